//! The results store: one JSON document per line, one line per finished point,
//! appended the moment the point finishes.
//!
//! Why JSON lines rather than SQLite (also in docs/lab.md): the records are
//! already JSON; an append-only file survives a kill at any instant (the only
//! possible damage is a torn last line, which [`Store::open`] cuts off); users
//! can read it with `jq`/`grep`; and rusqlite's bundled SQLite is a C build that
//! costs minutes on the 2-core machines smplab is developed on.
//!
//! Concurrency: the file is `flock`ed for the life of a [`Store`] opened for
//! writing, so two sweeps cannot interleave into one store.
//!
//! Per-point files: tasks of a Slurm job array (crate::slurm) run on many nodes
//! at once, on a shared filesystem where `flock` and `O_APPEND` are not to be
//! trusted. Each of them writes its result to its own file in the directory
//! `results.points/` beside `results.jsonl` (write a temporary file, `fsync`,
//! `rename`): a task killed at any instant leaves either the whole file or
//! only an ignored temporary. Every reader merges the per-point files after the
//! JSON lines, so a per-point result is the latest for its key; a local run that
//! later appends a line for the same key deletes that key's file.

use crate::point::Point;
use serde::{Deserialize, Serialize};
use smplab_record::RunRecord;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Layout version of a store line.
pub const STORE_VERSION: u32 = 1;

/// Attempts (50 ms apart) to take the store's lock before refusing.
const LOCK_TRIES: u32 = 40;

/// How a point ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// The run failed (guest crash, timeout, bad workload size, ...). Finished:
    /// a resumed sweep does not redo it unless asked to (`--retry-failed`).
    Failed {
        reason: String,
    },
    /// Not attempted because its executor is unavailable here (no KVM, no QEMU,
    /// not in this build). Not finished: a resumed sweep tries again.
    Skipped {
        reason: String,
    },
}

/// One line of the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub v: u32,
    pub key: String,
    pub point: Point,
    pub status: Status,
    /// Host seconds the point took (set-up included).
    pub host_seconds: f64,
    /// One record per VM (one for native and single-VM points).
    #[serde(default)]
    pub records: Vec<RunRecord>,
    /// The host's steal over the run exceeded the sweep's threshold
    /// (`--steal-threshold`, `RunRecord::interference`): the repetition is
    /// left out of intervals and pairs, and the sweep ran it again while its
    /// budget of reruns lasted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disturbed: bool,
}

impl Entry {
    pub fn new(point: Point, status: Status, host_seconds: f64, records: Vec<RunRecord>) -> Self {
        Entry {
            v: STORE_VERSION,
            key: point.key(),
            point,
            status,
            host_seconds,
            records,
            disturbed: false,
        }
    }
    pub fn is_ok(&self) -> bool {
        self.status == Status::Ok
    }
    /// Whether a resumed sweep counts this point as done.
    pub fn is_finished(&self, retry_failed: bool) -> bool {
        match self.status {
            Status::Ok => true,
            Status::Failed { .. } => !retry_failed,
            Status::Skipped { .. } => false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: cannot open results store: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: another `smplab lab run` is writing to this results store; wait for it or use another --store")]
    Locked { path: String },
    #[error("{path}: cannot write results store: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: corrupt results store line ({detail}); only the last line can be torn by a crash, so this file was edited or damaged: delete that line to rerun the point")]
    Corrupt {
        path: String,
        line: usize,
        detail: String,
    },
    #[error("{path}: no results store here; run `smplab lab run SPEC` first")]
    Missing { path: String },
    #[error("{path}: corrupt per-point result ({detail}); these files are written whole by a rename, so it was edited or damaged: delete it to rerun the point")]
    CorruptPointFile { path: String, detail: String },
}

/// The directory of per-point result files of the store `path`
/// (`lab/results.jsonl` → `lab/results.points`).
pub fn point_dir(path: &Path) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "results".into());
    path.with_file_name(format!("{stem}.points"))
}

