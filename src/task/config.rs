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

use super::error::{FileCtx, TaskError, TaskErrorKind, quote};
use super::model::{
    AgentSection, Completion, CompletionMode, DEFAULT_AGENT_TIMEOUT_SEC, DEFAULT_BUILD_TIMEOUT_SEC,
    DEFAULT_CPUS, DEFAULT_MEMORY_MB, DEFAULT_PIDS_LIMIT, DEFAULT_VALIDATION_TIMEOUT_SEC,
    DEFAULT_VERIFIER_TIMEOUT_SEC, Deliverable, EnvironmentSpec, ImageSource, MAX_DURATION_SEC,
    MIN_MEMORY_MB, NetworkMode, ValidationCommand, VerifierMode, VerifierSection,
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
/// 16 TiB; keeps `memory_mb * 1024 * 1024` well inside an `i64`.
const MAX_MEMORY_MB: i64 = 16 * 1024 * 1024;

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

fn syntax_error(ctx: &FileCtx, text: &str, err: &toml::de::Error) -> TaskError {
    let message = condense(err.message());
    let message = if message.is_empty() {
        "invalid TOML".to_string()
    } else {
        format!("invalid TOML: {message}")
    };
    match err.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            ctx.err(TaskErrorKind::Syntax, &format!("{line}:{column}"), message)
        }
        None => TaskError::new(TaskErrorKind::Syntax, ctx.file(), None, message),
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// All whitespace runs (newlines included) become one space.
fn condense(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
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

    fn environment_table(&mut self, path: &str, value: &Value) -> Result<EnvConfig> {
        let t = self.table(path, value, ENVIRONMENT_KEYS, HARBOR_ENVIRONMENT_KEYS)?;
        let d = EnvConfig::default();

        let docker_image = match t.string("docker_image")? {
            Some(image) if image.trim().is_empty() || image.chars().any(char::is_whitespace) => {
                return Err(t.ctx.value(
                    &t.key("docker_image"),
                    format!("not a valid image reference (got {})", quote(&image)),
                ));
            }
            other => other,
        };

        let cpus = match t.get("cpus") {
            Some(v) => {
                let cpus = number(&t.ctx, &t.key("cpus"), v)?;
                if !cpus.is_finite() || cpus <= 0.0 {
                    return Err(t
                        .ctx
                        .value(&t.key("cpus"), format!("must be greater than 0 (got {v})")));
                }
                if cpus > MAX_CPUS {
                    return Err(t.ctx.value(
                        &t.key("cpus"),
                        format!("must be at most {MAX_CPUS} (got {v})"),
                    ));
                }
                cpus
            }
            None => d.cpus,
        };

        let memory_mb = t.memory_mb(
            "memory_mb",
            "memory",
            MIN_MEMORY_MB as i64,
            "Docker's minimum",
        )?;
        let storage_mb = t.memory_mb("storage_mb", "storage", 1, "")?;

        let pids_limit = match t.get("pids_limit") {
            Some(v) => {
                let n = integer(&t.ctx, &t.key("pids_limit"), v)?;
                if n <= 0 {
                    return Err(t.ctx.value(
                        &t.key("pids_limit"),
                        format!("must be greater than 0 (got {v})"),
                    ));
                }
                n
            }
            None => d.pids_limit,
        };

        let network_mode = t.network_mode("network_mode")?;
        let allow_internet = t.boolean("allow_internet")?;
        let network = match (network_mode, allow_internet) {
            (Some(mode), Some(allow)) if mode.has_network() != allow => {
                return Err(t.ctx.err(
                    TaskErrorKind::Conflict,
                    &t.key("allow_internet"),
                    format!(
                        "conflicts with network_mode = \"{}\" (allow_internet = {allow} means {}; remove one of them)",
                        mode.as_str(),
                        if allow { "bridge" } else { "no-network" },
                    ),
                ));
            }
            (Some(mode), _) => Some(mode),
            (None, Some(true)) => Some(NetworkMode::Bridge),
            (None, Some(false)) => Some(NetworkMode::NoNetwork),
            (None, None) => None,
        };
        t.no_allowed_hosts()?;

        let workdir = match t.string("workdir")? {
            Some(w) => Some(container_path(&t.ctx, &t.key("workdir"), &w)?),
            None => None,
        };

        if let Some(os) = t.string("os")?
            && !os.eq_ignore_ascii_case("linux")
        {
            return Err(t.ctx.value(
                &t.key("os"),
                format!(
                    "{} is not supported (arbiter runs Linux containers only)",
                    quote(&os)
                ),
            ));
        }

        let env = t.string_map("env")?.unwrap_or_default();

        // Harbor keys that ask for something arbiter cannot give: say so.
        let unsupported: Vec<String> = HARBOR_ENVIRONMENT_KEYS
            .iter()
            .filter(|key| match t.get(key) {
                None => false,
                Some(Value::Integer(n)) => *n > 0,
                Some(Value::Array(a)) => !a.is_empty(),
                Some(Value::String(s)) => !s.is_empty(),
                Some(_) => true,
            })
            .map(|key| t.key(key))
            .collect();
        for key in unsupported {
            self.warn(&key, "not supported by arbiter, ignored (kept as metadata)");
        }

        Ok(EnvConfig {
            docker_image,
            build_timeout_sec: t
                .duration("build_timeout_sec")?
                .unwrap_or(DEFAULT_BUILD_TIMEOUT_SEC),
            cpus,
            memory_mb: memory_mb.unwrap_or(d.memory_mb),
            pids_limit,
            network,
            workdir,
            storage_mb,
            env,
        })
    }

    fn artifacts(&mut self, value: &Value) -> Result<Vec<String>> {
        let ctx = self.ctx.clone();
        let items = expect_array(&ctx, "artifacts", value)?;
        let mut out: Vec<String> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let field = format!("artifacts[{i}]");
            let path = match item {
                Value::String(s) => container_path(&ctx, &field, s)?,
                Value::Table(_) => {
                    let t = self.table(&field, item, ARTIFACT_KEYS, &[])?;
                    let Some(source) = t.string("source")? else {
                        return Err(ctx.value(
                            &t.key("source"),
                            "missing (an artifact table needs the container path to collect)",
                        ));
                    };
                    for key in ["destination", "exclude", "service"] {
                        if t.get(key).is_some() {
                            let k = t.key(key);
                            self.warn(&k, "not supported by arbiter, ignored");
                        }
                    }
                    container_path(&ctx, &t.key("source"), &source)?
                }
                other => {
                    return Err(type_error(&ctx, &field, "a string or a table", other));
                }
            };
            if let Some(first) = out.iter().position(|p| *p == path) {
                return Err(ctx.err(
                    TaskErrorKind::Duplicate,
                    &field,
                    format!("duplicate of artifacts[{first}] ({})", quote(&path)),
                ));
            }
            out.push(path);
        }
        Ok(out)
    }

    fn completion_table(&mut self, value: &Value) -> Result<Completion> {
        let t = self.table("completion", value, COMPLETION_KEYS, &[])?;
        let mode = match t.string("mode")? {
            Some(s) => CompletionMode::ALL
                .into_iter()
                .find(|m| m.as_str() == s)
                .ok_or_else(|| {
                    unknown_value(
                        &t.ctx,
                        "completion.mode",
                        &s,
                        &CompletionMode::ALL.map(|m| m.as_str()),
                    )
                })?,
            None => CompletionMode::default(),
        };
        let mut deliverables: Vec<Deliverable> = Vec::new();
        if let Some(v) = t.get("deliverables") {
            for (i, item) in expect_array(&t.ctx, &t.key("deliverables"), v)?
                .iter()
                .enumerate()
            {
                let d = self.deliverable(i, item, &deliverables)?;
                deliverables.push(d);
            }
        }
        let mut validation: Vec<ValidationCommand> = Vec::new();
        if let Some(v) = t.get("validation") {
            for (i, item) in expect_array(&t.ctx, &t.key("validation"), v)?
                .iter()
                .enumerate()
            {
                let c = self.validation_command(i, item, &validation)?;
                validation.push(c);
            }
        }
        Ok(Completion {
            mode,
            deliverables,
            validation,
        })
    }

    /// `completion.deliverables[i]`; `earlier` are the ones before it.
    fn deliverable(
        &mut self,
        i: usize,
        item: &Value,
        earlier: &[Deliverable],
    ) -> Result<Deliverable> {
        let d = self.table(
            &format!("completion.deliverables[{i}]"),
            item,
            DELIVERABLE_KEYS,
            &[],
        )?;
        let Some(file) = d.string("path")? else {
            return Err(d.ctx.value(
                &d.key("path"),
                "missing (every deliverable needs a container path)",
            ));
        };
        let file = container_path(&d.ctx, &d.key("path"), &file)?;
        if let Some(first) = earlier.iter().position(|x| x.path == file) {
            return Err(d.ctx.err(
                TaskErrorKind::Duplicate,
                &d.key("path"),
                format!(
                    "duplicate of completion.deliverables[{first}].path ({})",
                    quote(&file)
                ),
            ));
        }
        let sha256 = match d.string("sha256")? {
            Some(s) => Some(sha256_hex(&d.ctx, &d.key("sha256"), &s)?),
            None => None,
        };
        Ok(Deliverable {
            path: file,
            goal: d.string("goal")?,
            non_empty: d.boolean("non_empty")?.unwrap_or(true),
            sha256,
        })
    }

    /// `completion.validation[i]`; `earlier` are the ones before it.
    fn validation_command(
        &mut self,
        i: usize,
        item: &Value,
        earlier: &[ValidationCommand],
    ) -> Result<ValidationCommand> {
        let path = format!("completion.validation[{i}]");
        let c = self.table(&path, item, VALIDATION_KEYS, &[])?;
        let Some(id) = c.string("id")? else {
            return Err(c.ctx.value(
                &c.key("id"),
                "missing (every validation command needs an id)",
            ));
        };
        let id_ok = !id.is_empty()
            && id
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || "._-".contains(ch));
        if !id_ok {
            return Err(c.ctx.value(
                &c.key("id"),
                format!("must match [a-zA-Z0-9._-]+ (got {})", quote(&id)),
            ));
        }
        if let Some(first) = earlier.iter().position(|x| x.id == id) {
            return Err(c.ctx.err(
                TaskErrorKind::Duplicate,
                &c.key("id"),
                format!(
                    "duplicate of completion.validation[{first}].id ({})",
                    quote(&id)
                ),
            ));
        }
        let argv = match c.get("argv") {
            Some(v) => {
                let argv = string_list(&c.ctx, &c.key("argv"), v)?;
                if argv.first().is_none_or(|a| a.is_empty()) {
                    return Err(c
                        .ctx
                        .value(&c.key("argv"), "must name a program (empty argv)"));
                }
                Some(argv)
            }
            None => None,
        };
        let shell = c.string("shell")?;
        if shell.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(c.ctx.value(&c.key("shell"), "must not be empty"));
        }
        match (&argv, &shell) {
            (Some(_), Some(_)) => {
                return Err(c.ctx.err(
                    TaskErrorKind::Conflict,
                    &path,
                    "set exactly one of argv or shell (both are set)",
                ));
            }
            (None, None) => {
                return Err(c
                    .ctx
                    .value(&path, "set exactly one of argv or shell (neither is set)"));
            }
            _ => {}
        }
        let cwd = match c.string("cwd")? {
            Some(s) => Some(container_path(&c.ctx, &c.key("cwd"), &s)?),
            None => None,
        };
        Ok(ValidationCommand {
            id,
            argv,
            shell,
            cwd,
            timeout_sec: c
                .duration("timeout_sec")?
                .unwrap_or(DEFAULT_VALIDATION_TIMEOUT_SEC),
        })
    }
}

