//! `arbiter export harbor JOB_DIR --out DIR`: an arbiter job directory written as a Harbor
//! job folder. Everything is written into a temporary directory beside `DIR` and renamed into
//! place at the end: an export that fails leaves nothing behind.
//!
//! ```text
//! DIR/                         (--leaderboard: DIR/metadata.yaml + DIR/<job name>/…)
//!   config.json                JobConfig
//!   result.json                JobResult (without trial_results, as Harbor writes it)
//!   <trial id>/
//!     config.json              TrialConfig
//!     result.json              TrialResult
//!     agent/                   the agent's logs; trajectory.json is ATIF (arbiter's gateway
//!                              export), an agent's own non-ATIF trajectory is trajectory.agent.json
//!     verifier/                test-stdout.txt, test-stderr.txt, reward.txt|reward.json
//!     artifacts/               collected files
//!     arbiter/record.json      arbiter's trial record, whole
//! ```

use std::path::{Path, PathBuf};

use super::HarborError;
use super::leaderboard::{self, Submission};
use super::mapping;
use super::model::{JobConfig, JobResult, RetryConfig, VerifierConfig};
use super::source::{self, ArbiterJob};
use super::stats;

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub out: PathBuf,
    /// `--leaderboard terminal-bench-2.0` and its metadata flags.
    pub submission: Option<Submission>,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct Exported {
    /// The Harbor job folder.
    pub job_folder: PathBuf,
    pub trials: usize,
    /// Things worth a warning (trials Harbor will count that arbiter does not).
    pub warnings: Vec<String>,
}

/// The dataset name Harbor would record for a task dir: its parent's name when the parent is
/// a dataset (it has `dataset.toml` or `registry.json`), else none (Harbor's `adhoc`).
fn dataset_of(task_dir: &Path) -> Option<String> {
    let parent = task_dir.parent()?;
    (parent.join("dataset.toml").is_file() || parent.join("registry.json").is_file())
        .then(|| parent.file_name().map(|n| n.to_string_lossy().into_owned()))
        .flatten()
}

pub fn export(job_dir: &Path, opts: &ExportOptions) -> Result<Exported, HarborError> {
    let job = source::read(job_dir)?;
    if opts.out.exists() {
        return Err(HarborError::input(
            opts.out.display(),
            "--out",
            "exists; the export writes a new directory",
        ));
    }
    let metadata = match &opts.submission {
        Some(sub) => Some(leaderboard::check(&job, sub)?),
        None => None,
    };
    let parent = match opts.out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(HarborError::io(&parent))?;
    let parent = parent.canonicalize().map_err(HarborError::io(&parent))?;
    let name = opts
        .out
        .file_name()
        .ok_or_else(|| HarborError::input(opts.out.display(), "--out", "names no directory"))?;
    let final_out = parent.join(name);
    let tmp = tempfile::Builder::new()
        .prefix(".arbiter-export-")
        .tempdir_in(&parent)
        .map_err(HarborError::io(&parent))?;
    // The job folder, as it will be named once in place.
    let (job_rel, final_job) = match &opts.submission {
        Some(_) => (PathBuf::from(&job.name), final_out.join(&job.name)),
        None => (PathBuf::new(), final_out.clone()),
    };
    let staged_job = tmp.path().join(&job_rel);
    let (trials, warnings) = write_job(&job, &staged_job, &final_job)?;
    if let Some(metadata) = &metadata {
        let yaml = serde_yaml::to_string(metadata).map_err(|e| {
            HarborError::input("metadata.yaml", "file", format!("cannot write: {e}"))
        })?;
        let path = tmp.path().join("metadata.yaml");
        std::fs::write(&path, yaml).map_err(HarborError::io(&path))?;
    }
    let staged = tmp.keep();
    if let Err(e) = std::fs::rename(&staged, &final_out) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(HarborError::io(&final_out)(e));
    }
    Ok(Exported {
        job_folder: final_job,
        trials,
        warnings,
    })
}

fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), HarborError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| HarborError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    bytes.push(b'\n');
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p).map_err(HarborError::io(p))?;
    }
    std::fs::write(path, bytes).map_err(HarborError::io(path))
}

/// Write the job folder into `staged` (which will become `final_dir`).
fn write_job(
    job: &ArbiterJob,
    staged: &Path,
    final_dir: &Path,
) -> Result<(usize, Vec<String>), HarborError> {
    std::fs::create_dir_all(staged).map_err(HarborError::io(staged))?;
    let job_uuid = mapping::uuid_of(job.job_id.as_deref().unwrap_or(&job.name));
    let jobs_dir = final_dir
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut results = Vec::new();
    let mut warnings = Vec::new();
    let mut retries = 0u64;
    // Harbor's checksum of each task dir, where the dir still holds what the trials ran (its
    // arbiter checksum unchanged).
    let mut harbor_checksums: std::collections::BTreeMap<&str, Option<String>> =
        std::collections::BTreeMap::new();
    for rec in &job.records {
        let harbor_checksum = harbor_checksums
            .entry(rec.task.as_str())
            .or_insert_with(|| {
                let dir = job.task_dir_of.get(&rec.task)?;
                let now = crate::task::load(dir).ok()?.checksum;
                (now == rec.task_checksum)
                    .then(|| super::checksum::task_checksum(dir))
                    .flatten()
            })
            .clone();
        let source = job.task_dir_of.get(&rec.task).and_then(|d| dataset_of(d));
        let trial_final = final_dir.join(&rec.id);
        let config = mapping::trial_config(
            job,
            rec,
            &final_dir.display().to_string(),
            &job_uuid,
            source.as_deref(),
        );
        let uri = format!("file://{}", trial_final.display());
        let result = mapping::trial_result(
            job,
            rec,
            config.clone(),
            uri,
            source.as_deref(),
            harbor_checksum.as_deref(),
        );
        if rec.is_tampered() && result.reward_valid {
            warnings.push(format!(
                "{}: integrity suspect (the agent altered the verifier's toolchain): arbiter never counts it as passed, Harbor counts its reward",
                rec.id
            ));
        }
        retries += u64::from(rec.retries);
        let dir = staged.join(&rec.id);
        copy_trial_files(&job.dir.join("trials").join(&rec.id), &dir)?;
        write_json(&dir.join("config.json"), &config)?;
        write_json(&dir.join("result.json"), &result)?;
        // arbiter's record as the job wrote it (its unknown-to-this-version fields too).
        let original = job.dir.join("trials").join(&rec.id).join("result.json");
        let kept = dir.join("arbiter").join("record.json");
        if original.is_file() {
            std::fs::create_dir_all(dir.join("arbiter")).map_err(HarborError::io(&dir))?;
            std::fs::copy(&original, &kept).map_err(HarborError::io(&original))?;
        } else {
            write_json(&kept, rec)?;
        }
        results.push(result);
    }
    let started = results
        .iter()
        .filter_map(|r| r.started_at.clone())
        .min()
        .unwrap_or_default();
    let finished = results.iter().filter_map(|r| r.finished_at.clone()).max();
    // One Harbor agent per arm, agents in the job's order.
    let rank = |agent: &str| {
        job.agent_order
            .iter()
            .position(|a| a == agent)
            .unwrap_or(usize::MAX)
    };
    let mut arms: Vec<(&str, &str)> = Vec::new();
    for rec in &job.records {
        let arm = (rec.agent.as_str(), rec.variant.as_str());
        if !arms.contains(&arm) {
            arms.push(arm);
        }
    }
    arms.sort_by_key(|(agent, _)| rank(agent));
    let agents: Vec<super::model::AgentConfig> = arms
        .iter()
        .map(|(agent, variant)| {
            let def = job.agents.get(*agent).cloned().unwrap_or_default();
            mapping::agent_config(agent, variant, &def)
        })
        .collect();
    let [agent_t, verifier_t, build_t, install_t] = mapping::timeout_fields(job);
    let config = JobConfig {
        schema_version: 1,
        job_name: job.name.clone(),
        jobs_dir,
        n_attempts: job.attempts.max(1),
        timeout_multiplier: 1.0,
        agent_timeout_multiplier: agent_t,
        verifier_timeout_multiplier: verifier_t,
        agent_setup_timeout_multiplier: install_t,
        environment_build_timeout_multiplier: build_t,
        n_concurrent_trials: job.concurrency,
        quiet: false,
        retry: Some(RetryConfig {
            max_retries: job.max_retries,
        }),
        environment: mapping::environment_config(
            job.records
                .iter()
                .find_map(|r| r.sandbox.as_ref())
                .map(|s| s.backend.as_str()),
        ),
        verifier: VerifierConfig {
            override_timeout_sec: None,
            max_timeout_sec: None,
            disable: false,
        },
        agents,
        tasks: job
            .task_dirs
            .iter()
            .map(|d| super::model::TaskConfig::local(d.display().to_string(), dataset_of(d)))
            .collect(),
    };
    let result = JobResult {
        schema_version: 1,
        id: job_uuid,
        started_at: started,
        updated_at: finished.clone(),
        finished_at: finished,
        n_total_trials: results.len() as u64,
        stats: stats::job_stats(&results, retries),
    };
    write_json(&staged.join("config.json"), &config)?;
    write_json(&staged.join("result.json"), &result)?;
    Ok((results.len(), warnings))
}

