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

/// One task directory, loaded and validated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Task {
    /// `[task].name`, else the directory name. Matches `[a-zA-Z0-9._/-]+`,
    /// with no `..`, no leading `/` and no empty `/`-segment.
    pub name: String,
    /// The task directory, canonicalized.
    pub dir: PathBuf,
    /// Content of `instruction.md` (UTF-8, not blank).
    pub instruction: String,
    /// `sha256:<hex>` over every file and symlink of the task directory.
    pub checksum: String,
    pub agent: AgentSection,
    pub verifier: VerifierSection,
    /// The agent's environment. `environment.network` is the agent phase's
    /// network: `[agent] network_mode` when set, else `[environment]`.
    pub environment: EnvironmentSpec,
    /// `<dir>/tests`; holds `test.sh`.
    pub tests_dir: PathBuf,
    /// `<dir>/solution` when it exists; it then holds `solve.sh`.
    pub solution_dir: Option<PathBuf>,
    /// Harbor's `[solution] env`: env for the oracle's `solve.sh` only.
    pub solution_env: BTreeMap<String, String>,
    /// Absolute container paths collected after the agent phase.
    pub artifacts: Vec<String>,
    /// The arbiter `[completion]` extension (SPEC §6), when present.
    pub completion: Option<Completion>,
    /// A JSON object: `version`/`schema_version` when present, the `[metadata]`
    /// table under `metadata`, unknown and Harbor-only top-level keys verbatim,
    /// and Harbor keys arbiter does not use inside known tables under their
    /// table's name (e.g. `environment.gpus`).
    pub metadata: serde_json::Value,
    /// Non-fatal findings, each one line `<file>:<field>: <what>`.
    pub warnings: Vec<String>,
}

impl Task {
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
    /// Verifier phase network: `[verifier] network_mode`, default no-network
    /// whatever the agent's mode.
    pub network: NetworkMode,
    /// User the verifier runs as (Harbor `[verifier] user`).
    pub user: Option<String>,
    /// The verifier's own environment; `Some` exactly when `mode` is
    /// `Separate`. Its `network` equals `self.network`.
    pub environment: Option<EnvironmentSpec>,
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
            network: NetworkMode::NoNetwork,
            user: None,
            environment: None,
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
}

impl VerifierMode {
    pub const ALL: [VerifierMode; 3] = [Self::Snapshot, Self::Live, Self::Separate];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Snapshot => "snapshot",
            Self::Live => "live",
            Self::Separate => "separate",
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
}

impl NetworkMode {
    pub const ALL: [NetworkMode; 3] = [Self::NoNetwork, Self::Host, Self::Bridge];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoNetwork => "no-network",
            Self::Host => "host",
            Self::Bridge => "bridge",
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
    /// Harbor `[environment] env`: container env, `${NAME}` left unresolved.
    pub env: BTreeMap<String, String>,
}

impl EnvironmentSpec {
    /// An environment with every default and the given image source.
    pub fn with_source(source: ImageSource) -> Self {
        Self {
            source,
            build_timeout_sec: DEFAULT_BUILD_TIMEOUT_SEC,
            cpus: DEFAULT_CPUS,
            memory_mb: DEFAULT_MEMORY_MB,
            pids_limit: DEFAULT_PIDS_LIMIT,
            network: NetworkMode::NoNetwork,
            workdir: None,
            storage_mb: None,
            env: BTreeMap::new(),
        }
    }

    pub fn build_timeout(&self) -> Duration {
        secs(self.build_timeout_sec)
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
