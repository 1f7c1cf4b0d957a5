//! What a loaded task is: plain data, validated once by `load()`.
//!
//! Every value here has already been checked (durations finite and positive,
//! container paths absolute, limits in range), so consumers can use it as is.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub const DEFAULT_AGENT_TIMEOUT_SEC: f64 = 1800.0;
pub const DEFAULT_VERIFIER_TIMEOUT_SEC: f64 = 600.0;
pub const DEFAULT_BUILD_TIMEOUT_SEC: f64 = 600.0;
pub const DEFAULT_CPUS: f64 = 1.0;
pub const DEFAULT_MEMORY_MB: u64 = 2048;
pub const DEFAULT_PIDS_LIMIT: i64 = 1024;
pub const DEFAULT_VALIDATION_TIMEOUT_SEC: f64 = 120.0;
/// Docker refuses a memory limit under 6 MB.
pub const MIN_MEMORY_MB: u64 = 6;
/// Upper bound on every duration in a task (about 115 days); keeps
/// `Duration::from_secs_f64` and deadline arithmetic far from overflow.
pub const MAX_DURATION_SEC: f64 = 10_000_000.0;

/// Harbor's `[environment.healthcheck]` / `[steps.healthcheck]` defaults.
pub const DEFAULT_HEALTHCHECK_INTERVAL_SEC: f64 = 5.0;
pub const DEFAULT_HEALTHCHECK_TIMEOUT_SEC: f64 = 30.0;
pub const DEFAULT_HEALTHCHECK_START_INTERVAL_SEC: f64 = 5.0;
pub const DEFAULT_HEALTHCHECK_RETRIES: u32 = 3;

/// One task directory, loaded and validated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Task {
    /// `[task].name`, else the directory name. Matches `[a-zA-Z0-9._/-]+`,
    /// with no `..`, no leading `/` and no empty `/`-segment.
    pub name: String,
    /// The task directory, canonicalized.
    pub dir: PathBuf,
    /// Content of `instruction.md` (UTF-8, not blank). A multi-step task may
    /// have none (then this is empty): each step has its own, and Harbor never
    /// shows the task-level one to the agent.
    pub instruction: String,
    /// `sha256:<hex>` over every file and symlink of the task directory.
    pub checksum: String,
    pub agent: AgentSection,
    pub verifier: VerifierSection,
    /// The agent's environment. `environment.network` is the agent phase's
    /// network: `[agent] network_mode` when set, else `[environment]`.
    pub environment: EnvironmentSpec,
    /// `<dir>/tests`; holds `test.sh` (for a multi-step task: helpers shared
    /// by every step, and `test.sh` for the steps without their own).
    pub tests_dir: PathBuf,
    /// `<dir>/solution` when it exists; it then holds `solve.sh`.
    pub solution_dir: Option<PathBuf>,
    /// Harbor's `[solution] env`: env for the oracle's `solve.sh` only.
    pub solution_env: BTreeMap<String, String>,
    /// Absolute container paths collected after the agent phase.
    pub artifacts: Vec<String>,
    /// The arbiter `[completion]` extension (SPEC §6), when present.
    pub completion: Option<Completion>,
    /// Harbor `[[steps]]` in run order; empty for a single-step task.
    pub steps: Vec<Step>,
    /// `multi_step_reward_strategy`: how step rewards make the task's reward.
    /// Only meaningful when `steps` is not empty.
    pub multi_step_reward: MultiStepReward,
    /// A JSON object: `version`/`schema_version` when present, the `[metadata]`
    /// table under `metadata`, unknown and Harbor-only top-level keys verbatim,
    /// and Harbor keys arbiter does not use inside known tables under their
    /// table's name (e.g. `environment.gpus`).
    pub metadata: serde_json::Value,
    /// Non-fatal findings, each one line `<file>:<field>: <what>`.
    pub warnings: Vec<String>,
}

