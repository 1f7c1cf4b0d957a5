//! `task.toml` → validated configuration, without touching the file system.
//!
//! The document is parsed into a `toml::Table` and read key by key (no serde
//! derive) so every error can name its dotted key, the TOML type found and the
//! allowed values. Known tables (`[task]`, `[agent]`, `[verifier]`, `[environment]`,
//! `[completion]`, `[solution]`) are strict: an unknown key is an error with a
//! did-you-mean, except keys Harbor / Terminal-Bench tasks carry that arbiter
//! does not use (`HARBOR_*` lists), which are kept as metadata. Unknown
//! top-level keys and tables are kept as metadata with a warning.

use std::collections::BTreeMap;

use serde_json::{Map as JsonMap, Value as Json};
use toml::Value;

mod completion;
mod environment;

use super::error::{FileCtx, TaskError, TaskErrorKind, quote};
use super::model::{
    AgentSection, Completion, DEFAULT_AGENT_TIMEOUT_SEC, DEFAULT_BUILD_TIMEOUT_SEC, DEFAULT_CPUS,
    DEFAULT_MEMORY_MB, DEFAULT_PIDS_LIMIT, DEFAULT_VERIFIER_TIMEOUT_SEC, EnvironmentSpec,
    ImageSource, NetworkMode, VerifierMode, VerifierSection,
};
use super::toml_read::{
    Table, dotted, expect_table, insert_path, join, suggest, syntax_error, to_json,
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
];
/// Top-level keys of Harbor's `TaskConfig` that arbiter does not use: kept
/// verbatim in the metadata, no warning (`steps` warns: it changes the run).
const HARBOR_TOP_LEVEL: &[&str] = &["source", "steps", "multi_step_reward_strategy"];

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
    "env",
    "memory",
    "storage",
    "os",
    "allowed_hosts",
];
const HARBOR_ENVIRONMENT_KEYS: &[&str] = &[
    "gpus",
    "gpu_types",
    "tpu",
    "mcp_servers",
    "skills_dir",
    "healthcheck",
];

const SOLUTION_KEYS: &[&str] = &["env"];
const COMPLETION_KEYS: &[&str] = &["mode", "deliverables", "validation"];
const DELIVERABLE_KEYS: &[&str] = &["path", "goal", "non_empty", "sha256"];
const VALIDATION_KEYS: &[&str] = &["id", "argv", "shell", "cwd", "timeout_sec"];
const ARTIFACT_KEYS: &[&str] = &["source", "destination", "exclude", "service"];

const MAX_CPUS: f64 = 1024.0;

/// Everything `task.toml` says, validated; file-system facts come later.
#[derive(Debug)]
pub(crate) struct TaskConfig {
    pub name: Option<String>,
    pub agent: AgentSection,
    /// `[agent] network_mode`, overriding the environment's for the agent phase.
    pub agent_network: Option<NetworkMode>,
    /// `environment` is still `None`; the loader resolves it.
    pub verifier: VerifierSection,
    /// `[verifier.environment]`, when present.
    pub verifier_environment: Option<EnvConfig>,
    pub environment: EnvConfig,
    pub solution_env: BTreeMap<String, String>,
    pub artifacts: Vec<String>,
    pub completion: Option<Completion>,
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
    pub workdir: Option<String>,
    pub storage_mb: Option<u64>,
    pub env: BTreeMap<String, String>,
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
            workdir: None,
            storage_mb: None,
            env: BTreeMap::new(),
        }
    }
}

