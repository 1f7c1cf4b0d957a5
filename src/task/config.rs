//! `task.toml` → validated configuration, without touching the file system.
//!
//! The document is parsed into a `toml::Table` and read key by key (no serde
//! derive, see `toml_read.rs`) so every error can name its dotted key, the TOML
//! type found and the allowed values.
//!
//! Unknown keys. Harbor ignores keys its models do not declare, and real tasks
//! carry such keys (InfraBench: `environment.nodes`, `agent.network`,
//! `environment.base_image`). So inside Harbor's tables (`[task]`, `[agent]`,
//! `[verifier]`, `[environment]`, `[solution]`, `[[steps]]`, artifact tables)
//! an unknown key is kept in the metadata under its table's path with a
//! warning naming it — unless it is a near miss of a known key (`timeout_secs`,
//! `cpu`), which stays an error with a did-you-mean: a typo silently ignored
//! would run the task with a default its author did not mean. Keys Harbor
//! declares that arbiter does not use (`HARBOR_*` lists) are kept without a
//! warning (or with one when the value asks for something arbiter cannot do).
//! The arbiter-only `[completion]` tables stay strict: they are ours, so any
//! unknown key there is a mistake. Unknown top-level keys and tables are kept
//! as metadata with a warning.
//!
//! About 600 lines: the top-level reader and the `[task]`, `[agent]` and `[verifier]` tables
//! with their defaults; `[environment]`, `[[steps]]`, `[completion]` and network values have
//! their own files under `config/`, and the typed getters and did-you-mean helpers are in
//! `toml_read.rs`.

use std::collections::BTreeMap;

use serde_json::{Map as JsonMap, Value as Json};
use toml::Value;

mod completion;
mod environment;
mod network;
pub(crate) use network::check_host;
mod steps;

pub(crate) use steps::StepConfig;

use super::error::{FileCtx, TaskError, TaskErrorKind, quote};
use super::model::{
    AgentSection, Completion, DEFAULT_AGENT_TIMEOUT_SEC, DEFAULT_BUILD_TIMEOUT_SEC, DEFAULT_CPUS,
    DEFAULT_MEMORY_MB, DEFAULT_PIDS_LIMIT, DEFAULT_VERIFIER_TIMEOUT_SEC, EnvironmentSpec,
    Healthcheck, ImageSource, IntegrityMode, MultiStepReward, NetworkMode, VerifierMode,
    VerifierSection,
};
use super::toml_read::{
    Table, container_path, dotted, expect_table, insert_path, join, string_list, suggest,
    syntax_error, to_json, unknown_value,
};

type Result<T> = std::result::Result<T, TaskError>;

/// Top-level tables and keys arbiter reads.
const TOP_LEVEL: &[&str] = &[
    "task",
    "agent",
    "verifier",
    "environment",
    "completion",
    "metadata",
    "artifacts",
    "version",
    "schema_version",
    "solution",
    "steps",
    "multi_step_reward_strategy",
];
/// Top-level keys of Harbor's `TaskConfig` that arbiter does not use: kept
/// verbatim in the metadata, no warning (`multi_step_reward_mode` is the
/// pre-1.3 spelling Harbor itself drops).
const HARBOR_TOP_LEVEL: &[&str] = &["source", "multi_step_reward_mode"];

const TASK_KEYS: &[&str] = &["name"];
const HARBOR_TASK_KEYS: &[&str] = &["version", "description", "authors", "keywords"];

const AGENT_KEYS: &[&str] = &["timeout_sec", "user", "network_mode", "allowed_hosts"];

const VERIFIER_KEYS: &[&str] = &[
    "timeout_sec",
    "environment_mode",
    "env",
    "network_mode",
    "user",
    "environment",
    "allowed_hosts",
    "integrity",
    "protect",
];
const HARBOR_VERIFIER_KEYS: &[&str] = &["continuous", "collect"];

const ENVIRONMENT_KEYS: &[&str] = &[
    "docker_image",
    "build_timeout_sec",
    "cpus",
    "memory_mb",
    "pids_limit",
    "network_mode",
    "allow_internet",
    "workdir",
    "storage_mb",
    "max_files",
    "env",
    "memory",
    "storage",
    "os",
    "allowed_hosts",
    "gpus",
    "gpu_types",
    "healthcheck",
];
const HARBOR_ENVIRONMENT_KEYS: &[&str] = &["tpu", "mcp_servers", "skills_dir"];

