//! A private temporary directory, removed on drop.

use crate::error::{io, LinuxError};
use std::path::{Path, PathBuf};

pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(what: &str) -> Result<Self, LinuxError> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "smplab-linux-{what}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        Ok(TempDir(dir))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// Write `bytes` to `name` in the directory; its path.
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, LinuxError> {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).map_err(io(format!("writing {}", p.display())))?;
        Ok(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
