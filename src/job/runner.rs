use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::sandbox::Sandbox;
use crate::trial::{self, TrialPlan, TrialRecord, TrialRun};

use super::events::JobEvent;
use super::plan::JobSpec;
use super::store::{JobStore, StoreError};

/// What a job run produced.
#[derive(Debug)]
pub struct JobOutcome {
    /// Every finished record of the job (including those finished by earlier runs).
    pub records: Vec<TrialRecord>,
    /// The user stopped the job; some trials did not run.
    pub interrupted: bool,
    pub planned: usize,
}

#[derive(Debug, serde::Serialize)]
struct Lock<'a> {
    schema: &'static str,
    arbiter_version: &'static str,
    tasks: std::collections::BTreeMap<&'a str, LockTask<'a>>,
}

#[derive(Debug, serde::Serialize)]
struct LockTask<'a> {
    checksum: &'a str,
    image: &'a str,
}

/// Run every unfinished trial of `spec`, at most `spec.concurrency` at a time.
pub async fn run<S: Sandbox>(
    spec: &JobSpec,
    sandbox: Arc<S>,
    events: mpsc::UnboundedSender<JobEvent>,
    mut cancel: watch::Receiver<bool>,
) -> Result<JobOutcome, StoreError> {
    let store = JobStore::open(&spec.dir)?;
    store.write_file("job.yaml", spec.resolved_yaml.as_bytes())?;
    let lock = Lock {
        schema: "arbiter.lock.v1",
        arbiter_version: env!("CARGO_PKG_VERSION"),
        tasks: spec
            .tasks
            .iter()
            .zip(&spec.images)
            .map(|(t, i)| {
                (
                    t.name.as_str(),
                    LockTask {
                        checksum: &t.checksum,
                        image: i.reference(),
                    },
                )
            })
            .collect(),
    };
    let lock = serde_json::to_vec_pretty(&lock).map_err(|e| StoreError {
        path: spec.dir.join("lock.json"),
        source: e.into(),
    })?;
    store.write_file("lock.json", &lock)?;

    let plans = spec.trials();
    let planned = plans.len();
    let mut records = Vec::new();
    let mut pending = Vec::new();
    for plan in plans {
        match store.load(&plan.id) {
            Some(record) if store.is_finished(&plan.id) => records.push(record),
            _ => pending.push(plan),
        }
    }
    let _ = events.send(JobEvent::Started {
        job: spec.name.clone(),
        dir: spec.dir.clone(),
        total: planned,
        already_done: records.len(),
    });

    let mut pending = pending.into_iter();
    let mut running: JoinSet<(String, TrialRun)> = JoinSet::new();
    let mut interrupted = *cancel.borrow();
    loop {
        while !interrupted && running.len() < spec.concurrency {
            let Some(plan) = pending.next() else { break };
            store.fresh_trial_dir(&plan.id)?;
            let _ = events.send(JobEvent::TrialStarted {
                id: plan.id.clone(),
            });
            running.spawn(run_one(
                plan,
                sandbox.clone(),
                cancel.clone(),
                events.clone(),
            ));
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            joined = running.join_next() => {
                let Some(joined) = joined else { continue };
                match joined {
                    Ok((_, TrialRun::Finished(record))) => {
                        store.record(&record)?;
                        let _ = events.send(JobEvent::TrialFinished { record: record.clone() });
                        records.push(*record);
                    }
                    Ok((id, TrialRun::Cancelled)) => {
                        let _ = events.send(JobEvent::TrialCancelled { id });
                    }
                    Err(e) => tracing::error!("trial task failed: {e}"),
                }
            }
            changed = cancel.changed(), if !interrupted => {
                if changed.is_err() || *cancel.borrow() {
                    interrupted = true;
                    let _ = events.send(JobEvent::Interrupted);
                }
            }
        }
    }
    let _ = events.send(JobEvent::Finished);
    Ok(JobOutcome {
        records,
        interrupted,
        planned,
    })
}

async fn run_one<S: Sandbox>(
    plan: TrialPlan,
    sandbox: Arc<S>,
    cancel: watch::Receiver<bool>,
    events: mpsc::UnboundedSender<JobEvent>,
) -> (String, TrialRun) {
    let id = plan.id.clone();
    let on_phase = {
        let id = id.clone();
        move |phase| {
            let _ = events.send(JobEvent::PhaseChanged {
                id: id.clone(),
                phase,
            });
        }
    };
    let outcome = trial::run(sandbox, &plan, cancel, &on_phase).await;
    (id, outcome)
}
