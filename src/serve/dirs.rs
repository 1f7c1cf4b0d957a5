//! What a job dir under the root says of itself, read on every request: its id, whether a
//! process runs it, its records and counts, and its files (only under the job dir).

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::job::{JobConfig, JobStore, summarize};
use crate::trial::TrialRecord;

use super::error::ApiError;

/// A job dir under the root.
#[derive(Debug, Clone)]
pub(crate) struct JobDir {
    /// The job's `job-id`; a dir without one (never run by arbiter) goes by its path under the
    /// root, `/` written `~`.
    pub id: String,
    /// Canonical.
    pub dir: PathBuf,
}

/// Every job dir under `root` (three levels down, as `arbiter index` looks).
pub(crate) fn scan(root: &Path) -> Vec<JobDir> {
    let dirs = crate::results::find_jobs(&[root.to_path_buf()]).unwrap_or_default();
    dirs.into_iter()
        .filter_map(|d| d.canonicalize().ok())
        .filter(|d| d.starts_with(root))
        .map(|dir| JobDir {
            id: id_of(root, &dir),
            dir,
        })
        .collect()
}

pub(crate) fn id_of(root: &Path, dir: &Path) -> String {
    match std::fs::read_to_string(dir.join(crate::job::JOB_ID_FILE)) {
        Ok(text) if !text.trim().is_empty() => text.trim().to_string(),
        _ => dir
            .strip_prefix(root)
            .unwrap_or(dir)
            .to_string_lossy()
            .replace('/', "~"),
    }
}

/// Whether a process holds the job dir's lock (`arbiter run`/`resume`, or a job of this
/// server). Read from the kernel's table of locks, so looking never takes the lock — a run
/// starting at that moment is not refused; where that table cannot be read, the lock is tried
/// (and let go at once).
pub(crate) fn busy(dir: &Path) -> bool {
    let lock = dir.join(".arbiter.lock");
    let Ok(meta) = std::fs::metadata(&lock) else {
        return false;
    };
    match std::fs::read_to_string("/proc/locks") {
        Ok(table) => held_in(&table, meta.dev(), meta.ino()),
        Err(_) => matches!(JobStore::open(dir).and_then(|s| s.lock()), Ok(None)),
    }
}

/// Whether `/proc/locks` (`1: FLOCK ADVISORY WRITE 31556 fe:00:953089 0 EOF`) lists a lock
/// on the file `dev`/`ino`.
fn held_in(table: &str, dev: u64, ino: u64) -> bool {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    table.lines().any(|line| {
        let Some(file) = line.split_whitespace().nth(5) else {
            return false;
        };
        let mut parts = file.split(':');
        let (Some(ma), Some(mi), Some(i)) = (parts.next(), parts.next(), parts.next()) else {
            return false;
        };
        u64::from_str_radix(ma, 16) == Ok(major)
            && u64::from_str_radix(mi, 16) == Ok(minor)
            && i.parse::<u64>() == Ok(ino)
    })
}

/// The finished records of the job, as `trials.jsonl` holds them (a half-written last line of
/// a running job is skipped).
pub(crate) fn records(dir: &Path) -> Vec<(Value, TrialRecord)> {
    let Ok(text) = std::fs::read_to_string(dir.join("trials.jsonl")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let value: Value = serde_json::from_str(line).ok()?;
            let record: TrialRecord = serde_json::from_value(value.clone()).ok()?;
            Some((value, record))
        })
        .collect()
}

/// A job's counts so far, as `arbiter run`'s summary counts them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Counts {
    /// Trials the job plans (tasks × arms × attempts), when its `job.yaml` says.
    pub planned: Option<usize>,
    /// Finished trials.
    pub trials: usize,
    pub passed: usize,
    /// Passed or failed (infra errors and trials the user cancelled are not scored).
    pub scored: usize,
    pub infra: usize,
    pub cancelled: usize,
    /// passed ÷ scored, `null` before anything was scored.
    pub pass_rate: Option<f64>,
}

