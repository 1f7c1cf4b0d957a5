//! The verifier phase and everything it decides: its modes (where the verifier runs), arbiter's
//! own validation commands, reading the reward the verifier wrote, and the pass rule.
//!
//! Invariants:
//! - the verifier's files (`tests/`) only enter a container after the agent phase has ended;
//! - `/logs/verifier` is wiped and created fresh right before `test.sh` runs, so nothing the
//!   agent wrote is read as a reward;
//! - a verifier that crashes, times out or writes no reward gives `error` with no reward,
//!   never a zero.
//!
//! Also here: the change set and the integrity classifier over it (`integrity`).

mod clean;
mod downloads;
pub mod integrity;
mod outcome;
mod phase;
mod reward;
mod separate;
mod validation;

pub(crate) use clean::{at_or_under, delete_paths, left_out, prepare as prepare_clean};
pub use outcome::{VerifierOutcome, VerifierStatus, judge};
pub(crate) use phase::{Target, VerifierEgress, VerifyError, VerifyInput, verify};
pub use reward::{Reward, RewardError, parse_reward, primary_value};
pub(crate) use separate::{artifact_paths, prepare as prepare_separate};
pub(crate) use validation::validate;
