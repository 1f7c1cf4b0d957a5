//! From command-line flags and an optional `job.yaml` to a validated [`JobSpec`]. Every
//! problem is found here, before any container starts, and reported as one line naming the
//! file (or flag) and the field.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::{Agent, AgentKind, redact_env, resolve_env};
use crate::task::{ImageSource, TaskError, VerifierMode};

use super::lock::Lock;
use super::plan::{JobSpec, image_spec, trial_id};

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

fn field(
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
    /// Named overrides applied on top of agents: the arms of an ablation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<Variant>,
    /// Multipliers applied to every task's timeouts.
    #[serde(default)]
    pub timeouts: Option<TimeoutMultipliers>,
    /// Retries of infrastructure failures.
    #[serde(default)]
    pub retries: Option<RetryPolicy>,
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
}

impl Variant {
    pub fn default_variant() -> Self {
        Variant {
            name: "default".to_string(),
            env: BTreeMap::new(),
            args: Vec::new(),
            agents: None,
        }
    }

    fn applies_to(&self, agent: &str) -> bool {
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
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max: 2,
            backoff_sec: 1.0,
            max_backoff_sec: 30.0,
            on_claimed_infrastructure_failure: false,
        }
    }
}

impl RetryPolicy {
    /// Wait before retry number `n` (1-based).
    pub fn backoff(&self, n: u32) -> Duration {
        let secs = self.backoff_sec * 2f64.powi(n.saturating_sub(1).min(30) as i32);
        Duration::from_secs_f64(secs.min(self.max_backoff_sec).max(0.0))
    }
}

/// A built-in agent by name, or a full definition.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
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

const BUILTINS: &str = "oracle, nop";

