//! Flags + `job.yaml` → a validated [`JobSpec`]: the config is read, tasks expanded and
//! loaded, agents and variants resolved, every number checked, and the job's lock compared with
//! an existing job dir's — all before an engine is contacted.
//!
//! Over 600 lines: every check a job config gets before anything starts, each a named step, with its one-line error.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::agent::{Agent, AgentKind, redact_env, resolve_env};
use crate::task::{ImageSource, Task};

use super::config::{
    AgentEntry, ConfigError, JobConfig, RetryPolicy, RunArgs, TimeoutMultipliers, Variant, field,
};
use super::lock::Lock;
use super::plan::{JobSpec, image_spec, trial_id, verifier_image_spec};

const BUILTINS: &str = "oracle, nop";

/// Turn flags (and the config file they name) into a job.
pub fn resolve(args: &RunArgs) -> Result<JobSpec, ConfigError> {
    // Before its job.yaml is read (an imported one is not runnable).
    if let Some(dir) = &args.job_dir {
        refuse_imported(dir)?;
    }
    let (mut config, config_name, base) = read_config(args)?;
    apply_model_flag(args, &mut config)?;
    let mut tasks = load_tasks(args, &config, &config_name, &base)?;
    if let Some(mode) = config.integrity {
        for task in &mut tasks {
            task.verifier.integrity = mode;
        }
    }
    // `--network` over the config's `network:`; saved in job.yaml, so a resume keeps it.
    let network = match args.network {
        Some(mode) => Some(super::NetworkOverride::every_phase(mode)),
        None => config.network.filter(|n| !n.is_empty()),
    };
    if let Some(network) = &network {
        for task in &mut tasks {
            network.apply(task);
        }
    }
    crate::gateway::validate_models(&config.models)
        .map_err(|e| field(&config_name, e.field, e.message))?;
    let agents = resolve_agents(args, &config, &config_name, &base)?;
    let models = resolve_models(&config, &config_name, &base, &agents)?;
    check_tasks(&tasks, &agents)?;
    let variants = resolve_variants(args, &config, &config_name, &agents)?;
    let knobs = Knobs::resolve(args, &config, &config_name)?;

    let dir = match (&args.job_dir, &config.job_dir) {
        (Some(d), _) => d.clone(),
        (None, Some(d)) => base.join(d),
        (None, None) => PathBuf::from("jobs").join(crate::timefmt::now_compact()),
    };
    refuse_imported(&dir)?;
    let name = config
        .name
        .clone()
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "job".to_string());
    let arms = arms(&tasks, &agents, &variants, &config_name)?;
    let (mut images, mut verifier_images) = (Vec::new(), Vec::new());
    for task in &tasks {
        images.push(image_spec(
            task,
            context_digest(&task.environment.source)?.as_deref(),
            knobs.timeouts.build,
        ));
        let verifier_digest = match &task.verifier.environment {
            Some(env) => context_digest(&env.source)?,
            None => None,
        };
        verifier_images.push(verifier_image_spec(
            task,
            verifier_digest.as_deref(),
            knobs.timeouts.build,
        ));
    }

    // Flags over the config's `backend:`; saved in job.yaml (a resume keeps it), not locked.
    let backend = config
        .backend
        .clone()
        .unwrap_or_default()
        .with_flags(&args.backend);
    // `--otlp` over the config's `otlp:`; saved in job.yaml (a resume keeps sending), not locked.
    let otlp = match (&args.otlp, &config.otlp) {
        (Some(url), _) => Some(
            crate::interop::otlp::traces_url(url)
                .map_err(|message| field("--otlp", "otlp.endpoint", message))?,
        ),
        (None, Some(otlp)) => Some(
            crate::interop::otlp::traces_url(&otlp.endpoint)
                .map_err(|message| field(&config_name, "otlp.endpoint", message))?,
        ),
        (None, None) => None,
    };
    let mut saved = saved_config(&name, &tasks, &agents, &variants, &knobs, &config, network);
    saved.backend = (backend != crate::sandbox::BackendConfig::default()).then(|| backend.clone());
    saved.otlp = otlp
        .clone()
        .map(|endpoint| super::config::OtlpConfig { endpoint });
    let config_yaml =
        serde_yaml::to_string(&saved).map_err(|e| field(&config_name, "job", e.to_string()))?;
    let lock = Lock::new(
        &tasks,
        &images,
        &saved,
        knobs.attempts,
        knobs.pass_threshold,
        knobs.timeouts,
    );
    check_resumable(&dir, &lock)?;

    Ok(JobSpec {
        name,
        dir,
        tasks: tasks.into_iter().map(Arc::new).collect(),
        images,
        verifier_images,
        agents: agents.into_iter().map(Arc::new).collect(),
        variants: variants.into_iter().map(Arc::new).collect(),
        arms,
        attempts: knobs.attempts,
        concurrency: knobs.concurrency,
        pass_threshold: knobs.pass_threshold,
        log_cap_bytes: knobs.log_cap_mb * 1024 * 1024,
        change_content_cap_bytes: knobs.change_content_cap_mb.saturating_mul(1024 * 1024),
        kill_grace: Duration::from_secs(3),
        timeouts: knobs.timeouts,
        retry: knobs.retry,
        retry_infra: args.retry_infra || knobs.retry.rerun_infra_errors,
        config_yaml,
        lock,
        models,
        keep_snapshots: BTreeSet::new(),
        network: network.unwrap_or_default(),
        backend,
        otlp,
    })
}