pub(crate) fn counts(dir: &Path, records: &[(Value, TrialRecord)]) -> Counts {
    let briefs: Vec<_> = records
        .iter()
        .map(|(_, r)| crate::job::Brief::of(r))
        .collect();
    let arms = summarize(&briefs);
    let passed = arms.iter().map(|a| a.passed).sum();
    let failed: usize = arms.iter().map(|a| a.failed).sum();
    let infra = arms.iter().map(|a| a.infra).sum();
    let cancelled = arms.iter().map(|a| a.cancelled).sum();
    let scored = passed + failed;
    Counts {
        planned: planned(dir),
        trials: records.len(),
        passed,
        scored,
        infra,
        cancelled,
        pass_rate: (scored > 0).then(|| passed as f64 / scored as f64),
    }
}

/// tasks × (agent × variant arms) × attempts, from the saved `job.yaml` and `lock.json`.
fn planned(dir: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(dir.join("job.yaml")).ok()?;
    let config: JobConfig = serde_yaml::from_str(&text).ok()?;
    let lock: Value = serde_json::from_slice(&std::fs::read(dir.join("lock.json")).ok()?).ok()?;
    let tasks = lock.get("tasks")?.as_object()?.len();
    let attempts = lock.get("attempts")?.as_u64()? as usize;
    let agents = config.agents.len();
    let arms = if config.variants.is_empty() {
        agents
    } else {
        config
            .variants
            .iter()
            .map(|v| v.agents.as_ref().map_or(agents, Vec::len))
            .sum()
    };
    Some(tasks * arms * attempts)
}

/// `rel` inside the job dir `dir`: no `..`, no absolute path, and the canonical file under
/// the canonical job dir (a symlink out of it is refused too).
pub(crate) fn file(dir: &Path, rel: &str) -> Result<PathBuf, ApiError> {
    let refused = || ApiError::not_found(format!("{rel}: no such file in the job dir"));
    let rel_path = Path::new(rel);
    if rel.is_empty()
        || rel_path
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(refused());
    }
    let path = dir.join(rel_path).canonicalize().map_err(|_| refused())?;
    if !path.starts_with(dir) || !path.is_file() {
        return Err(refused());
    }
    Ok(path)
}

/// `path` (relative to the root, or absolute) as a path under the canonical `root`: its
/// longest existing ancestor canonicalized, the rest plain names. Anything else is refused.
pub(crate) fn under_root(root: &Path, field: &str, path: &Path) -> Result<PathBuf, ApiError> {
    let outside = || {
        ApiError::bad(format!(
            "{field}: {}: not under the served root",
            path.display()
        ))
    };
    let joined = root.join(path);
    let mut existing = joined.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        let name = existing.file_name().ok_or_else(outside)?;
        rest.push(name.to_os_string());
        existing = existing.parent().ok_or_else(outside)?;
    }
    let mut out = existing.canonicalize().map_err(|_| outside())?;
    for name in rest.into_iter().rev() {
        if name == ".." || name == "." {
            return Err(outside());
        }
        out.push(name);
    }
    if !out.starts_with(root) || out == root {
        return Err(outside());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_seen_without_taking_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = JobStore::open(tmp.path()).expect("store");
        assert!(!busy(tmp.path()), "no lock file");
        let held = store.lock().expect("lock").expect("free");
        assert!(busy(tmp.path()));
        // Looking did not take it: it is still ours alone, and free once let go.
        assert!(store.lock().expect("lock").is_none());
        drop(held);
        assert!(!busy(tmp.path()));
        assert!(store.lock().expect("lock").is_some());
    }

    #[test]
    fn the_kernel_table_is_read_by_device_and_inode() {
        let table = "1: FLOCK  ADVISORY  WRITE 31556 fe:00:953089 0 EOF\n2: POSIX  ADVISORY  WRITE 1 08:01:7 0 EOF\n";
        let dev = 0xfe << 8; // fe:00
        assert!(held_in(table, dev, 953089));
        assert!(!held_in(table, dev, 953088));
        assert!(held_in(table, (0x08 << 8) | 0x01, 7));
        assert!(!held_in(table, 0x0801 + 1, 7));
        assert!(!held_in("garbage\n", dev, 953089));
    }
}
