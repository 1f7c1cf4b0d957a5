//! Loading task directories: `task.toml` via `config.rs`, then the
//! files the layout requires, then one walk for symlinks and the checksum.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::checksum;
use super::config::{self, check_name};
use super::error::{FileCtx, TaskError, TaskErrorKind, quote};
use super::model::{ImageSource, NetworkMode, Task, VerifierMode};

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

    let instruction = read_instruction(dir)?;

    let environment_dir = root.join("environment");
    let source = match &cfg.environment.docker_image {
        Some(image) => ImageSource::Image(image.clone()),
        None => {
            let dockerfile = environment_dir.join("Dockerfile");
            let compose = compose_file(&environment_dir);
            if !dockerfile.is_file() {
                let why = match compose {
                    Some(file) => format!(
                        "environment/{file} is not supported by arbiter; add environment/Dockerfile or set [environment] docker_image in task.toml"
                    ),
                    None => "the task image is built from it; or set [environment] docker_image in task.toml".to_string(),
                };
                return Err(missing(&dir.join("environment").join("Dockerfile"), &why));
            }
            if let Some(file) = compose {
                warnings.push(format!(
                    "{}:file: docker compose is not supported by arbiter; building environment/Dockerfile alone",
                    dir.join("environment").join(file).display()
                ));
            }
            ImageSource::Build {
                context: environment_dir.clone(),
                dockerfile,
            }
        }
    };

    let tests_dir = root.join("tests");
    if !tests_dir.join("test.sh").is_file() {
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

    let agent_network = cfg
        .agent_network
        .or(cfg.environment.network)
        .unwrap_or(NetworkMode::NoNetwork);
    let mut verifier = cfg.verifier;
    if verifier.mode == VerifierMode::Separate {
        // Harbor: [verifier.environment] when given, else a fresh copy of the
        // task's [environment]. Without docker_image, tests/Dockerfile is
        // built when present (SPEC §5), else the task's own image source.
        let env = cfg
            .verifier_environment
            .unwrap_or_else(|| cfg.environment.clone());
        let verifier_source = match &env.docker_image {
            Some(image) => ImageSource::Image(image.clone()),
            None if tests_dir.join("Dockerfile").is_file() => ImageSource::Build {
                context: tests_dir.clone(),
                dockerfile: tests_dir.join("Dockerfile"),
            },
            None => source.clone(),
        };
        verifier.environment = Some(env.into_spec(verifier_source, verifier.network));
    }
    let environment = cfg.environment.into_spec(source, agent_network);

    let scan = checksum::scan(&root, dir)?;
    warnings.extend(scan.warnings);

    tracing::debug!(task = %name, dir = %root.display(), checksum = %scan.checksum, "loaded task");
    Ok(Task {
        name,
        dir: root,
        instruction,
        checksum: scan.checksum,
        agent: cfg.agent,
        verifier,
        environment,
        tests_dir,
        solution_dir,
        solution_env: cfg.solution_env,
        artifacts: cfg.artifacts,
        completion: cfg.completion,
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

fn not_a_task_dir(dir: &Path, why: &str) -> TaskError {
    TaskError::new(
        TaskErrorKind::NotATaskDir,
        dir,
        None,
        format!("not a task directory ({why})"),
    )
}

fn missing(file: &Path, why: &str) -> TaskError {
    TaskError::new(
        TaskErrorKind::File,
        file,
        Some("file"),
        format!("missing ({why})"),
    )
}

/// Reads a UTF-8 text file; `what` names it in messages.
fn read_text(path: &Path, what: &str) -> Result<String> {
    let bytes = fs::read(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => missing(path, &format!("{what} is required")),
        _ => TaskError::new(
            TaskErrorKind::Io,
            path,
            Some("file"),
            format!("cannot read ({e})"),
        ),
    })?;
    String::from_utf8(bytes).map_err(|e| {
        TaskError::new(
            TaskErrorKind::File,
            path,
            Some("file"),
            format!("not valid UTF-8 (at byte {})", e.utf8_error().valid_up_to()),
        )
    })
}

fn read_instruction(dir: &Path) -> Result<String> {
    const WHY: &str = "every task needs the prompt given to the agent";
    let path = dir.join("instruction.md");
    match fs::metadata(&path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => {
            return Err(TaskError::new(
                TaskErrorKind::File,
                &path,
                Some("file"),
                format!("not a regular file ({WHY})"),
            ));
        }
        Err(_) => return Err(missing(&path, WHY)),
    }
    let text = read_text(&path, "instruction.md")?;
    if text.trim().is_empty() {
        return Err(TaskError::new(
            TaskErrorKind::File,
            &path,
            Some("file"),
            format!("empty ({WHY})"),
        ));
    }
    Ok(text)
}

fn compose_file(environment_dir: &Path) -> Option<&'static str> {
    [
        "docker-compose.yaml",
        "docker-compose.yml",
        "compose.yaml",
        "compose.yml",
    ]
    .into_iter()
    .find(|f| environment_dir.join(f).is_file())
}
