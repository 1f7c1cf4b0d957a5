//! `environment/docker-compose.yaml` → typed services (SPEC §2.1), read key by key
//! like `task.toml`: every error names the file and the dotted key.
//!
//! Harbor's convention, followed here: the agent's container is the service
//! named `main`. Harbor lays the task's compose file over its own base file,
//! which defines `main` as built from `environment/` (or from
//! `[environment] docker_image`) with a keep-alive command; so a task's compose
//! file may omit `main` entirely or only add to it (env, `depends_on`, a
//! healthcheck). When `main` names no `build` and no `image` of its own, it
//! runs the task's usual image.
//!
//! Only `environment/docker-compose.yaml` is a compose file, as in Harbor's Docker runtime: a
//! `docker-compose.yml` or `compose.yaml` beside it is the task's data (a file the agent edits
//! or fixes), never read here.
//!
//! Interpolation is compose's (`compose/interpolate.rs`): the values arbiter uses are checked
//! here against Harbor's variables and arbiter's environment, so an unset `${VAR}` is one
//! warning naming the file and key (compose: an empty string and a warning) and
//! `${VAR:?message}` refuses the task. Sidecar values are kept as written and interpolated
//! when the trial starts them; the main service's `environment` becomes `[environment] env`
//! templates in which every value from arbiter's environment stays a `${NAME}` reference
//! ([`Compose::main_env`]), so no host value ever lands in a record. A build context is
//! resolved here (`${CONTEXT_DIR}` is `environment/`) so it can be checked to stay inside the
//! task directory. Keys arbiter does not use (ports, volumes, networks, …) are warnings; keys
//! that ask for host devices or privileges (`devices`, `group_add`, `ipc`, `cap_add`,
//! `privileged`: InfraBench's GPU passthrough) refuse the task, which would otherwise run
//! without them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_yaml::Value as Yaml;

use super::error::{FileCtx, TaskError, TaskErrorKind};

pub(crate) mod interpolate;
mod read;
mod values;
mod vars;

type Result<T> = std::result::Result<T, TaskError>;

/// Harbor's name for the agent's service.
pub const MAIN_SERVICE: &str = "main";

/// The compose file, under `environment/`: the one name Harbor's Docker runtime reads.
pub const COMPOSE_FILE: &str = "docker-compose.yaml";

/// Other names compose itself would read: under `environment/` they are the task's data
/// (Terminal-Bench tasks ship a `docker-compose.yml` for the agent to edit or fix).
pub(crate) const NOT_COMPOSE_FILES: [&str; 3] =
    ["docker-compose.yml", "compose.yaml", "compose.yml"];

/// Harbor's compose variables with the value they have in arbiter's task container (Harbor's
/// Docker runtime sets them for `docker compose`).
pub(crate) const HARBOR_FIXED_VARIABLES: [(&str, &str); 4] = [
    ("TEST_DIR", "/tests"),
    ("ENV_VERIFIER_LOGS_PATH", "/logs/verifier"),
    ("ENV_AGENT_LOGS_PATH", "/logs/agent"),
    ("ENV_ARTIFACTS_PATH", "/logs/artifacts"),
];

/// Harbor's compose variables arbiter sets per trial when it starts the sidecars (the main
/// image's name, the task's limits); `CONTEXT_DIR` is resolved at load.
pub(crate) const HARBOR_TRIAL_VARIABLES: [&str; 4] =
    ["MAIN_IMAGE_NAME", "PREBUILT_IMAGE_NAME", "CPUS", "MEMORY"];

/// Harbor's compose variables that name Harbor's own host paths and settings: arbiter has no
/// value for them (they are empty, with a warning saying so).
pub(crate) const HARBOR_HOST_VARIABLES: [&str; 4] = [
    "HOST_VERIFIER_LOGS_PATH",
    "HOST_AGENT_LOGS_PATH",
    "HOST_ARTIFACTS_PATH",
    "NETWORK_MODE",
];

/// Placeholders Harbor fills with the main image: a `main` service whose
/// `image` is one of these does not name an image of its own.
pub(super) const MAIN_IMAGE_PLACEHOLDERS: [&str; 2] =
    ["${MAIN_IMAGE_NAME}", "${PREBUILT_IMAGE_NAME}"];

pub(super) const TOP_KEYS: &[&str] = &["services", "version", "name", "networks", "volumes"];
pub(super) const SERVICE_KEYS: &[&str] = &[
    "build",
    "image",
    "environment",
    "command",
    "entrypoint",
    "healthcheck",
    "depends_on",
    "working_dir",
    "user",
];
pub(super) const BUILD_KEYS: &[&str] = &["context", "dockerfile", "args"];
pub(super) const HEALTHCHECK_KEYS: &[&str] = &[
    "test",
    "interval",
    "timeout",
    "retries",
    "start_period",
    "start_interval",
    "disable",
];

/// A parsed compose file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compose {
    /// The compose file, canonical.
    pub file: PathBuf,
    /// The agent's service: always [`MAIN_SERVICE`]; present in `services`
    /// (as an empty service when the file does not declare it).
    pub main: String,
    /// Every service by name, `main` included.
    pub services: BTreeMap<String, Service>,
    /// The main service's `environment` as `[environment] env` values (see
    /// [`Compose::main_env`]).
    #[serde(default)]
    pub main_env: BTreeMap<String, String>,
}

impl Compose {
    /// The main service.
    pub fn main_service(&self) -> Option<&Service> {
        self.services.get(&self.main)
    }