/// FNV-1a, 64 bits: a stable file name for a key (keys hold `/`, `=`, `,` and
/// workload paths). The file also holds the key, which is what readers use.
fn key_hash(key: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The per-point file of `key` in the store `path`.
pub fn point_file(path: &Path, key: &str) -> PathBuf {
    point_dir(path).join(format!("{:016x}.json", key_hash(key)))
}

/// Every complete per-point result of the store `path`, in file-name order.
/// Temporaries of writes that never finished (names starting with `.`) are
/// ignored.
fn read_point_files(path: &Path) -> Result<Vec<Entry>, StoreError> {
    let dir = point_dir(path);
    let shown = dir.display().to_string();
    let listing = match std::fs::read_dir(&dir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(source) => {
            return Err(StoreError::Open {
                path: shown,
                source,
            })
        }
    };
    let mut files = Vec::new();
    for item in listing {
        let item = item.map_err(|source| StoreError::Open {
            path: shown.clone(),
            source,
        })?;
        let name = item.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && name.ends_with(".json") {
            files.push(item.path());
        }
    }
    files.sort();
    let mut entries = Vec::with_capacity(files.len());
    for f in files {
        let corrupt = |detail: String| StoreError::CorruptPointFile {
            path: f.display().to_string(),
            detail,
        };
        let text = match std::fs::read_to_string(&f) {
            Ok(t) => t,
            // Replaced by a retry between the listing and the read: the retry's
            // file is read by the next reader.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(corrupt(e.to_string())),
        };
        entries.push(serde_json::from_str(&text).map_err(|e| corrupt(e.to_string()))?);
    }
    Ok(entries)
}

/// Write `entry` to its per-point file atomically: a temporary in the same
/// directory, `fsync`, `rename` over the final name, `fsync` of the directory.
/// Needs no lock: concurrent writers of different keys touch different files,
/// and two writers of one key (a task resubmitted while the first still ran)
/// each replace the file whole.
pub fn write_point_file(path: &Path, entry: &Entry) -> Result<PathBuf, StoreError> {
    let dir = point_dir(path);
    let final_path = point_file(path, &entry.key);
    let werr = |source| StoreError::Write {
        path: final_path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(werr)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = dir.join(format!(
        ".{:016x}.{}.{nanos}.tmp",
        key_hash(&entry.key),
        std::process::id()
    ));
    let text = serde_json::to_vec(entry).map_err(|e| werr(std::io::Error::other(e)))?;
    let write = || -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &final_path)?;
        // The rename itself is durable only once the directory is synced.
        File::open(&dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        werr(e)
    })?;
    Ok(final_path)
}

/// An open results store.
pub struct Store {
    path: PathBuf,
    file: Option<File>,
    /// [`Store::append`] writes per-point files instead of lines (Slurm tasks).
    per_point: bool,
    entries: Vec<Entry>,
    /// Bytes of a torn last line that were cut off on open.
    pub repaired_bytes: u64,
}

/// Parse store text; a last line without its newline is a torn write and is
/// returned as the number of bytes to drop.
fn parse(path: &Path, text: &str) -> Result<(Vec<Entry>, usize), StoreError> {
    let mut entries = Vec::new();
    let complete = match text.rfind('\n') {
        Some(i) => i + 1,
        None => 0,
    };
    for (i, line) in text[..complete].lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let e: Entry = serde_json::from_str(line).map_err(|e| StoreError::Corrupt {
            path: path.display().to_string(),
            line: i + 1,
            detail: e.to_string(),
        })?;
        entries.push(e);
    }
    Ok((entries, complete))
}

impl Store {
    /// Open (creating if needed) for appending, with an exclusive lock, cutting
    /// off a torn last line.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let shown = path.display().to_string();
        let open_err = |source| StoreError::Open {
            path: shown.clone(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(open_err)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(open_err)?;
        // A lock released a moment ago can still be held by a child process
        // forked meanwhile (it holds a copy of the descriptor until its exec
        // closes it), so a busy store is retried briefly before it is refused.
        let mut tries = 0;
        loop {
            // SAFETY: flock on a file descriptor we own; no memory is involved.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                break;
            }
            tries += 1;
            if tries >= LOCK_TRIES {
                return Err(StoreError::Locked { path: shown });
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(open_err)?;
        let (mut entries, complete) = parse(path, &text)?;
        let repaired_bytes = (text.len() - complete) as u64;
        if repaired_bytes > 0 {
            file.set_len(complete as u64).map_err(open_err)?;
        }
        file.seek(SeekFrom::End(0)).map_err(open_err)?;
        entries.extend(read_point_files(path)?);
        Ok(Store {
            path: path.to_path_buf(),
            file: Some(file),
            per_point: false,
            entries,
            repaired_bytes,
        })
    }

    /// Open for one of many concurrent writers (a Slurm array task): no lock,
    /// no repair of the JSON-lines file (a local run owns it), and every
    /// [`Store::append`] goes to its own per-point file.
    pub fn open_per_point(path: &Path) -> Result<Self, StoreError> {
        let mut store = match Self::read(path) {
            Ok(s) => s,
            Err(StoreError::Missing { .. }) => Self::from_entries_at(vec![], path),
            Err(e) => return Err(e),
        };
        store.per_point = true;
        Ok(store)
    }

    /// Read a store without locking or repairing it (reports, metrics): its
    /// lines, then its per-point files.
    pub fn read(path: &Path) -> Result<Self, StoreError> {
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if point_dir(path).is_dir() {
                    // Only Slurm tasks have written to this store so far.
                    String::new()
                } else {
                    return Err(StoreError::Missing { path: shown });
                }
            }
            Err(source) => {
                return Err(StoreError::Open {
                    path: shown,
                    source,
                })
            }
        };
        let (mut entries, _) = parse(path, &text)?;
        entries.extend(read_point_files(path)?);
        Ok(Store {
            path: path.to_path_buf(),
            file: None,
            per_point: false,
            entries,
            repaired_bytes: 0,
        })
    }

