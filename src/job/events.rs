use std::path::PathBuf;

use crate::trial::{Phase, TrialRecord};

/// What a job reports while it runs. Reporters match every variant.
#[derive(Debug, Clone)]
pub(crate) enum JobEvent {
    Started {
        job: String,
        dir: PathBuf,
        total: usize,
        already_done: usize,
    },
    TrialStarted {
        id: String,
    },
    PhaseChanged {
        id: String,
        phase: Phase,
    },
    TrialFinished {
        record: Box<TrialRecord>,
    },
    TrialCancelled {
        id: String,
    },
    /// An infrastructure failure; the trial runs again after `wait`.
    TrialRetrying {
        id: String,
        retry: u32,
        wait: std::time::Duration,
        reason: String,
    },
    /// The user asked to stop: no new trials start.
    Interrupted,
    Finished,
}