const HEALTHCHECK_KEYS: &[&str] = &[
    "command",
    "interval_sec",
    "timeout_sec",
    "start_period_sec",
    "start_interval_sec",
    "retries",
];

const SOLUTION_KEYS: &[&str] = &["env"];
const COMPLETION_KEYS: &[&str] = &["mode", "deliverables", "validation"];
const DELIVERABLE_KEYS: &[&str] = &["path", "goal", "non_empty", "sha256"];
const VALIDATION_KEYS: &[&str] = &["id", "argv", "shell", "cwd", "timeout_sec"];
const ARTIFACT_KEYS: &[&str] = &["source", "destination", "exclude", "service"];

const MAX_CPUS: f64 = 1024.0;
const MAX_GPUS: i64 = 1024;

/// A phase's network: the mode and, for `Allowlist`, its hosts.
pub(crate) type Policy = (NetworkMode, Vec<String>);

/// How [`Parser::table`] treats a key it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unknown {
    /// Harbor's tables: a warning, kept as metadata (a near miss is an error).
    Keep,
    /// arbiter's own tables: always an error.
    Refuse,
}

/// Everything `task.toml` says, validated; file-system facts come later.
#[derive(Debug)]
pub(crate) struct TaskConfig {
    pub name: Option<String>,
    pub agent: AgentSection,
    /// `[agent] network_mode` / `allowed_hosts`, overriding the environment's
    /// for the agent phase.
    pub agent_network: Option<Policy>,
    /// `environment` is still `None`; the loader resolves it.
    pub verifier: VerifierSection,
    /// `[verifier.environment]`, when present.
    pub verifier_environment: Option<EnvConfig>,
    pub environment: EnvConfig,
    pub solution_env: BTreeMap<String, String>,
    pub artifacts: Vec<String>,
    pub completion: Option<Completion>,
    /// `[[steps]]`, in order; files are checked by the loader.
    pub steps: Vec<StepConfig>,
    pub multi_step_reward: MultiStepReward,
    pub metadata: JsonMap<String, Json>,
    pub warnings: Vec<String>,
}

/// An `[environment]`-shaped table before its image source is resolved.
#[derive(Debug, Clone)]
pub(crate) struct EnvConfig {
    pub docker_image: Option<String>,
    pub build_timeout_sec: f64,
    pub cpus: f64,
    pub memory_mb: u64,
    pub pids_limit: i64,
    /// From `network_mode` or legacy `allow_internet`; `None` when neither.
    pub network: Option<NetworkMode>,
    pub allowed_hosts: Vec<String>,
    pub workdir: Option<String>,
    pub storage_mb: Option<u64>,
    pub max_files: Option<u64>,
    pub env: BTreeMap<String, String>,
    pub gpus: u32,
    pub gpu_types: Vec<String>,
    pub healthcheck: Option<Healthcheck>,
}

impl Default for EnvConfig {
    fn default() -> Self {
        Self {
            docker_image: None,
            build_timeout_sec: DEFAULT_BUILD_TIMEOUT_SEC,
            cpus: DEFAULT_CPUS,
            memory_mb: DEFAULT_MEMORY_MB,
            pids_limit: DEFAULT_PIDS_LIMIT,
            network: None,
            allowed_hosts: Vec::new(),
            workdir: None,
            storage_mb: None,
            max_files: None,
            env: BTreeMap::new(),
            gpus: 0,
            gpu_types: Vec::new(),
            healthcheck: None,
        }
    }
}

impl EnvConfig {
    /// Harbor's baseline network of the task (`EnvironmentConfig.resolve_baseline`): its
    /// `network_mode` (or legacy `allow_internet`), else `public` — what every phase gets that
    /// sets no network of its own.
    pub(crate) fn baseline(&self) -> Policy {
        let network = self.network.unwrap_or(NetworkMode::Bridge);
        (
            network,
            only_for_allowlist(network, self.allowed_hosts.clone()),
        )
    }