impl Task {
    /// The names that resolve to the task's own loopback in its containers: a compose task's
    /// service names (each is 127.0.0.1 there, on both backends). An egress proxy, serving from
    /// outside the container, could not reach their servers: clients must bypass it for them.
    pub(crate) fn loopback_hosts(&self) -> Vec<String> {
        self.environment
            .compose
            .as_ref()
            .map(|c| c.services.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Whether the task declares Harbor `[[steps]]`.
    pub fn is_multi_step(&self) -> bool {
        !self.steps.is_empty()
    }

    /// `[metadata] difficulty`, when it is a string.
    pub fn difficulty(&self) -> Option<&str> {
        self.metadata_str("difficulty")
    }

    /// `[metadata] category`, when it is a string.
    pub fn category(&self) -> Option<&str> {
        self.metadata_str("category")
    }

    /// `[metadata] tags` that are strings (others are skipped).
    pub fn tags(&self) -> Vec<&str> {
        self.metadata
            .get("metadata")
            .and_then(|m| m.get("tags"))
            .and_then(|t| t.as_array())
            .map(|tags| tags.iter().filter_map(|t| t.as_str()).collect())
            .unwrap_or_default()
    }

    fn metadata_str(&self, key: &str) -> Option<&str> {
        self.metadata.get("metadata")?.get(key)?.as_str()
    }

    /// The env (unresolved) of the verifier's `test.sh`: `[environment] env`, with
    /// `[verifier] env` over it. Resolve with `agent::resolve_env` at run time.
    pub fn verifier_exec_env(&self) -> BTreeMap<String, String> {
        let mut env = self.environment.env.clone();
        env.extend(self.verifier.env.clone());
        env
    }
}

/// `[agent]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentSection {
    /// Wall-clock limit of the agent phase, seconds.
    pub timeout_sec: f64,
    /// User the agent runs as (a Harbor integer UID becomes its decimal text).
    pub user: Option<String>,
}

impl AgentSection {
    pub fn timeout(&self) -> Duration {
        secs(self.timeout_sec)
    }
}

impl Default for AgentSection {
    fn default() -> Self {
        Self {
            timeout_sec: DEFAULT_AGENT_TIMEOUT_SEC,
            user: None,
        }
    }
}

/// `[verifier]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifierSection {
    pub timeout_sec: f64,
    /// TOML key `environment_mode`.
    pub mode: VerifierMode,
    /// Env for the verifier only; `${NAME}` references are left unresolved.
    pub env: BTreeMap<String, String>,
    /// Verifier phase network: `[verifier] network_mode`, else the task's baseline
    /// (`[environment]`'s, `public` when it sets none), as Harbor resolves it.
    pub network: NetworkMode,
    /// Hosts the verifier may reach; non-empty only when `network` is `Allowlist`.
    pub allowed_hosts: Vec<String>,
    /// User the verifier runs as (Harbor `[verifier] user`).
    pub user: Option<String>,
    /// The verifier's own environment; `Some` exactly when `mode` is
    /// `Separate`. Its `network` equals `self.network`.
    pub environment: Option<EnvironmentSpec>,
    /// `[verifier] integrity`: what a trial with integrity findings is verified on.
    #[serde(default)]
    pub integrity: IntegrityMode,
    /// `[verifier] protect`: extra paths the agent must not alter for the verifier.
    #[serde(default)]
    pub protect: Vec<String>,
}

/// `[verifier] integrity` (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IntegrityMode {
    /// Findings are recorded; the verifier runs on the agent's filesystem (`suspect`).
    #[default]
    Audit,
    /// A trial with findings is verified in `clean` mode, so they cannot act (`restored`).
    Enforce,
}

impl VerifierSection {
    pub fn timeout(&self) -> Duration {
        secs(self.timeout_sec)
    }
}

impl Default for VerifierSection {
    fn default() -> Self {
        Self {
            timeout_sec: DEFAULT_VERIFIER_TIMEOUT_SEC,
            mode: VerifierMode::default(),
            env: BTreeMap::new(),
            // Harbor's default; a task's own baseline replaces it when loaded.
            network: NetworkMode::Bridge,
            allowed_hosts: Vec::new(),
            user: None,
            environment: None,
            integrity: IntegrityMode::Audit,
            protect: Vec::new(),
        }
    }
}

/// How the verifier is isolated from the agent (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerifierMode {
    /// Fresh container from a commit of the stopped agent container.
    /// Harbor's `shared` loads as this.
    #[default]
    Snapshot,
    /// Exec inside the still-running agent container.
    Live,
    /// Fresh container from the verifier's own image.
    Separate,
    /// Fresh container of the original task image with the agent's changes applied, except
    /// the integrity findings.
    Clean,
}

