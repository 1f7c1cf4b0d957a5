//! `arbiter tasks check`: is each task sound? Per task: the layout loads, the oracle passes,
//! nop fails, the verifier gives the same verdict every time on the oracle's frozen result,
//! and no built-in exploit ([`EXPLOITS`]) passes it.
//!
//! It is an ordinary job: [`plan`] loads the tasks (one that does not load is a failed
//! `layout` check, not an error of the command) and resolves a generated `job.yaml` (agents
//! `oracle`, `nop` and `exploit-<name>` for each exploit, one attempt each) into a
//! [`crate::job::JobSpec`] that keeps the oracle's frozen filesystem; [`run`] runs it with
//! [`crate::job::run`] (so the job dir is readable by `arbiter report` and resumable), then
//! re-verifies the oracle's kept filesystem N-1 times ([`reverify`]), judges every task
//! ([`judge_task`], pure) and writes `check/result.json` in the job dir.
//!
//! Job dir additions: `check/config.yaml` (the generated job config), `check/repeats/<oracle
//! trial>/<n>/{outcome.json,verifier/}` (re-verifications 2..=N), `check/result.json` (the
//! [`CheckReport`], schema `arbiter.taskcheck.v1`).

mod exploits;
mod repeat;
mod verdict;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use crate::job::{
    self, AgentEntry, CancelReason, ConfigError, JobConfig, JobEvent, JobSpec, JobStore, RunArgs,
    RunError, trial_id,
};
use crate::sandbox::{Resource, Sandbox};
use crate::task::{Task, TaskError, VerifierMode};
use crate::verifier::{VerifierOutcome, VerifierStatus};

pub(crate) use exploits::EXPLOITS;
pub(crate) use repeat::keep_snapshot;
pub(crate) use repeat::{RepeatSettings, reverify};
pub(crate) use verdict::{
    CheckResult, Problem, Repeats, TaskInput, TaskReport, TrialFacts, Verdict, exit_code,
    judge_task,
};

/// Schema tag of `check/result.json` and of `--format json`.
pub(crate) const CHECK_SCHEMA: &str = "arbiter.taskcheck.v1";
/// Default number of verifier runs on the oracle's result.
pub(crate) const DEFAULT_REPEAT: u32 = 3;
const ORACLE: &str = "oracle";
const NOP: &str = "nop";
const VARIANT: &str = "default";

/// What `arbiter tasks check` was asked.
#[derive(Debug, Clone)]
pub(crate) struct CheckOptions {
    /// Task or dataset directories.
    pub paths: Vec<PathBuf>,
    pub concurrency: usize,
    /// Verifier runs on the oracle's result, the oracle's own included (at least 1).
    pub repeat: u32,
    /// Default `jobs/check-<UTC timestamp>`.
    pub job_dir: Option<PathBuf>,
}

/// Why `tasks check` could not start or finish (exit 2 for the first three, else 1).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    /// A path given is not a task or dataset directory.
    #[error("{0}")]
    Path(#[source] TaskError),
    #[error("no task could be checked: {first}")]
    NoTask { first: String },
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Run(#[from] RunError),
    #[error("{path}: {message}")]
    Io { path: PathBuf, message: String },
}

/// One task as given: loaded, or why not.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// The task's name (its directory's name when it did not load).
    pub name: String,
    /// `Err(one line)`: the loader's error, or why the task cannot be checked.
    pub task: Result<Arc<Task>, String>,
}

/// A resolved check: the tasks and the job that checks those that loaded.
#[derive(Debug)]
pub(crate) struct CheckPlan {
    pub entries: Vec<Entry>,
    pub spec: JobSpec,
    pub repeat: u32,
}