/// Harbor's names in a trial's `verifier/`: arbiter's `stdout.log` / `stderr.log` of the test
/// script are Harbor's `test-stdout.txt` / `test-stderr.txt`.
const VERIFIER_RENAMES: &[(&str, &str)] = &[
    ("stdout.log", "test-stdout.txt"),
    ("stderr.log", "test-stderr.txt"),
];

/// What arbiter keeps in a trial's `agent/` that the agent did not write: the change set and
/// the kept changed files (integrity, regrading) and the gateway's ledger of model calls. In the
/// Harbor folder they are under `arbiter/`, beside the record; `agent/` keeps the agent's logs.
pub(crate) const HARNESS_FILES: &[&str] = &["changes.json", "changes.tar", "model-calls.jsonl"];

/// Copy a trial's `agent/`, `verifier/`, `artifacts/` and `steps/` into the Harbor trial dir,
/// under Harbor's names.
fn copy_trial_files(from: &Path, to: &Path) -> Result<(), HarborError> {
    for sub in ["agent", "verifier", "artifacts", "steps"] {
        let src = from.join(sub);
        if src.is_dir() {
            copy_tree(&src, &to.join(sub))?;
        }
    }
    for name in HARNESS_FILES {
        let p = to.join("agent").join(name);
        if p.is_file() {
            let dir = to.join("arbiter");
            std::fs::create_dir_all(&dir).map_err(HarborError::io(&dir))?;
            std::fs::rename(&p, dir.join(name)).map_err(HarborError::io(&p))?;
        }
    }
    let verifier = to.join("verifier");
    for (ours, theirs) in VERIFIER_RENAMES {
        let p = verifier.join(ours);
        if p.is_file() && !verifier.join(theirs).exists() {
            std::fs::rename(&p, verifier.join(theirs)).map_err(HarborError::io(&p))?;
        }
    }
    place_trajectory(&to.join("agent"))
}

