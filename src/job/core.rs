//! The job's state and every decision about it, as one synchronous function: an input (a
//! trial finished, time passed, the user asked to stop) goes in, the actions to take come out.
//! The async loop in `runner.rs` only waits for inputs and carries out actions, so everything
//! here is unit-tested without an engine or a runtime.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use crate::trial::{InfraError, Phase, TrialPlan, TrialRecord, TrialRun};

use super::config::RetryPolicy;
use super::events::JobEvent;

/// Why the job is stopping; a later, stronger reason upgrades an earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CancelReason {
    /// First Ctrl-C / SIGTERM: start nothing new, let running trials clean up.
    Interrupt,
    /// Second: stop waiting, remove everything of the job at once.
    HardInterrupt,
}

/// A trial waiting to run, with the infrastructure failures of its earlier tries.
#[derive(Debug, Clone)]
pub(crate) struct Queued {
    pub plan: TrialPlan,
    pub failures: Vec<InfraError>,
}

#[derive(Debug)]
pub(crate) enum Input {
    /// Time has passed (a retry may be due).
    Tick,
    TrialDone(Box<Queued>, TrialRun),
    Cancel(CancelReason),
}

#[derive(Debug)]
pub(crate) enum Action {
    /// Start this trial now (a concurrency slot is taken).
    Spawn(Box<Queued>),
    /// Write this finished record to the job store.
    Record(Box<TrialRecord>),
    Emit(JobEvent),
    /// Tell running trials to stop.
    CancelTrials,
    /// Kill and remove everything of the job now, and stop waiting.
    Reap,
}

#[derive(Debug)]
pub(crate) struct JobState {
    queue: VecDeque<Queued>,
    /// Trials waiting for their retry time (holding no slot).
    waiting: Vec<(Instant, Queued)>,
    running: usize,
    concurrency: usize,
    policy: RetryPolicy,
    cancel: Option<CancelReason>,
}

impl JobState {
    /// `pending`: the trials without a finished record, in the order they should start.
    pub(crate) fn new(pending: Vec<TrialPlan>, concurrency: usize, policy: RetryPolicy) -> Self {
        JobState {
            queue: pending
                .into_iter()
                .map(|plan| Queued {
                    plan,
                    failures: Vec::new(),
                })
                .collect(),
            waiting: Vec::new(),
            running: 0,
            concurrency: concurrency.max(1),
            policy,
            cancel: None,
        }
    }

    pub(crate) fn handle(&mut self, input: Input, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        match input {
            Input::Tick => {}
            Input::TrialDone(queued, run) => {
                self.running = self.running.saturating_sub(1);
                match run {
                    TrialRun::Finished(record) => self.finished(*queued, record, now, &mut actions),
                    TrialRun::Cancelled => actions.push(Action::Emit(JobEvent::TrialCancelled {
                        id: queued.plan.id,
                    })),
                }
            }
            Input::Cancel(reason) => {
                if self.cancel.is_some_and(|current| current >= reason) {
                    return actions;
                }
                if self.cancel.is_none() {
                    actions.push(Action::Emit(JobEvent::Interrupted));
                    actions.push(Action::CancelTrials);
                }
                self.cancel = Some(reason);
                if reason == CancelReason::HardInterrupt {
                    actions.push(Action::Reap);
                }
                return actions;
            }
        }
        self.release_due(now);
        self.fill(&mut actions);
        actions
    }

    /// When the next retry is due (nothing is due once the job is stopping).
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        if self.cancel.is_some() {
            return None;
        }
        self.waiting.iter().map(|(at, _)| *at).min()
    }

    /// Nothing runs and nothing more will start.
    pub(crate) fn is_done(&self) -> bool {
        self.cancel == Some(CancelReason::HardInterrupt)
            || (self.running == 0
                && (self.cancel.is_some() || (self.queue.is_empty() && self.waiting.is_empty())))
    }

    pub(crate) fn cancelled(&self) -> Option<CancelReason> {
        self.cancel
    }

    fn finished(
        &mut self,
        queued: Queued,
        record: Box<TrialRecord>,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        if let Some((wait, retry)) = self.retry_of(&record, &queued) {
            actions.push(Action::Emit(JobEvent::TrialRetrying {
                id: record.id.clone(),
                retry: retry.failures.len() as u32,
                wait,
                reason: retry
                    .failures
                    .last()
                    .map(|f| f.message.clone())
                    .unwrap_or_default(),
            }));
            self.waiting.push((now + wait, retry));
            return;
        }
        let mut record = record;
        record.retries = queued.failures.len() as u32;
        record.previous_errors = queued.failures;
        actions.push(Action::Record(record));
    }

    /// If `record` should be retried: the wait and the re-queued trial.
    fn retry_of(&self, record: &TrialRecord, queued: &Queued) -> Option<(Duration, Queued)> {
        let policy = &self.policy;
        let claimed_infra = policy.on_claimed_infrastructure_failure
            && record.claim.claims_infrastructure_failure();
        if self.cancel.is_some()
            || !(record.is_infra() || claimed_infra)
            || queued.failures.len() as u32 >= policy.max
        {
            return None;
        }
        let failure = record.infra_error.clone().unwrap_or_else(|| InfraError {
            phase: Phase::Agent,
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

    /// Retries whose time has come go to the front of the queue, in the order they fell due.
    fn release_due(&mut self, now: Instant) {
        let (mut ready, still): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.waiting = still;
        ready.sort_by_key(|(at, _)| *at);
        for (_, queued) in ready.into_iter().rev() {
            self.queue.push_front(queued);
        }
    }

    fn fill(&mut self, actions: &mut Vec<Action>) {
        while self.cancel.is_none() && self.running < self.concurrency {
            let Some(queued) = self.queue.pop_front() else {
                break;
            };
            self.running += 1;
            actions.push(Action::Emit(JobEvent::TrialStarted {
                id: queued.plan.id.clone(),
            }));
            actions.push(Action::Spawn(Box::new(queued)));
        }
    }
}