    /// The spec with its image source and the phase's network (`allowed_hosts`
    /// go with `network`: kept only for `Allowlist`).
    pub(crate) fn into_spec(
        self,
        source: ImageSource,
        network: NetworkMode,
        allowed_hosts: Vec<String>,
    ) -> EnvironmentSpec {
        EnvironmentSpec {
            source,
            build_timeout_sec: self.build_timeout_sec,
            cpus: self.cpus,
            memory_mb: self.memory_mb,
            pids_limit: self.pids_limit,
            network,
            workdir: self.workdir,
            storage_mb: self.storage_mb,
            max_files: self.max_files,
            env: self.env,
            allowed_hosts: if network == NetworkMode::Allowlist {
                allowed_hosts
            } else {
                Vec::new()
            },
            gpus: self.gpus,
            gpu_types: self.gpu_types,
            healthcheck: self.healthcheck,
            compose: None,
        }
    }
}

/// A `[verifier]`-shaped table as written, before Harbor's fallbacks (task
/// defaults for `[verifier]`, the task's `[verifier]` for `[steps.verifier]`).
#[derive(Debug, Clone, Default)]
pub(crate) struct VerifierConfig {
    pub timeout_sec: Option<f64>,
    /// `environment_mode`, or `Separate` implied by an `environment` table.
    pub mode: Option<VerifierMode>,
    pub env: BTreeMap<String, String>,
    /// `network_mode` / `allowed_hosts`, when `network_mode` or hosts are given.
    pub network: Option<Policy>,
    pub user: Option<String>,
    pub environment: Option<EnvConfig>,
    pub integrity: Option<IntegrityMode>,
    pub protect: Vec<String>,
}

/// Parses and validates the text of a `task.toml`.
pub(crate) fn parse(ctx: &FileCtx, text: &str) -> Result<TaskConfig> {
    let root: toml::Table = text.parse().map_err(|e| syntax_error(ctx, text, &e))?;
    Parser {
        ctx,
        warnings: Vec::new(),
        metadata: JsonMap::new(),
    }
    .parse(&root)
}

struct Parser<'a> {
    ctx: &'a FileCtx,
    warnings: Vec<String>,
    metadata: JsonMap<String, Json>,
}

