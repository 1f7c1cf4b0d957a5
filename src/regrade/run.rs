//! The regrade of a job: plan (or continue) it, then for each selected trial apply its
//! recorded change set to the original environment image, run the verifier (`--repeat`
//! times), append the outcomes to the trial's history and make the last one current.
//! One loop owns the job dir's records (the trials run as tokio tasks and hand back records),
//! as in `job::run`.
//!
//! Over 600 lines: the regrade loop and the regrade of one trial share the job's record store and journal; the per-trial part is the candidate to split out.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::job::{JobSpec, JobStore, StoreError, reap_job, write_atomic};
use crate::outcome::CompletionRecord;
use crate::sandbox::{
    Base, Cancellable, ContainerSpec, ImageRef, ImageSpec, Owner, Role, Sandbox, SandboxError,
    Scope,
};
use crate::task::{IntegrityMode, Task, VerifierMode};
use crate::timefmt::{now_compact, now_rfc3339};
use crate::trial::{Phase, TrialPlan, TrialRecord};
use crate::verifier::integrity::{ChangeKind, ChangesFile, Integrity, VerifiedOn};
use crate::verifier::{
    self, Target, VerifierOutcome, VerifierStatus, VerifyError, VerifyInput, primary_value,
};

use super::journal::{Decision, REGRADE_SCHEMA, RegradePlan, choose, decide, fresh_id, load_plans};
use crate::trial::content::without_findings;
use crate::trial::history::{RegradeMark, RegradeStatus, VerifierRun, VerifierSource};

/// What `arbiter verify` was asked to do.
#[derive(Debug, Clone)]
pub(crate) struct RegradeArgs {
    /// A replacement tests dir for every selected trial.
    pub tests: Option<PathBuf>,
    /// Trial ids to regrade (default: every finished trial).
    pub trials: Vec<String>,
    /// Verifier runs per trial.
    pub repeat: u32,
    /// Trials regraded at the same time.
    pub concurrency: usize,
}

/// How one trial fared.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RowStatus {
    Regraded {
        before: VerifierStatus,
        before_reward: Option<f64>,
        after: VerifierStatus,
        after_reward: Option<f64>,
        /// The primary reward of every run.
        rewards: Vec<Option<f64>>,
        deterministic: Option<bool>,
    },
    /// Regraded by an earlier, killed run of the same regrade.
    AlreadyDone {
        after: VerifierStatus,
        after_reward: Option<f64>,
    },
    NotRegradable(String),
    /// The engine or harness failed: not recorded, regraded when the command runs again.
    InfraError(String),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TrialRow {
    pub id: String,
    pub status: RowStatus,
}

/// What a regrade did.
#[derive(Debug)]
pub(crate) struct RegradeOutcome {
    pub id: String,
    /// It continued an unfinished regrade with the same arguments.
    pub resumed: bool,
    pub rows: Vec<TrialRow>,
    pub interrupted: bool,
    /// Wall time of the verifier work (from the first trial started to the last finished).
    pub seconds: f64,
}

