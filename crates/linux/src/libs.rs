//! Finding a program and the files it needs to run elsewhere: its ELF
//! interpreter (PT_INTERP) and shared libraries (listed by the interpreter
//! as for `ldd`), and for a `#!` script its interpreter's.

use crate::error::LinuxError;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Find `name` as a shell would: a name with a `/` is a path (made absolute),
/// any other name is looked up on `$PATH`. It must be an executable file.
pub fn resolve_program(name: &str) -> Result<PathBuf, LinuxError> {
    if name.is_empty() {
        return Err(LinuxError::NoProgram);
    }
    if name.contains('/') {
        let path = std::path::absolute(name).map_err(|_| LinuxError::ProgramNotFound {
            name: name.to_string(),
        })?;
        return match executable(&path) {
            Some(true) => Ok(path),
            Some(false) => Err(LinuxError::ProgramNotExecutable { path }),
            None => Err(LinuxError::ProgramNotFound {
                name: name.to_string(),
            }),
        };
    }
    let mut not_executable = None;
    for dir in std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
    {
        let candidate = dir.join(name);
        match executable(&candidate) {
            Some(true) => {
                return std::path::absolute(&candidate).map_err(|_| LinuxError::ProgramNotFound {
                    name: name.to_string(),
                })
            }
            Some(false) => not_executable = not_executable.or(Some(candidate)),
            None => {}
        }
    }
    Err(match not_executable {
        Some(path) => LinuxError::ProgramNotExecutable { path },
        None => LinuxError::ProgramNotFound {
            name: name.to_string(),
        },
    })
}

