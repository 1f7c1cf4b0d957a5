use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::sandbox::{LABEL_JOB, Sandbox};
use crate::trial::{self, InfraError, TrialPlan, TrialRecord, TrialRun};

use super::config::RetryPolicy;
use super::events::JobEvent;
use super::owner::Owner;
use super::plan::JobSpec;
use super::store::{JobStore, StoreError};
use super::summary::Brief;

/// What a job run produced.
#[derive(Debug)]
pub struct JobOutcome {
    /// Every finished trial of the job (including those finished by earlier runs).
    pub records: Vec<Brief>,
    /// The user stopped the job; some trials did not run.
    pub interrupted: bool,
    pub planned: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{dir}: job directory is in use by another arbiter process")]
    Busy { dir: String },
}

/// A trial waiting to run, with the infrastructure failures of its earlier tries.
struct Queued {
    plan: TrialPlan,
    failures: Vec<InfraError>,
}

/// Run every unfinished trial of `spec`, at most `spec.concurrency` at a time.
pub async fn run<S: Sandbox>(
    spec: &JobSpec,
    sandbox: Arc<S>,
    events: mpsc::UnboundedSender<JobEvent>,
    mut cancel: watch::Receiver<bool>,
) -> Result<JobOutcome, RunError> {
    let store = JobStore::open(&spec.dir)?;
    let _lock = store.lock()?.ok_or_else(|| RunError::Busy {
        dir: spec.dir.display().to_string(),
    })?;
    // We hold the job dir: anything still labelled with this job is a leftover of a killed run.
    reap_job(&*sandbox, &spec.job_label()).await;
    store.write_file("job.yaml", spec.config_yaml.as_bytes())?;
    let lock = serde_json::to_vec_pretty(&spec.lock).map_err(|e| StoreError {
        path: spec.dir.join("lock.json"),
        source: e.into(),
    })?;
    store.write_file("lock.json", &lock)?;

    let plans = spec.trials(Owner::current().labels());
    let planned = plans.len();
    let mut records = Vec::new();
    let mut queue = VecDeque::new();
    for plan in plans {
        match store.load(&plan.id) {
            Some(record) => records.push(Brief::of(&record)),
            None => queue.push_back(Queued {
                plan,
                failures: Vec::new(),
            }),
        }
    }
    let finished_ids: Vec<&str> = records.iter().map(|b| b.id.as_str()).collect();
    store.reconcile_jsonl(&finished_ids)?;
    let _ = events.send(JobEvent::Started {
        job: spec.name.clone(),
        dir: spec.dir.clone(),
        total: planned,
        already_done: records.len(),
    });

    let mut running: JoinSet<(Queued, TrialRun)> = JoinSet::new();
    let mut waiting: Vec<(tokio::time::Instant, Queued)> = Vec::new();
    let mut interrupted = *cancel.borrow();
    loop {
        let now = tokio::time::Instant::now();
        let (ready, still): (Vec<_>, Vec<_>) = waiting.into_iter().partition(|(at, _)| *at <= now);
        waiting = still;
        for (_, queued) in ready.into_iter().rev() {
            queue.push_front(queued);
        }
        while !interrupted && running.len() < spec.concurrency {
            let Some(queued) = queue.pop_front() else {
                break;
            };
            store.fresh_trial_dir(&queued.plan.id)?;
            let _ = events.send(JobEvent::TrialStarted {
                id: queued.plan.id.clone(),
            });
            running.spawn(run_one(
                queued,
                sandbox.clone(),
                cancel.clone(),
                events.clone(),
            ));
        }
        let nothing_left = queue.is_empty() && waiting.is_empty();
        let more_to_start = !interrupted && !nothing_left;
        if running.is_empty() && !more_to_start {
            break;
        }
        let wake = waiting.iter().map(|(at, _)| *at).min();
        tokio::select! {
            joined = running.join_next(), if !running.is_empty() => {
                let Some(joined) = joined else { continue };
                match joined {
                    Ok((queued, TrialRun::Finished(record))) => {
                        if let Some(retry) = retry_of(&spec.retry, &record, &queued, interrupted) {
                            let _ = events.send(JobEvent::TrialRetrying {
                                id: record.id.clone(),
                                retry: retry.1.failures.len() as u32,
                                wait: retry.0,
                                reason: retry.1.failures.last().map(|f| f.message.clone()).unwrap_or_default(),
                            });
                            waiting.push((tokio::time::Instant::now() + retry.0, retry.1));
                            continue;
                        }
                        let mut record = record;
                        record.retries = queued.failures.len() as u32;
                        record.previous_errors = queued.failures;
                        store.record(&record)?;
                        let _ = events.send(JobEvent::TrialFinished { record: record.clone() });
                        records.push(Brief::of(&record));
                    }
                    Ok((queued, TrialRun::Cancelled)) => {
                        let _ = events.send(JobEvent::TrialCancelled { id: queued.plan.id });
                    }
                    Err(e) => tracing::error!("trial task failed: {e}"),
                }
            }
            _ = sleep_until(wake), if wake.is_some() && !interrupted => {}
            changed = cancel.changed(), if !interrupted => {
                if changed.is_err() || *cancel.borrow() {
                    interrupted = true;
                    let _ = events.send(JobEvent::Interrupted);
                }
            }
        }
    }
    if !interrupted {
        // Every trial is finished: anything still labelled with this job is a leftover, e.g.
        // of a try that failed because the engine went away and could not clean up then.
        reap_job(&*sandbox, &spec.job_label()).await;
    }
    let _ = events.send(JobEvent::Finished);
    Ok(JobOutcome {
        records,
        interrupted,
        planned,
    })
}