    /// An in-memory store (tests, the demo's derived sets).
    pub fn from_entries(entries: Vec<Entry>) -> Self {
        Store {
            path: PathBuf::new(),
            file: None,
            per_point: false,
            entries,
            repaired_bytes: 0,
        }
    }

    /// An in-memory store that reports `path` as where it came from (merged
    /// stores for one report).
    pub fn from_entries_at(entries: Vec<Entry>, path: &Path) -> Self {
        Store {
            path: path.to_path_buf(),
            ..Self::from_entries(entries)
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every line, in file order. A point may appear more than once (a failure,
    /// then a retry): [`Store::latest`] gives the current state.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The last entry per key, in first-seen order.
    pub fn latest(&self) -> Vec<&Entry> {
        let mut index: std::collections::HashMap<&str, usize> = Default::default();
        let mut out: Vec<&Entry> = Vec::new();
        for e in &self.entries {
            match index.get(e.key.as_str()) {
                Some(&i) => out[i] = e,
                None => {
                    index.insert(&e.key, out.len());
                    out.push(e);
                }
            }
        }
        out
    }

    /// Every entry a later entry of the same key replaced (a failure or a
    /// disturbed run that was run again), in file order: [`Store::entries`]
    /// minus [`Store::latest`].
    pub fn superseded(&self) -> Vec<&Entry> {
        let latest = self.latest();
        self.entries
            .iter()
            .filter(|e| !latest.iter().any(|l| std::ptr::eq(*l, *e)))
            .collect()
    }

    pub fn is_finished(&self, key: &str, retry_failed: bool) -> bool {
        self.latest_entry(key)
            .is_some_and(|e| e.is_finished(retry_failed))
    }

    /// The latest entry of one point (key with repetition), if any.
    pub fn latest_entry(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().rev().find(|e| e.key == key)
    }

    /// Append one entry durably: a single `write` of the whole line with
    /// O_APPEND semantics, then `fdatasync`, so a kill leaves either the whole
    /// line or a torn tail that the next open cuts off. A store opened with
    /// [`Store::open_per_point`] writes the entry's own file instead.
    pub fn append(&mut self, entry: Entry) -> Result<(), StoreError> {
        let shown = self.path.display().to_string();
        if self.per_point {
            write_point_file(&self.path, &entry)?;
            self.entries.push(entry);
            return Ok(());
        }
        let Some(file) = self.file.as_mut() else {
            // In-memory or read-only store: keep the entry only in memory.
            self.entries.push(entry);
            return Ok(());
        };
        let mut line = serde_json::to_string(&entry).map_err(|e| StoreError::Write {
            path: shown.clone(),
            source: std::io::Error::other(e),
        })?;
        line.push('\n');
        let werr = |source| StoreError::Write {
            path: shown.clone(),
            source,
        };
        file.write_all(line.as_bytes()).map_err(werr)?;
        file.sync_data().map_err(werr)?;
        // Readers put per-point files after the lines: this newer line must
        // not be hidden by an older per-point result of the same key.
        match std::fs::remove_file(point_file(&self.path, &entry.key)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(StoreError::Write {
                    path: shown,
                    source,
                })
            }
        }
        self.entries.push(entry);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::vm_point;

    pub fn temp_path(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "smplab-lab-test-{}-{}-{}",
            tag,
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let _ = std::fs::create_dir_all(&dir);
        dir.join("results.jsonl")
    }

    #[test]
    fn append_reopen_and_torn_tail() {
        let path = temp_path("store");
        {
            let mut s = Store::open(&path).unwrap();
            s.append(Entry::new(vm_point("dedup", 2, 0), Status::Ok, 1.0, vec![]))
                .unwrap();
            s.append(Entry::new(
                vm_point("dedup", 2, 1),
                Status::Failed {
                    reason: "guest crashed".into(),
                },
                1.0,
                vec![],
            ))
            .unwrap();
        }
        // Simulate a kill in the middle of the third write.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"v\":1,\"key\":\"vm/ded").unwrap();
        drop(f);
        let s = Store::open(&path).unwrap();
        assert_eq!(s.entries().len(), 2);
        assert!(s.repaired_bytes > 0);
        assert!(s.is_finished(&vm_point("dedup", 2, 0).key(), false));
        assert!(s.is_finished(&vm_point("dedup", 2, 1).key(), false));
        assert!(!s.is_finished(&vm_point("dedup", 2, 1).key(), true));
        assert!(std::fs::read_to_string(&path).unwrap().ends_with('\n'));
        // A second writer is refused while the first holds the lock.
        let err = Store::open(&path).err().unwrap();
        assert!(matches!(err, StoreError::Locked { .. }));
        drop(s);
        assert!(Store::open(&path).is_ok());
    }

    proptest::proptest! {
        /// A kill can cut the file at any byte: opening it keeps exactly the
        /// entries whose lines were complete, and appending afterwards works.
        #[test]
        // Casts: statistics are finite and non-negative; f64 `as` integer saturates (NaN to 0), which is the clamp wanted; counts are small.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        fn any_cut_keeps_the_complete_prefix(cut_frac in 0.0f64..1.0, n in 1usize..6) {
            let path = temp_path("cut");
            let mut full = String::new();
            let mut ends = Vec::new();
            for rep in 0..n {
                let e = Entry::new(vm_point("dedup", 2, u32::try_from(rep).unwrap_or(u32::MAX)), Status::Ok, 0.5, vec![]);
                full.push_str(&serde_json::to_string(&e).unwrap());
                full.push('\n');
                ends.push(full.len());
            }
            let cut = (full.len() as f64 * cut_frac) as usize;
            std::fs::write(&path, &full.as_bytes()[..cut]).unwrap();
            let complete = ends.iter().filter(|&&e| e <= cut).count();
            let mut s = Store::open(&path).unwrap();
            proptest::prop_assert_eq!(s.entries().len(), complete);
            s.append(Entry::new(vm_point("x", 2, 0), Status::Ok, 0.0, vec![])).unwrap();
            drop(s);
            let again = Store::read(&path).unwrap();
            proptest::prop_assert_eq!(again.entries().len(), complete + 1);
        }
    }

    #[test]
    fn per_point_files_merge_with_lines_and_the_newest_wins() {
        let path = temp_path("points");
        let a = vm_point("dedup", 2, 0);
        let b = vm_point("dedup", 2, 1);
        {
            // A Slurm task: no lock, one file per point, even beside a local writer.
            let local = Store::open(&path).unwrap();
            let mut task = Store::open_per_point(&path).unwrap();
            task.append(Entry::new(a.clone(), Status::Ok, 1.0, vec![]))
                .unwrap();
            task.append(Entry::new(
                b.clone(),
                Status::Failed { reason: "x".into() },
                1.0,
                vec![],
            ))
            .unwrap();
            drop(local);
        }
        assert!(point_file(&path, &a.key()).is_file());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        // A task killed mid-write leaves only a temporary, which readers ignore.
        std::fs::write(point_dir(&path).join(".0123.99.1.tmp"), "{\"v\":1,").unwrap();
        let s = Store::read(&path).unwrap();
        assert_eq!(s.entries().len(), 2);
        assert!(s.is_finished(&a.key(), false));
        assert!(!s.is_finished(&b.key(), true));
        // A local retry of b supersedes its per-point failure and removes the file.
        let mut local = Store::open(&path).unwrap();
        local
            .append(Entry::new(b.clone(), Status::Ok, 1.0, vec![]))
            .unwrap();
        drop(local);
        assert!(!point_file(&path, &b.key()).exists());
        let s = Store::read(&path).unwrap();
        assert_eq!(s.latest().len(), 2);
        assert!(s.latest().iter().all(|e| e.is_ok()));
        // A store only Slurm tasks wrote to (no JSON-lines file) still reads.
        let only = temp_path("points-only");
        Store::open_per_point(&only)
            .unwrap()
            .append(Entry::new(a.clone(), Status::Ok, 1.0, vec![]))
            .unwrap();
        assert!(!only.exists());
        assert_eq!(Store::read(&only).unwrap().entries().len(), 1);
        // A damaged per-point file is named.
        std::fs::write(point_file(&only, &b.key()), "garbage").unwrap();
        let err = Store::read(&only).err().unwrap().to_string();
        assert!(err.contains(".json") && err.contains("delete it"), "{err}");
    }

    #[test]
    fn corrupt_middle_line_is_located() {
        let path = temp_path("corrupt");
        std::fs::write(&path, "not json\n{}\n").unwrap();
        let err = Store::read(&path).err().unwrap().to_string();
        assert!(err.contains(":1: corrupt"), "{err}");
    }

    #[test]
    fn latest_takes_the_retry() {
        let p = vm_point("dedup", 2, 0);
        let s = Store::from_entries(vec![
            Entry::new(
                p.clone(),
                Status::Failed { reason: "x".into() },
                0.0,
                vec![],
            ),
            Entry::new(p, Status::Ok, 0.0, vec![]),
        ]);
        let l = s.latest();
        assert_eq!(l.len(), 1);
        assert!(l[0].is_ok());
        let old = s.superseded();
        assert_eq!(old.len(), 1);
        assert!(!old[0].is_ok());
    }
}
