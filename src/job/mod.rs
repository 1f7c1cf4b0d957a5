//! A job: tasks × agents × variants × attempts, run with bounded concurrency into a job dir.
//!
//! Owns: turning a config into trial plans ([`plan`]), the scheduler loop ([`runner`]), the
//! job directory ([`store`]) and the event stream that reporters consume ([`events`]).
//!
//! Invariants:
//! - one loop owns job state; trials run as tokio tasks and hand back records; only that
//!   loop writes `result.json` / `trials.jsonl`, so records are never interleaved;
//! - a trial with a `result.json` is finished and never re-run; a trial dir without one is
//!   discarded and the trial re-run;
//! - on cancellation no new trial starts, running trials clean up and are not recorded.

mod config;
mod core;
mod events;
mod gpus;
mod lock;
mod network;
mod owner;
mod plan;
mod preflight;
mod resolve;
mod runner;
mod store;
mod summary;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_harbor;

pub use config::{
    AgentEntry, ConfigError, JobConfig, OtlpConfig, RetryPolicy, RunArgs, TimeoutMultipliers,
    Variant,
};
pub(crate) use core::CancelReason;
pub(crate) use events::JobEvent;
pub use network::{NetworkOverride, PhaseNetwork};
pub(crate) use owner::{LABEL_OWNER, Owner};
pub(crate) use plan::{JobSpec, trial_id};
pub(crate) use preflight::{PreflightError, preflight};
pub use resolve::resolve;
pub(crate) use runner::{RunError, reap_job, run, run_controlled};
pub(crate) use store::{
    IMPORTED_MARKER, JOB_ID_FILE, JobStore, StoreError, imported_marker, write_atomic,
};
pub(crate) use summary::{ArmSummary, Brief, summarize};
