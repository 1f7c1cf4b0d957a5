//! One trial: `environment → agent → collect → validate → verify → record`, a straight line of
//! phases (`phases/`), each an async function that takes what it needs as values and returns a
//! typed outcome; [`run`] writes each outcome into the record as it arrives.
//!
//! Owns: the phase sequence, deadlines, the trial's resources, cleanup. Knows nothing of other
//! trials or of a particular backend: everything goes through [`crate::sandbox::Sandbox`].
//!
//! Invariants:
//! - `run` never fails: every harness or engine failure ends up in the record as an
//!   `infra_error` (with the phase it happened in), never as an agent failure.
//! - The verifier's files only ever enter a container after the agent phase has ended (see
//!   `crate::verifier`).
//! - Every resource the trial creates is registered in its [`crate::sandbox::Scope`] the moment
//!   it exists and removed on every path, including cancellation (plus a sweep by owner).
//! - A cancelled trial records nothing: it runs again on resume.

mod close;
pub(crate) mod content;
mod continuation;
mod control;
pub(crate) mod history;
mod phases;
mod plan;
mod record;
mod run;
pub(crate) mod scrub;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_gateway;
#[cfg(test)]
mod tests_harbor;
#[cfg(test)]
mod tests_limits;
#[cfg(test)]
mod tests_steps;

pub(crate) use close::audit_of;
pub(crate) use close::cancelled_record;
#[cfg(test)]
pub(crate) use close::initial_record;
pub(crate) use phases::{limits_of, sandbox_network};
pub(crate) use plan::{DEFAULT_STORAGE_LIMIT_MB, Phase, TrialPlan, TrialSettings};
pub(crate) use record::{
    InfraError, JsonlError, NetworkRecord, Termination, TerminationKind, TrialRecord,
    VerifierStatus, final_records,
};
pub(crate) use run::{TrialRun, run};

/// `s` reduced to `[A-Za-z0-9._-]` (anything else becomes `-`): safe in file names and ids.
pub(crate) fn safe_name(s: &str) -> String {
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