impl VerifierMode {
    pub const ALL: [VerifierMode; 4] = [Self::Snapshot, Self::Live, Self::Separate, Self::Clean];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::Live => "live",
            Self::Separate => "separate",
            Self::Clean => "clean",
        }
    }
}

/// Container network of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// `no-network`; also legacy `allow_internet = false`.
    #[default]
    NoNetwork,
    Host,
    /// `bridge`; also legacy `allow_internet = true` and Harbor's `public`.
    Bridge,
    /// Harbor's `allowlist`: only the phase's `allowed_hosts` are reachable
    /// (SPEC §11: an egress proxy on the container's loopback).
    Allowlist,
}

impl NetworkMode {
    pub const ALL: [NetworkMode; 4] = [Self::NoNetwork, Self::Host, Self::Bridge, Self::Allowlist];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoNetwork => "no-network",
            Self::Host => "host",
            Self::Bridge => "bridge",
            Self::Allowlist => "allowlist",
        }
    }

    /// Whether the phase can reach beyond the container.
    pub fn has_network(self) -> bool {
        self != Self::NoNetwork
    }
}

/// `[environment]` (and, for separate verifiers, `[verifier.environment]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentSpec {
    pub source: ImageSource,
    pub build_timeout_sec: f64,
    pub cpus: f64,
    pub memory_mb: u64,
    pub pids_limit: i64,
    pub network: NetworkMode,
    /// Absolute container path, when set.
    pub workdir: Option<String>,
    /// Disk limit where the engine supports it; recorded otherwise.
    pub storage_mb: Option<u64>,
    /// Paths the agent may create or change in its container's filesystem (`max_files`);
    /// `None`: arbiter's default bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_files: Option<u64>,
    /// Harbor `[environment] env`: env of the task container in every phase;
    /// `${NAME}` / `${NAME:-default}` left unresolved (resolve with
    /// `agent::resolve_env` at run time; never write the result to a record).
    pub env: BTreeMap<String, String>,
    /// Hosts the agent phase may reach; non-empty only when `network` is `Allowlist`.
    /// Lowercase, without a trailing dot: host names, `*.suffix` wildcards, IP
    /// addresses or CIDR ranges.
    pub allowed_hosts: Vec<String>,
    /// GPUs requested from the engine (0: none).
    pub gpus: u32,
    /// Acceptable GPU types (`["H100", "A100"]`); empty: any.
    pub gpu_types: Vec<String>,
    /// Harbor `[environment.healthcheck]`: run after the environment starts,
    /// before the agent.
    pub healthcheck: Option<Healthcheck>,
    /// `environment/docker-compose.yaml` (or `.yml`, `compose.yaml`): the main
    /// service and its sidecars (SPEC §2.1). `None` for a single-container task.
    pub compose: Option<super::compose::Compose>,
}

/// Harbor's `HealthcheckConfig`: a shell command that must succeed before the
/// agent (or a step's agent) starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Healthcheck {
    /// Run with `sh -c`; exit 0 means healthy.
    pub command: String,
    pub interval_sec: f64,
    /// Limit of one attempt.
    pub timeout_sec: f64,
    /// Grace period after start (or after a step's setup) during which
    /// failures do not count; may be 0.
    pub start_period_sec: f64,
    pub start_interval_sec: f64,
    /// Consecutive failures before the check has failed.
    pub retries: u32,
}