/// A known table, opened and key-checked.
struct Table<'v> {
    ctx: FileCtx,
    path: String,
    table: &'v toml::Table,
}

impl Table<'_> {
    fn key(&self, key: &str) -> String {
        join(&self.path, key)
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.table.get(key)
    }

    fn string(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(type_error(&self.ctx, &self.key(key), "a string", v)),
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Boolean(b)) => Ok(Some(*b)),
            Some(v) => Err(type_error(&self.ctx, &self.key(key), "a boolean", v)),
        }
    }

    /// Seconds: integer or float, finite, > 0, at most `MAX_DURATION_SEC`.
    fn duration(&self, key: &str) -> Result<Option<f64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let field = self.key(key);
        let secs = number(&self.ctx, &field, v)?;
        if secs.is_nan() {
            return Err(self
                .ctx
                .value(&field, "must be a number of seconds (got nan)"));
        }
        if secs <= 0.0 {
            return Err(self
                .ctx
                .value(&field, format!("must be greater than 0 (got {v})")));
        }
        if secs > MAX_DURATION_SEC {
            return Err(self.ctx.value(
                &field,
                format!("must be at most {MAX_DURATION_SEC} seconds (got {v})"),
            ));
        }
        Ok(Some(secs))
    }

    /// `<key>_mb` as an integer, or Harbor's deprecated size string under
    /// `legacy` ("2G", "512M"); both given and different is an error.
    fn memory_mb(&self, key: &str, legacy: &str, min: i64, why: &str) -> Result<Option<u64>> {
        let modern = match self.get(key) {
            Some(v) => {
                let n = integer(&self.ctx, &self.key(key), v)?;
                if n < min {
                    let why = if why.is_empty() {
                        String::new()
                    } else {
                        format!("{why}; ")
                    };
                    let bound = if min == 1 {
                        format!("must be greater than 0 ({why}got {v})")
                    } else {
                        format!("must be at least {min} ({why}got {v})")
                    };
                    return Err(self.ctx.value(&self.key(key), bound));
                }
                if n > MAX_MEMORY_MB {
                    return Err(self.ctx.value(
                        &self.key(key),
                        format!("must be at most {MAX_MEMORY_MB} (got {v})"),
                    ));
                }
                Some(n as u64)
            }
            None => None,
        };
        let old = match self.string(legacy)? {
            Some(s) => {
                let mb = parse_size_mb(&s)
                    .filter(|mb| *mb >= min && *mb <= MAX_MEMORY_MB)
                    .ok_or_else(|| {
                        self.ctx.value(
                            &self.key(legacy),
                            format!(
                                "not a size like \"2G\" or \"512M\" of at least {min} MB (got {})",
                                quote(&s)
                            ),
                        )
                    })?;
                Some(mb as u64)
            }
            None => None,
        };
        match (modern, old) {
            (Some(m), Some(o)) if m != o => Err(self.ctx.err(
                TaskErrorKind::Conflict,
                &self.key(legacy),
                format!("conflicts with {key} = {m} ({legacy} means {o} MB; remove one of them)"),
            )),
            (m, o) => Ok(m.or(o)),
        }
    }

    /// A user name, or a Harbor integer UID as decimal text.
    fn user(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => {
                Err(self.ctx.value(&self.key(key), "must not be empty"))
            }
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Integer(n)) if *n >= 0 => Ok(Some(n.to_string())),
            Some(v @ Value::Integer(_)) => Err(self
                .ctx
                .value(&self.key(key), format!("must not be negative (got {v})"))),
            Some(v) => Err(type_error(
                &self.ctx,
                &self.key(key),
                "a string or an integer",
                v,
            )),
        }
    }

    fn network_mode(&self, key: &str) -> Result<Option<NetworkMode>> {
        let Some(s) = self.string(key)? else {
            return Ok(None);
        };
        if let Some(mode) = NetworkMode::ALL.into_iter().find(|m| m.as_str() == s) {
            return Ok(Some(mode));
        }
        if s == "public" {
            // Harbor's name for a network with internet access.
            return Ok(Some(NetworkMode::Bridge));
        }
        Err(unknown_value(
            &self.ctx,
            &self.key(key),
            &s,
            &NetworkMode::ALL.map(|m| m.as_str()),
        ))
    }

    /// The environment mode and how it was spelled (Harbor's `shared` is our
    /// default, `snapshot`).
    fn verifier_mode(&self, key: &str) -> Result<Option<(VerifierMode, String)>> {
        let Some(s) = self.string(key)? else {
            return Ok(None);
        };
        let mode = VerifierMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .or((s == "shared").then_some(VerifierMode::Snapshot))
            .ok_or_else(|| {
                unknown_value(
                    &self.ctx,
                    &self.key(key),
                    &s,
                    &VerifierMode::ALL.map(|m| m.as_str()),
                )
            })?;
        Ok(Some((mode, s)))
    }

    fn string_map(&self, key: &str) -> Result<Option<BTreeMap<String, String>>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let field = self.key(key);
        let table = expect_table(&self.ctx, &field, v)?;
        let mut out = BTreeMap::new();
        for (k, v) in table {
            match v {
                Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                other => return Err(type_error(&self.ctx, &join(&field, k), "a string", other)),
            }
        }
        Ok(Some(out))
    }

    /// Harbor's allowlist networking cannot be enforced here: refuse it
    /// rather than run with more or less network than the task asked for.
    fn no_allowed_hosts(&self) -> Result<()> {
        if let Some(v) = self.get("allowed_hosts") {
            let hosts = string_list(&self.ctx, &self.key("allowed_hosts"), v)?;
            if !hosts.is_empty() {
                return Err(self.ctx.value(
                    &self.key("allowed_hosts"),
                    "allowlist networking is not supported by arbiter (use network_mode = \"bridge\" or \"no-network\")",
                ));
            }
        }
        Ok(())
    }
}