    /// The main service's `environment` as `[environment] env` entries: Harbor lays the
    /// compose file over its base, so these are the task container's env. Interpolated as
    /// compose does when the task was loaded, except that a value taken from arbiter's
    /// environment stays a `${NAME}` reference (resolved when the trial runs): an unset
    /// `${VAR}` is empty, `${VAR:-default}` its default, a bare `NAME` passes `${NAME}`
    /// through when arbiter's environment has it and is left out when not.
    pub fn main_env(&self) -> Vec<(String, String)> {
        self.main_env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Every service but `main`, by name.
    pub fn sidecars(&self) -> impl Iterator<Item = (&String, &Service)> {
        self.services.iter().filter(|(name, _)| **name != self.main)
    }

    /// Service names in start order: every service after the ones it depends
    /// on, otherwise by name (the file is checked to have no cycle).
    pub fn start_order(&self) -> Vec<&str> {
        let mut order: Vec<&str> = Vec::with_capacity(self.services.len());
        let mut placed: BTreeSet<&str> = BTreeSet::new();
        while order.len() < self.services.len() {
            let before = order.len();
            for (name, service) in &self.services {
                if placed.contains(name.as_str()) {
                    continue;
                }
                if service
                    .depends_on
                    .iter()
                    .all(|d| placed.contains(d.service.as_str()))
                {
                    placed.insert(name);
                    order.push(name);
                }
            }
            if order.len() == before {
                break; // unreachable for a checked file; never loop forever
            }
        }
        order
    }
}

/// One service.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Service {
    pub build: Option<Build>,
    /// As written (may hold `${NAME}`); for `main`, Harbor's image placeholders
    /// are dropped (`None`: the task's own image).
    pub image: Option<String>,
    /// `environment`, list (`K=V`) or map form. `None`: `K` alone, passed
    /// through from the host environment when set there (compose semantics).
    pub environment: BTreeMap<String, Option<String>>,
    /// `command`; a string is split into words like compose does (no shell).
    pub command: Option<Vec<String>>,
    /// `entrypoint`, same forms as `command`.
    pub entrypoint: Option<Vec<String>>,
    pub healthcheck: Option<ServiceHealthcheck>,
    /// In the order written.
    pub depends_on: Vec<Dependency>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
}

/// `build`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    /// Canonical directory inside the task.
    pub context: PathBuf,
    /// Canonical Dockerfile inside the task (`dockerfile` relative to the
    /// context; default `Dockerfile`).
    pub dockerfile: PathBuf,
    /// `args`, as written.
    pub args: BTreeMap<String, String>,
}

/// `healthcheck`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceHealthcheck {
    pub test: HealthTest,
    /// Seconds; `None` leaves the engine default.
    pub interval_sec: Option<f64>,
    pub timeout_sec: Option<f64>,
    pub start_period_sec: Option<f64>,
    pub start_interval_sec: Option<f64>,
    pub retries: Option<u32>,
}

/// `healthcheck.test`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthTest {
    /// `["CMD", prog, args...]`: exec form.
    Exec(Vec<String>),
    /// `["CMD-SHELL", cmd]` or a plain string: run by the image's shell.
    Shell(String),
    /// `["NONE"]` or `disable: true`: the image's own healthcheck is turned off.
    Disabled,
}

/// One `depends_on` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub service: String,
    pub condition: DependsCondition,
}

/// `depends_on.<service>.condition`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DependsCondition {
    /// `service_started` (also the list form).
    Started,
    /// `service_healthy`: its healthcheck must pass first.
    Healthy,
    /// `service_completed_successfully`: it must exit 0 first.
    CompletedSuccessfully,
}

impl DependsCondition {
    pub const ALL: [DependsCondition; 3] =
        [Self::Started, Self::Healthy, Self::CompletedSuccessfully];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "service_started",
            Self::Healthy => "service_healthy",
            Self::CompletedSuccessfully => "service_completed_successfully",
        }
    }
}

/// The compose file under `environment_dir`, when there is one (file name only). Another
/// compose name there is the task's data: traced, never read.
pub(crate) fn find(environment_dir: &Path) -> Option<&'static str> {
    for data in NOT_COMPOSE_FILES {
        if environment_dir.join(data).is_file() {
            tracing::debug!(
                file = %environment_dir.join(data).display(),
                "not a compose file (Harbor reads environment/{COMPOSE_FILE} only): task data"
            );
        }
    }
    environment_dir
        .join(COMPOSE_FILE)
        .is_file()
        .then_some(COMPOSE_FILE)
}

/// Parses the compose file `text`. `ctx` names the file as the user spelled
/// it; `environment_dir` (canonical) is where relative paths start and
/// `root` (canonical) the task directory every build path must stay in.
pub(crate) fn parse(
    ctx: &FileCtx,
    text: &str,
    file: PathBuf,
    environment_dir: &Path,
    root: &Path,
) -> Result<(Compose, Vec<String>)> {
    let mut doc: Yaml = serde_yaml::from_str(text).map_err(|e| {
        let message = e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        TaskError::new(
            TaskErrorKind::Syntax,
            ctx.file(),
            None,
            format!("invalid YAML: {message}"),
        )
    })?;
    doc.apply_merge().map_err(|e| {
        TaskError::new(
            TaskErrorKind::Syntax,
            ctx.file(),
            None,
            format!("invalid YAML merge key: {e}"),
        )
    })?;
    let mut reader = read::Reader {
        ctx,
        environment_dir,
        root,
        warnings: Vec::new(),
    };
    let compose = reader.document(&doc, file)?;
    Ok((compose, reader.warnings))
}
