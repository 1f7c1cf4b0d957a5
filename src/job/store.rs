//! The job directory on disk (SPEC §7). Records are written atomically (temp file, fsync,
//! rename) and appended to `trials.jsonl` with an fsync, so a killed run never leaves a
//! half-written record that looks finished.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::trial::TrialRecord;

#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub(crate) struct StoreError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

fn at(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError {
        path: path.to_path_buf(),
        source,
    }
}

/// Write `bytes` to `path` so that readers see either the old content or all of the new.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(at(path))?;
    tmp.write_all(bytes).map_err(at(path))?;
    tmp.as_file().sync_all().map_err(at(path))?;
    tmp.persist(path).map_err(|e| StoreError {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The job's identity (one line), written at its first run and kept by every resume, so the
/// results store tells two jobs run in the same folder apart (docs/results.md).
pub(crate) const JOB_ID_FILE: &str = "job-id";

/// The marker of a job dir made by `arbiter import` from another harness's records: such a
/// dir is read-only (no run, resume or regrade writes into it).
pub(crate) const IMPORTED_MARKER: &str = "imported.json";

/// `Some(the marker's path)` when `dir` is an imported, read-only job dir.
pub(crate) fn imported_marker(dir: &Path) -> Option<PathBuf> {
    let marker = dir.join(IMPORTED_MARKER);
    marker.is_file().then_some(marker)
}

/// Errors of earlier runs of trials run again with `--retry-infra`, by trial id.
const CARRIED: &str = "retry-infra.json";

/// A job directory.
#[derive(Debug, Clone)]
pub(crate) struct JobStore {
    root: PathBuf,
}

impl JobStore {
    pub(crate) fn open(root: &Path) -> Result<Self, StoreError> {
        fs::create_dir_all(root.join("trials")).map_err(at(root))?;
        Ok(JobStore {
            root: root.to_path_buf(),
        })
    }

    pub(crate) fn trial_dir(&self, id: &str) -> PathBuf {
        self.root.join("trials").join(id)
    }

    /// Make an empty directory for a trial about to run, discarding what a killed run left.
    pub(crate) fn fresh_trial_dir(&self, id: &str) -> Result<PathBuf, StoreError> {
        let dir = self.trial_dir(id);
        if dir.exists() {
            fs::remove_dir_all(&dir).map_err(at(&dir))?;
        }
        fs::create_dir_all(&dir).map_err(at(&dir))?;
        Ok(dir)
    }

    /// Persist a finished trial: `result.json` first, then its line in `trials.jsonl`.
    pub(crate) fn record(&self, record: &TrialRecord) -> Result<(), StoreError> {
        let dir = self.trial_dir(&record.id);
        let result = dir.join("result.json");
        let pretty = serde_json::to_vec_pretty(record).map_err(|e| StoreError {
            path: result.clone(),
            source: e.into(),
        })?;
        write_atomic(&result, &pretty)?;
        let jsonl = self.root.join("trials.jsonl");
        let mut line = serde_json::to_vec(record).map_err(|e| StoreError {
            path: jsonl.clone(),
            source: e.into(),
        })?;
        line.push(b'\n');
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&jsonl)
            .map_err(at(&jsonl))?;
        file.write_all(&line).map_err(at(&jsonl))?;
        file.sync_all().map_err(at(&jsonl))?;
        Ok(())
    }

    /// Take the job dir's exclusive lock (held until the returned file is dropped);
    /// `None` when another process holds it.
    pub(crate) fn lock(&self) -> Result<Option<File>, StoreError> {
        let path = self.root.join(".arbiter.lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(at(&path))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(StoreError { path, source: e }),
        }
    }

    /// Make `trials.jsonl` hold exactly one line per finished record. A run killed between
    /// writing `result.json` and appending its line (or in the middle of a line) is mended
    /// here; `result.json` files are the source of truth.
    pub(crate) fn reconcile_jsonl(&self, finished: &[&str]) -> Result<bool, StoreError> {
        #[derive(serde::Deserialize)]
        struct IdOnly {
            id: String,
        }
        let path = self.root.join("trials.jsonl");
        let text = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(StoreError { path, source: e }),
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut consistent = text.is_empty() || text.ends_with(b"\n");
        for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<IdOnly>(line) {
                Ok(rec) if !seen.contains(&rec.id) => {
                    seen.insert(rec.id);
                }
                _ => consistent = false,
            }
        }
        let expected: std::collections::BTreeSet<&str> = finished.iter().copied().collect();
        if consistent
            && seen.len() == expected.len()
            && seen.iter().all(|id| expected.contains(id.as_str()))
        {
            return Ok(false);
        }
        self.rewrite_jsonl(finished)?;
        Ok(true)
    }

    /// Write `trials.jsonl` anew from the `result.json` of `finished` (temp file + rename):
    /// readers see the old file or all of the new one. Used after records were updated in
    /// place (`arbiter verify`).
    pub(crate) fn rewrite_jsonl(&self, finished: &[&str]) -> Result<(), StoreError> {
        let path = self.root.join("trials.jsonl");
        let mut out = Vec::new();
        for id in finished {
            // Compact each finished record onto one line; result.json is the source of truth.
            let result = self.trial_dir(id).join("result.json");
            let bytes = fs::read(&result).map_err(at(&result))?;
            let value: serde_json::Value =
                serde_json::from_slice(&bytes).map_err(|e| StoreError {
                    path: result.clone(),
                    source: e.into(),
                })?;
            serde_json::to_writer(&mut out, &value).map_err(|e| StoreError {
                path: path.clone(),
                source: e.into(),
            })?;
            out.push(b'\n');
        }
        write_atomic(&path, &out)?;
        tracing::info!(
            records = finished.len(),
            "rewrote trials.jsonl from the trial records"
        );
        Ok(())
    }

    /// Replace a finished trial's `result.json` atomically (its `trials.jsonl` line is
    /// rewritten later, with [`JobStore::rewrite_jsonl`]).
    pub(crate) fn update(&self, record: &TrialRecord) -> Result<(), StoreError> {
        let result = self.trial_dir(&record.id).join("result.json");
        let pretty = serde_json::to_vec_pretty(record).map_err(|e| StoreError {
            path: result.clone(),
            source: e.into(),
        })?;
        write_atomic(&result, &pretty)
    }

    /// The infrastructure errors of earlier runs of trials run again with `--retry-infra`
    /// (`retry-infra.json`), by trial id; empty when there is none or it cannot be read.
    pub(crate) fn carried_errors(
        &self,
    ) -> std::collections::BTreeMap<String, Vec<crate::trial::InfraError>> {
        std::fs::read(self.root.join(CARRIED))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Keep `carried` (atomically) before the records they came from are discarded.
    pub(crate) fn keep_carried_errors(
        &self,
        carried: &std::collections::BTreeMap<String, Vec<crate::trial::InfraError>>,
    ) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec_pretty(carried).map_err(|e| StoreError {
            path: self.root.join(CARRIED),
            source: e.into(),
        })?;
        self.write_file(CARRIED, &bytes)
    }

    /// The job's id from its `job-id` file; a job without one (its first run) gets a new
    /// random one, written atomically.
    pub(crate) fn ensure_job_id(&self) -> Result<String, StoreError> {
        let path = self.root.join(JOB_ID_FILE);
        match fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_string()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError { path, source: e }),
        }
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| StoreError {
            path: path.clone(),
            source: io::Error::other(e.to_string()),
        })?;
        let id = crate::digest::hex(&bytes);
        write_atomic(&path, format!("{id}\n").as_bytes())?;
        Ok(id)
    }

    /// Read a finished trial's record.
    pub(crate) fn load(&self, id: &str) -> Option<TrialRecord> {
        let bytes = fs::read(self.trial_dir(id).join("result.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub(crate) fn write_file(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        write_atomic(&self.root.join(name), bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_content() {
        let tmp = tempfile::tempdir().expect("tmp");
        let p = tmp.path().join("a.json");
        write_atomic(&p, b"first").expect("write");
        write_atomic(&p, b"second").expect("write");
        assert_eq!(fs::read(&p).expect("read"), b"second");
        assert_eq!(
            fs::read_dir(tmp.path()).expect("ls").count(),
            1,
            "no temp files left behind"
        );
    }

    #[test]
    fn fresh_trial_dir_discards_half_written_state() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = JobStore::open(tmp.path()).expect("open");
        let dir = store.fresh_trial_dir("t1").expect("dir");
        fs::write(dir.join("partial.log"), b"x").expect("write");
        assert!(!store.trial_dir("t1").join("result.json").exists());
        let dir = store.fresh_trial_dir("t1").expect("dir");
        assert_eq!(fs::read_dir(dir).expect("ls").count(), 0);
    }

    #[test]
    fn jsonl_is_mended_to_one_line_per_finished_record() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = JobStore::open(tmp.path()).expect("open");
        for id in ["a", "b", "c"] {
            let dir = store.fresh_trial_dir(id).expect("dir");
            fs::write(
                dir.join("result.json"),
                format!("{{\n  \"id\": \"{id}\"\n}}"),
            )
            .expect("write");
        }
        let jsonl = tmp.path().join("trials.jsonl");
        let lines = |p: &Path| {
            fs::read_to_string(p)
                .expect("read")
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        // Killed after result.json of c, and in the middle of a line.
        fs::write(&jsonl, "{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c").expect("write");
        assert!(store.reconcile_jsonl(&["a", "b", "c"]).expect("reconcile"));
        assert_eq!(
            lines(&jsonl),
            ["{\"id\":\"a\"}", "{\"id\":\"b\"}", "{\"id\":\"c\"}"]
        );
        // Consistent: left alone.
        assert!(!store.reconcile_jsonl(&["a", "b", "c"]).expect("reconcile"));
        // A duplicate line is removed.
        fs::write(
            &jsonl,
            "{\"id\":\"a\"}\n{\"id\":\"a\"}\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n",
        )
        .expect("write");
        assert!(store.reconcile_jsonl(&["a", "b", "c"]).expect("reconcile"));
        assert_eq!(lines(&jsonl).len(), 3);
    }

    #[test]
    fn job_id_is_written_once_and_kept() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = JobStore::open(tmp.path()).expect("open");
        let id = store.ensure_job_id().expect("id");
        assert_eq!(id.len(), 32);
        assert_eq!(store.ensure_job_id().expect("id"), id, "a resume keeps it");
        let other = tempfile::tempdir().expect("tmp");
        let again = JobStore::open(other.path()).expect("open");
        assert_ne!(again.ensure_job_id().expect("id"), id);
    }

    #[test]
    fn job_dir_lock_is_exclusive() {
        let tmp = tempfile::tempdir().expect("tmp");
        let store = JobStore::open(tmp.path()).expect("open");
        let held = store.lock().expect("lock").expect("free");
        assert!(
            store.lock().expect("lock").is_none(),
            "second lock must fail while held"
        );
        drop(held);
        assert!(store.lock().expect("lock").is_some());
    }
}