impl RegradeOutcome {
    pub(crate) fn infra(&self) -> usize {
        self.rows
            .iter()
            .filter(|r| matches!(r.status, RowStatus::InfraError(_)))
            .count()
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RegradeError {
    /// Bad arguments (exit 2): the path or flag, the field, what is wrong.
    #[error("{path}: {field}: {message}")]
    Usage {
        path: String,
        field: String,
        message: String,
    },
    #[error("{dir}: job directory is in use by another arbiter process")]
    Busy { dir: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A failure while regrading one trial (never the agent's doing).
#[derive(Debug, thiserror::Error)]
enum TrialError {
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl TrialError {
    fn cancelled(&self) -> bool {
        matches!(
            self,
            TrialError::Sandbox(SandboxError::Cancelled)
                | TrialError::Verify(VerifyError::Sandbox(SandboxError::Cancelled))
        )
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrialError + '_ {
    move |source| TrialError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn usage(path: impl Into<String>, field: &str, message: impl Into<String>) -> RegradeError {
    RegradeError::Usage {
        path: path.into(),
        field: field.to_string(),
        message: message.into(),
    }
}

/// What every trial of the regrade shares.
struct Shared {
    id: String,
    repeat: u32,
    job_label: String,
    labels: BTreeMap<String, String>,
    tests_dir: Option<String>,
}

/// The verifier a trial runs: its task (tests dir replaced with `--tests`) and that dir's
/// checksum, plus the checksum of the task's own tests (for the original history entry).
struct Verifier {
    task: Arc<Task>,
    checksum: String,
    original_checksum: String,
}

/// Regrade the finished trials of `spec` (the job as resolved from its `job.yaml`).
pub(crate) async fn regrade<S: Sandbox + ?Sized>(
    spec: &JobSpec,
    args: &RegradeArgs,
    sandbox: Arc<S>,
    cancel: watch::Receiver<bool>,
) -> Result<RegradeOutcome, RegradeError> {
    if args.repeat == 0 {
        return Err(usage("--repeat", "repeat", "must be at least 1"));
    }
    if args.concurrency == 0 {
        return Err(usage("-n", "concurrency", "must be at least 1"));
    }
    let tests = match &args.tests {
        Some(dir) => Some(check_tests_dir(dir)?),
        None => None,
    };
    let store = JobStore::open(&spec.dir)?;
    let labels = crate::job::Owner::current().labels();
    let mut finished: Vec<(TrialPlan, TrialRecord)> = spec
        .trials(labels.clone(), sandbox.name())
        .into_iter()
        .filter_map(|plan| store.load(&plan.id).map(|rec| (plan, rec)))
        .collect();
    let all_ids: Vec<String> = finished.iter().map(|(p, _)| p.id.clone()).collect();
    for wanted in &args.trials {
        if !all_ids.contains(wanted) {
            return Err(usage(
                store.trial_dir(wanted).display().to_string(),
                "--trial",
                "no finished trial with this id in the job",
            ));
        }
    }
    if !args.trials.is_empty() {
        finished.retain(|(p, _)| args.trials.contains(&p.id));
    }

    let _lock = store.lock()?.ok_or_else(|| RegradeError::Busy {
        dir: spec.dir.display().to_string(),
    })?;
    // We hold the job dir: anything still labelled with the job is a leftover of a killed run.
    reap_job(&*sandbox, &spec.job_label()).await;

    let existing = load_plans(&spec.dir);
    let wanted = RegradePlan {
        schema: REGRADE_SCHEMA.to_string(),
        id: fresh_id(&existing, &now_compact()),
        created_at: now_rfc3339(),
        arbiter_version: env!("CARGO_PKG_VERSION").to_string(),
        tests_dir: tests.as_ref().map(|(d, _)| d.display().to_string()),
        tests_checksum: tests.as_ref().map(|(_, c)| c.clone()),
        trials: finished.iter().map(|(p, _)| p.id.clone()).collect(),
        repeat: args.repeat,
        finished_at: None,
    };
    let (mut journal, resumed) = choose(existing, wanted);
    let journal_path = RegradePlan::path(&spec.dir, &journal.id);
    save_plan(&journal_path, &journal)?;
    tracing::info!(regrade = journal.id, resumed, "regrade planned");

    let shared = Arc::new(Shared {
        id: journal.id.clone(),
        repeat: journal.repeat,
        job_label: spec.job_label(),
        labels,
        tests_dir: journal.tests_dir.clone(),
    });
    let mut verifiers: HashMap<String, Arc<Verifier>> = HashMap::new();
    let mut images: HashMap<String, Result<ImageRef, String>> = HashMap::new();
    let image_specs: HashMap<&str, &ImageSpec> = spec
        .tasks
        .iter()
        .zip(&spec.images)
        .map(|(t, i)| (t.name.as_str(), i))
        .collect();

    let started = Instant::now();
    let mut rows: Vec<Option<TrialRow>> = vec![None; finished.len()];
    let mut running: JoinSet<(usize, Result<TrialRecord, TrialError>)> = JoinSet::new();
    let mut queue = finished.into_iter().enumerate();
    let mut before: HashMap<usize, (VerifierStatus, Option<f64>)> = HashMap::new();
    let mut interrupted = false;
    let mut cancel_seen = cancel.clone();
    loop {
        while !interrupted && running.len() < args.concurrency {
            let Some((index, (plan, mut rec))) = queue.next() else {
                break;
            };
            let task = &plan.task;
            let verifier = match verifier_for(&mut verifiers, task, tests.as_ref()) {
                Ok(v) => v,
                Err(why) => {
                    rows[index] = Some(row(&plan.id, RowStatus::InfraError(why)));
                    continue;
                }
            };
            match decide(&rec, &shared.id, task.verifier.mode) {
                Decision::Done => {
                    rows[index] = Some(row(
                        &plan.id,
                        RowStatus::AlreadyDone {
                            after: rec.verifier.status,
                            after_reward: reward_of(&rec.verifier),
                        },
                    ));
                }
                Decision::NotRegradable(why) => {
                    rec.regrade = Some(RegradeMark {
                        id: shared.id.clone(),
                        at: now_rfc3339(),
                        status: RegradeStatus::NotRegradable,
                        reason: Some(why.clone()),
                        runs: 0,
                        rewards: Vec::new(),
                        deterministic: None,
                    });
                    store.update(&rec)?;
                    rows[index] = Some(row(&plan.id, RowStatus::NotRegradable(why)));
                }
                Decision::FromChangeSet => {
                    let image = match images.get(&task.name) {
                        Some(image) => image.clone(),
                        None => {
                            let prepared = match image_specs.get(task.name.as_str()) {
                                Some(spec) => sandbox
                                    .prepare_image(spec)
                                    .await
                                    .map_err(|e| format!("environment image: {e}")),
                                None => Err("the task's environment image is unknown".to_string()),
                            };
                            images.insert(task.name.clone(), prepared.clone());
                            prepared
                        }
                    };
                    let image = match image {
                        Ok(image) => image,
                        Err(why) => {
                            rows[index] = Some(row(&plan.id, RowStatus::InfraError(why)));
                            continue;
                        }
                    };
                    before.insert(index, (rec.verifier.status, reward_of(&rec.verifier)));
                    let raw = sandbox.clone();
                    let sb = Cancellable::new(sandbox.clone(), cancel.clone());
                    let shared = shared.clone();
                    running.spawn(async move {
                        let result =
                            regrade_one(&sb, &*raw, &plan, rec, &verifier, &image, &shared).await;
                        (index, result)
                    });
                }
            }
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            joined = running.join_next() => {
                let Some(joined) = joined else { break };
                let (index, result) = match joined {
                    Ok(done) => done,
                    Err(e) => {
                        tracing::error!("a regrade task failed: {e}");
                        continue;
                    }
                };
                let id = journal.trials.get(index).cloned().unwrap_or_default();
                let status = match result {
                    Ok(rec) => {
                        store.update(&rec)?;
                        let (b, br) = before.get(&index).copied().unwrap_or((rec.verifier.status, None));
                        let mark = rec.regrade.as_ref();
                        RowStatus::Regraded {
                            before: b,
                            before_reward: br,
                            after: rec.verifier.status,
                            after_reward: reward_of(&rec.verifier),
                            rewards: mark.map(|m| m.rewards.clone()).unwrap_or_default(),
                            deterministic: mark.and_then(|m| m.deterministic),
                        }
                    }
                    Err(e) if e.cancelled() => {
                        interrupted = true;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(trial = id, "regrade: infrastructure error: {e}");
                        RowStatus::InfraError(e.to_string())
                    }
                };
                rows[index] = Some(row(&id, status));
            }
            changed = cancel_seen.changed(), if !interrupted => {
                if changed.is_err() || *cancel_seen.borrow() {
                    interrupted = true;
                }
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();

    // trials.jsonl from the records (one line per finished trial, temp file + rename).
    let ids: Vec<String> = spec
        .trials(BTreeMap::new(), sandbox.name())
        .into_iter()
        .map(|p| p.id)
        .filter(|id| store.trial_dir(id).join("result.json").is_file())
        .collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    store.rewrite_jsonl(&ids)?;

    let rows: Vec<TrialRow> = rows.into_iter().flatten().collect();
    let complete = !interrupted
        && rows.len() == journal.trials.len()
        && !rows
            .iter()
            .any(|r| matches!(r.status, RowStatus::InfraError(_)));
    if complete {
        journal.finished_at = Some(now_rfc3339());
        save_plan(&journal_path, &journal)?;
    }
    Ok(RegradeOutcome {
        id: journal.id,
        resumed,
        rows,
        interrupted,
        seconds,
    })
}

fn row(id: &str, status: RowStatus) -> TrialRow {
    TrialRow {
        id: id.to_string(),
        status,
    }
}

fn reward_of(outcome: &VerifierOutcome) -> Option<f64> {
    outcome.reward.as_ref().map(primary_value)
}

fn save_plan(path: &Path, plan: &RegradePlan) -> Result<(), StoreError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| StoreError {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let bytes = serde_json::to_vec_pretty(plan).map_err(|e| StoreError {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    write_atomic(path, &bytes)
}

/// `--tests DIR`: a directory with a `test.sh`; gives it and its checksum.
fn check_tests_dir(dir: &Path) -> Result<(PathBuf, String), RegradeError> {
    let shown = dir.display().to_string();
    if !dir.is_dir() {
        return Err(usage(shown, "--tests", "not a directory"));
    }
    if !dir.join("test.sh").is_file() {
        return Err(usage(shown, "--tests", "no test.sh in it"));
    }
    let canonical = dir
        .canonicalize()
        .map_err(|e| usage(shown.clone(), "--tests", e.to_string()))?;
    let checksum = crate::task::dir_checksum(&canonical)
        .map_err(|e| usage(shown, "--tests", e.to_string()))?;
    Ok((canonical, checksum))
}

/// The verifier of `task` for this regrade (made once per task).
fn verifier_for(
    cache: &mut HashMap<String, Arc<Verifier>>,
    task: &Arc<Task>,
    tests: Option<&(PathBuf, String)>,
) -> Result<Arc<Verifier>, String> {
    if let Some(v) = cache.get(&task.name) {
        return Ok(v.clone());
    }
    let original_checksum = crate::task::dir_checksum(&task.tests_dir)
        .map_err(|e| format!("the task's tests dir: {e}"))?;
    let verifier = match tests {
        Some((dir, checksum)) => {
            let mut replaced = (**task).clone();
            replaced.tests_dir = dir.clone();
            Verifier {
                task: Arc::new(replaced),
                checksum: checksum.clone(),
                original_checksum,
            }
        }
        None => Verifier {
            task: task.clone(),
            checksum: original_checksum.clone(),
            original_checksum,
        },
    };
    let verifier = Arc::new(verifier);
    cache.insert(task.name.clone(), verifier.clone());
    Ok(verifier)
}

/// The paths the agent deleted, from `agent/changes.json`.
fn deleted_paths(trial_dir: &Path) -> Result<Vec<String>, TrialError> {
    let path = trial_dir.join("agent/changes.json");
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&path)(e)),
    };
    let file: ChangesFile = serde_json::from_slice(&bytes)
        .map_err(|e| io(&path)(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    Ok(file
        .entries
        .into_iter()
        .filter(|e| e.kind == ChangeKind::Deleted)
        .map(|e| e.path)
        .collect())
}

/// The agent's typed completion record, when it wrote a valid one (for the audit).
fn completion_record(trial_dir: &Path) -> Option<CompletionRecord> {
    let bytes = std::fs::read(trial_dir.join("agent/completion.json")).ok()?;
    CompletionRecord::parse(&bytes).ok()
}

/// Regrade one trial: `repeat` verifier runs, each in a fresh container of `image` with the
/// change set applied; gives the updated record.
async fn regrade_one<S: Sandbox + ?Sized>(
    sb: &Cancellable<S>,
    raw: &S,
    plan: &TrialPlan,
    rec: TrialRecord,
    verifier: &Verifier,
    image: &ImageRef,
    shared: &Shared,
) -> Result<TrialRecord, TrialError> {
    let task = &verifier.task;
    let out = plan.dir.join("regrade").join(&shared.id);
    // What a killed run of this regrade left for this trial is discarded.
    match std::fs::remove_dir_all(&out) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&out)(e)),
    }
    let findings: Vec<String> = rec
        .integrity
        .as_ref()
        .map(|i| i.findings.iter().map(|f| f.path.clone()).collect())
        .unwrap_or_default();
    let clean = task.verifier.mode == VerifierMode::Clean
        || (task.verifier.integrity == IntegrityMode::Enforce && !findings.is_empty());
    let left_out: &[String] = if clean { &findings } else { &[] };
    let (archive, roots) = match &rec.change_content {
        Some(c) => (
            plan.dir.join(
                c.file
                    .as_deref()
                    .unwrap_or(crate::trial::content::CHANGES_TAR),
            ),
            c.roots.clone(),
        ),
        None => (
            plan.dir.join(crate::trial::content::CHANGES_TAR),
            Vec::new(),
        ),
    };
    let (tar, dropped) = without_findings(&archive, &roots, left_out).map_err(io(&archive))?;
    if !dropped.is_empty() {
        tracing::debug!(trial = plan.id, ?dropped, "regrade: findings left out");
    }
    let deleted = deleted_paths(&plan.dir)?;
    let settings = &plan.settings;
    let env = &task.environment;
    let limits = crate::trial::limits_of(env);
    let network = crate::trial::sandbox_network(task.verifier.network);
    let scope = Scope::new(Owner {
        job: shared.job_label.clone(),
        trial: plan.id.clone(),
        role: Role::Verifier,
        extra: shared.labels.clone(),
    });
    let mut outcomes = Vec::new();
    for run in 1..=shared.repeat {
        let dir = out.join(run.to_string());
        std::fs::create_dir_all(dir.join("verifier")).map_err(io(&dir))?;
        let egress_events = std::sync::Mutex::new(Vec::new());
        // The attempts through its proxy are not kept: only the trial's own run records them.
        let input = VerifyInput::new(task, &dir, limits, settings, &egress_events);
        let result: Result<VerifierOutcome, TrialError> = async {
            let spec = ContainerSpec {
                base: Base::Image(image.clone()),
                owner: scope.owner(Role::Verifier),
                env: Vec::new(),
                limits,
                network,
                workdir: env.workdir.clone(),
                mounts: Vec::new(),
                start: crate::sandbox::StartSpec::for_role(Role::Verifier),
            };
            let at = Instant::now();
            let id = scope.launch(sb, &spec).await?;
            let launched = at.elapsed();
            sb.upload(&id, "/", tar.clone()).await?;
            verifier::delete_paths(sb, &input, &id, &deleted, left_out).await?;
            let applied = at.elapsed();
            let mut outcome = verifier::verify(sb, &scope, &input, &Target::Prepared(id)).await?;
            tracing::debug!(
                trial = plan.id,
                ?launched,
                ?applied,
                verified = ?at.elapsed(),
                "regrade run"
            );
            outcome.mode = if clean {
                VerifierMode::Clean
            } else {
                task.verifier.mode
            };
            Ok(outcome)
        }
        .await;
        let at = Instant::now();
        if let Err(e) = scope.cleanup(raw, result.is_err()).await {
            tracing::warn!(trial = plan.id, "regrade cleanup: {e}");
        }
        tracing::debug!(trial = plan.id, cleanup = ?at.elapsed(), "regrade run cleaned up");
        outcomes.push(result?);
    }
    let completion = completion_record(&plan.dir);
    let provenance = Provenance {
        regrade: &shared.id,
        checksum: &verifier.checksum,
        original_checksum: &verifier.original_checksum,
        tests_dir: shared.tests_dir.as_deref(),
        image: image.as_str(),
        clean,
    };
    Ok(record_outcomes(
        rec,
        outcomes,
        &provenance,
        completion.as_ref(),
    ))
}

/// Where the new outcomes came from.
pub(crate) struct Provenance<'a> {
    pub regrade: &'a str,
    pub checksum: &'a str,
    pub original_checksum: &'a str,
    pub tests_dir: Option<&'a str>,
    pub image: &'a str,
    /// The verifier ran on the pristine toolchain (findings left out).
    pub clean: bool,
}

/// The record with `outcomes` appended to its history (the original outcome first, when it
/// is not there yet) and the last one made current: verifier, integrity and audit recomputed
/// with the run's own code, the regrade's mark set.
pub(crate) fn record_outcomes(
    mut rec: TrialRecord,
    outcomes: Vec<VerifierOutcome>,
    prov: &Provenance<'_>,
    completion: Option<&CompletionRecord>,
) -> TrialRecord {
    if rec.verifier_history.is_empty() {
        rec.verifier_history.push(VerifierRun {
            at: rec.finished_at.clone(),
            regrade: None,
            run: None,
            source: VerifierSource::Original,
            verifier_checksum: prov.original_checksum.to_string(),
            tests_dir: None,
            arbiter_version: None,
            mode: rec.verifier.mode,
            image: rec.image.clone(),
            outcome: rec.verifier.clone(),
            verdict: rec.audit.as_ref().map(|a| a.verdict),
        });
    }
    if let Some(integrity) = rec.integrity.take() {
        let on = if prov.clean {
            VerifiedOn::PristineToolchain
        } else {
            VerifiedOn::AgentFilesystem
        };
        rec.integrity = Some(Integrity::judge(integrity.findings, on));
    }
    // A verify-phase infrastructure error is superseded by a verdict.
    if rec
        .infra_error
        .as_ref()
        .is_some_and(|e| e.phase == Phase::Verify)
        && let Some(e) = rec.infra_error.take()
    {
        rec.previous_errors.push(e);
    }
    let at = now_rfc3339();
    let runs = outcomes.len();
    let rewards: Vec<Option<f64>> = outcomes.iter().map(reward_of).collect();
    let deterministic = (runs > 1).then(|| {
        outcomes
            .windows(2)
            .all(|w| w[0].status == w[1].status && w[0].reward == w[1].reward)
    });
    for (n, outcome) in outcomes.into_iter().enumerate() {
        rec.verifier = outcome;
        rec.audit = crate::trial::audit_of(&rec, completion);
        rec.verifier_history.push(VerifierRun {
            at: at.clone(),
            regrade: Some(prov.regrade.to_string()),
            run: Some(n as u32 + 1),
            source: VerifierSource::ChangeSet,
            verifier_checksum: prov.checksum.to_string(),
            tests_dir: prov.tests_dir.map(str::to_string),
            arbiter_version: Some(env!("CARGO_PKG_VERSION").to_string()),
            mode: rec.verifier.mode,
            image: Some(prov.image.to_string()),
            outcome: rec.verifier.clone(),
            verdict: rec.audit.as_ref().map(|a| a.verdict),
        });
    }
    rec.regrade = Some(RegradeMark {
        id: prov.regrade.to_string(),
        at,
        status: RegradeStatus::Regraded,
        reason: None,
        runs: runs as u32,
        rewards,
        deterministic,
    });
    rec
}