/// Load the tasks and resolve the checking job. Nothing is started.
pub(crate) fn plan(opts: &CheckOptions) -> Result<CheckPlan, CheckError> {
    let entries = load_entries(&opts.paths)?;
    let loaded: Vec<&Arc<Task>> = entries
        .iter()
        .filter_map(|e| e.task.as_ref().ok())
        .collect();
    if loaded.is_empty() {
        let first = entries
            .iter()
            .find_map(|e| e.task.as_ref().err().cloned())
            .unwrap_or_else(|| "no task directories given".to_string());
        return Err(CheckError::NoTask { first });
    }
    let dir = opts.job_dir.clone().unwrap_or_else(|| {
        PathBuf::from("jobs").join(format!("check-{}", crate::timefmt::now_compact()))
    });
    let config = JobConfig {
        name: Some("tasks-check".to_string()),
        tasks: loaded
            .iter()
            .map(|t| absolute(&t.dir).display().to_string())
            .collect(),
        agents: agents(),
        attempts: Some(1),
        concurrency: Some(opts.concurrency),
        ..JobConfig::default()
    };
    let path = dir.join("check").join("config.yaml");
    let io = |message: String| CheckError::Io {
        path: path.clone(),
        message,
    };
    let yaml = serde_yaml::to_string(&config).map_err(|e| io(e.to_string()))?;
    std::fs::create_dir_all(dir.join("check")).map_err(|e| io(e.to_string()))?;
    job::write_atomic(&path, yaml.as_bytes()).map_err(|e| io(e.to_string()))?;
    let mut spec = job::resolve(&RunArgs {
        config: Some(path.clone()),
        job_dir: Some(dir),
        concurrency: Some(opts.concurrency),
        ..RunArgs::default()
    })?;
    if opts.repeat > 1 {
        spec.keep_snapshots = BTreeSet::from([ORACLE.to_string()]);
    }
    Ok(CheckPlan {
        entries,
        spec,
        repeat: opts.repeat.max(1),
    })
}

/// `oracle`, `nop`, then one `command` agent per exploit.
fn agents() -> Vec<AgentEntry> {
    let mut agents = vec![
        AgentEntry::Name(ORACLE.to_string()),
        AgentEntry::Name(NOP.to_string()),
    ];
    agents.extend(EXPLOITS.iter().map(|e| AgentEntry::Def(e.agent())));
    agents
}

fn absolute(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Every task the paths name (datasets expanded), loaded one by one: a path that is neither a
/// task nor a dataset is a bad argument; a task dir that does not load is an entry with its
/// one-line error.
fn load_entries(paths: &[PathBuf]) -> Result<Vec<Entry>, CheckError> {
    let mut dirs = Vec::new();
    for path in paths {
        dirs.extend(
            crate::task::expand_task_dirs(std::slice::from_ref(path)).map_err(CheckError::Path)?,
        );
    }
    let mut seen_dirs = BTreeSet::new();
    let mut names = BTreeSet::new();
    let mut entries = Vec::new();
    for dir in dirs {
        if !seen_dirs.insert(absolute(&dir)) {
            continue;
        }
        let fallback = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string());
        let entry = match crate::task::load(&dir) {
            Err(e) => Entry {
                name: fallback,
                task: Err(e.to_string()),
            },
            Ok(task) => {
                let name = task.name.clone();
                let problem = if !names.insert(name.clone()) {
                    Some(format!(
                        "{}: task.name: duplicate task name {name:?}",
                        dir.join("task.toml").display()
                    ))
                } else if task.solution_dir.is_none() {
                    Some(format!(
                        "{}: solve.sh: missing: tasks check needs the reference solution for the oracle",
                        dir.join("solution").display()
                    ))
                } else {
                    None
                };
                Entry {
                    name,
                    task: match problem {
                        Some(p) => Err(p),
                        None => Ok(Arc::new(task)),
                    },
                }
            }
        };
        entries.push(entry);
    }
    Ok(entries)
}

/// The documented exploit list, as written into the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ExploitDoc {
    pub name: String,
    pub proves: String,
    /// How to fix a task the exploit passes, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
}

/// `check/result.json` and `--format json` (schema [`CHECK_SCHEMA`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct CheckReport {
    pub schema: String,
    pub job_dir: PathBuf,
    /// Verifier runs on each oracle result.
    pub repeat: u32,
    /// 0, 3 or 4 (what the command exits with).
    pub exit_code: u8,
    pub exploits: Vec<ExploitDoc>,
    pub tasks: Vec<TaskReport>,
}

/// How a check run ended.
#[derive(Debug)]
pub(crate) enum CheckOutcome {
    Done(CheckReport),
    /// The user stopped it; `reaped` after a second interrupt.
    Interrupted {
        reaped: Option<usize>,
    },
}

