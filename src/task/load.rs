//! Loading task directories: `task.toml` via `config.rs`, then the
//! files the layout requires, then one walk for symlinks and the checksum.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::checksum;
use super::compose;
use super::config::{self, check_name, only_for_allowlist};
use super::error::{FileCtx, TaskError, TaskErrorKind, quote};
use super::files::{missing, read_prompt, read_text, separate_source};
use super::model::{ImageSource, Task, VerifierMode};
use super::steps;

type Result<T> = std::result::Result<T, TaskError>;

/// Loads and validates one task directory.
///
/// Error messages name files as `dir` was spelled (joined with the file
/// name); `Task::dir` and every path inside the returned task are canonical.
pub fn load(dir: &Path) -> Result<Task> {
    let toml_shown = dir.join("task.toml");
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(not_a_task_dir(dir, "not a directory")),
        Err(_) => return Err(not_a_task_dir(dir, "no task.toml")),
    }
    match fs::metadata(&toml_shown) {
        Ok(meta) if meta.is_file() => {}
        _ => return Err(not_a_task_dir(dir, "no task.toml")),
    }
    let root = fs::canonicalize(dir).map_err(|e| {
        TaskError::new(
            TaskErrorKind::Io,
            dir,
            None,
            format!("cannot resolve the directory ({e})"),
        )
    })?;

    let ctx = FileCtx::new(&toml_shown);
    let text = read_text(&toml_shown, "task.toml")?;
    let cfg = config::parse(&ctx, &text)?;
    let mut warnings = cfg.warnings;

    let name = match &cfg.name {
        Some(name) => {
            check_name(name).map_err(|what| ctx.value("task.name", what))?;
            name.clone()
        }
        None => {
            let dir_name = root.file_name().and_then(|n| n.to_str()).unwrap_or("");
            check_name(dir_name).map_err(|_| {
                ctx.value(
                    "task.name",
                    format!(
                        "the directory name {} is not a valid task name (allowed: a-z A-Z 0-9 . _ / -); set [task] name",
                        quote(dir_name)
                    ),
                )
            })?;
            dir_name.to_string()
        }
    };

    let multi_step = !cfg.steps.is_empty();
    let instruction = if multi_step {
        // Harbor never shows a multi-step task's own instruction.md: optional.
        let path = dir.join("instruction.md");
        if path.is_file() {
            read_text(&path, "instruction.md")?
        } else {
            String::new()
        }
    } else {
        read_instruction(dir)?
    };

    let environment_dir = root.join("environment");
    let compose = match compose::find(&environment_dir) {
        Some(file) => {
            let shown = dir.join("environment").join(file);
            let text = read_text(&shown, file)?;
            let (compose, compose_warnings) = compose::parse(
                &FileCtx::new(&shown),
                &text,
                environment_dir.join(file),
                &environment_dir,
                &root,
            )?;
            warnings.extend(compose_warnings);
            Some((file, compose))
        }
        None => None,
    };
    let main_source = compose.as_ref().and_then(|(_, c)| {
        let main = c.main_service()?;
        match (&main.build, &main.image) {
            (Some(build), _) => Some(ImageSource::Build {
                context: build.context.clone(),
                dockerfile: build.dockerfile.clone(),
            }),
            (None, Some(image)) => Some(ImageSource::Image(image.clone())),
            (None, None) => None,
        }
    });
    let source = match (main_source, &cfg.environment.docker_image) {
        (Some(source), _) => source,
        (None, Some(image)) => ImageSource::Image(image.clone()),
        (None, None) => {
            let dockerfile = environment_dir.join("Dockerfile");
            if !dockerfile.is_file() {
                let why = match &compose {
                    Some((file, _)) => format!(
                        "the main service of environment/{file} names no build or image, so it is built from environment/Dockerfile; or set [environment] docker_image in task.toml"
                    ),
                    None => "the task image is built from it; or set [environment] docker_image in task.toml".to_string(),
                };
                return Err(missing(&dir.join("environment").join("Dockerfile"), &why));
            }
            ImageSource::Build {
                context: environment_dir.clone(),
                dockerfile,
            }
        }
    };

    let tests_dir = root.join("tests");
    if !multi_step && !tests_dir.join("test.sh").is_file() {
        return Err(missing(
            &dir.join("tests").join("test.sh"),
            "the verifier entry point; it writes /logs/verifier/reward.txt or reward.json",
        ));
    }

    let solution_path = root.join("solution");
    let solution_dir = if solution_path.is_dir() {
        if !solution_path.join("solve.sh").is_file() {
            return Err(missing(
                &dir.join("solution").join("solve.sh"),
                "solution/ exists, so the oracle agent needs solution/solve.sh",
            ));
        }
        Some(solution_path)
    } else {
        None
    };

    let (agent_network, agent_hosts) = match cfg.agent_network.clone() {
        Some(policy) => policy,
        None => cfg.environment.baseline(),
    };
    let agent_hosts = only_for_allowlist(agent_network, agent_hosts);
    let mut verifier = cfg.verifier;
    if verifier.mode == VerifierMode::Separate {
        // Harbor: [verifier.environment] when given, else a fresh copy of the
        // task's [environment]. Without docker_image, tests/Dockerfile is
        // built when present (SPEC §5), else the task's own image source.
        // A copy of [environment] does not bring its docker_image: tests/Dockerfile, when
        // present, is then the verifier's own image.
        let env = cfg
            .verifier_environment
            .clone()
            .unwrap_or_else(|| config::EnvConfig {
                docker_image: None,
                ..cfg.environment.clone()
            });
        let verifier_source = separate_source(&env, &[&tests_dir], &source);
        verifier.environment = Some(env.into_spec(
            verifier_source,
            verifier.network,
            verifier.allowed_hosts.clone(),
        ));
    }
    let steps = steps::load(
        dir,
        &root,
        cfg.steps,
        &steps::TaskLevel {
            agent: &cfg.agent,
            network: (agent_network, &agent_hosts),
            verifier: &verifier,
            verifier_environment: cfg.verifier_environment.as_ref(),
            environment: &cfg.environment,
            source: &source,
            tests_dir: &tests_dir,
        },
    )?;
    // The steps share one agent container, whose network is the task's (harbor-steps).
    for (i, step) in steps.iter().enumerate() {
        if step.network != agent_network {
            warnings.push(ctx.warning(
                &format!("steps[{i}].agent.network_mode"),
                format!(
                    "not applied: the steps share one container, which keeps the task's agent network ({})",
                    agent_network.as_str()
                ),
            ));
        }
    }
    let mut environment = cfg
        .environment
        .into_spec(source, agent_network, agent_hosts);
    environment.compose = compose.map(|(_, c)| c);
    // The main service's `environment` is the task container's env; task.toml's wins.
    for (key, value) in environment.compose.iter().flat_map(|c| c.main_env()) {
        environment.env.entry(key).or_insert(value);
    }
    // The main service's `working_dir` and `user` are where and as whom its container starts
    // (as under compose and Harbor) unless task.toml says otherwise.
    let mut agent = cfg.agent;
    if let Some(main) = environment.compose.as_ref().and_then(|c| c.main_service()) {
        if environment.workdir.is_none() {
            environment.workdir = main.working_dir.clone();
        }
        if agent.user.is_none() {
            agent.user = main.user.clone();
        }
        if verifier.user.is_none() {
            verifier.user = main.user.clone();
        }
    }

    let scan = checksum::scan(&root, dir)?;
    warnings.extend(scan.warnings);

    tracing::debug!(task = %name, dir = %root.display(), checksum = %scan.checksum, "loaded task");
    Ok(Task {
        name,
        dir: root,
        instruction,
        checksum: scan.checksum,
        agent,
        verifier,
        environment,
        tests_dir,
        solution_dir,
        solution_env: cfg.solution_env,
        artifacts: cfg.artifacts,
        completion: cfg.completion,
        steps,
        multi_step_reward: cfg.multi_step_reward,
        metadata: Json::Object(cfg.metadata),
        warnings,
    })
}