/// Harbor keeps the ATIF trajectory at `agent/trajectory.json`. arbiter writes the gateway's as
/// `trajectory.atif.json`, and an agent's own trajectory (any format) as `trajectory.json`:
/// the ATIF one takes Harbor's name, an agent's own that is not ATIF becomes
/// `trajectory.agent.json`.
fn place_trajectory(agent: &Path) -> Result<(), HarborError> {
    let atif = agent.join("trajectory.atif.json");
    let native = agent.join("trajectory.json");
    let is_atif = |p: &Path| {
        std::fs::read(p)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v.get("schema_version")?.as_str().map(str::to_string))
            .is_some_and(|s| s.starts_with("ATIF"))
    };
    if native.is_file() && (atif.is_file() || !is_atif(&native)) {
        let to = agent.join("trajectory.agent.json");
        std::fs::rename(&native, &to).map_err(HarborError::io(&native))?;
    }
    if atif.is_file() {
        std::fs::rename(&atif, &native).map_err(HarborError::io(&atif))?;
    }
    Ok(())
}

/// Copy a directory tree: files and directories; symlinks as symlinks (never followed).
pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<(), HarborError> {
    std::fs::create_dir_all(to).map_err(HarborError::io(to))?;
    for entry in std::fs::read_dir(from).map_err(HarborError::io(from))? {
        let entry = entry.map_err(HarborError::io(from))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let ty = entry.file_type().map_err(HarborError::io(&src))?;
        if ty.is_dir() {
            copy_tree(&src, &dst)?;
        } else if ty.is_symlink() {
            let target = std::fs::read_link(&src).map_err(HarborError::io(&src))?;
            std::os::unix::fs::symlink(target, &dst).map_err(HarborError::io(&dst))?;
        } else if ty.is_file() {
            std::fs::copy(&src, &dst).map_err(HarborError::io(&src))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn files_take_harbors_names_and_harness_files_move_to_arbiter() {
        let tmp = tempfile::tempdir().expect("tmp");
        let from = tmp.path().join("trial");
        write(&from.join("agent/stdout.log"), "hi");
        write(&from.join("agent/trajectory.json"), r#"{"native": true}"#);
        write(
            &from.join("agent/trajectory.atif.json"),
            r#"{"schema_version": "ATIF-v1.4", "steps": []}"#,
        );
        write(&from.join("agent/changes.json"), "{}");
        write(&from.join("agent/model-calls.jsonl"), "{}\n");
        write(&from.join("verifier/stdout.log"), "ran");
        write(&from.join("verifier/reward.txt"), "1");
        let to = tmp.path().join("harbor");
        copy_trial_files(&from, &to).expect("copied");
        let read = |p: &str| std::fs::read_to_string(to.join(p)).expect(p);
        assert!(read("agent/trajectory.json").contains("ATIF-v1.4"));
        assert!(read("agent/trajectory.agent.json").contains("native"));
        assert!(!to.join("agent/trajectory.atif.json").exists());
        assert_eq!(read("agent/stdout.log"), "hi");
        assert_eq!(read("arbiter/changes.json"), "{}");
        assert_eq!(read("arbiter/model-calls.jsonl"), "{}\n");
        assert!(!to.join("agent/changes.json").exists());
        assert_eq!(read("verifier/test-stdout.txt"), "ran");
        assert_eq!(read("verifier/reward.txt"), "1");
    }

    #[test]
    fn an_agents_own_atif_trajectory_keeps_its_name() {
        let tmp = tempfile::tempdir().expect("tmp");
        let agent = tmp.path().join("agent");
        write(
            &agent.join("trajectory.json"),
            r#"{"schema_version": "ATIF-v1.2", "steps": []}"#,
        );
        place_trajectory(&agent).expect("placed");
        assert!(agent.join("trajectory.json").is_file());
        assert!(!agent.join("trajectory.agent.json").exists());
    }

    #[test]
    fn datasets_are_named_by_their_directory() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ds = tmp.path().join("terminal-bench");
        write(&ds.join("registry.json"), "[]");
        write(&ds.join("hello/task.toml"), "");
        assert_eq!(
            dataset_of(&ds.join("hello")).as_deref(),
            Some("terminal-bench")
        );
        write(&tmp.path().join("loose/task.toml"), "");
        assert_eq!(dataset_of(&tmp.path().join("loose")), None);
    }
}