/// Run the checking job, the re-verifications, and judge every task.
pub(crate) async fn run<S: Sandbox + ?Sized + 'static>(
    plan: &CheckPlan,
    sandbox: Arc<S>,
    events: mpsc::UnboundedSender<JobEvent>,
    cancel: watch::Receiver<Option<CancelReason>>,
) -> Result<CheckOutcome, CheckError> {
    let spec = &plan.spec;
    let job_label = spec.job_label();
    // Leftovers of a killed earlier run of this check.
    repeat::reap_kept(&*sandbox, &job_label).await;
    redo_oracles_without_repeats(plan).await?;

    let outcome = job::run(spec, sandbox.clone(), events, cancel.clone()).await?;
    if outcome.reaped.is_some() || outcome.interrupted {
        repeat::reap_kept(&*sandbox, &job_label).await;
        return Ok(CheckOutcome::Interrupted {
            reaped: outcome.reaped,
        });
    }
    let store = JobStore::open(&spec.dir)?;
    let facts = |task: &str, agent: &str| {
        store
            .load(&trial_id(task, agent, VARIANT, 1))
            .map(|r| TrialFacts::of(&r))
    };
    // An exploit's trial, with the evidence / not-applicable lines its script printed.
    let exploit_facts = |task: &str, agent: &str| {
        let id = trial_id(task, agent, VARIANT, 1);
        store
            .load(&id)
            .map(|r| TrialFacts::of(&r).with_said(exploits::Said::read(&store.trial_dir(&id))))
    };

    let settings = RepeatSettings {
        job_label: job_label.clone(),
        pass_threshold: spec.pass_threshold,
        timeout_multiplier: spec.timeouts.verifier,
        log_cap_bytes: spec.log_cap_bytes,
        grace: spec.kill_grace,
        labels: job::Owner::current().labels(),
    };
    let semaphore = Arc::new(tokio::sync::Semaphore::new(spec.concurrency.max(1)));
    let mut jobs = tokio::task::JoinSet::new();
    for (i, entry) in plan.entries.iter().enumerate() {
        let Ok(task) = &entry.task else { continue };
        let oracle = facts(&task.name, ORACLE);
        let (sb, task, settings, sem) = (
            sandbox.clone(),
            task.clone(),
            settings.clone(),
            semaphore.clone(),
        );
        let (dir, repeat, cancel) = (spec.dir.clone(), plan.repeat, cancel.clone());
        jobs.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let repeats =
                repeats_of(sb, &settings, &task, oracle.as_ref(), &dir, repeat, &cancel).await;
            (i, repeats)
        });
    }
    let mut repeats = vec![None; plan.entries.len()];
    while let Some(joined) = jobs.join_next().await {
        match joined {
            Ok((i, r)) => repeats[i] = Some(r),
            Err(e) => tracing::error!("re-verification task failed: {e}"),
        }
    }
    repeat::reap_kept(&*sandbox, &job_label).await;
    if cancel.borrow().is_some() {
        return Ok(CheckOutcome::Interrupted { reaped: None });
    }

    let tasks: Vec<TaskReport> = plan
        .entries
        .iter()
        .zip(repeats)
        .map(|(entry, repeats)| {
            let name = &entry.name;
            judge_task(&TaskInput {
                task: name.clone(),
                layout: entry.task.as_ref().map(|_| ()).map_err(Clone::clone),
                oracle: facts(name, ORACLE),
                nop: facts(name, NOP),
                repeats: repeats.unwrap_or_else(|| {
                    Repeats::Infra("the re-verification did not finish".to_string())
                }),
                exploits: EXPLOITS
                    .iter()
                    .map(|e| (e.name.to_string(), exploit_facts(name, &e.agent_name())))
                    .collect(),
            })
        })
        .collect();
    let report = CheckReport {
        schema: CHECK_SCHEMA.to_string(),
        job_dir: spec.dir.clone(),
        repeat: plan.repeat,
        exit_code: exit_code(&tasks),
        exploits: EXPLOITS
            .iter()
            .map(|e| ExploitDoc {
                name: e.name.to_string(),
                proves: e.proves.to_string(),
                advice: e.advice.map(str::to_string),
            })
            .collect(),
        tasks,
    };
    let path = spec.dir.join("check").join("result.json");
    let bytes = serde_json::to_vec_pretty(&report).map_err(|e| CheckError::Io {
        path: path.clone(),
        message: e.to_string(),
    })?;
    job::write_atomic(&path, &bytes)?;
    Ok(CheckOutcome::Done(report))
}

impl From<job::StoreError> for CheckError {
    fn from(e: job::StoreError) -> Self {
        CheckError::Io {
            path: PathBuf::new(),
            message: e.to_string(),
        }
    }
}