impl EnvConfig {
    pub(crate) fn into_spec(self, source: ImageSource, network: NetworkMode) -> EnvironmentSpec {
        EnvironmentSpec {
            source,
            build_timeout_sec: self.build_timeout_sec,
            cpus: self.cpus,
            memory_mb: self.memory_mb,
            pids_limit: self.pids_limit,
            network,
            workdir: self.workdir,
            storage_mb: self.storage_mb,
            env: self.env,
        }
    }
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
                if key == "steps" {
                    self.warn(
                        key,
                        "multi-step tasks are not supported by arbiter; the steps are ignored (kept as metadata)",
                    );
                }
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
            Some(v) => self.agent_table(v)?,
            None => (AgentSection::default(), None),
        };
        let environment = match root.get("environment") {
            Some(v) => self.environment_table("environment", v)?,
            None => EnvConfig::default(),
        };
        let (verifier, verifier_environment) = match root.get("verifier") {
            Some(v) => self.verifier_table(v)?,
            None => (VerifierSection::default(), None),
        };
        let solution_env = match root.get("solution") {
            Some(v) => {
                let t = self.table("solution", v, SOLUTION_KEYS, &[])?;
                t.string_map("env")?.unwrap_or_default()
            }
            None => BTreeMap::new(),
        };
        let artifacts = match root.get("artifacts") {
            Some(v) => self.artifacts(v)?,
            None => Vec::new(),
        };
        let completion = match root.get("completion") {
            Some(v) => Some(self.completion_table(v)?),
            None => None,
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
            metadata: self.metadata,
            warnings: self.warnings,
        })
    }

    fn warn(&mut self, field: &str, message: impl std::fmt::Display) {
        self.warnings.push(self.ctx.warning(field, message));
    }

    /// Opens a known table: checks its type and its keys, and files the
    /// Harbor-only keys under `metadata.<path>`.
    fn table<'v>(
        &mut self,
        path: &str,
        value: &'v Value,
        ours: &[&str],
        harbor: &[&str],
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
            let hint = match suggest(key, &candidates) {
                Some(s) => format!("did you mean {s}?"),
                None => format!("expected one of: {}", ours.join(", ")),
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
        let t = self.table("task", value, TASK_KEYS, HARBOR_TASK_KEYS)?;
        t.string("name")
    }

    fn agent_table(&mut self, value: &Value) -> Result<(AgentSection, Option<NetworkMode>)> {
        let t = self.table("agent", value, AGENT_KEYS, &[])?;
        let agent = AgentSection {
            timeout_sec: t
                .duration("timeout_sec")?
                .unwrap_or(DEFAULT_AGENT_TIMEOUT_SEC),
            user: t.user("user")?,
        };
        t.no_allowed_hosts()?;
        Ok((agent, t.network_mode("network_mode")?))
    }

    fn verifier_table(&mut self, value: &Value) -> Result<(VerifierSection, Option<EnvConfig>)> {
        let t = self.table("verifier", value, VERIFIER_KEYS, HARBOR_VERIFIER_KEYS)?;
        t.no_allowed_hosts()?;
        let environment = match t.get("environment") {
            Some(v) => Some(self.environment_table("verifier.environment", v)?),
            None => None,
        };
        let explicit_mode = t.verifier_mode("environment_mode")?;
        let mode = match (explicit_mode, environment.is_some()) {
            (Some((mode, _)), false) => mode,
            (None, false) => VerifierMode::Snapshot,
            // Harbor: a verifier environment without a mode implies separate.
            (None, true) | (Some((VerifierMode::Separate, _)), true) => VerifierMode::Separate,
            (Some((_, spelled)), true) => {
                return Err(t.ctx.err(
                    TaskErrorKind::Conflict,
                    "verifier.environment",
                    format!(
                        "only used with environment_mode = \"separate\" (environment_mode is {})",
                        quote(&spelled)
                    ),
                ));
            }
        };
        let network = match t.network_mode("network_mode")? {
            Some(n) => n,
            None => environment
                .as_ref()
                .and_then(|e| e.network)
                .unwrap_or(NetworkMode::NoNetwork),
        };
        let verifier = VerifierSection {
            timeout_sec: t
                .duration("timeout_sec")?
                .unwrap_or(DEFAULT_VERIFIER_TIMEOUT_SEC),
            mode,
            env: t.string_map("env")?.unwrap_or_default(),
            network,
            user: t.user("user")?,
            environment: None,
        };
        if let Some(Value::Table(c)) = t.get("continuous")
            && c.get("enabled") == Some(&Value::Boolean(true))
        {
            self.warn(
                "verifier.continuous",
                "continuous verification is not supported by arbiter, ignored (kept as metadata)",
            );
        }
        if let Some(Value::Array(c)) = t.get("collect")
            && !c.is_empty()
        {
            self.warn(
                "verifier.collect",
                "collect hooks are not supported by arbiter, ignored (kept as metadata)",
            );
        }
        Ok((verifier, environment))
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