/// Loads every directory in order, stopping at the first error. Two tasks
/// with the same name (or one directory given twice) are an error.
pub fn load_all(dirs: &[PathBuf]) -> Result<Vec<Task>> {
    let mut tasks: Vec<Task> = Vec::with_capacity(dirs.len());
    let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
    for dir in dirs {
        let task = load(dir)?;
        if let Some(&i) = by_name.get(&task.name) {
            let first = &dirs[i];
            let message = if tasks[i].dir == task.dir {
                format!(
                    "the same task directory as {} (given twice)",
                    first.display()
                )
            } else {
                format!(
                    "duplicate task name {} (also used by {})",
                    quote(&task.name),
                    first.display()
                )
            };
            return Err(TaskError::new(
                TaskErrorKind::Duplicate,
                dir.join("task.toml"),
                Some("task.name"),
                message,
            ));
        }
        by_name.insert(task.name.clone(), tasks.len());
        tasks.push(task);
    }
    Ok(tasks)
}

pub(super) fn not_a_task_dir(dir: &Path, why: &str) -> TaskError {
    TaskError::new(
        TaskErrorKind::NotATaskDir,
        dir,
        None,
        format!("not a task directory ({why})"),
    )
}

fn read_instruction(dir: &Path) -> Result<String> {
    read_prompt(
        &dir.join("instruction.md"),
        "every task needs the prompt given to the agent",
    )
}
