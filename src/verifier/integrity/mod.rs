//! Integrity (SPEC §5): what the agent changed in its filesystem, and whether any of it can
//! alter how the verifier runs.
//!
//! The trial drives it (all functions here are pure):
//!
//! 1. the sandbox lists the engine's changes (`GET /containers/{id}/changes`) and enriches
//!    each from the frozen filesystem into a [`ChangeEntry`] (type, size, mode, link target);
//! 2. [`collapse`] sorts them, drops the toolbox mount points and marks the parent
//!    directories the engine lists only because something beneath changed (`implied`);
//! 3. [`content_wanted`] names the few small files whose text sharpens the rules; the trial
//!    fetches them and answers [`Filesystems::agent_text`] / [`Filesystems::original_text`];
//! 4. [`classify`] gives the [`Finding`]s; [`Integrity::judge`] the record's `integrity`;
//! 5. [`plan_hashes`] picks the regular files to hash (findings first), the trial hashes
//!    them ([`record_hash`]) and writes [`ChangesFile`] to `agent/changes.json`;
//!    [`summarize`] gives the record's `changes`;
//! 6. `clean` mode replays [`without_findings`] onto the original image.
//!
//! What steers the verifier's downloads (hosts and resolver files, proxies, package-index
//! configuration, credentials, trust stores) is a finding too, with or without a network in
//! the verifier phase (`steering.rs` says why).

mod changes;
mod classify;
mod paths;
mod steering;

#[cfg(test)]
mod tests;

pub use changes::{
    CHANGES_FILE, CHANGES_SCHEMA, ChangeEntry, ChangeKind, ChangeSummary, ChangesFile, FileType,
    HashCaps, HashReport, HashSkip, collapse, plan_hashes, record_hash, summarize,
};
pub use classify::{
    DEFAULT_PATH, Filesystems, Finding, FindingClass, IntegrityContext, OriginalFile, PythonLayout,
    VERIFIER_PATHS, classify, content_wanted, guess_pythons, path_dirs_from_env,
};
pub use steering::text_wanted;

use serde::{Deserialize, Serialize};

use paths::is_at_or_under;

/// The record's `integrity.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntegrityStatus {
    /// No findings.
    Clean,
    /// Findings, and the verifier ran on a filesystem that had them. Never counts as passed.
    Suspect,
    /// Findings, neutralised: the verifier ran on the pristine image (`clean` mode).
    Restored,
}

/// Which filesystem the verifier ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifiedOn {
    /// The agent's filesystem as it left it (`snapshot`, `live`).
    AgentFilesystem,
    /// The original image with the agent's changes except the findings (`clean`), or only
    /// the artifacts (`separate`).
    PristineToolchain,
}

/// The record's `integrity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Integrity {
    pub status: IntegrityStatus,
    pub findings: Vec<Finding>,
}

impl Integrity {
    /// `clean` without findings; otherwise `suspect` or `restored` by where the verifier ran.
    pub fn judge(findings: Vec<Finding>, verified_on: VerifiedOn) -> Self {
        let status = match (findings.is_empty(), verified_on) {
            (true, _) => IntegrityStatus::Clean,
            (false, VerifiedOn::AgentFilesystem) => IntegrityStatus::Suspect,
            (false, VerifiedOn::PristineToolchain) => IntegrityStatus::Restored,
        };
        Integrity { status, findings }
    }
}

/// The changes `clean` mode applies to the original image: every change except the
/// findings and what lies beneath a finding, and except implied parent directories (they
/// come along with their children).
pub fn without_findings<'a>(
    changes: &'a [ChangeEntry],
    findings: &[Finding],
) -> Vec<&'a ChangeEntry> {
    changes
        .iter()
        .filter(|e| !e.implied)
        .filter(|e| !findings.iter().any(|f| is_at_or_under(&e.path, &f.path)))
        .collect()
}
