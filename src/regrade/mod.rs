//! Regrading (`arbiter verify`, SPEC §13): the task's verifier — or a replacement tests dir —
//! run again on what each agent left, the new outcome appended to the trial's verifier
//! history with its provenance, and the trial's current verdict updated.
//!
//! Owns: the content of the agent's changes kept at collect time (`content`: the archive
//! `agent/changes.tar` and the record's `change_content`), the regrade journal
//! (`journal`: `regrade/<id>.json` in the job dir and the per-trial decision), and the
//! regrade itself (`run`).
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

mod content;
mod journal;
mod model;
mod run;
#[cfg(test)]
mod tests;

pub(crate) use content::ContentWriter;
pub(crate) use content::DEFAULT_CONTENT_CAP_MB;
pub(crate) use model::{ChangeContent, RegradeMark, VerifierRun};
pub(crate) use run::{RegradeArgs, RegradeError, RegradeOutcome, RowStatus, regrade};

/// After the trial's files were scrubbed of secrets (`scrubbed`: the files changed): an archive
/// in which a secret was replaced no longer unpacks, so it is removed and the record says why.
pub(crate) fn after_scrub(
    trial_dir: &std::path::Path,
    content: &mut ChangeContent,
    scrubbed: &[String],
) {
    let Some(file) = &content.file else {
        return;
    };
    let archive = trial_dir.join(file);
    if scrubbed.iter().any(|s| std::path::Path::new(s) == archive) {
        discard_content(
            trial_dir,
            content,
            "the agent's changed files held a secret value (scrubbed), so their content was not kept",
        );
    }
}

/// The collect phase decided not to verify the agent's filesystem: the content kept so far is
/// removed and the record says why the trial cannot be regraded.
pub(crate) fn discard_content(trial_dir: &std::path::Path, content: &mut ChangeContent, why: &str) {
    if let Some(file) = content.file.take() {
        let _ = std::fs::remove_file(trial_dir.join(file));
    }
    *content = ChangeContent::not_kept(content.cap_bytes, why.to_string());
}