/// If `record` should be retried: the wait and the re-queued trial.
fn retry_of(
    policy: &RetryPolicy,
    record: &TrialRecord,
    queued: &Queued,
    interrupted: bool,
) -> Option<(Duration, Queued)> {
    let claimed_infra = policy.on_claimed_infrastructure_failure
        && record.claim.semantic_status.as_deref() == Some("infrastructure_failed");
    if interrupted
        || !(record.is_infra() || claimed_infra)
        || queued.failures.len() as u32 >= policy.max
    {
        return None;
    }
    let failure = record.infra_error.clone().unwrap_or_else(|| InfraError {
        phase: "agent".to_string(),
        message: "the agent claimed infrastructure_failed".to_string(),
    });
    let mut failures = queued.failures.clone();
    failures.push(failure);
    let wait = policy.backoff(failures.len() as u32);
    Some((
        wait,
        Queued {
            plan: queued.plan.clone(),
            failures,
        },
    ))
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn run_one<S: Sandbox>(
    queued: Queued,
    sandbox: Arc<S>,
    cancel: watch::Receiver<bool>,
    events: mpsc::UnboundedSender<JobEvent>,
) -> (Queued, TrialRun) {
    let id = queued.plan.id.clone();
    let on_phase = move |phase| {
        let _ = events.send(JobEvent::PhaseChanged {
            id: id.clone(),
            phase,
        });
    };
    let outcome = trial::run(sandbox, &queued.plan, cancel, &on_phase).await;
    (queued, outcome)
}

/// Remove every container and image labelled with `job_label` (leftovers of a killed run of
/// the same job dir). Failures are logged: they must not stop the job.
pub async fn reap_job<S: Sandbox>(sandbox: &S, job_label: &str) -> usize {
    let filter = [format!("{LABEL_JOB}={job_label}")];
    let mut removed = 0;
    match sandbox.list_containers(&filter).await {
        Ok(found) => {
            for c in found {
                match sandbox.remove_container(&c.id).await {
                    Ok(()) => removed += 1,
                    Err(e) => tracing::warn!("removing leftover container {}: {e}", c.id),
                }
            }
        }
        Err(e) => tracing::warn!("listing leftover containers: {e}"),
    }
    match sandbox.list_images(&filter).await {
        Ok(found) => {
            for i in found {
                match sandbox.remove_image(&i.id).await {
                    Ok(()) => removed += 1,
                    Err(e) => tracing::warn!("removing leftover image {}: {e}", i.id),
                }
            }
        }
        Err(e) => tracing::warn!("listing leftover images: {e}"),
    }
    if removed > 0 {
        tracing::info!(
            job = job_label,
            removed,
            "removed leftovers of an earlier run"
        );
    }
    removed
}