fn expect_table<'v>(ctx: &FileCtx, field: &str, v: &'v Value) -> Result<&'v toml::Table> {
    match v {
        Value::Table(t) => Ok(t),
        other => Err(type_error(ctx, field, "a table", other)),
    }
}

fn expect_array<'v>(ctx: &FileCtx, field: &str, v: &'v Value) -> Result<&'v Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(type_error(ctx, field, "an array", other)),
    }
}

fn string_list(ctx: &FileCtx, field: &str, v: &Value) -> Result<Vec<String>> {
    expect_array(ctx, field, v)?
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Ok(s.clone()),
            other => Err(type_error(ctx, &format!("{field}[{i}]"), "a string", other)),
        })
        .collect()
}

fn number(ctx: &FileCtx, field: &str, v: &Value) -> Result<f64> {
    match v {
        Value::Integer(n) => Ok(*n as f64),
        Value::Float(f) => Ok(*f),
        other => Err(type_error(ctx, field, "a number", other)),
    }
}

/// An integer; a float with no fractional part (`4096.0`) is accepted, as
/// Harbor's pydantic models accept it.
fn integer(ctx: &FileCtx, field: &str, v: &Value) -> Result<i64> {
    match v {
        Value::Integer(n) => Ok(*n),
        Value::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(*f as i64),
        other => Err(type_error(ctx, field, "an integer", other)),
    }
}