/// `--model PROVIDER/NAME`: the implied provider joins `models:`, preset agents get the
/// model, and `--agent <preset kind>` without a definition becomes that preset
/// (`agent::presets::model_flag`).
fn apply_model_flag(args: &RunArgs, config: &mut JobConfig) -> Result<(), ConfigError> {
    use crate::agent::presets::model_flag;
    let Some(spec) = &args.model else {
        return Ok(());
    };
    let flag = model_flag::parse_model_flag(spec, &config.models, |k| std::env::var(k).ok())
        .map_err(|message| field("--model", spec, message))?;
    let mut defined: Vec<Agent> = config
        .agents
        .iter()
        .filter_map(|e| match e {
            AgentEntry::Def(a) => Some(a.clone()),
            AgentEntry::Name(_) => None,
        })
        .collect();
    let added = model_flag::apply_model_flag(&flag, &mut defined, &args.agents);
    let mut defined = defined.into_iter();
    for entry in &mut config.agents {
        if let (AgentEntry::Def(a), Some(updated)) = (&mut *entry, defined.next()) {
            *a = updated;
        }
    }
    config.agents.extend(added.into_iter().map(AgentEntry::Def));
    config.models.extend(flag.implied);
    Ok(())
}

/// The job's `models:` resolved (keys from arbiter's environment, scripts loaded relative to
/// the job file), when any agent has a model; none otherwise (an unused provider's key need not
/// be set).
fn resolve_models(
    config: &JobConfig,
    config_name: &str,
    base: &Path,
    agents: &[Agent],
) -> Result<Vec<crate::gateway::ResolvedModel>, ConfigError> {
    if !agents.iter().any(|a| a.kind.model().is_some()) {
        return Ok(Vec::new());
    }
    config
        .models
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            agents
                .iter()
                .any(|a| a.kind.model().is_some_and(|(am, _)| am.provider == m.name))
        })
        .map(|(i, m)| {
            m.resolve(i, base)
                .map_err(|e| field(config_name, e.field, e.message))
        })
        .collect()
}

/// The config file named by `-c` (or an empty one), how errors name it, and the directory
/// its relative paths start from.
fn read_config(args: &RunArgs) -> Result<(JobConfig, String, PathBuf), ConfigError> {
    Ok(match &args.config {
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
    })
}

/// The tasks named on the command line, else in the config (relative to it).
fn load_tasks(
    args: &RunArgs,
    config: &JobConfig,
    config_name: &str,
    base: &Path,
) -> Result<Vec<Task>, ConfigError> {
    let (patterns, pattern_source, pattern_base) = if args.tasks.is_empty() {
        (
            config.tasks.clone(),
            config_name.to_string(),
            base.to_path_buf(),
        )
    } else {
        (args.tasks.clone(), "arguments".to_string(), PathBuf::new())
    };
    if patterns.is_empty() {
        return Err(field(
            config_name,
            "tasks",
            "no tasks given (pass task directories, or list them under tasks: in job.yaml)",
        ));
    }
    let dirs = expand_tasks(&patterns, &pattern_source, &pattern_base)?;
    // A dataset (a directory of task dirs, with or without Harbor's `dataset.toml` /
    // `registry.json`) stands for its tasks.
    let mut dirs = crate::task::expand_task_dirs(&dirs)?;
    let mut seen = BTreeSet::new();
    dirs.retain(|d| seen.insert(d.canonicalize().unwrap_or_else(|_| d.clone())));
    let tasks = crate::task::load_all(&dirs)?;
    for task in &tasks {
        for warning in &task.warnings {
            tracing::warn!("{warning}");
        }
    }
    Ok(tasks)
}