/// Turn flags (and the config file they name) into a job.
pub fn resolve(args: &RunArgs) -> Result<JobSpec, ConfigError> {
    let (config, config_name, base) = match &args.config {
        Some(path) => {
            let shown = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| field(&shown, "file", format!("cannot read: {e}")))?;
            let config: JobConfig =
                serde_yaml::from_str(&text).map_err(|e| yaml_error(&shown, &e))?;
            let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
            (config, shown, base)
        }
        None => (
            JobConfig::default(),
            "arguments".to_string(),
            PathBuf::new(),
        ),
    };

    let (patterns, pattern_source, pattern_base) = if args.tasks.is_empty() {
        (config.tasks.clone(), config_name.clone(), base.clone())
    } else {
        (args.tasks.clone(), "arguments".to_string(), PathBuf::new())
    };
    if patterns.is_empty() {
        return Err(field(
            &config_name,
            "tasks",
            "no tasks given (pass task directories, or list them under tasks: in job.yaml)",
        ));
    }
    let dirs = expand_tasks(&patterns, &pattern_source, &pattern_base)?;
    let tasks = crate::task::load_all(&dirs)?;
    for task in &tasks {
        for warning in &task.warnings {
            tracing::warn!("{warning}");
        }
    }

    let agents = resolve_agents(args, &config, &config_name)?;
    for task in &tasks {
        if task.verifier.mode == VerifierMode::Separate {
            return Err(field(
                task.dir.join("task.toml").display().to_string(),
                "verifier.environment_mode",
                "\"separate\" is not supported yet (use snapshot or live)",
            ));
        }
        for agent in &agents {
            if matches!(agent.kind, AgentKind::Oracle) && task.solution_dir.is_none() {
                return Err(field(
                    task.dir.join("solution").display().to_string(),
                    "solve.sh",
                    "missing: the oracle agent needs a reference solution",
                ));
            }
        }
        resolve_env(&task.verifier.env).map_err(|e| {
            field(
                task.dir.join("task.toml").display().to_string(),
                format!("verifier.env.{}", e.key()),
                e.reason(),
            )
        })?;
    }
    let variants = resolve_variants(args, &config, &config_name, &agents)?;

    let attempts = args.attempts.or(config.attempts).unwrap_or(1);
    if attempts == 0 {
        return Err(field(
            flag_or(&config_name, args.attempts.is_some(), "-k"),
            "attempts",
            "must be at least 1",
        ));
    }
    let concurrency = args.concurrency.or(config.concurrency).unwrap_or(1);
    if concurrency == 0 {
        return Err(field(
            flag_or(&config_name, args.concurrency.is_some(), "-n"),
            "concurrency",
            "must be at least 1",
        ));
    }
    let pass_threshold = args.pass_threshold.or(config.pass_threshold).unwrap_or(1.0);
    if !pass_threshold.is_finite() {
        return Err(field(
            flag_or(
                &config_name,
                args.pass_threshold.is_some(),
                "--pass-threshold",
            ),
            "pass_threshold",
            "must be a finite number",
        ));
    }
    let log_cap_mb = config.log_cap_mb.unwrap_or(10);
    if log_cap_mb == 0 {
        return Err(field(&config_name, "log_cap_mb", "must be at least 1"));
    }
    let timeouts = config.timeouts.unwrap_or_default();
    for (key, value) in [
        ("agent", timeouts.agent),
        ("verifier", timeouts.verifier),
        ("build", timeouts.build),
        ("install", timeouts.install),
    ] {
        if !(value.is_finite() && value > 0.0 && value <= 1000.0) {
            return Err(field(
                &config_name,
                format!("timeouts.{key}"),
                format!("must be a multiplier above 0 and at most 1000 (got {value})"),
            ));
        }
    }
    let retry = config.retries.unwrap_or_default();
    if retry.max > 100 {
        return Err(field(
            &config_name,
            "retries.max",
            format!("must be at most 100 (got {})", retry.max),
        ));
    }
    for (key, value) in [
        ("backoff_sec", retry.backoff_sec),
        ("max_backoff_sec", retry.max_backoff_sec),
    ] {
        if !(value.is_finite() && (0.0..=3600.0).contains(&value)) {
            return Err(field(
                &config_name,
                format!("retries.{key}"),
                format!("must be between 0 and 3600 seconds (got {value})"),
            ));
        }
    }

    let dir = match (&args.job_dir, &config.job_dir) {
        (Some(d), _) => d.clone(),
        (None, Some(d)) => base.join(d),
        (None, None) => PathBuf::from("jobs").join(crate::timefmt::now_compact()),
    };
    let name = config
        .name
        .clone()
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "job".to_string());

    let mut arms = Vec::new();
    for (a, agent) in agents.iter().enumerate() {
        for (v, variant) in variants.iter().enumerate() {
            if variant.applies_to(&agent.name) {
                arms.push((a, v));
            }
        }
    }
    let mut ids = BTreeSet::new();
    for task in &tasks {
        for &(a, v) in &arms {
            let id = trial_id(&task.name, &agents[a].name, &variants[v].name, 1);
            if !ids.insert(id.clone()) {
                return Err(field(
                    &config_name,
                    "tasks",
                    format!(
                        "two tasks, agents or variants map to the same trial id {id}; rename one"
                    ),
                ));
            }
        }
    }

    let mut images = Vec::new();
    for task in &tasks {
        let digest = match &task.environment.source {
            ImageSource::Build { context, .. } => Some(crate::task::dir_checksum(context)?),
            ImageSource::Image(_) => None,
        };
        images.push(image_spec(task, digest.as_deref(), timeouts.build));
    }

    let saved = JobConfig {
        name: Some(name.clone()),
        tasks: tasks.iter().map(|t| t.dir.display().to_string()).collect(),
        agents: agents
            .iter()
            .map(|a| AgentEntry::Def(redacted(a)))
            .collect(),
        attempts: Some(attempts),
        concurrency: Some(concurrency),
        pass_threshold: Some(pass_threshold),
        job_dir: None,
        log_cap_mb: Some(log_cap_mb),
        variants: variants
            .iter()
            .filter(|v| **v != Variant::default_variant())
            .map(|v| Variant {
                env: redact_env(&v.env),
                ..v.clone()
            })
            .collect(),
        timeouts: Some(timeouts),
        retries: Some(retry),
    };
    let config_yaml =
        serde_yaml::to_string(&saved).map_err(|e| field(&config_name, "job", e.to_string()))?;
    let lock = Lock::new(&tasks, &images, &saved, attempts, pass_threshold, timeouts);
    check_resumable(&dir, &lock)?;

    Ok(JobSpec {
        name,
        dir,
        tasks: tasks.into_iter().map(Arc::new).collect(),
        images,
        agents: agents.into_iter().map(Arc::new).collect(),
        variants: variants.into_iter().map(Arc::new).collect(),
        arms,
        attempts,
        concurrency,
        pass_threshold,
        log_cap_bytes: log_cap_mb * 1024 * 1024,
        kill_grace: Duration::from_secs(3),
        timeouts,
        retry,
        config_yaml,
        lock,
    })
}