/// Where re-verification `n` of `trial` lives.
fn repeat_dir(job_dir: &Path, trial: &str, n: u32) -> PathBuf {
    job_dir
        .join("check")
        .join("repeats")
        .join(trial)
        .join(n.to_string())
}

fn repeats_done(job_dir: &Path, trial: &str, repeat: u32) -> bool {
    (2..=repeat).all(|n| repeat_dir(job_dir, trial, n).join("outcome.json").is_file())
}

/// An oracle trial finished by an earlier run whose repeats are not all done has lost its kept
/// snapshot (the job's start removes leftovers): discard it so the job runs it again.
async fn redo_oracles_without_repeats(plan: &CheckPlan) -> Result<(), CheckError> {
    if plan.repeat <= 1 {
        return Ok(());
    }
    for entry in &plan.entries {
        let Ok(task) = &entry.task else { continue };
        let id = trial_id(&task.name, ORACLE, VARIANT, 1);
        let dir = plan.spec.dir.join("trials").join(&id);
        if dir.join("result.json").is_file() && !repeats_done(&plan.spec.dir, &id, plan.repeat) {
            tracing::info!(
                trial = id,
                "re-running the oracle: its repeats are not all done"
            );
            std::fs::remove_dir_all(&dir).map_err(|e| CheckError::Io {
                path: dir.clone(),
                message: e.to_string(),
            })?;
        }
    }
    Ok(())
}

/// Re-verify the oracle's kept filesystem `repeat - 1` times (or say why not).
async fn repeats_of<S: Sandbox + ?Sized>(
    sb: Arc<S>,
    settings: &RepeatSettings,
    task: &Task,
    oracle: Option<&TrialFacts>,
    job_dir: &Path,
    repeat: u32,
    cancel: &watch::Receiver<Option<CancelReason>>,
) -> Repeats {
    if repeat <= 1 {
        return Repeats::NotApplicable("--repeat 1: the verifier ran once".to_string());
    }
    let Some(oracle) = oracle.filter(|o| o.infra.is_none()) else {
        return Repeats::NotApplicable("the oracle has no result to verify again".to_string());
    };
    match task.verifier.mode {
        VerifierMode::Snapshot => {}
        mode => {
            return Repeats::NotApplicable(format!(
                "the verifier runs in {} mode; repeats verify a frozen snapshot and need snapshot mode",
                mode_name(mode)
            ));
        }
    }
    if oracle.verifier_mode != VerifierMode::Snapshot {
        return Repeats::NotApplicable(format!(
            "the oracle's verifier ran in {} mode (integrity enforce), not on its snapshot",
            mode_name(oracle.verifier_mode)
        ));
    }
    let trial = &oracle.trial;
    let frozen = match repeat::find_kept(&*sb, &settings.job_label, trial).await {
        Ok(Some(frozen)) => Some(frozen),
        Ok(None) => None,
        Err(e) => return Repeats::Infra(format!("listing the oracle's kept snapshot: {e}")),
    };
    let mut runs = Vec::new();
    for n in 2..=repeat {
        let dir = repeat_dir(job_dir, trial, n);
        if let Some(saved) = saved_outcome(&dir) {
            runs.push(saved);
            continue;
        }
        if cancel.borrow().is_some() {
            return Repeats::Infra("interrupted".to_string());
        }
        let Some(frozen) = &frozen else {
            return match oracle.verifier_status {
                VerifierStatus::Error | VerifierStatus::Skipped => Repeats::NotApplicable(format!(
                    "the oracle's filesystem was not frozen: {}",
                    oracle.verifier_detail.as_deref().unwrap_or("no verifier target")
                )),
                _ => Repeats::Infra(
                    "the oracle's kept snapshot is gone; run tasks check again with the same --job-dir".to_string(),
                ),
            };
        };
        match reverify(sb.clone(), settings, task, trial, frozen, &dir).await {
            Ok(outcome) => runs.push(outcome),
            Err(e) => return Repeats::Infra(e.to_string()),
        }
    }
    if let Some(frozen) = frozen
        && let Err(e) = sb.remove(&Resource::Frozen(frozen)).await
    {
        tracing::warn!(trial, "removing the kept snapshot: {e}");
    }
    Repeats::Ran(runs)
}

fn saved_outcome(dir: &Path) -> Option<VerifierOutcome> {
    let bytes = std::fs::read(dir.join("outcome.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn mode_name(mode: VerifierMode) -> String {
    serde_json::to_value(mode)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{mode:?}"))
}