/// One Harbor `[[steps]]` entry, resolved against the task: every fallback
/// Harbor applies (step → task `[agent]`, `[verifier]`) is already applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// `name`: a portable directory name under `steps/`, unique in the task.
    pub name: String,
    /// `<task>/steps/<name>`, canonical.
    pub dir: PathBuf,
    /// Content of `steps/<name>/instruction.md` (UTF-8, not blank).
    pub instruction: String,
    /// `[steps.agent]` over the task's `[agent]` (timeout and user).
    pub agent: AgentSection,
    /// The step's agent-phase network: `[steps.agent] network_mode`, else the task's.
    pub network: NetworkMode,
    /// With `network == Allowlist`: the hosts the step's agent may reach.
    pub allowed_hosts: Vec<String>,
    /// `[steps.verifier]`: `timeout_sec` is the step's own (Harbor default
    /// 600 s); `env` is the task's `[verifier] env` overlaid with the step's;
    /// `user`, mode, network and environment fall back to the task's.
    pub verifier: VerifierSection,
    /// `steps/<name>/tests` when it exists: uploaded to `/tests` over the
    /// task's `tests/`, same-named files replaced.
    pub tests_dir: Option<PathBuf>,
    /// The verifier entry point: `steps/<name>/tests/test.sh`, else the task's
    /// `tests/test.sh`.
    pub test_script: PathBuf,
    /// `steps/<name>/solution` when it exists (it then holds `solve.sh`); the
    /// oracle falls back to the task's `solution/` otherwise.
    pub solution_dir: Option<PathBuf>,
    /// `steps/<name>/workdir` when it exists: copied into the working
    /// directory before the step.
    pub workdir_dir: Option<PathBuf>,
    /// `steps/<name>/workdir/setup.sh` when it exists: run before the step's agent.
    pub setup_script: Option<PathBuf>,
    /// `min_reward`: remaining steps are skipped when this step misses it.
    pub min_reward: Option<MinReward>,
    /// `[steps.healthcheck]`, run after the step's setup (in addition to the
    /// environment's).
    pub healthcheck: Option<Healthcheck>,
    /// Absolute container paths collected after this step's verification.
    pub artifacts: Vec<String>,
}

/// A step's `min_reward` gate (Harbor): a missing reward counts as -inf.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MinReward {
    /// A number: gates on the `reward` key.
    Reward(f64),
    /// A table: every key must be present and at least its threshold.
    PerKey(BTreeMap<String, f64>),
}

/// `multi_step_reward_strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MultiStepReward {
    /// Per-key mean over the steps that have a verifier result (a key missing
    /// from a step counts as 0). Harbor's default.
    #[default]
    Mean,
    /// The last step's verifier result as is.
    Final,
}

impl MultiStepReward {
    pub const ALL: [MultiStepReward; 2] = [Self::Mean, Self::Final];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mean => "mean",
            Self::Final => "final",
        }
    }
}

/// Where the image comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageSource {
    /// Build `dockerfile` with `context` (canonical paths inside the task).
    Build {
        context: PathBuf,
        dockerfile: PathBuf,
    },
    /// `docker_image`: use this image as is.
    Image(String),
}

/// `[completion]` (SPEC §6).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Completion {
    pub mode: CompletionMode,
    pub deliverables: Vec<Deliverable>,
    pub validation: Vec<ValidationCommand>,
}

/// Passed to AWorld as `AWORLD_COMPLETION_MODE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CompletionMode {
    Off,
    #[default]
    Observe,
    Enforce,
}

impl CompletionMode {
    pub const ALL: [CompletionMode; 3] = [Self::Off, Self::Observe, Self::Enforce];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Observe => "observe",
            Self::Enforce => "enforce",
        }
    }
}

/// A file the agent must produce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deliverable {
    /// Absolute container path.
    pub path: String,
    pub goal: Option<String>,
    /// Default true.
    pub non_empty: bool,
    /// Expected content hash: 64 lowercase hex digits (a `sha256:` prefix in
    /// the TOML is accepted and dropped).
    pub sha256: Option<String>,
}

/// A command arbiter runs (and hands to AWorld) after the agent phase.
/// Exactly one of `argv` and `shell` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValidationCommand {
    pub id: String,
    /// Run without a shell; never empty.
    pub argv: Option<Vec<String>>,
    /// Run under `bash -o pipefail -c`.
    pub shell: Option<String>,
    /// Absolute container path, when set.
    pub cwd: Option<String>,
    pub timeout_sec: f64,
}

impl ValidationCommand {
    /// The argv to exec: `argv` as is, or `bash -o pipefail -c <shell>`.
    pub fn exec_argv(&self) -> Vec<String> {
        match (&self.argv, &self.shell) {
            (Some(argv), _) => argv.clone(),
            (None, Some(shell)) => ["bash", "-o", "pipefail", "-c", shell]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            (None, None) => Vec::new(),
        }
    }

    pub fn timeout(&self) -> Duration {
        secs(self.timeout_sec)
    }
}

/// Seconds to a `Duration` without panicking on values a caller built by hand.
fn secs(value: f64) -> Duration {
    Duration::try_from_secs_f64(value).unwrap_or(if value > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    })
}
