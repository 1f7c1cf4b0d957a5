//! Harbor 0.26's job-folder documents as serde structs: field names, types and nulls as
//! Harbor's pydantic models (`harbor/models/{job,trial,verifier,agent}`) write them. Only the
//! fields arbiter fills or reads are here; what Harbor adds when it loads one (defaults) is
//! Harbor's business. `tests/harbor_folders.rs` loads every file written from these with
//! Harbor's own classes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The version of Harbor whose models these mirror (and the one the validation test installs).
pub(crate) const HARBOR_VERSION: &str = "0.26.0";

/// `harbor.models.task.id.LocalTaskId` (the only task id arbiter writes; reading takes any).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskId {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `GitTaskId` / `PackageTaskId` fields, kept when reading.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// `harbor.models.trial.config.TaskConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskConfig {
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub git_url: Option<String>,
    #[serde(default)]
    pub git_commit_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default, rename = "ref")]
    pub reference: Option<String>,
    #[serde(default)]
    pub overwrite: bool,
    #[serde(default)]
    pub download_dir: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
}

impl TaskConfig {
    pub(crate) fn local(path: String, source: Option<String>) -> Self {
        TaskConfig {
            path: Some(path),
            git_url: None,
            git_commit_id: None,
            name: None,
            reference: None,
            overwrite: false,
            download_dir: None,
            source,
        }
    }
}

/// `harbor.models.trial.config.AgentConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentConfig {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub import_path: Option<String>,
    #[serde(default)]
    pub model_name: Option<String>,
    #[serde(default)]
    pub override_timeout_sec: Option<f64>,
    #[serde(default)]
    pub override_setup_timeout_sec: Option<f64>,
    #[serde(default)]
    pub max_timeout_sec: Option<f64>,
    #[serde(default)]
    pub kwargs: BTreeMap<String, Value>,
}

/// `harbor.models.trial.config.EnvironmentConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EnvironmentConfig {
    /// `EnvironmentType` (`docker`, …); `None` where Harbor has no type for the backend.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub import_path: Option<String>,
    #[serde(default)]
    pub force_build: bool,
    #[serde(default = "yes")]
    pub delete: bool,
    #[serde(default)]
    pub override_cpus: Option<f64>,
    #[serde(default)]
    pub override_memory_mb: Option<u64>,
    #[serde(default)]
    pub override_storage_mb: Option<u64>,
    #[serde(default)]
    pub override_gpus: Option<u64>,
    #[serde(default)]
    pub kwargs: BTreeMap<String, Value>,
}

fn yes() -> bool {
    true
}

/// `harbor.models.trial.config.VerifierConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VerifierConfig {
    #[serde(default)]
    pub override_timeout_sec: Option<f64>,
    #[serde(default)]
    pub max_timeout_sec: Option<f64>,
    #[serde(default)]
    pub disable: bool,
}

/// `harbor.models.trial.config.TrialConfig` (a trial dir's `config.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TrialConfig {
    #[serde(default = "one")]
    pub schema_version: u32,
    pub task: TaskConfig,
    #[serde(default)]
    pub trial_name: String,
    #[serde(default)]
    pub trials_dir: String,
    #[serde(default = "unit")]
    pub timeout_multiplier: f64,
    #[serde(default)]
    pub agent_timeout_multiplier: Option<f64>,
    #[serde(default)]
    pub verifier_timeout_multiplier: Option<f64>,
    #[serde(default)]
    pub agent_setup_timeout_multiplier: Option<f64>,
    #[serde(default)]
    pub environment_build_timeout_multiplier: Option<f64>,
    pub agent: AgentConfig,
    pub environment: EnvironmentConfig,
    pub verifier: VerifierConfig,
    #[serde(default)]
    pub job_id: Option<String>,
}

fn one() -> u32 {
    1
}

fn unit() -> f64 {
    1.0
}

/// `harbor.models.job.config.RetryConfig`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RetryConfig {
    pub max_retries: u32,
}

/// `harbor.models.job.config.JobConfig` (the job dir's `config.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JobConfig {
    #[serde(default = "one")]
    pub schema_version: u32,
    pub job_name: String,
    #[serde(default)]
    pub jobs_dir: String,
    #[serde(default = "one")]
    pub n_attempts: u32,
    #[serde(default = "unit")]
    pub timeout_multiplier: f64,
    #[serde(default)]
    pub agent_timeout_multiplier: Option<f64>,
    #[serde(default)]
    pub verifier_timeout_multiplier: Option<f64>,
    #[serde(default)]
    pub agent_setup_timeout_multiplier: Option<f64>,
    #[serde(default)]
    pub environment_build_timeout_multiplier: Option<f64>,
    #[serde(default = "four")]
    pub n_concurrent_trials: u32,
    #[serde(default)]
    pub quiet: bool,
    #[serde(default)]
    pub retry: Option<RetryConfig>,
    pub environment: EnvironmentConfig,
    pub verifier: VerifierConfig,
    #[serde(default)]
    pub agents: Vec<AgentConfig>,
    #[serde(default)]
    pub tasks: Vec<TaskConfig>,
}

fn four() -> u32 {
    4
}

/// `harbor.models.trial.result.TimingInfo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TimingInfo {
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
}

/// `harbor.models.trial.error_policy.ErrorPolicy` (the computed `policy` of an exception).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ErrorPolicy {
    pub should_retry: bool,
    pub should_grade: bool,
    pub has_valid_reward: bool,
}

