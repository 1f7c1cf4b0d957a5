//! From command-line flags and an optional `job.yaml` to a validated [`JobSpec`]. Every
//! problem is found here, before any container starts, and reported as one line naming the
//! file (or flag) and the field.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::{Agent, AgentKind, resolve_env};
use crate::task::{ImageSource, TaskError, VerifierMode};

use super::plan::{JobSpec, ResolvedJob, ResolvedTask, image_spec, trial_id};

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
            &config_name,
            "pass_threshold",
            "must be a finite number",
        ));
    }
    let log_cap_bytes = config.log_cap_mb.unwrap_or(10).max(1) * 1024 * 1024;

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

    let mut ids = BTreeSet::new();
    for task in &tasks {
        for agent in &agents {
            let id = trial_id(&task.name, &agent.name, "default", 1);
            if !ids.insert(id.clone()) {
                return Err(field(
                    &config_name,
                    "tasks",
                    format!("two tasks or agents map to the same trial id {id}; rename one"),
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
        images.push(image_spec(task, digest.as_deref()));
    }

    let resolved = ResolvedJob {
        name: &name,
        tasks: tasks
            .iter()
            .map(|t| ResolvedTask {
                name: &t.name,
                path: t.dir.display().to_string(),
                checksum: &t.checksum,
            })
            .collect(),
        agents: agents.iter().map(redacted).collect(),
        attempts,
        concurrency,
        pass_threshold,
        log_cap_bytes,
    };
    let resolved_yaml =
        serde_yaml::to_string(&resolved).map_err(|e| field(&config_name, "job", e.to_string()))?;

    Ok(JobSpec {
        name,
        dir,
        tasks: tasks.into_iter().map(Arc::new).collect(),
        images,
        agents: agents.into_iter().map(Arc::new).collect(),
        attempts,
        concurrency,
        pass_threshold,
        log_cap_bytes,
        kill_grace: Duration::from_secs(3),
        resolved_yaml,
    })
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
        if let AgentKind::Command(cmd) = &agent.kind {
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
