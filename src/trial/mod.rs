//! One trial: `environment → agent → collect → verify → record`, a straight line of phases.
//!
//! Invariants:
//! - `run` never fails: every harness or engine failure ends up in the record as an
//!   `infra_error` (with the phase it happened in), never as an agent failure.
//! - The verifier's files (`tests/`) only ever enter a container after the agent phase has
//!   ended; `/logs/verifier` is wiped and created fresh right before the verifier runs, so
//!   nothing the agent wrote can be read as a reward.
//! - Every container and image the trial creates is registered before anything else happens
//!   and removed on every path, including cancellation (plus a sweep by label).

mod control;
mod record;
mod run;
pub mod scrub;

pub use record::{
    ArtifactEntry, ArtifactStatus, ControlRootInfo, InfraError, Limits, OutputStats, PhaseTime,
    TRIAL_SCHEMA, Termination, TerminationKind, TrialRecord, VerifierOutcome, VerifierStatus,
};
pub use run::{Phase, TrialPlan, TrialRun, TrialSettings, run};

/// `s` reduced to `[A-Za-z0-9._-]` (anything else becomes `-`): safe in file names and ids.
pub fn safe_name(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect()
}
