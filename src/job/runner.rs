//! The job's async loop: it waits for inputs (a trial finished, a retry fell due, the user
//! asked to stop), hands each to [`JobState::handle`] and carries out the actions it returns.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::interop::otlp::{TraceReport, TraceSink};
use crate::sandbox::{Listed, Resource, Sandbox, Selector};
use crate::trial::{self, TrialRun};

use super::core::{Action, CancelReason, Input, JobState, Queued};
use super::events::JobEvent;
use super::owner::Owner;
use super::plan::JobSpec;
use super::store::{JobStore, StoreError};
use super::summary::Brief;

/// What a job run produced.
#[derive(Debug)]
pub(crate) struct JobOutcome {
    /// Every finished trial of the job (including those finished by earlier runs).
    pub records: Vec<Brief>,
    /// The user stopped the job; some trials did not run.
    pub interrupted: bool,
    /// After a second interrupt: how many resources of the job were killed and removed at once.
    pub reaped: Option<usize>,
    pub planned: usize,
    /// What became of the trials' traces, when the job sends them (`--otlp`, `otlp:`).
    pub traces: Option<TraceReport>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{dir}: job directory is in use by another arbiter process")]
    Busy { dir: String },
    #[error("starting the model gateway: {0}")]
    Gateway(#[from] crate::gateway::GatewayError),
}

/// Run every unfinished trial of `spec`, at most `spec.concurrency` at a time. `cancel`
/// carries the user's stop requests, strongest last.
pub(crate) async fn run<S: Sandbox + ?Sized>(
    spec: &JobSpec,
    sandbox: Arc<S>,
    events: mpsc::UnboundedSender<JobEvent>,
    cancel: watch::Receiver<Option<CancelReason>>,
) -> Result<JobOutcome, RunError> {
    run_controlled(spec, sandbox, events, cancel, None).await
}

/// [`run`], and `trial_cancels` names running trials the user stops one by one (`arbiter
/// serve`): such a trial is cleaned up like any cancelled trial and recorded with its
/// termination `cancelled` ([`trial::cancelled_record`]), so it does not run again. A name
/// that is not running is ignored.
pub(crate) async fn run_controlled<S: Sandbox + ?Sized>(
    spec: &JobSpec,
    sandbox: Arc<S>,
    events: mpsc::UnboundedSender<JobEvent>,
    mut cancel: watch::Receiver<Option<CancelReason>>,
    mut trial_cancels: Option<mpsc::UnboundedReceiver<String>>,
) -> Result<JobOutcome, RunError> {
    let store = JobStore::open(&spec.dir)?;
    let _lock = store.lock()?.ok_or_else(|| RunError::Busy {
        dir: spec.dir.display().to_string(),
    })?;
    // We hold the job dir: anything still labelled with this job is a leftover of a killed run.
    reap_job(&*sandbox, &spec.job_label()).await;
    let job_id = store.ensure_job_id()?;
    store.write_file("job.yaml", spec.config_yaml.as_bytes())?;
    let lock = serde_json::to_vec_pretty(&spec.lock).map_err(|e| StoreError {
        path: spec.dir.join("lock.json"),
        source: e.into(),
    })?;
    store.write_file("lock.json", &lock)?;

    // One gateway per job, shared by its trials (each opens its own listener on its container's
    // loopback).
    let gateway = spec.start_gateway()?;
    let plans = spec.trials_with(Owner::current().labels(), gateway, sandbox.name());
    let planned = plans.len();
    let mut records = Vec::new();
    let mut pending = Vec::new();
    // Errors of earlier runs of trials being run again after their infra errors (kept on disk
    // before any of their records is discarded, so a run killed now loses none of them).
    let mut carried = store.carried_errors();
    let mut rerun = 0;
    for plan in plans {
        match store.load(&plan.id) {
            Some(record) if spec.retry_infra && record.infra_error.is_some() => {
                let mut earlier = record.previous_errors.clone();
                earlier.extend(record.infra_error.clone());
                carried.insert(plan.id.clone(), earlier.clone());
                pending.push((plan, earlier));
                rerun += 1;
            }
            Some(record) => records.push(Brief::of(&record)),
            None => {
                let earlier = carried.get(&plan.id).cloned().unwrap_or_default();
                pending.push((plan, earlier));
            }
        }
    }
    if rerun > 0 {
        store.keep_carried_errors(&carried)?;
        tracing::info!(
            trials = rerun,
            "running again the trials that ended as infra errors"
        );
    }
    let finished_ids: Vec<&str> = records.iter().map(|b| b.id.as_str()).collect();
    store.reconcile_jsonl(&finished_ids)?;
    let _ = events.send(JobEvent::Started {
        job: spec.name.clone(),
        dir: spec.dir.clone(),
        total: planned,
        already_done: records.len(),
    });

    // Each trial's trace, sent in the background once its record is final.
    let mut traces = spec
        .otlp
        .as_deref()
        .map(|endpoint| TraceSink::start(endpoint, job_id.clone()));

    let mut state = JobState::continuing(pending, spec.concurrency, spec.retry);
    // One stop switch per running trial: the job's cancel flips them all, a trial cancel one.
    let mut switches: HashMap<String, watch::Sender<bool>> = HashMap::new();
    let mut stopped_one: HashSet<String> = HashSet::new();
    let mut running: JoinSet<(Box<Queued>, TrialRun)> = JoinSet::new();
    let mut reaped = None;
    let mut input = match *cancel.borrow_and_update() {
        Some(reason) => Input::Cancel(reason),
        None => Input::Tick,
    };
    loop {
        let actions = state.handle(input, tokio::time::Instant::now());
        // Before the trials just let go start: a backend starting containers ahead knows how
        // many more can still be claimed.
        sandbox.trials_waiting(state.waiting_to_start());
        for action in actions {
            match action {
                Action::Spawn(queued) => {
                    store.fresh_trial_dir(&queued.plan.id)?;
                    let (switch, stop) = watch::channel(false);
                    switches.insert(queued.plan.id.clone(), switch);
                    running.spawn(run_one(queued, sandbox.clone(), stop, events.clone()));
                }
                Action::Record(record) => {
                    store.record(&record)?;
                    if let Some(traces) = &mut traces {
                        traces.send(&record, store.trial_dir(&record.id));
                    }
                    records.push(Brief::of(&record));
                    let _ = events.send(JobEvent::TrialFinished { record });
                }
                Action::Emit(event) => {
                    let _ = events.send(event);
                }
                Action::CancelTrials => {
                    for switch in switches.values() {
                        let _ = switch.send(true);
                    }
                }
                Action::Reap => reaped = Some(reap_job(&*sandbox, &spec.job_label()).await),
            }
        }
        if state.is_done() {
            break;
        }
        let wake = state.next_wake();
        input = tokio::select! {
            joined = running.join_next(), if !running.is_empty() => match joined {
                Some(Ok((queued, run))) => {
                    switches.remove(&queued.plan.id);
                    let one = stopped_one.remove(&queued.plan.id);
                    match run {
                        // Stopped on its own while the job goes on: recorded as cancelled.
                        TrialRun::Cancelled if one && state.cancelled().is_none() => {
                            let record = trial::cancelled_record(&queued.plan);
                            Input::TrialDone(queued, TrialRun::Finished(Box::new(record)))
                        }
                        run => Input::TrialDone(queued, run),
                    }
                }
                Some(Err(e)) => {
                    tracing::error!("trial task failed: {e}");
                    Input::Tick
                }
                None => Input::Tick,
            },
            _ = sleep_until(wake), if wake.is_some() => Input::Tick,
            asked = next_name(&mut trial_cancels), if trial_cancels.is_some() => {
                match asked {
                    Some(id) => {
                        if let Some(switch) = switches.get(&id) {
                            tracing::info!(trial = id, "trial cancelled by the user");
                            stopped_one.insert(id);
                            let _ = switch.send(true);
                        }
                    }
                    None => trial_cancels = None,
                }
                Input::Tick
            },
            changed = cancel.changed() => match changed {
                Ok(()) => match *cancel.borrow_and_update() {
                    Some(reason) => Input::Cancel(reason),
                    None => Input::Tick,
                },
                // The sender is gone: treat as a plain stop.
                Err(_) => Input::Cancel(CancelReason::Interrupt),
            },
        };
    }
    let interrupted = state.cancelled().is_some();
    if !interrupted {
        // Every trial is finished: anything still labelled with this job is a leftover, e.g.
        // of a try that failed because the engine went away and could not clean up then.
        reap_job(&*sandbox, &spec.job_label()).await;
    }
    // The traces still on their way: a job stopped hard waits for none.
    let traces = match traces {
        Some(sink) => {
            let wait = if reaped.is_some() {
                Duration::ZERO
            } else {
                TRACES_WAIT
            };
            Some(sink.finish(wait).await)
        }
        None => None,
    };
    if reaped.is_none() {
        let _ = events.send(JobEvent::Finished);
    }
    Ok(JobOutcome {
        records,
        interrupted,
        reaped,
        planned,
        traces,
    })
}

/// How long a finished job waits for its last traces to be sent.
const TRACES_WAIT: Duration = Duration::from_secs(30);

async fn next_name(names: &mut Option<mpsc::UnboundedReceiver<String>>) -> Option<String> {
    match names {
        Some(names) => names.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn run_one<S: Sandbox + ?Sized>(
    queued: Box<Queued>,
    sandbox: Arc<S>,
    cancel: watch::Receiver<bool>,
    events: mpsc::UnboundedSender<JobEvent>,
) -> (Box<Queued>, TrialRun) {
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

/// Remove every resource of the job labelled `job_label` (leftovers of a killed run of the
/// same job dir, or everything at once after a second interrupt): containers first, then the
/// frozen filesystems they may have started from. Failures are logged: they must not stop
/// the job.
pub(crate) async fn reap_job<S: Sandbox + ?Sized>(sandbox: &S, job_label: &str) -> usize {
    let mut found: Vec<Listed> = match sandbox.list(&Selector::Job(job_label.to_string())).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!("listing leftovers: {e}");
            return 0;
        }
    };
    found.sort_by(|a, b| a.resource.cmp(&b.resource));
    let mut removed = 0;
    for listed in found {
        if matches!(listed.resource, Resource::Image(_)) {
            continue;
        }
        match sandbox.remove(&listed.resource).await {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!("removing leftover {:?}: {e}", listed.resource),
        }
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
