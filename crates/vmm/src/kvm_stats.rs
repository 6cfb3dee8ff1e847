//! KVM binary statistics (`KVM_GET_STATS_FD`), per vCPU and per VM.
//!
//! kvm-ioctls has no wrapper for this ioctl, so the few lines of the binary format
//! (header, descriptors, data block; Documentation/virt/kvm/api.rst 4.133) are here.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;

/// `KVM_GET_STATS_FD` = `_IO(KVMIO, 0xce)`.
const KVM_GET_STATS_FD: libc::c_ulong = 0xae_ce;
/// `KVM_CAP_BINARY_STATS_FD`.
pub const KVM_CAP_BINARY_STATS_FD: libc::c_ulong = 203;

const HEADER_BYTES: usize = 24;
const DESC_FIXED_BYTES: usize = 16;

/// Open the stats file of a VM or vCPU fd.
pub fn open_stats(fd: &impl AsRawFd) -> std::io::Result<File> {
    // SAFETY: KVM_GET_STATS_FD takes no argument and returns a new file descriptor
    // or -1; the fd we pass stays owned by its caller.
    let stats_fd = unsafe { libc::ioctl(fd.as_raw_fd(), KVM_GET_STATS_FD as _, 0) };
    if stats_fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { File::from_raw_fd(stats_fd) })
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

/// Read every single-valued statistic (histogram statistics are summed).
pub fn read_stats(file: &File) -> std::io::Result<BTreeMap<String, u64>> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut header = [0u8; HEADER_BYTES];
    file.read_exact_at(&mut header, 0)?;
    let name_size = u32_at(&header, 4).ok_or_else(|| bad("stats header"))? as usize;
    let num_desc = u32_at(&header, 8).ok_or_else(|| bad("stats header"))? as usize;
    let desc_offset = u32_at(&header, 16).ok_or_else(|| bad("stats header"))? as u64;
    let data_offset = u32_at(&header, 20).ok_or_else(|| bad("stats header"))? as u64;
    if num_desc > 4096 || name_size > 4096 {
        return Err(bad("implausible stats header"));
    }
    let desc_bytes = DESC_FIXED_BYTES + name_size;
    let mut descs = vec![0u8; desc_bytes * num_desc];
    file.read_exact_at(&mut descs, desc_offset)?;
    let mut stats = BTreeMap::new();
    for desc in descs.chunks_exact(desc_bytes) {
        let size = u16_at(desc, 6).ok_or_else(|| bad("stats descriptor"))? as usize;
        let offset = u32_at(desc, 8).ok_or_else(|| bad("stats descriptor"))? as u64;
        let name_bytes = &desc[DESC_FIXED_BYTES..];
        let end = name_bytes
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(name_bytes.len());
        let name = String::from_utf8_lossy(&name_bytes[..end]).into_owned();
        if size == 0 || size > 1024 {
            continue;
        }
        let mut data = vec![0u8; size * 8];
        file.read_exact_at(&mut data, data_offset + offset)?;
        let value = data
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .fold(0u64, u64::saturating_add);
        stats.insert(name, value);
    }
    Ok(stats)
}
