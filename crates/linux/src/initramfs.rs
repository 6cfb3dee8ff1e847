//! The initramfs a Linux guest boots: a cpio "newc" archive (uncompressed;
//! the kernel takes it as is) with the init as `/init`, the program's
//! arguments and environment under `/smplab/`, the program and the files it
//! needs at their host paths, the user's included files, and the mount
//! points the init uses. Or a given initramfs with a second archive holding
//! the init's part appended (the kernel unpacks both, the later on top).

use crate::error::LinuxError;
use crate::{libs, Program, INIT};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Where the init reads the program's argument vector: NUL-terminated
/// strings, the path to execute first, then `argv[0]`, `argv[1]`, ...
pub const ARGV_FILE: &str = "smplab/argv";
/// Where the init reads the program's environment: NUL-terminated `NAME=value`.
pub const ENV_FILE: &str = "smplab/env";
/// The program's `PATH` unless it sets its own.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A built initramfs.
#[derive(Debug, Clone)]
pub struct Initramfs {
    pub bytes: Vec<u8>,
    /// The path the init executes (absolute, or a bare name the init looks
    /// up on the program's `PATH` when a given compressed initramfs could
    /// not be searched).
    pub exec_path: String,
}

/// The argv and env files' contents for a program executed as `exec_path`.
pub fn args_files(program: &Program, exec_path: &str) -> (Vec<u8>, Vec<u8>) {
    let mut argv = Vec::new();
    for s in std::iter::once(exec_path).chain(program.argv.iter().map(String::as_str)) {
        argv.extend_from_slice(s.as_bytes());
        argv.push(0);
    }
    let mut env = Vec::new();
    if !program.env.iter().any(|(k, _)| k == "PATH") {
        env.extend_from_slice(format!("PATH={DEFAULT_PATH}").as_bytes());
        env.push(0);
    }
    for (k, v) in &program.env {
        env.extend_from_slice(format!("{k}={v}").as_bytes());
        env.push(0);
    }
    (argv, env)
}

/// Build the initramfs for `program`: from the host's files, or on top of
/// `given` (in which the program must be).
pub fn build(program: &Program, given: Option<&Path>) -> Result<Initramfs, LinuxError> {
    let name = program.argv.first().ok_or(LinuxError::NoProgram)?;
    let mut archive = Archive::default();
    let (mut bytes, exec_path) = match given {
        None => {
            let path = libs::resolve_program(name)?;
            archive.host_file(&path, &path)?;
            for needed in libs::needed_files(&path)? {
                archive.host_file(&needed, &needed)?;
            }
            (Vec::new(), path.display().to_string())
        }
        Some(initrd) => {
            let bytes = std::fs::read(initrd).map_err(|source| LinuxError::InitrdRead {
                path: initrd.to_path_buf(),
                source,
            })?;
            let listing = list(&bytes).map_err(|reason| LinuxError::BadInitrd {
                path: initrd.to_path_buf(),
                reason,
            })?;
            let exec = find_in(&listing, name, &program.env).ok_or_else(|| {
                LinuxError::ProgramNotInInitrd {
                    program: name.clone(),
                    path: initrd.to_path_buf(),
                }
            })?;
            let mut bytes = bytes;
            // The kernel skips zero bytes between archives, which start on
            // a 4-byte boundary.
            bytes.resize(bytes.len().div_ceil(4) * 4, 0);
            (bytes, exec)
        }
    };
    for include in &program.include {
        let path = std::path::absolute(include).map_err(|e| LinuxError::Include {
            path: include.clone(),
            reason: e.to_string(),
        })?;
        archive.include(&path)?;
    }
    let (argv, env) = args_files(program, &exec_path);
    archive.skeleton(&argv, &env);
    bytes.extend_from_slice(&archive.finish());
    Ok(Initramfs { bytes, exec_path })
}

/// An archive being written: entries in order, each directory once, before
/// what it holds.
#[derive(Default)]
struct Archive {
    out: Vec<u8>,
    entries: BTreeSet<String>,
    ino: u32,
}

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFCHR: u32 = 0o020_000;