/// The digest of a build context (`None` for a named image).
fn context_digest(source: &ImageSource) -> Result<Option<String>, ConfigError> {
    Ok(match source {
        ImageSource::Build { context, .. } => Some(crate::task::dir_checksum(context)?),
        ImageSource::Image(_) => None,
    })
}

/// What no trial of these tasks could run with: an oracle
/// without a solution, an env reference (`[environment] env`, `[verifier] env`, and
/// `[solution] env` when the oracle runs) that does not resolve.
fn check_tasks(tasks: &[Task], agents: &[Agent]) -> Result<(), ConfigError> {
    let oracle = agents.iter().any(|a| matches!(a.kind, AgentKind::Oracle));
    for task in tasks {
        for agent in agents {
            // `Agent::check`: a multi-step task may have a solution per step (harbor-steps).
            if matches!(agent.kind, AgentKind::Oracle) && agent.check(task).is_err() {
                return Err(field(
                    task.dir.join("solution").display().to_string(),
                    "solve.sh",
                    "missing: the oracle agent needs a reference solution",
                ));
            }
        }
        let tables = [
            ("environment", &task.environment.env),
            ("verifier", &task.verifier.env),
            ("solution", &task.solution_env),
        ];
        for (table, env) in tables {
            if table == "solution" && !oracle {
                continue;
            }
            resolve_env(env).map_err(|e| {
                field(
                    task.dir.join("task.toml").display().to_string(),
                    format!("{table}.env.{}", e.key()),
                    e.reason(),
                )
            })?;
        }
    }
    Ok(())
}

/// The job's numbers, flags over config over defaults, each checked.
struct Knobs {
    attempts: u32,
    concurrency: usize,
    pass_threshold: f64,
    log_cap_mb: u64,
    change_content_cap_mb: u64,
    timeouts: TimeoutMultipliers,
    retry: RetryPolicy,
}

impl Knobs {
    fn resolve(args: &RunArgs, config: &JobConfig, config_name: &str) -> Result<Self, ConfigError> {
        let attempts = args.attempts.or(config.attempts).unwrap_or(1);
        if attempts == 0 {
            return Err(field(
                flag_or(config_name, args.attempts.is_some(), "-k"),
                "attempts",
                "must be at least 1",
            ));
        }
        let concurrency = args.concurrency.or(config.concurrency).unwrap_or(1);
        if concurrency == 0 {
            return Err(field(
                flag_or(config_name, args.concurrency.is_some(), "-n"),
                "concurrency",
                "must be at least 1",
            ));
        }
        let pass_threshold = args.pass_threshold.or(config.pass_threshold).unwrap_or(1.0);
        if !pass_threshold.is_finite() {
            return Err(field(
                flag_or(
                    config_name,
                    args.pass_threshold.is_some(),
                    "--pass-threshold",
                ),
                "pass_threshold",
                "must be a finite number",
            ));
        }
        let log_cap_mb = config.log_cap_mb.unwrap_or(10);
        if log_cap_mb == 0 {
            return Err(field(config_name, "log_cap_mb", "must be at least 1"));
        }
        let change_content_cap_mb = config
            .change_content_cap_mb
            .unwrap_or(crate::trial::content::DEFAULT_CONTENT_CAP_MB);
        let timeouts = config.timeouts.unwrap_or_default();
        for (key, value) in [
            ("agent", timeouts.agent),
            ("verifier", timeouts.verifier),
            ("build", timeouts.build),
            ("install", timeouts.install),
        ] {
            if !(value.is_finite() && value > 0.0 && value <= 1000.0) {
                return Err(field(
                    config_name,
                    format!("timeouts.{key}"),
                    format!("must be a multiplier above 0 and at most 1000 (got {value})"),
                ));
            }
        }
        let retry = config.retries.unwrap_or_default();
        if retry.max > 100 {
            return Err(field(
                config_name,
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
                    config_name,
                    format!("retries.{key}"),
                    format!("must be between 0 and 3600 seconds (got {value})"),
                ));
            }
        }
        Ok(Knobs {
            attempts,
            concurrency,
            pass_threshold,
            log_cap_mb,
            change_content_cap_mb,
            timeouts,
            retry,
        })
    }
}

