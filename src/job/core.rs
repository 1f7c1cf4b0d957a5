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
pub(crate) enum CancelReason {
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
    /// Infrastructure errors of earlier runs of the job (a resume with `--retry-infra`): kept
    /// in the record's `previous_errors`, before this run's; they do not use up its retries.
    pub earlier: Vec<InfraError>,
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
    #[cfg(test)]
    pub(crate) fn new(pending: Vec<TrialPlan>, concurrency: usize, policy: RetryPolicy) -> Self {
        let pending = pending.into_iter().map(|plan| (plan, Vec::new())).collect();
        Self::continuing(pending, concurrency, policy)
    }

    /// Like [`JobState::new`], each trial with the infrastructure errors of earlier runs.
    pub(crate) fn continuing(
        pending: Vec<(TrialPlan, Vec<InfraError>)>,
        concurrency: usize,
        policy: RetryPolicy,
    ) -> Self {
        JobState {
            queue: pending
                .into_iter()
                .map(|(plan, earlier)| Queued {
                    plan,
                    failures: Vec::new(),
                    earlier,
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

    /// Trials that will still start: queued, or waiting for their retry (none once the job
    /// is stopping).
    pub(crate) fn waiting_to_start(&self) -> usize {
        if self.cancel.is_some() {
            return 0;
        }
        self.queue.len() + self.waiting.len()
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
        let mut errors = queued.earlier;
        errors.extend(queued.failures);
        record.retries = errors.len() as u32;
        record.previous_errors = errors;
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
                earlier: queued.earlier.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{job_spec, task_dir};
    use crate::trial::{TerminationKind, VerifierStatus, initial_record};

    struct Job {
        _dir: tempfile::TempDir,
        plans: Vec<TrialPlan>,
    }

    fn job(tasks: usize) -> Job {
        let dir = tempfile::tempdir().expect("tmp");
        let dirs: Vec<_> = (0..tasks)
            .map(|i| task_dir(dir.path(), &format!("t{i}"), ""))
            .collect();
        let spec = job_spec(dir.path(), &dirs, &["oracle"], 1);
        let plans = spec.trials(Default::default(), "fake");
        Job { _dir: dir, plans }
    }

    fn policy(max: u32) -> RetryPolicy {
        RetryPolicy {
            max,
            backoff_sec: 2.0,
            max_backoff_sec: 30.0,
            on_claimed_infrastructure_failure: false,
            rerun_infra_errors: false,
        }
    }

    fn passed(plan: &TrialPlan) -> TrialRun {
        let mut rec = initial_record(plan);
        rec.termination.kind = TerminationKind::Exited;
        rec.verifier.status = VerifierStatus::Passed;
        TrialRun::Finished(Box::new(rec))
    }

    fn infra(plan: &TrialPlan, message: &str) -> TrialRun {
        let mut rec = initial_record(plan);
        rec.infra_error = Some(InfraError {
            phase: Phase::Environment,
            message: message.to_string(),
        });
        TrialRun::Finished(Box::new(rec))
    }

    fn spawned(actions: &[Action]) -> Vec<Queued> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Spawn(q) => Some((**q).clone()),
                _ => None,
            })
            .collect()
    }

    fn recorded(actions: &[Action]) -> Vec<TrialRecord> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Record(r) => Some((**r).clone()),
                _ => None,
            })
            .collect()
    }

    fn done(q: Queued, run: TrialRun) -> Input {
        Input::TrialDone(Box::new(q), run)
    }

    #[test]
    fn starts_at_most_concurrency_trials_and_one_per_finished() {
        let job = job(5);
        let now = Instant::now();
        let mut state = JobState::new(job.plans.clone(), 2, policy(0));
        let first = spawned(&state.handle(Input::Tick, now));
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].plan.id, job.plans[0].id);
        let run = passed(&first[0].plan);
        let next = state.handle(done(first[0].clone(), run), now);
        assert_eq!(recorded(&next).len(), 1);
        assert_eq!(spawned(&next).len(), 1);
        assert_eq!(spawned(&next)[0].plan.id, job.plans[2].id);
        assert!(!state.is_done());
        // Five trials, three started: two will still start (what warm pods are sized by).
        assert_eq!(state.waiting_to_start(), 2);
        state.handle(Input::Cancel(CancelReason::Interrupt), now);
        assert_eq!(state.waiting_to_start(), 0, "nothing starts once stopping");
    }

    #[test]
    fn infra_failures_are_retried_with_backoff_without_holding_a_slot() {
        let job = job(2);
        let t0 = Instant::now();
        let mut state = JobState::new(job.plans.clone(), 1, policy(2));
        let a = spawned(&state.handle(Input::Tick, t0)).remove(0);

        // First failure: a retry after 2 s; the slot goes to the next trial meanwhile.
        let out = state.handle(done(a.clone(), infra(&a.plan, "engine gone")), t0);
        assert!(recorded(&out).is_empty());
        assert!(out.iter().any(|x| matches!(x, Action::Emit(JobEvent::TrialRetrying { retry: 1, wait, .. }) if *wait == Duration::from_secs(2))));
        let b = spawned(&out);
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].plan.id, job.plans[1].id);
        assert_eq!(state.next_wake(), Some(t0 + Duration::from_secs(2)));

        // Due while the slot is busy: it waits for the slot, then goes first.
        assert!(spawned(&state.handle(Input::Tick, t0 + Duration::from_secs(3))).is_empty());
        let out = state.handle(
            done(b[0].clone(), passed(&b[0].plan)),
            t0 + Duration::from_secs(3),
        );
        let retried = spawned(&out);
        assert_eq!(retried.len(), 1);
        assert_eq!(retried[0].plan.id, a.plan.id);
        assert_eq!(retried[0].failures.len(), 1);

        // Second failure: backoff doubles.
        let t1 = t0 + Duration::from_secs(4);
        let out = state.handle(done(retried[0].clone(), infra(&a.plan, "again")), t1);
        assert!(out.iter().any(|x| matches!(x, Action::Emit(JobEvent::TrialRetrying { retry: 2, wait, .. }) if *wait == Duration::from_secs(4))));
        assert!(spawned(&state.handle(Input::Tick, t1 + Duration::from_secs(3))).is_empty());
        let third = spawned(&state.handle(Input::Tick, t1 + Duration::from_secs(4))).remove(0);

        // Third failure: out of retries, recorded with both earlier errors.
        let out = state.handle(
            done(third.clone(), infra(&a.plan, "still")),
            t1 + Duration::from_secs(5),
        );
        let rec = recorded(&out).remove(0);
        assert_eq!(rec.retries, 2);
        let messages: Vec<&str> = rec
            .previous_errors
            .iter()
            .map(|e| e.message.as_str())
            .collect();
        assert_eq!(messages, ["engine gone", "again"]);
        assert!(rec.is_infra());
        assert!(state.is_done());
    }

    #[test]
    fn agent_results_are_never_retried_and_claimed_infra_only_when_asked() {
        let job = job(1);
        let now = Instant::now();
        let mut claimed = initial_record(&job.plans[0]);
        claimed.termination.kind = TerminationKind::Exited;
        claimed.verifier.status = VerifierStatus::Failed;
        claimed.claim.semantic_status = Some("infrastructure_failed".to_string());
        for (on_claimed, retried) in [(false, false), (true, true)] {
            let mut p = policy(3);
            p.on_claimed_infrastructure_failure = on_claimed;
            let mut state = JobState::new(job.plans.clone(), 1, p);
            let q = spawned(&state.handle(Input::Tick, now)).remove(0);
            let out = state.handle(done(q, TrialRun::Finished(Box::new(claimed.clone()))), now);
            assert_eq!(
                recorded(&out).is_empty(),
                retried,
                "on_claimed={on_claimed}"
            );
        }
    }

    #[test]
    fn an_interrupt_starts_nothing_more_and_a_second_reaps_at_once() {
        let job = job(3);
        let now = Instant::now();
        let mut state = JobState::new(job.plans.clone(), 1, policy(2));
        let a = spawned(&state.handle(Input::Tick, now)).remove(0);
        let out = state.handle(Input::Cancel(CancelReason::Interrupt), now);
        assert!(
            out.iter()
                .any(|x| matches!(x, Action::Emit(JobEvent::Interrupted)))
        );
        assert!(out.iter().any(|x| matches!(x, Action::CancelTrials)));
        assert!(!out.iter().any(|x| matches!(x, Action::Reap)));
        // A repeated interrupt of the same strength changes nothing.
        assert!(
            state
                .handle(Input::Cancel(CancelReason::Interrupt), now)
                .is_empty()
        );
        assert!(!state.is_done(), "a trial is still cleaning up");
        // An infra failure seen while stopping is recorded, not retried; nothing new starts.
        let out = state.handle(done(a.clone(), infra(&a.plan, "x")), now);
        assert_eq!(recorded(&out).len(), 1);
        assert!(spawned(&out).is_empty());
        assert!(state.is_done());
        assert_eq!(state.next_wake(), None);

        let mut state = JobState::new(job.plans.clone(), 2, policy(2));
        state.handle(Input::Tick, now);
        state.handle(Input::Cancel(CancelReason::Interrupt), now);
        let out = state.handle(Input::Cancel(CancelReason::HardInterrupt), now);
        assert!(out.iter().any(|x| matches!(x, Action::Reap)));
        assert!(
            !out.iter()
                .any(|x| matches!(x, Action::Emit(JobEvent::Interrupted)))
        );
        assert!(
            state.is_done(),
            "a second interrupt does not wait for running trials"
        );
        // A weaker reason after a stronger one is ignored.
        assert!(
            state
                .handle(Input::Cancel(CancelReason::Interrupt), now)
                .is_empty()
        );
        assert_eq!(state.cancelled(), Some(CancelReason::HardInterrupt));
    }

    #[test]
    fn a_cancelled_trial_is_not_recorded() {
        let job = job(1);
        let now = Instant::now();
        let mut state = JobState::new(job.plans.clone(), 1, policy(2));
        let a = spawned(&state.handle(Input::Tick, now)).remove(0);
        state.handle(Input::Cancel(CancelReason::Interrupt), now);
        let out = state.handle(done(a, TrialRun::Cancelled), now);
        assert!(recorded(&out).is_empty());
        assert!(
            out.iter()
                .any(|x| matches!(x, Action::Emit(JobEvent::TrialCancelled { .. })))
        );
        assert!(state.is_done());
    }
}