impl Archive {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        if !self.entries.insert(name.to_string()) {
            return;
        }
        if let Some((parent, _)) = name.rsplit_once('/') {
            self.dir(parent);
        }
        self.ino += 1;
        // `add_file` refused files of 4 GiB or more, so the size fits.
        #[allow(clippy::cast_possible_truncation)]
        let size = data.len() as u32;
        let writer = cpio::newc::Builder::new(name)
            .ino(self.ino)
            .mode(mode)
            .nlink(if mode & S_IFDIR != 0 { 2 } else { 1 })
            .rdev_major(rdev.0)
            .rdev_minor(rdev.1)
            .write(&mut self.out, size);
        // Writing to a Vec cannot fail.
        let mut writer = writer;
        let _ = writer.write_all(data);
        let _ = writer.finish();
    }

    fn dir(&mut self, name: &str) {
        if !name.is_empty() {
            self.entry(name, S_IFDIR | 0o755, &[], (0, 0));
        }
    }

    /// The init, its files, device nodes and mount points.
    fn skeleton(&mut self, argv: &[u8], env: &[u8]) {
        for d in ["dev", "proc", "sys", "tmp", "smplab"] {
            self.dir(d);
        }
        // The kernel opens /dev/console for init's stdout before devtmpfs is
        // mounted; the init opens /dev/null for the program's stdin.
        self.entry("dev/console", S_IFCHR | 0o600, &[], (5, 1));
        self.entry("dev/null", S_IFCHR | 0o666, &[], (1, 3));
        self.entry("init", S_IFREG | 0o755, INIT, (0, 0));
        self.entry(ARGV_FILE, S_IFREG | 0o644, argv, (0, 0));
        self.entry(ENV_FILE, S_IFREG | 0o644, env, (0, 0));
    }

    /// The host file `from` (symlinks followed) as `to` in the archive.
    fn host_file(&mut self, from: &Path, to: &Path) -> Result<(), LinuxError> {
        let fail = |reason: String| LinuxError::Include {
            path: from.to_path_buf(),
            reason,
        };
        let data = std::fs::read(from).map_err(|e| fail(e.to_string()))?;
        let mode = std::fs::metadata(from)
            .map_err(|e| fail(e.to_string()))?
            .permissions()
            .mode();
        self.add_file(to, mode & 0o7777, &data).map_err(fail)
    }

    fn add_file(&mut self, to: &Path, perm: u32, data: &[u8]) -> Result<(), String> {
        if u32::try_from(data.len()).is_err() {
            return Err("4 GiB or larger (a newc archive holds files below 4 GiB)".into());
        }
        let name = archive_name(to)?;
        self.entry(&name, S_IFREG | perm, data, (0, 0));
        Ok(())
    }

    /// A file, symlink or directory tree at its own absolute path.
    fn include(&mut self, path: &Path) -> Result<(), LinuxError> {
        let fail = |reason: String| LinuxError::Include {
            path: path.to_path_buf(),
            reason,
        };
        let meta = std::fs::symlink_metadata(path).map_err(|e| fail(e.to_string()))?;
        let name = archive_name(path).map_err(fail)?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = std::fs::read_link(path).map_err(|e| fail(e.to_string()))?;
            let target = target
                .to_str()
                .ok_or_else(|| fail("a symlink target that is not UTF-8".into()))?;
            self.entry(&name, S_IFLNK | 0o777, target.as_bytes(), (0, 0));
        } else if kind.is_dir() {
            self.entry(&name, S_IFDIR | (meta.mode() & 0o7777), &[], (0, 0));
            let mut children: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| fail(e.to_string()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            children.sort();
            for child in children {
                self.include(&child)?;
            }
        } else if kind.is_file() {
            self.host_file(path, path)?;
        } else {
            return Err(fail("not a regular file, directory or symlink".into()));
        }
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        // Writing to a Vec cannot fail.
        let _ = cpio::newc::trailer(&mut self.out);
        self.out
    }
}

/// The archive name of an absolute path: no leading `/`, no `.`/`..`.
fn archive_name(path: &Path) -> Result<String, String> {
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(p) => parts.push(
                p.to_str()
                    .ok_or_else(|| "a path that is not UTF-8".to_string())?,
            ),
            Component::ParentDir => {
                parts.pop();
            }
            Component::Prefix(_) => return Err("not a Unix path".into()),
        }
    }
    if parts.is_empty() {
        return Err("the root directory itself".into());
    }
    Ok(parts.join("/"))
}

