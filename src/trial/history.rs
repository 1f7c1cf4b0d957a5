//! What regrading adds to the trial record (`arbiter.trial.v1`; every field optional, so older
//! records still load).

use serde::{Deserialize, Serialize};

use crate::outcome::Verdict;
use crate::task::VerifierMode;
use crate::verifier::VerifierOutcome;

/// The record's `change_content`: whether the content of the agent's changed files was kept
/// (`agent/changes.tar`), so the trial can be regraded after its frozen filesystem is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ChangeContent {
    pub regradable: bool,
    /// The archive, relative to the trial dir (absent when nothing was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Size of the archive.
    pub bytes: u64,
    /// The cap it was kept under (`change_content_cap_mb`).
    pub cap_bytes: u64,
    /// The changed subtrees it holds (each an added or modified path with no added ancestor):
    /// what `clean` mode leaves out whole when a finding lies in one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roots: Vec<String>,
    /// Why the trial cannot be regraded from its change set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ChangeContent {
    /// Nothing was kept, because of `reason`.
    pub(crate) fn not_kept(cap_bytes: u64, reason: String) -> Self {
        ChangeContent {
            regradable: false,
            file: None,
            bytes: 0,
            cap_bytes,
            roots: Vec::new(),
            reason: Some(reason),
        }
    }
}

/// What a verifier ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum VerifierSource {
    /// The trial's own verify phase (`arbiter run`).
    Original,
    /// The original environment image with the recorded change set applied.
    ChangeSet,
}

/// One entry of the record's `verifier_history`: a verifier outcome with its provenance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VerifierRun {
    /// When it was recorded (RFC 3339, UTC).
    pub at: String,
    /// The regrade that produced it (absent for the original run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regrade: Option<String>,
    /// Which run of the regrade (1-based; `--repeat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u32>,
    pub source: VerifierSource,
    /// Checksum of the tests dir the verifier ran (task checksum format, `sha256:…`).
    pub verifier_checksum: String,
    /// The replacement tests dir (`--tests`), as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests_dir: Option<String>,
    /// The arbiter version that ran it (absent for the original run: see `lock.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arbiter_version: Option<String>,
    pub mode: VerifierMode,
    /// The environment image the change set was applied to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    pub outcome: VerifierOutcome,
    /// The audit verdict this outcome gave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

/// Whether a regrade regraded a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RegradeStatus {
    Regraded,
    NotRegradable,
}

/// The record's `regrade`: the last regrade that reached this trial. It is written in the
/// same atomic update as the new verdict, which is what makes a resumed regrade skip it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RegradeMark {
    pub id: String,
    pub at: String,
    pub status: RegradeStatus,
    /// Why it could not be regraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Verifier runs (`--repeat`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runs: u32,
    /// The primary reward of each run (`null`: no reward).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewards: Vec<Option<f64>>,
    /// With more than one run: whether every run gave the same status and reward.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deterministic: Option<bool>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}