/// An existing job dir may only be continued by a config that does not change its trials.
fn check_resumable(dir: &Path, lock: &Lock) -> Result<(), ConfigError> {
    let path = dir.join("lock.json");
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(());
    };
    let shown = dir.join("job.yaml").display().to_string();
    let old: Lock = serde_json::from_slice(&bytes).map_err(|e| {
        field(
            path.display().to_string(),
            "file",
            format!("unreadable ({e}); use a new --job-dir"),
        )
    })?;
    match old.changes_to(lock) {
        None => Ok(()),
        Some((what, change)) => Err(field(
            shown,
            what,
            format!(
                "{change} since this job started; its trials would differ (adding attempts, tasks, agents or variants is fine; use a new --job-dir for anything else)"
            ),
        )),
    }
}

fn resolve_variants(
    args: &RunArgs,
    config: &JobConfig,
    config_name: &str,
    agents: &[Agent],
) -> Result<Vec<Variant>, ConfigError> {
    let mut defined: Vec<Variant> = Vec::new();
    for (i, variant) in config.variants.iter().enumerate() {
        if !valid_name(&variant.name) {
            return Err(field(
                config_name,
                format!("variants[{i}].name"),
                format!(
                    "{:?} must be non-empty and use only A-Z a-z 0-9 . _ -",
                    variant.name
                ),
            ));
        }
        if defined.iter().any(|v| v.name == variant.name) {
            return Err(field(
                config_name,
                format!("variants[{i}].name"),
                format!("variant {:?} is defined twice", variant.name),
            ));
        }
        check_not_redacted(&variant.env, config_name, &format!("variants[{i}]"))?;
        resolve_env(&variant.env).map_err(|e| {
            field(
                config_name,
                format!("variants[{i}].env.{}", e.key()),
                e.reason(),
            )
        })?;
        if let Some(names) = &variant.agents {
            for (j, name) in names.iter().enumerate() {
                let Some(agent) = agents.iter().find(|a| &a.name == name) else {
                    let known: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
                    return Err(field(
                        config_name,
                        format!("variants[{i}].agents[{j}]"),
                        format!(
                            "unknown agent {name:?} (agents in this job: {})",
                            known.join(", ")
                        ),
                    ));
                };
                check_args(variant, agent, config_name, i)?;
            }
        } else {
            for agent in agents {
                check_args(variant, agent, config_name, i)?;
            }
        }
        defined.push(variant.clone());
    }
    if args.variants.is_empty() {
        return Ok(if defined.is_empty() {
            vec![Variant::default_variant()]
        } else {
            defined
        });
    }
    let mut chosen: Vec<Variant> = Vec::new();
    for name in &args.variants {
        let variant = if name == "default" && defined.is_empty() {
            Variant::default_variant()
        } else {
            let known: Vec<&str> = defined.iter().map(|v| v.name.as_str()).collect();
            defined
                .iter()
                .find(|v| &v.name == name)
                .cloned()
                .ok_or_else(|| {
                    field(
                        "--variant",
                        name,
                        format!(
                            "unknown variant (defined: {})",
                            if known.is_empty() {
                                "none".to_string()
                            } else {
                                known.join(", ")
                            }
                        ),
                    )
                })?
        };
        if !chosen.iter().any(|v| v.name == variant.name) {
            chosen.push(variant);
        }
    }
    Ok(chosen)
}

