//! From command-line flags and an optional `job.yaml` to a validated [`JobSpec`]. Every
//! problem is found here, before any container starts, and reported as one line naming the
//! file (or flag) and the field.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::Agent;
use crate::task::TaskError;

/// A configuration problem: `<where>: <field>: <what is wrong>`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{source_name}:{field}: {message}")]
    Field {
        source_name: String,
        field: String,
        message: String,
    },
    #[error("{0}")]
    Task(#[from] TaskError),
}

pub(super) fn field(
    source_name: impl Into<String>,
    field: impl Into<String>,
    message: impl Into<String>,
) -> ConfigError {
    ConfigError::Field {
        source_name: source_name.into(),
        field: field.into(),
        message: message.into(),
    }
}

/// `arbiter run` flags that shape a job (they override the config file).
#[derive(Debug, Clone, Default)]
pub struct RunArgs {
    pub tasks: Vec<String>,
    pub config: Option<PathBuf>,
    pub agents: Vec<String>,
    pub attempts: Option<u32>,
    pub concurrency: Option<usize>,
    pub job_dir: Option<PathBuf>,
    pub pass_threshold: Option<f64>,
    /// Variants to run (by name, from the config); empty = all.
    pub variants: Vec<String>,
    /// `--model PROVIDER/NAME` for every preset agent (`agent::presets::model_flag`).
    pub model: Option<String>,
    /// `--network MODE`: every phase of every task, over the config's `network:`.
    pub network: Option<super::PhaseNetwork>,
    /// `--retry-infra`: run again the trials whose final record is an `infra_error`.
    pub retry_infra: bool,
    /// `--backend`, `--namespace`, `--context`, `--registry`: over the config's `backend:`.
    pub backend: crate::sandbox::choose::BackendFlags,
    /// `--otlp URL`: send each trial as a trace there, over the config's `otlp:`.
    pub otlp: Option<String>,
}

/// `job.yaml`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    #[serde(default)]
    pub name: Option<String>,
    /// Task directories or globs, relative to the config file.
    #[serde(default)]
    pub tasks: Vec<String>,
    #[serde(default)]
    pub agents: Vec<AgentEntry>,
    #[serde(default)]
    pub attempts: Option<u32>,
    #[serde(default)]
    pub concurrency: Option<usize>,
    #[serde(default)]
    pub pass_threshold: Option<f64>,
    #[serde(default)]
    pub job_dir: Option<PathBuf>,
    /// Bytes of agent stdout/stderr kept per stream, in MiB.
    #[serde(default)]
    pub log_cap_mb: Option<u64>,
    /// Bytes of the agent's changed files kept per trial for regrading (`agent/changes.tar`),
    /// in MiB; 0 keeps none (regrade issue 14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_content_cap_mb: Option<u64>,
    /// Named overrides applied on top of agents: the arms of an ablation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<Variant>,
    /// Multipliers applied to every task's timeouts.
    #[serde(default)]
    pub timeouts: Option<TimeoutMultipliers>,
    /// Retries of infrastructure failures.
    #[serde(default)]
    pub retries: Option<RetryPolicy>,
    /// Model providers agents reach through arbiter's gateway (SPEC §11); `api_key` is a
    /// `${NAME}` reference resolved when the job starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<crate::gateway::ModelConfig>,
    /// `[verifier] integrity` for every task of the job (SPEC §5), over each task's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<crate::task::IntegrityMode>,
    /// The network of every task's phases (SPEC §2), over what the tasks ask for: one mode
    /// (`none`, `public`, `host`) or `{agent: …, verifier: …}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<super::NetworkOverride>,
    /// Which backend runs the job (SPEC §14); default: the Docker engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<crate::sandbox::BackendConfig>,
    /// Send each trial, once its record is final, as an OpenTelemetry trace (SPEC §17).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<OtlpConfig>,
}

/// `otlp:` in job.yaml: where each trial's trace goes (docs/traces.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// An OTLP/HTTP endpoint: a collector's base URL (`http://localhost:4318`, to which
    /// `/v1/traces` is added) or its full traces URL. Headers (auth) come from
    /// `OTEL_EXPORTER_OTLP_HEADERS`, never from here.
    pub endpoint: String,
}

/// A named set of overrides applied on top of agents (an ablation arm).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    /// Env overrides (values may be `${NAME}` references).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Extra arguments appended to a command agent's `run`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Agents the variant applies to (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
    /// Goal continuation for this arm (SPEC §15), over the agent's own `continuation:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<crate::agent::Continuation>,
}

impl Variant {
    pub(crate) fn default_variant() -> Self {
        Variant {
            name: "default".to_string(),
            env: BTreeMap::new(),
            args: Vec::new(),
            agents: None,
            continuation: None,
        }
    }

    pub(super) fn applies_to(&self, agent: &str) -> bool {
        self.agents
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == agent))
    }
}

/// Multipliers on the timeouts tasks declare (e.g. `agent: 2` doubles every agent deadline).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutMultipliers {
    pub agent: f64,
    pub verifier: f64,
    pub build: f64,
    pub install: f64,
}

impl Default for TimeoutMultipliers {
    fn default() -> Self {
        TimeoutMultipliers {
            agent: 1.0,
            verifier: 1.0,
            build: 1.0,
            install: 1.0,
        }
    }
}

/// Which failures are retried, how often and how far apart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Retries per trial after the first run (infra-class results only).
    pub max: u32,
    /// Wait before the first retry; doubles each time.
    pub backoff_sec: f64,
    pub max_backoff_sec: f64,
    /// Also retry a trial whose agent claimed `infrastructure_failed`.
    pub on_claimed_infrastructure_failure: bool,
    /// When the job is continued (`arbiter resume`, or `run` on its job dir): run again every
    /// trial whose final record is an `infra_error` (`--retry-infra` for one resume).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rerun_infra_errors: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max: 2,
            backoff_sec: 1.0,
            max_backoff_sec: 30.0,
            on_claimed_infrastructure_failure: false,
            rerun_infra_errors: false,
        }
    }
}

impl RetryPolicy {
    /// Wait before retry number `n` (1-based).
    pub(crate) fn backoff(&self, n: u32) -> Duration {
        let secs = self.backoff_sec * 2f64.powi(n.saturating_sub(1).min(30) as i32);
        Duration::from_secs_f64(secs.min(self.max_backoff_sec).max(0.0))
    }
}

/// A built-in agent by name, or a full definition.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
// A config value read once per job: boxing the definition would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum AgentEntry {
    Name(String),
    Def(Agent),
}

impl<'de> Deserialize<'de> for AgentEntry {
    /// By hand rather than `untagged`, so a bad definition reports its own problem instead of
    /// "did not match any variant".
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_yaml::Value::deserialize(deserializer)?;
        match value {
            serde_yaml::Value::String(name) => Ok(AgentEntry::Name(name)),
            other => Agent::deserialize(other)
                .map(AgentEntry::Def)
                .map_err(serde::de::Error::custom),
        }
    }
}