fn type_error(ctx: &FileCtx, field: &str, expected: &str, found: &Value) -> TaskError {
    ctx.err(
        TaskErrorKind::Type,
        field,
        format!("expected {expected}, found {}", found.type_str()),
    )
}

fn unknown_value(ctx: &FileCtx, field: &str, got: &str, allowed: &[&str]) -> TaskError {
    ctx.value(
        field,
        format!(
            "unknown value {} (expected one of: {})",
            quote(got),
            allowed.join(", ")
        ),
    )
}

/// A path inside the container: absolute, no `..` component, no NUL.
pub(crate) fn container_path(ctx: &FileCtx, field: &str, path: &str) -> Result<String> {
    if !path.starts_with('/') {
        return Err(ctx.err(
            TaskErrorKind::Path,
            field,
            format!(
                "must be an absolute path inside the container (got {})",
                quote(path)
            ),
        ));
    }
    if path.split('/').any(|c| c == "..") {
        return Err(ctx.err(
            TaskErrorKind::Path,
            field,
            format!("must not contain \"..\" components (got {})", quote(path)),
        ));
    }
    if path.contains('\0') {
        return Err(ctx.err(
            TaskErrorKind::Path,
            field,
            "must not contain a NUL character",
        ));
    }
    Ok(path.to_string())
}

