//! Goal continuation (SPEC §15, issue 29): `continuation: {max_attempts: N}` on an agent or a
//! variant runs attempts 1…N of the agent in one trial's container. This module holds the
//! config value and what an attempt is told through its environment; the attempt loop is the
//! trial's (`trial::phases::attempts`).
//!
//! Why a contract of env vars and one read-only file rather than a flag per agent: every kind
//! of agent (a `command`, `aworld-cli`, a preset) can read env vars, and the previous attempt's
//! own words are the only thing of it the next attempt is given by the harness. What the agent
//! learnt (plans, notes, observations) it keeps itself, in its work ledger: the control root
//! when it has one, else any path of its filesystem, which persists between attempts.

use serde::{Deserialize, Serialize};

/// The attempt number, 1-based.
pub const ATTEMPT_ENV: &str = "ARBITER_ATTEMPT";
/// The attempt limit of the trial.
pub const MAX_ATTEMPTS_ENV: &str = "ARBITER_MAX_ATTEMPTS";
/// The attempt's own identity (`<trial id>/attempt-<k>`), distinct per attempt.
pub const ATTEMPT_ID_ENV: &str = "ARBITER_ATTEMPT_ID";
/// Seconds left before the trial's agent deadline when the attempt starts (one deadline bounds
/// every attempt together).
pub const REMAINING_ENV: &str = "ARBITER_REMAINING_SECONDS";
/// The trial's agent deadline, Unix seconds (the same for every attempt).
pub const DEADLINE_ENV: &str = "ARBITER_DEADLINE_EPOCH_SECONDS";
/// Where the agent's work ledger lives: the control root when the agent has one, else
/// [`LEDGER_PATH`]. Both persist from attempt to attempt; arbiter never reads them to decide.
pub const LEDGER_ENV: &str = "ARBITER_WORK_LEDGER";
/// Container path of the previous attempt's claim and error (attempts 2…N only), written by
/// arbiter, mode 0444.
pub const PREVIOUS_ENV: &str = "ARBITER_PREVIOUS_ATTEMPT";
/// Container path of [`PREVIOUS_ENV`]'s file.
pub const PREVIOUS_PATH: &str = "/arbiter/previous-attempt.json";
/// The work ledger of an agent without a control root (created by arbiter, writable by all).
pub const LEDGER_PATH: &str = "/arbiter/ledger";
/// Schema of the previous-attempt file.
pub const PREVIOUS_SCHEMA: &str = "arbiter.previous_attempt.v1";
/// The largest attempt limit accepted (a limit is a budget, not "forever").
pub const MAX_ATTEMPTS_LIMIT: u32 = 100;

/// `continuation:` on an agent or a variant (a variant's wins for its arms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Continuation {
    /// Attempts 1…N of the agent in the same container; 1 is a one-shot run that still records
    /// its attempt.
    pub max_attempts: u32,
}

impl Continuation {
    /// Why the value cannot be used, if it cannot.
    pub fn problem(&self) -> Option<String> {
        (self.max_attempts == 0 || self.max_attempts > MAX_ATTEMPTS_LIMIT).then(|| {
            format!(
                "max_attempts must be between 1 and {MAX_ATTEMPTS_LIMIT} (got {})",
                self.max_attempts
            )
        })
    }
}

/// The file an attempt after the first finds at [`PREVIOUS_PATH`]: the previous attempt's
/// claim and error in its own words, and why arbiter started this one. Nothing of the
/// verifier, `/tests` or a reward: the verifier has not run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviousAttempt {
    pub schema: String,
    /// The previous attempt's number.
    pub attempt: u32,
    pub max_attempts: u32,
    /// Its claim as read (`present`, `missing`, `invalid`) and, when present, its
    /// `semantic_status`.
    pub claim_status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic_status: Option<String>,
    /// The outcome record it wrote, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<serde_json::Value>,
    /// Its error: the record's `failure`, its `AWORLD_RUN_FAILURE=` line, or why its record
    /// could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<serde_json::Value>,
    /// How its process ended (`exited 1`).
    pub ended: String,
    /// Why arbiter started this attempt, in words (the claim was not a typed success, or the
    /// task's declared validation commands failed).
    pub continued_because: String,
}
