//! Walks a task directory once: checks symlinks and computes the checksum.
//!
//! Checksum format (`sha256:<hex>`), version 1: the hash of the domain tag
//! `arbiter.task-checksum.v1\0`, then for every regular file and symlink in
//! the directory tree, sorted by relative path bytes (`/`-separated):
//!
//! ```text
//! kind byte ('F' file | 'L' symlink | 'O' other) · path bytes · 0x00 ·
//! length as u64 big-endian · content (file bytes | symlink target bytes | nothing)
//! ```
//!
//! Symlinks are never followed (a symlinked directory is one entry, hashed by
//! its target text). Directories themselves and permission bits are not
//! hashed, so an empty directory or a `chmod` does not change the checksum.

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use super::error::{TaskError, TaskErrorKind};

type Result<T> = std::result::Result<T, TaskError>;

const DOMAIN: &[u8] = b"arbiter.task-checksum.v1\0";

/// Subdirectories whose symlinks must stay inside the task directory: they
/// are copied into containers (build context, verifier, oracle).
const CONTAINED_DIRS: &[&str] = &["tests", "solution", "environment", "steps"];

#[derive(Debug)]
enum Kind {
    File { len: u64 },
    Symlink { target: PathBuf },
    Other,
}

#[derive(Debug)]
struct Entry {
    /// Relative path, `/`-separated, as bytes (the sort key).
    key: Vec<u8>,
    rel: PathBuf,
    kind: Kind,
}

/// What one walk found.
pub(crate) struct Scan {
    pub checksum: String,
    pub warnings: Vec<String>,
}

/// Walks `root` (canonical); `shown` is the directory as the user spelled it,
/// used in messages.
pub(crate) fn scan(root: &Path, shown: &Path) -> Result<Scan> {
    let entries = walk(root, shown)?;
    let warnings = check_symlinks(root, shown, &entries)?;
    let checksum = hash(root, shown, &entries)?;
    Ok(Scan { checksum, warnings })
}

fn walk(root: &Path, shown: &Path) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel_dir) = pending.pop() {
        let dir = root.join(&rel_dir);
        let read = fs::read_dir(&dir).map_err(|e| io_error(shown, &rel_dir, "directory", &e))?;
        for item in read {
            let item = item.map_err(|e| io_error(shown, &rel_dir, "directory", &e))?;
            let rel = rel_dir.join(item.file_name());
            let meta = fs::symlink_metadata(root.join(&rel))
                .map_err(|e| io_error(shown, &rel, "file", &e))?;
            let kind = if meta.file_type().is_symlink() {
                let target = fs::read_link(root.join(&rel))
                    .map_err(|e| io_error(shown, &rel, "symlink", &e))?;
                Kind::Symlink { target }
            } else if meta.is_dir() {
                pending.push(rel);
                continue;
            } else if meta.is_file() {
                Kind::File { len: meta.len() }
            } else {
                Kind::Other
            };
            out.push(Entry {
                key: rel_key(&rel),
                rel,
                kind,
            });
        }
    }
    out.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(out)
}

fn check_symlinks(root: &Path, shown: &Path, entries: &[Entry]) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    for entry in entries {
        let Kind::Symlink { target } = &entry.kind else {
            continue;
        };
        let top = entry.rel.components().next().map(|c| c.as_os_str());
        if !top.is_some_and(|t| CONTAINED_DIRS.iter().any(|d| OsStr::new(d) == t)) {
            continue;
        }
        let link = root.join(&entry.rel);
        let resolved = match fs::canonicalize(&link) {
            Ok(path) => path,
            Err(_) => {
                // Dangling (or a loop): judge the target text lexically.
                let base = link.parent().unwrap_or(root);
                let lexical = normalize(&base.join(target));
                if lexical.starts_with(root) {
                    warnings.push(format!(
                        "{}:symlink: target {} does not exist",
                        shown.join(&entry.rel).display(),
                        target.display()
                    ));
                }
                lexical
            }
        };
        if !resolved.starts_with(root) {
            return Err(TaskError::new(
                TaskErrorKind::Path,
                shown.join(&entry.rel),
                Some("symlink"),
                format!(
                    "points outside the task directory (target: {})",
                    target.display()
                ),
            ));
        }
    }
    Ok(warnings)
}

fn hash(root: &Path, shown: &Path, entries: &[Entry]) -> Result<String> {
    let mut hasher = Sha256::new();
    hasher.update(DOMAIN);
    let mut buf = vec![0u8; 64 * 1024];
    for entry in entries {
        match &entry.kind {
            Kind::File { len } => {
                header(&mut hasher, b'F', &entry.key, *len);
                let mut file = fs::File::open(root.join(&entry.rel))
                    .map_err(|e| io_error(shown, &entry.rel, "file", &e))?;
                let mut read_total: u64 = 0;
                loop {
                    let n = file
                        .read(&mut buf)
                        .map_err(|e| io_error(shown, &entry.rel, "file", &e))?;
                    if n == 0 {
                        break;
                    }
                    read_total += n as u64;
                    if read_total > *len {
                        break;
                    }
                    hasher.update(&buf[..n]);
                }
                if read_total != *len {
                    return Err(TaskError::new(
                        TaskErrorKind::Io,
                        shown.join(&entry.rel),
                        Some("file"),
                        "changed while it was being read; load the task again",
                    ));
                }
            }
            Kind::Symlink { target } => {
                let bytes = os_bytes(target.as_os_str());
                header(&mut hasher, b'L', &entry.key, bytes.len() as u64);
                hasher.update(&bytes);
            }
            Kind::Other => header(&mut hasher, b'O', &entry.key, 0),
        }
    }
    Ok(format!("sha256:{}", crate::digest::hex(&hasher.finalize())))
}

fn header(hasher: &mut Sha256, kind: u8, key: &[u8], len: u64) {
    hasher.update([kind]);
    hasher.update(key);
    hasher.update([0u8]);
    hasher.update(len.to_be_bytes());
}

fn rel_key(rel: &Path) -> Vec<u8> {
    let mut key = Vec::new();
    for (i, part) in rel.components().enumerate() {
        if i > 0 {
            key.push(b'/');
        }
        key.extend_from_slice(&os_bytes(part.as_os_str()));
    }
    key
}

#[cfg(unix)]
fn os_bytes(s: &OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    s.as_bytes().to_vec()
}

#[cfg(not(unix))]
fn os_bytes(s: &OsStr) -> Vec<u8> {
    s.to_string_lossy().replace('\\', "/").into_bytes()
}

/// Resolves `.` and `..` without touching the file system.
pub(super) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn io_error(shown: &Path, rel: &Path, field: &str, err: &std::io::Error) -> TaskError {
    TaskError::new(
        TaskErrorKind::Io,
        shown.join(rel),
        Some(field),
        format!("cannot read ({err})"),
    )
}
