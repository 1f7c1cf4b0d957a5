//! Regrading (`arbiter verify`, SPEC §13): the task's verifier — or a replacement tests dir —
//! run again on what each agent left, the new outcome appended to the trial's verifier
//! history with its provenance, and the trial's current verdict updated.
//!
//! Owns: the regrade journal (`journal`: `regrade/<id>.json` in the job dir and the
//! per-trial decision) and the regrade itself (`run`). The content of the agent's changes it
//! replays is kept by the trial (`trial::content`), with the verifier history it appends to
//! (`trial::history`): a trial never depends on the command built on top of it.
//!
//! Invariants:
//! - the verifier runs on the original environment image with the recorded change set applied
//!   (findings left out in `clean` mode, with `verifier::prepare_clean`'s rule), never on
//!   anything the agent could still change;
//! - a trial's new verdict, its history entry and the regrade's mark (`regrade.id`) are one
//!   atomic write of `result.json`: a regrade killed at any point and run again regrades every
//!   trial exactly once; `trials.jsonl` is then rewritten from the records (temp + rename);
//! - a trial that cannot be regraded says why (record and output) and does not stop the others;
//!   an engine failure leaves the trial unmarked (regraded on the next run) and is counted as
//!   an infrastructure error.

mod journal;
mod run;
#[cfg(test)]
mod tests;

pub(crate) use run::{RegradeArgs, RegradeError, RegradeOutcome, RowStatus, regrade};