/// What a given initramfs holds, as far as it could be read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Entry name (no leading `/`) → symlink target (`None`: not a symlink).
    pub entries: BTreeMap<String, Option<String>>,
    /// Whether the whole archive was read (false: a compressed part follows,
    /// which only the kernel unpacks).
    pub complete: bool,
}

/// Compressed-stream magics the kernel may find in an initramfs.
const COMPRESSED: &[&[u8]] = &[
    b"\x1f\x8b",             // gzip
    b"\xfd7zXZ\x00",         // xz
    b"\x28\xb5\x2f\xfd",     // zstd
    b"\x02\x21\x4c\x18",     // lz4 legacy
    b"BZh",                  // bzip2
    b"\x5d\x00\x00",         // lzma
    b"\x89\x4c\x5a\x4f\x00", // lzo
];

/// Read the uncompressed cpio archives at the start of `bytes`.
pub fn list(bytes: &[u8]) -> Result<Listing, String> {
    let mut listing = Listing::default();
    let mut rest = bytes;
    let mut archives = 0;
    loop {
        let skip = rest.iter().take_while(|&&b| b == 0).count();
        rest = &rest[skip..];
        if rest.is_empty() {
            listing.complete = true;
            break;
        }
        if COMPRESSED.iter().any(|m| rest.starts_with(m)) {
            break;
        }
        if !rest.starts_with(b"07070") {
            return Err(if archives == 0 {
                "no cpio or compressed-stream magic at its start".into()
            } else {
                "garbage after a cpio archive".into()
            });
        }
        rest = read_archive(rest, &mut listing.entries)?;
        archives += 1;
    }
    Ok(listing)
}

/// Read one archive up to its trailer; returns what follows it.
fn read_archive<'a>(
    mut rest: &'a [u8],
    entries: &mut BTreeMap<String, Option<String>>,
) -> Result<&'a [u8], String> {
    loop {
        let reader = cpio::newc::Reader::new(rest).map_err(|e| format!("a corrupt entry: {e}"))?;
        if reader.entry().is_trailer() {
            return reader
                .finish()
                .map_err(|e| format!("a corrupt trailer: {e}"));
        }
        let name = reader
            .entry()
            .name()
            .trim_start_matches("./")
            .trim_start_matches('/')
            .to_string();
        let is_link = reader.entry().mode() & 0o170_000 == S_IFLNK;
        let mut data = Vec::new();
        let mut reader = reader;
        if is_link {
            std::io::Read::read_to_end(&mut reader, &mut data)
                .map_err(|e| format!("a corrupt symlink: {e}"))?;
        }
        rest = reader
            .finish()
            .map_err(|e| format!("a truncated entry {name}: {e}"))?;
        entries.insert(
            name,
            is_link.then(|| String::from_utf8_lossy(&data).into_owned()),
        );
    }
}

/// Where the program `name` is in a given initramfs: an absolute path, a
/// bare name searched on the program's `PATH` (or [`DEFAULT_PATH`]). `None`
/// if a complete listing lacks it; a bare name if the listing is incomplete.
pub fn find_in(listing: &Listing, name: &str, env: &[(String, String)]) -> Option<String> {
    let present = |path: &str| resolve_in(listing, path).is_some();
    if name.contains('/') {
        let abs = format!("/{}", name.trim_start_matches("./").trim_start_matches('/'));
        return (present(&abs) || !listing.complete).then_some(abs);
    }
    let path_var = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    path_var
        .split(':')
        .map(|dir| format!("{}/{name}", dir.trim_end_matches('/')))
        .find(|p| present(p))
        .or_else(|| (!listing.complete).then(|| name.to_string()))
}

