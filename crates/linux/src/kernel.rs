//! The guest kernel: which boot format a file is (the Linux boot protocol's
//! bzImage, or an ELF with the PVH entry note), and where to find one.

use crate::error::LinuxError;
use std::path::{Path, PathBuf};

/// A kernel's boot format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelKind {
    /// Linux boot protocol: the setup header's "HdrS" at offset 0x202.
    BzImage,
    /// An ELF64 x86-64 file with the PVH entry (Xen ELF note 18,
    /// XEN_ELFNOTE_PHYS32_ENTRY) in a PT_NOTE segment.
    PvhElf,
}

/// Offset of the setup header's magic in a bzImage (Documentation/x86/boot.rst).
const HDRS_OFFSET: usize = 0x202;
const PT_NOTE: u32 = 4;
const EM_X86_64: u16 = 62;
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

/// The boot format of `bytes`, or why it has none smplab can boot.
pub fn kernel_kind(bytes: &[u8]) -> Result<KernelKind, String> {
    if bytes.get(HDRS_OFFSET..HDRS_OFFSET + 4) == Some(b"HdrS") {
        return Ok(KernelKind::BzImage);
    }
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Err("no ELF magic either".into());
    }
    if bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("an ELF file, but not 64-bit little-endian".into());
    }
    if read_u16(bytes, 18) != Some(EM_X86_64) {
        return Err("an ELF file, but not for x86-64".into());
    }
    if has_pvh_note(bytes).unwrap_or(false) {
        Ok(KernelKind::PvhElf)
    } else {
        Err("an x86-64 ELF file without the PVH note (Xen ELF note type 18)".into())
    }
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Whether a PT_NOTE segment holds the "Xen" note of type 18 (`None`: the
/// headers point outside the file).
fn has_pvh_note(b: &[u8]) -> Option<bool> {
    let phoff = usize::try_from(read_u64(b, 32)?).ok()?;
    let phentsize = usize::from(read_u16(b, 54)?);
    let phnum = usize::from(read_u16(b, 56)?);
    for i in 0..phnum {
        let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if read_u32(b, ph)? != PT_NOTE {
            continue;
        }
        let off = usize::try_from(read_u64(b, ph + 8)?).ok()?;
        let size = usize::try_from(read_u64(b, ph + 32)?).ok()?;
        let notes = b.get(off..off.checked_add(size)?)?;
        if notes_have(notes, b"Xen\0", XEN_ELFNOTE_PHYS32_ENTRY) {
            return Some(true);
        }
    }
    Some(false)
}

/// Walk ELF notes (name and descriptor each padded to 4 bytes).
fn notes_have(mut notes: &[u8], name: &[u8], kind: u32) -> bool {
    let pad = |n: usize| n.div_ceil(4) * 4;
    while notes.len() >= 12 {
        let (Some(namesz), Some(descsz), Some(ty)) =
            (read_u32(notes, 0), read_u32(notes, 4), read_u32(notes, 8))
        else {
            return false;
        };
        let (Ok(namesz), Ok(descsz)) = (usize::try_from(namesz), usize::try_from(descsz)) else {
            return false;
        };
        let name_end = 12 + namesz;
        if notes.get(12..name_end) == Some(name) && ty == kind {
            return true;
        }
        let next = 12 + pad(namesz) + pad(descsz);
        match notes.get(next..) {
            Some(rest) => notes = rest,
            None => return false,
        }
    }
    false
}

/// Read `path` and check it is a kernel smplab can boot.
pub fn read_kernel(path: &Path) -> Result<(Vec<u8>, KernelKind), LinuxError> {
    let bytes = std::fs::read(path).map_err(|source| LinuxError::KernelRead {
        path: path.to_path_buf(),
        source,
    })?;
    let kind = kernel_kind(&bytes).map_err(|reason| LinuxError::BadKernel {
        path: path.to_path_buf(),
        reason,
    })?;
    Ok((bytes, kind))
}

/// The environment variable naming the default Linux guest kernel.
pub const KERNEL_ENV: &str = "SMPLAB_LINUX_KERNEL";

/// The kernel to use when none is given: `$SMPLAB_LINUX_KERNEL`, else the
/// running kernel's `/boot/vmlinuz-$(uname -r)`, else `/boot/vmlinuz`,
/// `/vmlinuz` (Debian's links to the newest).
pub fn find_kernel() -> Result<PathBuf, LinuxError> {
    if let Some(p) = std::env::var_os(KERNEL_ENV) {
        return Ok(PathBuf::from(p));
    }
    let mut candidates = Vec::new();
    if let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        candidates.push(PathBuf::from(format!("/boot/vmlinuz-{}", release.trim())));
    }
    candidates.push(PathBuf::from("/boot/vmlinuz"));
    candidates.push(PathBuf::from("/vmlinuz"));
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| LinuxError::KernelNotFound {
            searched: std::iter::once(format!("${KERNEL_ENV}"))
                .chain(candidates.iter().map(|p| p.display().to_string()))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elf_with_note(name: &[u8], ty: u32) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
        let note_off = b.len() as u64;
        let mut note = Vec::new();
        note.extend_from_slice(&4u32.to_le_bytes());
        note.extend_from_slice(&4u32.to_le_bytes());
        note.extend_from_slice(&ty.to_le_bytes());
        note.extend_from_slice(name);
        note.extend_from_slice(&0x0100_0000u32.to_le_bytes());
        b[64..68].copy_from_slice(&PT_NOTE.to_le_bytes());
        b[64 + 8..64 + 16].copy_from_slice(&note_off.to_le_bytes());
        b[64 + 32..64 + 40].copy_from_slice(&(note.len() as u64).to_le_bytes());
        b.extend_from_slice(&note);
        b
    }

    #[test]
    fn tells_bzimage_pvh_and_neither_apart() {
        let mut bz = vec![0u8; 0x300];
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        assert_eq!(kernel_kind(&bz), Ok(KernelKind::BzImage));
        assert_eq!(
            kernel_kind(&elf_with_note(b"Xen\0", 18)),
            Ok(KernelKind::PvhElf)
        );
        let no_pvh = kernel_kind(&elf_with_note(b"Xen\0", 1)).unwrap_err();
        assert!(no_pvh.contains("without the PVH note"), "{no_pvh}");
        let gnu = kernel_kind(&elf_with_note(b"GNU\0", 18)).unwrap_err();
        assert!(gnu.contains("without the PVH note"), "{gnu}");
        assert!(kernel_kind(b"#!/bin/sh\n").unwrap_err().contains("no ELF"));
        assert!(kernel_kind(&[]).is_err());
        // Headers pointing past the end are refused, not a panic.
        let mut cut = elf_with_note(b"Xen\0", 18);
        cut.truncate(100);
        assert!(kernel_kind(&cut).is_err());
    }

    #[test]
    fn a_file_that_is_no_kernel_is_bad_kernel_status_4() {
        let dir = std::env::temp_dir().join(format!("smplab-linux-k-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("not-a-kernel");
        std::fs::write(&p, b"hello").unwrap();
        let e = read_kernel(&p).unwrap_err();
        assert_eq!(e.exit_status(), smplab_record::exit::BAD_KERNEL);
        assert!(e.to_string().contains("neither a bzImage"), "{e}");
        let missing = read_kernel(&dir.join("missing")).unwrap_err();
        assert_eq!(missing.exit_status(), smplab_record::exit::BAD_INPUT);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