/// The (agent, variant) pairs that run; two that map to the same trial id are refused.
fn arms(
    tasks: &[Task],
    agents: &[Agent],
    variants: &[Variant],
    config_name: &str,
) -> Result<Vec<(usize, usize)>, ConfigError> {
    let mut arms = Vec::new();
    for (a, agent) in agents.iter().enumerate() {
        for (v, variant) in variants.iter().enumerate() {
            if variant.applies_to(&agent.name) {
                arms.push((a, v));
            }
        }
    }
    let mut ids = BTreeSet::new();
    for task in tasks {
        for &(a, v) in &arms {
            // Harbor steps already run the agent several times in one container, each step
            // judged by its own verifier: attempts inside steps would mix the two loops.
            if !task.steps.is_empty()
                && (variants[v].continuation.is_some() || agents[a].continuation.is_some())
            {
                let at = if variants[v].continuation.is_some() {
                    format!("variants.{}.continuation", variants[v].name)
                } else {
                    format!("agents.{}.continuation", agents[a].name)
                };
                return Err(field(
                    config_name,
                    at,
                    format!(
                        "task {} is a multi-step task ([[steps]]); goal continuation runs single-step tasks only",
                        task.name
                    ),
                ));
            }
            let id = trial_id(&task.name, &agents[a].name, &variants[v].name, 1);
            if !ids.insert(id.clone()) {
                return Err(field(
                    config_name,
                    "tasks",
                    format!(
                        "two tasks, agents or variants map to the same trial id {id}; rename one"
                    ),
                ));
            }
        }
    }
    Ok(arms)
}

/// A job dir made by `arbiter import` is read-only: nothing runs into it.
fn refuse_imported(dir: &Path) -> Result<(), ConfigError> {
    match super::imported_marker(dir) {
        Some(marker) => Err(field(
            marker.display().to_string(),
            "from",
            "this job dir was imported from another harness's records and is read-only: run, resume and verify refuse it (report, compare, check and index read it)",
        )),
        None => Ok(()),
    }
}