impl Parser<'_> {
    fn parse(mut self, root: &toml::Table) -> Result<TaskConfig> {
        let ctx = self.ctx;
        for (key, value) in root {
            if TOP_LEVEL.contains(&key.as_str()) {
                continue;
            }
            self.metadata.insert(key.clone(), to_json(value));
            if HARBOR_TOP_LEVEL.contains(&key.as_str()) {
                continue;
            }
            let what = if value.is_table() {
                format!("unknown table [{key}], kept as metadata")
            } else {
                "unknown key, kept as metadata".to_string()
            };
            let hint = suggest(key, TOP_LEVEL)
                .map(|s| format!(" (did you mean {s}?)"))
                .unwrap_or_default();
            self.warn(&dotted(&[key]), format!("{what}{hint}"));
        }
        for key in ["version", "schema_version"] {
            if let Some(v) = root.get(key) {
                self.metadata.insert(key.to_string(), to_json(v));
            }
        }
        if let Some(v) = root.get("metadata") {
            let table = expect_table(ctx, "metadata", v)?;
            self.metadata.insert(
                "metadata".to_string(),
                to_json(&Value::Table(table.clone())),
            );
        }

        let name = match root.get("task") {
            Some(v) => self.task_table(v)?,
            None => None,
        };
        let (agent, agent_network) = match root.get("agent") {
            Some(v) => {
                let (timeout, user, network) = self.agent_table("agent", v)?;
                let agent = AgentSection {
                    timeout_sec: timeout.unwrap_or(DEFAULT_AGENT_TIMEOUT_SEC),
                    user,
                };
                (agent, network)
            }
            None => (AgentSection::default(), None),
        };
        let environment = match root.get("environment") {
            Some(v) => self.environment_table("environment", v)?,
            None => EnvConfig::default(),
        };
        let baseline = environment.baseline();
        let (verifier, verifier_environment) = match root.get("verifier") {
            Some(v) => resolve_task_verifier(self.verifier_table("verifier", v)?, baseline),
            None => resolve_task_verifier(VerifierConfig::default(), baseline),
        };
        let solution_env = match root.get("solution") {
            Some(v) => {
                let t = self.table("solution", v, SOLUTION_KEYS, &[], Unknown::Keep)?;
                t.string_map("env")?.unwrap_or_default()
            }
            None => BTreeMap::new(),
        };
        let artifacts = match root.get("artifacts") {
            Some(v) => self.artifacts("artifacts", v)?,
            None => Vec::new(),
        };
        let completion = match root.get("completion") {
            Some(v) => Some(self.completion_table(v)?),
            None => None,
        };
        let steps = match root.get("steps") {
            Some(v) => self.steps(v)?,
            None => Vec::new(),
        };
        let multi_step_reward = match root.get("multi_step_reward_strategy") {
            Some(Value::String(s)) => MultiStepReward::ALL
                .into_iter()
                .find(|m| m.as_str() == s)
                .ok_or_else(|| {
                    unknown_value(
                        ctx,
                        "multi_step_reward_strategy",
                        s,
                        &MultiStepReward::ALL.map(|m| m.as_str()),
                    )
                })?,
            Some(other) => {
                return Err(super::toml_read::type_error(
                    ctx,
                    "multi_step_reward_strategy",
                    "a string",
                    other,
                ));
            }
            None => MultiStepReward::default(),
        };

        Ok(TaskConfig {
            name,
            agent,
            agent_network,
            verifier,
            verifier_environment,
            environment,
            solution_env,
            artifacts,
            completion,
            steps,
            multi_step_reward,
            metadata: self.metadata,
            warnings: self.warnings,
        })
    }

    fn warn(&mut self, field: &str, message: impl std::fmt::Display) {
        self.warnings.push(self.ctx.warning(field, message));
    }

    /// Opens a known table: checks its type and its keys, files the
    /// Harbor-only keys under `metadata.<path>`, and handles unknown keys as
    /// `unknown` says (a near miss of a known key is always an error).
    fn table<'v>(
        &mut self,
        path: &str,
        value: &'v Value,
        ours: &[&str],
        harbor: &[&str],
        unknown: Unknown,
    ) -> Result<Table<'v>> {
        let ctx = self.ctx.clone();
        let table = expect_table(&ctx, path, value)?;
        let mut kept = JsonMap::new();
        for (key, v) in table {
            if ours.contains(&key.as_str()) {
                continue;
            }
            if harbor.contains(&key.as_str()) {
                kept.insert(key.clone(), to_json(v));
                continue;
            }
            let candidates: Vec<&str> = ours.iter().chain(harbor).copied().collect();
            let hint = match (suggest(key, &candidates), unknown) {
                (Some(s), _) => format!("did you mean {s}?"),
                (None, Unknown::Refuse) => format!("expected one of: {}", ours.join(", ")),
                (None, Unknown::Keep) => {
                    kept.insert(key.clone(), to_json(v));
                    self.warn(&join(path, key), "unknown key, kept as metadata");
                    continue;
                }
            };
            return Err(ctx.err(
                TaskErrorKind::UnknownKey,
                &join(path, key),
                format!("unknown key ({hint})"),
            ));
        }
        if !kept.is_empty() {
            insert_path(&mut self.metadata, path, kept);
        }
        Ok(Table {
            ctx,
            path: path.to_string(),
            table,
        })
    }

    fn task_table(&mut self, value: &Value) -> Result<Option<String>> {
        let t = self.table("task", value, TASK_KEYS, HARBOR_TASK_KEYS, Unknown::Keep)?;
        t.string("name")
    }

    /// `[agent]` or `[steps.agent]`: timeout, user and the network override,
    /// as written.
    fn agent_table(
        &mut self,
        path: &str,
        value: &Value,
    ) -> Result<(Option<f64>, Option<String>, Option<Policy>)> {
        let t = self.table(path, value, AGENT_KEYS, &[], Unknown::Keep)?;
        let network = self.network_policy(&t)?;
        Ok((t.duration("timeout_sec")?, t.user("user")?, network))
    }

    /// `[verifier]` or `[steps.verifier]`, as written.
    fn verifier_table(&mut self, path: &str, value: &Value) -> Result<VerifierConfig> {
        let t = self.table(
            path,
            value,
            VERIFIER_KEYS,
            HARBOR_VERIFIER_KEYS,
            Unknown::Keep,
        )?;
        let env_path = join(path, "environment");
        let environment = match t.get("environment") {
            Some(v) => Some(self.environment_table(&env_path, v)?),
            None => None,
        };
        let mode = match (t.verifier_mode("environment_mode")?, environment.is_some()) {
            (Some((mode, _)), false) => Some(mode),
            (None, false) => None,
            // Harbor: a verifier environment without a mode implies separate.
            (None, true) | (Some((VerifierMode::Separate, _)), true) => {
                Some(VerifierMode::Separate)
            }
            (Some((_, spelled)), true) => {
                return Err(t.ctx.err(
                    TaskErrorKind::Conflict,
                    &env_path,
                    format!(
                        "only used with environment_mode = \"separate\" (environment_mode is {})",
                        quote(&spelled)
                    ),
                ));
            }
        };
        let network = self.network_policy(&t)?;
        let verifier = VerifierConfig {
            timeout_sec: t.duration("timeout_sec")?,
            mode,
            env: t.string_map("env")?.unwrap_or_default(),
            network,
            user: t.user("user")?,
            environment,
            integrity: match t.string("integrity")? {
                None => None,
                Some(s) if s == "audit" => Some(IntegrityMode::Audit),
                Some(s) if s == "enforce" => Some(IntegrityMode::Enforce),
                Some(s) => {
                    return Err(unknown_value(
                        &t.ctx,
                        &join(path, "integrity"),
                        &s,
                        &["audit", "enforce"],
                    ));
                }
            },
            protect: match t.get("protect") {
                None => Vec::new(),
                Some(v) => {
                    let field = join(path, "protect");
                    string_list(&t.ctx, &field, v)?
                        .iter()
                        .map(|p| container_path(&t.ctx, &field, p))
                        .collect::<Result<_>>()?
                }
            },
        };
        if let Some(Value::Table(c)) = t.get("continuous")
            && c.get("enabled") == Some(&Value::Boolean(true))
        {
            self.warn(
                &join(path, "continuous"),
                "continuous verification is not supported by arbiter, ignored (kept as metadata)",
            );
        }
        if let Some(Value::Array(c)) = t.get("collect")
            && !c.is_empty()
        {
            self.warn(
                &join(path, "collect"),
                "collect hooks are not supported by arbiter, ignored (kept as metadata)",
            );
        }
        Ok(verifier)
    }
}