fn sha256_hex(ctx: &FileCtx, field: &str, s: &str) -> Result<String> {
    let hex = s.strip_prefix("sha256:").unwrap_or(s);
    if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(hex.to_ascii_lowercase())
    } else {
        Err(ctx.value(field, format!("must be 64 hex digits (got {})", quote(s))))
    }
}

/// Harbor's legacy size strings: "2G", "512M", "1024K" (case-insensitive).
fn parse_size_mb(s: &str) -> Option<i64> {
    let s = s.trim().to_ascii_uppercase();
    let (number, factor) = if let Some(n) = s.strip_suffix('G') {
        (n, 1024.0)
    } else if let Some(n) = s.strip_suffix('M') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('K') {
        (n, 1.0 / 1024.0)
    } else {
        return None;
    };
    let value: f64 = number.trim().parse().ok()?;
    let mb = (value * factor).floor();
    (0.0..9.0e15).contains(&mb).then_some(mb as i64)
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

/// The closest candidate within a small edit distance, if any.
pub(crate) fn suggest<'c>(key: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let key = key.to_ascii_lowercase();
    let limit = match key.chars().count() {
        0..=3 => 1,
        4..=8 => 2,
        _ => 3,
    };
    candidates
        .iter()
        .map(|c| (levenshtein(&key, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `path` + `.key`, quoting the key when it is not a bare TOML key.
fn join(path: &str, key: &str) -> String {
    let part = dotted(&[key]);
    if path.is_empty() {
        part
    } else {
        format!("{path}.{part}")
    }
}

fn dotted(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| {
            if !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                k.to_string()
            } else {
                quote(k)
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Files `kept` under a dotted `path` ("verifier.environment") of `root`,
/// merging with what is there.
fn insert_path(root: &mut JsonMap<String, Json>, path: &str, kept: JsonMap<String, Json>) {
    let mut node = root;
    for part in path.split('.') {
        let entry = node
            .entry(part.to_string())
            .or_insert_with(|| Json::Object(JsonMap::new()));
        if !entry.is_object() {
            *entry = Json::Object(JsonMap::new());
        }
        let Json::Object(next) = entry else {
            return;
        };
        node = next;
    }
    node.extend(kept);
}

/// TOML → JSON. Datetimes become their TOML text; non-finite floats their
/// TOML spelling (`nan`, `inf`, `-inf`), as JSON has no such numbers.
pub(crate) fn to_json(v: &Value) -> Json {
    match v {
        Value::String(s) => Json::String(s.clone()),
        Value::Integer(n) => Json::from(*n),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .unwrap_or_else(|| Json::String(v.to_string())),
        Value::Boolean(b) => Json::Bool(*b),
        Value::Datetime(d) => Json::String(d.to_string()),
        Value::Array(a) => Json::Array(a.iter().map(to_json).collect()),
        Value::Table(t) => Json::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}