/// Follow symlinks (of the path and of its directories) inside the listing;
/// the final entry name, or `None` if it is not there.
fn resolve_in(listing: &Listing, path: &str) -> Option<String> {
    let mut parts: Vec<String> = path
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let mut hops = 0;
    let mut i = 0;
    while i < parts.len() {
        let prefix = parts[..=i].join("/");
        match listing.entries.get(&prefix)? {
            None => i += 1,
            Some(target) => {
                hops += 1;
                if hops > 16 {
                    return None;
                }
                let mut next: Vec<String> = if target.starts_with('/') {
                    Vec::new()
                } else {
                    parts[..i].to_vec()
                };
                for t in target.split('/').filter(|p| !p.is_empty() && *p != ".") {
                    if t == ".." {
                        next.pop();
                    } else {
                        next.push(t.to_string());
                    }
                }
                next.extend_from_slice(&parts[i + 1..]);
                parts = next;
                // Rescan from the top: the hop limit bounds the work.
                i = 0;
            }
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_record::exit;
    use std::process::Command;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("smplab-linux-ir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// busybox from the nested host's packages (docs/nested-host.md), an
    /// independent cpio reader; `None` when it has not been downloaded.
    fn busybox() -> Option<PathBuf> {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/nested-host/busybox");
        p.is_file().then_some(p)
    }

    #[test]
    fn builds_an_archive_with_the_program_its_libraries_and_includes() {
        let dir = scratch("build");
        std::fs::create_dir_all(dir.join("data/sub")).unwrap();
        std::fs::write(dir.join("data/sub/input.txt"), b"payload").unwrap();
        std::os::unix::fs::symlink("sub/input.txt", dir.join("data/link")).unwrap();
        let mut program = Program::new(["sh", "-c", "exit 0"]);
        program.include.push(dir.join("data"));
        program.env.push(("LANG".into(), "C".into()));
        let built = build(&program, None).unwrap();
        let sh = libs::resolve_program("sh").unwrap();
        assert_eq!(built.exec_path, sh.display().to_string());
        let listing = list(&built.bytes).unwrap();
        assert!(listing.complete);
        let has = |p: &str| listing.entries.contains_key(p);
        for p in [
            "init",
            "dev/console",
            "dev/null",
            "proc",
            "sys",
            "tmp",
            ARGV_FILE,
            ENV_FILE,
        ] {
            assert!(has(p), "{p} missing: {:?}", listing.entries.keys());
        }
        assert!(has(&archive_name(&sh).unwrap()));
        for lib in libs::needed_files(&sh).unwrap() {
            assert!(has(&archive_name(&lib).unwrap()), "{}", lib.display());
        }
        let input = archive_name(&dir.join("data/sub/input.txt")).unwrap();
        assert!(has(&input));
        let link = archive_name(&dir.join("data/link")).unwrap();
        assert_eq!(listing.entries[&link].as_deref(), Some("sub/input.txt"));
        // Every parent comes before its children (the kernel creates them in order).
        let names = entry_names(&built.bytes);
        for (i, n) in names.iter().enumerate() {
            if let Some((parent, _)) = n.rsplit_once('/') {
                let at = names.iter().position(|m| m == parent).unwrap();
                assert!(at < i, "{parent} after {n}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn entry_names(bytes: &[u8]) -> Vec<String> {
        let mut names = Vec::new();
        let mut rest = bytes;
        loop {
            let r = cpio::newc::Reader::new(rest).unwrap();
            if r.entry().is_trailer() {
                return names;
            }
            names.push(r.entry().name().to_string());
            rest = r.finish().unwrap();
        }
    }

    #[test]
    fn busybox_cpio_reads_back_what_was_written() {
        let Some(busybox) = busybox() else {
            eprintln!("skipped: target/nested-host/busybox absent (tools/nested-host/nested-host image fetches it)");
            return;
        };
        let dir = scratch("busybox");
        std::fs::write(dir.join("f"), b"0123456789abc").unwrap();
        let mut program = Program::new(["sh", "-c", "echo 'a b'"]);
        program.include.push(dir.join("f"));
        let built = build(&program, None).unwrap();
        let out = dir.join("out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(dir.join("a.cpio"), &built.bytes).unwrap();
        let status = Command::new(&busybox)
            .args(["cpio", "-i", "-d", "-F"])
            .arg(dir.join("a.cpio"))
            .current_dir(&out)
            .status()
            .unwrap();
        assert!(status.success());
        let copied = out.join(archive_name(&dir.join("f")).unwrap());
        assert_eq!(std::fs::read(copied).unwrap(), b"0123456789abc");
        assert_eq!(std::fs::read(out.join("init")).unwrap(), INIT);
        let argv = std::fs::read(out.join(ARGV_FILE)).unwrap();
        assert_eq!(
            argv,
            format!("{}\0sh\0-c\0echo 'a b'\0", built.exec_path).into_bytes()
        );
        let env = std::fs::read(out.join(ENV_FILE)).unwrap();
        assert_eq!(env, format!("PATH={DEFAULT_PATH}\0").into_bytes());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join("init"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_given_initramfs_must_hold_the_program() {
        let dir = scratch("given");
        // A given archive with busybox-style merged /usr: bin -> usr/bin.
        let mut a = Archive::default();
        a.entry("bin", S_IFLNK | 0o777, b"usr/bin", (0, 0));
        a.add_file(Path::new("/usr/bin/tool"), 0o755, b"#!/bin/sh\n")
            .unwrap();
        let given = dir.join("given.cpio");
        std::fs::write(&given, a.finish()).unwrap();

        let built = build(&Program::new(["tool", "x"]), Some(&given)).unwrap();
        assert_eq!(built.exec_path, "/usr/bin/tool");
        let listing = list(&built.bytes).unwrap();
        assert!(
            listing.entries.contains_key("usr/bin/tool") && listing.entries.contains_key("init")
        );
        let by_link = build(&Program::new(["/bin/tool"]), Some(&given)).unwrap();
        assert_eq!(by_link.exec_path, "/bin/tool");

        let e = build(&Program::new(["pigz"]), Some(&given)).unwrap_err();
        assert!(matches!(e, LinuxError::ProgramNotInInitrd { .. }), "{e}");
        assert_eq!(e.exit_status(), exit::BAD_INITRAMFS);
        let e = build(&Program::new(["/usr/bin/other"]), Some(&given)).unwrap_err();
        assert_eq!(e.exit_status(), exit::BAD_INITRAMFS);

        // A compressed one cannot be searched: the init looks the name up.
        let gz = dir.join("given.cpio.gz");
        std::fs::write(&gz, b"\x1f\x8b\x08\x00rest").unwrap();
        assert_eq!(
            build(&Program::new(["pigz"]), Some(&gz)).unwrap().exec_path,
            "pigz"
        );

        let e = build(&Program::new(["tool"]), Some(&dir.join("missing.cpio"))).unwrap_err();
        assert!(matches!(e, LinuxError::InitrdRead { .. }), "{e}");
        assert_eq!(e.exit_status(), exit::BAD_INITRAMFS);
        let junk = dir.join("junk");
        std::fs::write(&junk, b"this is no archive").unwrap();
        let e = build(&Program::new(["tool"]), Some(&junk)).unwrap_err();
        assert!(matches!(e, LinuxError::BadInitrd { .. }), "{e}");
        assert!(e.to_string().contains("not a cpio archive"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_includes_and_programs_are_refused() {
        let mut p = Program::new(["sh"]);
        p.include.push(PathBuf::from("/no/such/file/anywhere"));
        let e = build(&p, None).unwrap_err();
        assert!(matches!(e, LinuxError::Include { .. }), "{e}");
        assert_eq!(e.exit_status(), exit::BAD_INITRAMFS);
        let e = build(&Program::new(["smplab-no-such-program-xyz"]), None).unwrap_err();
        assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
        let e = build(&Program::default(), None).unwrap_err();
        assert!(matches!(e, LinuxError::NoProgram));
    }

    #[test]
    fn symlinks_resolve_inside_a_listing() {
        let mut l = Listing {
            complete: true,
            ..Listing::default()
        };
        l.entries.insert("usr".into(), None);
        l.entries.insert("usr/bin".into(), None);
        l.entries.insert("usr/bin/busybox".into(), None);
        l.entries.insert("bin".into(), Some("usr/bin".into()));
        l.entries
            .insert("usr/bin/sh".into(), Some("busybox".into()));
        l.entries.insert("loop".into(), Some("/loop".into()));
        assert_eq!(
            resolve_in(&l, "/bin/sh").as_deref(),
            Some("usr/bin/busybox")
        );
        assert_eq!(resolve_in(&l, "/loop/x"), None);
        assert_eq!(resolve_in(&l, "/usr/bin/none"), None);
        assert_eq!(find_in(&l, "sh", &[]).as_deref(), Some("/usr/bin/sh"));
        let env = [("PATH".to_string(), "/bin".to_string())];
        assert_eq!(find_in(&l, "sh", &env).as_deref(), Some("/bin/sh"));
    }
}