/// `Some(true)`: an executable regular file; `Some(false)`: exists but is not
/// one; `None`: nothing there.
fn executable(path: &Path) -> Option<bool> {
    let meta = std::fs::metadata(path).ok()?;
    Some(meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Every file a program needs besides itself, absolute paths in load order:
/// for an ELF, its interpreter and shared libraries; for a `#!` script, its
/// interpreter and what that needs. A static program needs none.
pub fn needed_files(program: &Path) -> Result<Vec<PathBuf>, LinuxError> {
    let mut files = Vec::new();
    if let Some(interpreter) = script_interpreter(program) {
        let interpreter = resolve_program(&interpreter)?;
        files.extend(shared_libraries(&interpreter)?);
        files.push(interpreter);
        return Ok(files);
    }
    files.extend(shared_libraries(program)?);
    Ok(files)
}

/// The interpreter path of a `#!` script (`None` for anything else).
fn script_interpreter(program: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head.get(..n)?.strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    text.split_whitespace().next().map(str::to_string)
}

/// The interpreter and shared libraries of an ELF program: none for a
/// static one (no PT_INTERP), else what its interpreter lists
/// (`LD_TRACE_LOADED_OBJECTS=1 INTERP PROGRAM`, which is what `ldd` runs; so
/// no `ldd` is needed, as in the nested host).
pub fn shared_libraries(program: &Path) -> Result<Vec<PathBuf>, LinuxError> {
    let Some(interpreter) = elf_interpreter(program) else {
        return Ok(Vec::new());
    };
    let out = Command::new(&interpreter)
        .arg(program)
        .env("LD_TRACE_LOADED_OBJECTS", "1")
        .output()
        .map_err(|source| LinuxError::ToolMissing {
            tool: interpreter.display().to_string(),
            source,
        })?;
    let mut files = parse_ldd(&String::from_utf8_lossy(&out.stdout)).map_err(|library| {
        LinuxError::LibraryNotFound {
            program: program.to_path_buf(),
            library,
        }
    })?;
    if !files.contains(&interpreter) {
        files.push(interpreter);
    }
    Ok(files)
}

/// The PT_INTERP path of an ELF64 file (`None`: static, or not ELF64).
pub fn elf_interpreter(program: &Path) -> Option<PathBuf> {
    const PT_INTERP: u32 = 3;
    let bytes = std::fs::read(program).ok()?;
    if bytes.get(..4) != Some(b"\x7fELF") || bytes.get(4) != Some(&2) {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| {
        let v = u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?);
        usize::try_from(v).ok()
    };
    let phoff = u64_at(32)?;
    let phentsize = usize::from(u16_at(54)?);
    for i in 0..usize::from(u16_at(56)?) {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(ph)? == PT_INTERP {
            let (off, size) = (u64_at(ph + 8)?, u64_at(ph + 32)?);
            let raw = bytes.get(off..off.checked_add(size)?)?;
            let path = raw.split(|&b| b == 0).next()?;
            return Some(PathBuf::from(std::str::from_utf8(path).ok()?));
        }
    }
    None
}

/// The files named in `ldd` output, or the first library it could not find.
/// Lines are `name => /path (0x..)`, `/path (0x..)` (the interpreter),
/// `name (0x..)` (the vDSO: no file) and `name => not found`.
pub fn parse_ldd(text: &str) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for line in text.lines().map(str::trim) {
        let (name, target) = match line.split_once(" => ") {
            Some((name, target)) => (name, target.trim()),
            None => (line, line),
        };
        if target == "not found" {
            return Err(name.to_string());
        }
        let path = target.split(" (0x").next().unwrap_or(target).trim();
        if path.starts_with('/') && !files.iter().any(|f: &PathBuf| f == Path::new(path)) {
            files.push(PathBuf::from(path));
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_record::exit;

    #[test]
    fn parses_ldd_output() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd1b5f2000)\n\
                    \tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f2c0a8e0000)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2c0a6ff000)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f2c0a924000)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libz.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
        assert_eq!(
            parse_ldd("\tlibfoo.so.3 => not found\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n"),
            Err("libfoo.so.3".to_string())
        );
        assert_eq!(parse_ldd("\tnot a dynamic executable\n"), Ok(vec![]));
        assert_eq!(parse_ldd("\tstatically linked\n"), Ok(vec![]));
    }

    #[test]
    fn resolves_programs_like_a_shell() {
        let sh = resolve_program("sh").unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        let e = resolve_program("smplab-no-such-program-xyz").unwrap_err();
        assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
        assert!(e.to_string().contains("not found"), "{e}");
        let dir = std::env::temp_dir().join(format!("smplab-linux-libs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("plain");
        std::fs::write(&plain, b"data").unwrap();
        let e = resolve_program(plain.to_str().unwrap()).unwrap_err();
        assert!(matches!(e, LinuxError::ProgramNotExecutable { .. }), "{e}");
        assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
        assert!(matches!(
            resolve_program(dir.to_str().unwrap()),
            Err(LinuxError::ProgramNotExecutable { .. })
        ));
        assert!(matches!(resolve_program(""), Err(LinuxError::NoProgram)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn finds_the_libraries_of_a_dynamic_program_and_of_a_script() {
        let sh = resolve_program("sh").unwrap();
        let libs = needed_files(&sh).unwrap();
        assert!(
            libs.iter()
                .any(|l| l.to_string_lossy().contains("ld-linux")),
            "{libs:?}"
        );
        assert!(
            libs.iter().any(|l| l.to_string_lossy().contains("libc.so")),
            "{libs:?}"
        );
        let dir = std::env::temp_dir().join(format!("smplab-linux-script-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s");
        std::fs::write(&script, format!("#!{} -e\necho hi\n", sh.display())).unwrap();
        let needed = needed_files(&script).unwrap();
        assert_eq!(needed.last(), Some(&sh));
        assert!(needed.len() > 1, "{needed:?}");
        // A static program needs nothing (and is not run to find out).
        let busybox =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/nested-host/busybox");
        if busybox.is_file() {
            assert_eq!(elf_interpreter(&busybox), None);
            assert_eq!(needed_files(&busybox).unwrap(), Vec::<PathBuf>::new());
        }
        assert_eq!(elf_interpreter(&script), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_library_missing_on_the_host_is_bad_initramfs() {
        let dir = std::env::temp_dir().join(format!("smplab-linux-missing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gone.c"), "int gone(void) { return 1; }\n").unwrap();
        std::fs::write(
            dir.join("main.c"),
            "int gone(void);\nint main(void) { return gone(); }\n",
        )
        .unwrap();
        let cc = |args: &[&str]| {
            let ok = Command::new("gcc")
                .args(args)
                .current_dir(&dir)
                .status()
                .unwrap()
                .success();
            assert!(ok, "gcc {args:?}");
        };
        cc(&["-shared", "-fPIC", "-o", "libsmplabgone.so", "gone.c"]);
        cc(&["-o", "main", "main.c", "-L.", "-lsmplabgone"]);
        std::fs::remove_file(dir.join("libsmplabgone.so")).unwrap();
        let e = needed_files(&dir.join("main")).unwrap_err();
        assert!(
            matches!(&e, LinuxError::LibraryNotFound { library, .. } if library == "libsmplabgone.so"),
            "{e}"
        );
        assert_eq!(e.exit_status(), exit::BAD_INITRAMFS);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