/// `harbor.models.trial.error_policy.ErrorPolicyOverride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct ErrorPolicyOverride {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub should_retry: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub should_grade: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_valid_reward: Option<bool>,
}

/// `harbor.models.trial.result.ExceptionInfo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ExceptionInfo {
    pub exception_type: String,
    pub exception_message: String,
    pub exception_traceback: String,
    pub occurred_at: String,
    /// Harbor leaves it out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_override: Option<ErrorPolicyOverride>,
    /// Computed by Harbor from the type and the override (written, never trusted on read).
    #[serde(default, skip_deserializing)]
    pub policy: Option<ErrorPolicy>,
}

/// `harbor.models.trial.result.ModelInfo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ModelInfo {
    pub name: String,
    #[serde(default)]
    pub provider: Option<String>,
}

/// `harbor.models.trial.result.AgentInfo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentInfo {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub model_info: Option<ModelInfo>,
}

/// `harbor.models.agent.context.AgentContext`. `n_input_tokens` counts cached input too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentContext {
    #[serde(default)]
    pub n_input_tokens: Option<u64>,
    #[serde(default)]
    pub n_cache_tokens: Option<u64>,
    #[serde(default)]
    pub n_output_tokens: Option<u64>,
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[serde(default)]
    pub model_usage: Option<Value>,
    #[serde(default)]
    pub rollout_details: Option<Value>,
    /// "Additional metadata about the agent execution": where arbiter's own facts of the agent
    /// run go (key `arbiter`).
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, Value>>,
}

/// `harbor.models.verifier.result.VerifierResult`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VerifierResult {
    #[serde(default)]
    pub rewards: Option<BTreeMap<String, f64>>,
}

/// `harbor.models.trial.result.StepResult`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StepResult {
    pub step_name: String,
    #[serde(default)]
    pub agent_result: Option<AgentContext>,
    #[serde(default)]
    pub verifier_result: Option<VerifierResult>,
    #[serde(default)]
    pub exception_info: Option<ExceptionInfo>,
    #[serde(default)]
    pub agent_execution: Option<TimingInfo>,
    #[serde(default)]
    pub verifier: Option<TimingInfo>,
}

/// `harbor.models.trial.result.TrialResult` (a trial dir's `result.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TrialResult {
    #[serde(default = "one")]
    pub schema_version: u32,
    pub id: String,
    pub task_name: String,
    pub trial_name: String,
    pub trial_uri: String,
    pub task_id: TaskId,
    #[serde(default)]
    pub source: Option<String>,
    pub task_checksum: String,
    pub config: TrialConfig,
    pub agent_info: AgentInfo,
    #[serde(default)]
    pub agent_result: Option<AgentContext>,
    #[serde(default)]
    pub verifier_result: Option<VerifierResult>,
    /// `shared` or `separate`.
    #[serde(default)]
    pub verifier_environment_mode: Option<String>,
    #[serde(default)]
    pub exception_info: Option<ExceptionInfo>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub environment_setup: Option<TimingInfo>,
    #[serde(default)]
    pub agent_setup: Option<TimingInfo>,
    #[serde(default)]
    pub agent_execution: Option<TimingInfo>,
    #[serde(default)]
    pub verifier: Option<TimingInfo>,
    #[serde(default)]
    pub step_results: Option<Vec<StepResult>>,
    /// Computed by Harbor (written, recomputed on read).
    #[serde(default, skip_deserializing)]
    pub reward_valid: bool,
}

/// `harbor.models.job.result.AgentDatasetStats`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AgentDatasetStats {
    pub n_trials: u64,
    pub n_errors: u64,
    pub metrics: Vec<BTreeMap<String, f64>>,
    /// k → pass@k; JSON keys are the numbers as strings, as pydantic writes `dict[int, float]`.
    pub pass_at_k: BTreeMap<String, f64>,
    /// reward key → reward value (as pydantic writes a float key: `"1.0"`) → trial names.
    pub reward_stats: BTreeMap<String, BTreeMap<String, Vec<String>>>,
    pub exception_stats: BTreeMap<String, Vec<String>>,
}

/// `harbor.models.job.result.JobStats` (every field defaulted on read, as Harbor's are; older
/// Harbor wrote `n_trials` / `n_errors`, which a read ignores: the stats are recomputed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct JobStats {
    pub n_completed_trials: u64,
    pub n_errored_trials: u64,
    pub n_running_trials: u64,
    pub n_pending_trials: u64,
    pub n_cancelled_trials: u64,
    pub n_retries: u64,
    pub evals: BTreeMap<String, AgentDatasetStats>,
    pub n_input_tokens: Option<u64>,
    pub n_cache_tokens: Option<u64>,
    pub n_output_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
}

/// `harbor.models.job.result.JobResult` (the job dir's `result.json`; Harbor writes it without
/// `trial_results`, which live in the trial dirs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct JobResult {
    #[serde(default = "one")]
    pub schema_version: u32,
    pub id: String,
    pub started_at: String,
    #[serde(default)]
    pub updated_at: Option<String>,
    #[serde(default)]
    pub finished_at: Option<String>,
    #[serde(default)]
    pub n_total_trials: u64,
    #[serde(default)]
    pub stats: JobStats,
}

/// The leaderboard's `metadata.yaml` (Terminal-Bench 2.0 submissions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SubmissionMetadata {
    pub agent_url: String,
    pub agent_display_name: String,
    pub agent_org_display_name: String,
    pub models: Vec<SubmissionModel>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SubmissionModel {
    pub model_name: String,
    pub model_provider: String,
    pub model_display_name: String,
    pub model_org_display_name: String,
}