/// The resolved config as saved in the job dir's `job.yaml` (secrets redacted); loadable again.
fn saved_config(
    name: &str,
    tasks: &[Task],
    agents: &[Agent],
    variants: &[Variant],
    knobs: &Knobs,
    config: &JobConfig,
    network: Option<super::NetworkOverride>,
) -> JobConfig {
    JobConfig {
        name: Some(name.to_string()),
        tasks: tasks.iter().map(|t| t.dir.display().to_string()).collect(),
        agents: agents
            .iter()
            .map(|a| AgentEntry::Def(redacted(a)))
            .collect(),
        attempts: Some(knobs.attempts),
        concurrency: Some(knobs.concurrency),
        pass_threshold: Some(knobs.pass_threshold),
        job_dir: None,
        log_cap_mb: Some(knobs.log_cap_mb),
        change_content_cap_mb: Some(knobs.change_content_cap_mb),
        variants: variants
            .iter()
            .filter(|v| **v != Variant::default_variant())
            .map(|v| Variant {
                env: redact_env(&v.env),
                ..v.clone()
            })
            .collect(),
        timeouts: Some(knobs.timeouts),
        retries: Some(knobs.retry),
        models: config.models.clone(),
        integrity: config.integrity,
        network,
        backend: None,
        otlp: None,
    }
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
        if let Some(problem) = variant.continuation.as_ref().and_then(|c| c.problem()) {
            return Err(field(
                config_name,
                format!("variants[{i}].continuation.max_attempts"),
                problem,
            ));
        }
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
    let takes_args = matches!(agent.kind, AgentKind::Command(_)) || agent.kind.preset().is_some();
    if !variant.args.is_empty() && !takes_args {
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
    base: &Path,
) -> Result<Vec<Agent>, ConfigError> {
    let mut defined: Vec<Agent> = Vec::new();
    let mut cache = None;
    for (i, entry) in config.agents.iter().enumerate() {
        let mut agent = match entry {
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
        check_network(&mut agent, config_name, i)?;
        if let Some(problem) = agent.continuation.as_ref().and_then(|c| c.problem()) {
            return Err(field(
                config_name,
                format!("agents[{i}].continuation.max_attempts"),
                problem,
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
        }
        crate::agent::resolve_mounts(&mut agent, base)
            .map_err(|e| field(config_name, format!("agents[{i}].{}", e.field), e.message))?;
        agent
            .validate()
            .map_err(|e| field(config_name, format!("agents[{i}].{}", e.field), e.message))?;
        if let AgentKind::Aworld(aw) = &mut agent.kind {
            // Gateway model (names a `models:` entry) or the literal base_url/api_key form.
            aw.route_model(&config.models)
                .map_err(|e| field(config_name, format!("agents[{i}].{}", e.field), e.message))?;
        }
        check_model(&agent, &config.models, config_name, i)?;
        if let Some((kind, _)) = agent.kind.preset() {
            if agent.kind.model().is_none() {
                return Err(field(
                    config_name,
                    format!("agents[{i}].model"),
                    format!(
                        "required for kind {}: it reaches its model through arbiter's gateway (model: {{provider: <a models: entry>, name: <model>}})",
                        kind.name()
                    ),
                ));
            }
            if cache.is_none() {
                cache = Some(crate::agent::cache::AgentCache::from_env().map_err(|e| {
                    field(config_name, format!("agents[{i}].version"), e.to_string())
                })?);
            }
            if let Some(cache) = &cache {
                agent.check_installed(cache).map_err(|e| {
                    field(config_name, format!("agents[{i}].{}", e.field), e.message)
                })?;
            }
        }
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

/// An agent's `network:` override and its `allowed_hosts` (task.toml's rules: hosts without a
/// `network` mean `allowlist`; entries are checked and normalized like the task's).
fn check_network(agent: &mut Agent, config_name: &str, i: usize) -> Result<(), ConfigError> {
    use crate::agent::AgentNetwork;
    if agent.allowed_hosts.is_empty() {
        if agent.network == Some(AgentNetwork::Allowlist) {
            return Err(field(
                config_name,
                format!("agents[{i}].allowed_hosts"),
                "required with network: allowlist (the hosts the agent may reach)",
            ));
        }
        return Ok(());
    }
    match agent.network {
        None => agent.network = Some(AgentNetwork::Allowlist),
        Some(AgentNetwork::Allowlist) => {}
        Some(other) => {
            return Err(field(
                config_name,
                format!("agents[{i}].allowed_hosts"),
                format!(
                    "only used with network: allowlist (network is {:?})",
                    other.as_str()
                ),
            ));
        }
    }
    let mut hosts: Vec<String> = Vec::new();
    for (j, raw) in agent.allowed_hosts.iter().enumerate() {
        let host = crate::task::check_host(raw)
            .map_err(|why| field(config_name, format!("agents[{i}].allowed_hosts[{j}]"), why))?;
        if !hosts.contains(&host) {
            hosts.push(host);
        }
    }
    agent.allowed_hosts = hosts;
    Ok(())
}

/// An agent's `model:` names a `models:` entry and its `budget:` is sound; a `budget:` needs a
/// `model:`.
fn check_model(
    agent: &Agent,
    models: &[crate::gateway::ModelConfig],
    config_name: &str,
    i: usize,
) -> Result<(), ConfigError> {
    if agent.kind.budget_without_model() {
        return Err(field(
            config_name,
            format!("agents[{i}].budget"),
            "needs a model: (budgets limit the calls made through arbiter's gateway)",
        ));
    }
    if let Some((model, budget)) = agent.kind.model() {
        crate::gateway::validate_agent_model(&format!("agents[{i}]"), models, model, budget)
            .map_err(|e| field(config_name, e.field, e.message))?;
    }
    Ok(())
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
                .filter(|p| {
                    ["task.toml", "dataset.toml", "registry.json"]
                        .iter()
                        .any(|f| p.join(f).is_file())
                })
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