fn check_args(
    variant: &Variant,
    agent: &Agent,
    config_name: &str,
    i: usize,
) -> Result<(), ConfigError> {
    if !variant.args.is_empty() && !matches!(agent.kind, AgentKind::Command(_)) {
        return Err(field(
            config_name,
            format!("variants[{i}].args"),
            format!(
                "agent {:?} is built in and takes no arguments (limit the variant with agents: [...])",
                agent.name
            ),
        ));
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A saved `job.yaml` holds `***` where a literal secret was; it cannot be run again as is.
fn check_not_redacted(
    env: &BTreeMap<String, String>,
    config_name: &str,
    at: &str,
) -> Result<(), ConfigError> {
    match env.iter().find(|(_, v)| v.as_str() == "***") {
        Some((key, _)) => Err(field(
            config_name,
            format!("{at}.env.{key}"),
            "the value was redacted when the job was saved; give secrets as ${NAME} references, or run the original config with --job-dir",
        )),
        None => Ok(()),
    }
}

fn flag_or(config_name: &str, from_flag: bool, flag: &str) -> String {
    if from_flag {
        flag.to_string()
    } else {
        config_name.to_string()
    }
}

fn redacted(agent: &Agent) -> Agent {
    agent.redacted()
}

fn resolve_agents(
    args: &RunArgs,
    config: &JobConfig,
    config_name: &str,
) -> Result<Vec<Agent>, ConfigError> {
    let mut defined: Vec<Agent> = Vec::new();
    for (i, entry) in config.agents.iter().enumerate() {
        let agent = match entry {
            AgentEntry::Name(name) => Agent::builtin(name).ok_or_else(|| {
                field(config_name, format!("agents[{i}]"), format!("unknown agent {name:?} (built-in: {BUILTINS}; or define one with name: and kind:)"))
            })?,
            AgentEntry::Def(agent) => agent.clone(),
        };
        if !valid_name(&agent.name) {
            return Err(field(
                config_name,
                format!("agents[{i}].name"),
                format!(
                    "{:?} must be non-empty and use only A-Z a-z 0-9 . _ -",
                    agent.name
                ),
            ));
        }
        if let AgentKind::Command(cmd) = &agent.kind {
            check_not_redacted(&cmd.env, config_name, &format!("agents[{i}]"))?;
            if cmd.run.is_empty() {
                return Err(field(
                    config_name,
                    format!("agents[{i}].run"),
                    "must name a command (a non-empty list)",
                ));
            }
            resolve_env(&cmd.env).map_err(|e| {
                field(
                    config_name,
                    format!("agents[{i}].env.{}", e.key()),
                    e.reason(),
                )
            })?;
            for (m, mount) in cmd.mounts.iter().enumerate() {
                if !mount.host.exists() {
                    return Err(field(
                        config_name,
                        format!("agents[{i}].mounts[{m}].host"),
                        format!("{} does not exist", mount.host.display()),
                    ));
                }
            }
        }
        agent
            .validate()
            .map_err(|e| field(config_name, format!("agents[{i}].{}", e.field), e.message))?;
        if defined.iter().any(|a| a.name == agent.name) {
            return Err(field(
                config_name,
                format!("agents[{i}].name"),
                format!("agent {:?} is defined twice", agent.name),
            ));
        }
        defined.push(agent);
    }
    if args.agents.is_empty() {
        if defined.is_empty() {
            return Err(field(
                config_name,
                "agents",
                format!("no agents given (pass --agent NAME; built-in: {BUILTINS})"),
            ));
        }
        return Ok(defined);
    }
    let mut chosen = Vec::new();
    for name in &args.agents {
        let agent = defined
            .iter()
            .find(|a| &a.name == name)
            .cloned()
            .or_else(|| Agent::builtin(name))
            .ok_or_else(|| field("--agent", name, format!("unknown agent (built-in: {BUILTINS}; or define it under agents: in job.yaml)")))?;
        if !chosen.iter().any(|a: &Agent| a.name == agent.name) {
            chosen.push(agent);
        }
    }
    Ok(chosen)
}

fn expand_tasks(
    patterns: &[String],
    source: &str,
    base: &Path,
) -> Result<Vec<PathBuf>, ConfigError> {
    let mut dirs = Vec::new();
    for (i, pattern) in patterns.iter().enumerate() {
        let full = if Path::new(pattern).is_absolute() {
            PathBuf::from(pattern)
        } else {
            base.join(pattern)
        };
        let label = if source == "arguments" {
            pattern.clone()
        } else {
            format!("tasks[{i}]")
        };
        if pattern.contains(['*', '?', '[']) {
            let matches = glob::glob(&full.to_string_lossy())
                .map_err(|e| field(source, &label, format!("bad glob: {e}")))?;
            let mut found: Vec<PathBuf> = matches
                .filter_map(Result::ok)
                .filter(|p| p.join("task.toml").is_file())
                .collect();
            if found.is_empty() {
                return Err(field(
                    source,
                    &label,
                    format!("{pattern} matches no task directory"),
                ));
            }
            found.sort();
            dirs.extend(found);
        } else {
            if !full.is_dir() {
                let shown = if source == "arguments" {
                    pattern.clone()
                } else {
                    full.display().to_string()
                };
                return Err(field(shown, "path", "no such task directory"));
            }
            dirs.push(full);
        }
    }
    let mut seen = BTreeSet::new();
    dirs.retain(|d| seen.insert(d.canonicalize().unwrap_or_else(|_| d.clone())));
    Ok(dirs)
}

/// One line for a YAML problem: serde_yaml's message, which names the field path and location.
fn yaml_error(file: &str, e: &serde_yaml::Error) -> ConfigError {
    let message = e
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    match message.split_once(": ") {
        Some((path, rest)) if !path.contains(' ') => field(file, path, rest),
        _ => ConfigError::Field {
            source_name: file.to_string(),
            field: "yaml".to_string(),
            message,
        },
    }
}
