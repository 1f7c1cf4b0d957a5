//! What a trial is given before it starts.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::Agent;
use crate::sandbox::ImageSpec;
use crate::task::Task;

/// What an agent may write to its container's filesystem when the task sets no `storage_mb`.
/// Without a ceiling a sparse file (`truncate -s 1T`) costs the agent nothing, but freezing it
/// for the snapshot verifier writes every byte to the host's disk.
pub(crate) const DEFAULT_STORAGE_LIMIT_MB: u64 = 10 * 1024;

/// Phases of a trial, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Phase {
    Environment,
    Agent,
    Collect,
    /// arbiter's own validation commands (`[completion] validation`), when the task has any.
    Validate,
    Verify,
    Cleanup,
}

impl Phase {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Phase::Environment => "environment",
            Phase::Agent => "agent",
            Phase::Collect => "collect",
            Phase::Validate => "validate",
            Phase::Verify => "verify",
            Phase::Cleanup => "cleanup",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Knobs that are the same for every trial of a job.
#[derive(Debug, Clone)]
pub(crate) struct TrialSettings {
    /// The backend's name for the record (`docker`, `kubernetes`); nothing else of the trial
    /// depends on it.
    pub backend: &'static str,
    pub pass_threshold: f64,
    /// Bytes of stdout / stderr kept per stream.
    pub log_cap_bytes: u64,
    /// Bytes of the agent's changed files kept for regrading (`agent/changes.tar`; 0: none).
    pub change_content_cap_bytes: u64,
    /// Time between SIGTERM and SIGKILL when a deadline fires.
    pub kill_grace: Duration,
    /// Label value identifying the job's resources (unique per job dir).
    pub job_label: String,
    /// Extra labels on every resource (e.g. the owning process, for `gc`).
    pub labels: BTreeMap<String, String>,
    pub agent_timeout_multiplier: f64,
    pub install_timeout_multiplier: f64,
    pub verifier_timeout_multiplier: f64,
    /// Environment images indexed for change-set classification (shared by the job's trials).
    pub image_indexes: Arc<super::phases::image_index::ImageIndexes>,
    /// The job's model gateway, when an agent of the job has a `model:`.
    pub gateway: Option<Arc<crate::gateway::Gateway>>,
    /// The providers' real keys: never in a container, scrubbed from the trial's files anyway.
    pub model_secrets: Vec<String>,
    /// Agents whose trials keep a second copy of their frozen filesystem past the trial
    /// (`arbiter tasks check` re-verifies the oracle's; see `taskcheck::keep_snapshot`).
    pub keep_snapshots: std::collections::BTreeSet<String>,
    /// The job's network override (`--network`, `network:`), already applied to the task; the
    /// trial records it in `harness_overrides`.
    pub network_overrides: Vec<crate::agent::HarnessOverride>,
}

/// Everything one trial needs, decided before it starts.
#[derive(Debug, Clone)]
pub(crate) struct TrialPlan {
    pub id: String,
    pub job: String,
    pub task: Arc<Task>,
    pub agent: Arc<Agent>,
    pub variant: String,
    /// Variant env overrides (values may hold `${NAME}` references; never recorded resolved).
    pub overrides: BTreeMap<String, String>,
    /// Variant arguments appended to a command agent's argv.
    pub args: Vec<String>,
    pub attempt: u32,
    /// Goal continuation of this arm (the variant's, else the agent's): attempts 1…N of the
    /// agent in this trial's container (SPEC §15). `None`: one run, as always.
    pub continuation: Option<crate::agent::Continuation>,
    pub image: ImageSpec,
    /// The image a `separate` verifier runs in (`None` in every other mode).
    pub verifier_image: Option<ImageSpec>,
    /// The trial's directory (created by the caller, empty).
    pub dir: PathBuf,
    pub settings: Arc<TrialSettings>,
}