/// `[verifier]` with the defaults applied: snapshot mode, 600 s, and the network Harbor
/// gives it: its own `network_mode`, else `[verifier.environment]`'s, else the task's
/// baseline (`[environment]`'s, `public` when that sets none) — as the agent phase gets.
fn resolve_task_verifier(
    raw: VerifierConfig,
    baseline: Policy,
) -> (VerifierSection, Option<EnvConfig>) {
    let (network, allowed_hosts) = match raw.network {
        Some(n) => n,
        None => raw
            .environment
            .as_ref()
            .filter(|e| e.network.is_some())
            .map_or(baseline, EnvConfig::baseline),
    };
    let section = VerifierSection {
        timeout_sec: raw.timeout_sec.unwrap_or(DEFAULT_VERIFIER_TIMEOUT_SEC),
        mode: raw.mode.unwrap_or_default(),
        env: raw.env,
        network,
        allowed_hosts: only_for_allowlist(network, allowed_hosts),
        user: raw.user,
        environment: None,
        integrity: raw.integrity.unwrap_or_default(),
        protect: raw.protect,
    };
    (section, raw.environment)
}

/// `hosts` when `network` is `Allowlist`, else nothing.
pub(crate) fn only_for_allowlist(network: NetworkMode, hosts: Vec<String>) -> Vec<String> {
    if network == NetworkMode::Allowlist {
        hosts
    } else {
        Vec::new()
    }
}

/// Validates a task name: `[a-zA-Z0-9._/-]+`, no `..`, no leading `/`,
/// no empty or `.` path segment. Returns what is wrong.
pub(crate) fn check_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_string());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._/-".contains(*c)))
    {
        return Err(format!(
            "invalid character {} in {} (allowed: a-z A-Z 0-9 . _ / -)",
            quote(&bad.to_string()),
            quote(name)
        ));
    }
    if name.starts_with('/') {
        return Err(format!("must not start with \"/\" (got {})", quote(name)));
    }
    if name.contains("..") {
        return Err(format!("must not contain \"..\" (got {})", quote(name)));
    }
    if name.split('/').any(|seg| seg.is_empty() || seg == ".") {
        return Err(format!(
            "must not have an empty or \".\" path segment (got {})",
            quote(name)
        ));
    }
    Ok(())
}
