//! `arbiter tasks load`: arbiter's task loader over task directories, without Docker. One
//! line per task (loaded, or refused with the loader's one-line error) with its warnings, or
//! one JSON object per task (`--format jsonl`, what `scripts/corpus` counts): the working
//! dir's source (task.toml's `workdir`, the Dockerfile's final-stage `WORKDIR`, neither),
//! the Dockerfile's heredocs and what BuildKit would refuse in it, the agent's and the
//! verifier's network, and the compose file names under `environment/`.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Serialize;

use crate::task::{self, Dockerfile, ImageSource, Task};

use super::exit;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LoadFormat {
    Table,
    Jsonl,
}

#[derive(Debug, Args)]
pub(super) struct LoadCmd {
    /// Task directories or dataset directories (a directory of tasks).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Every directory under each path that holds a task.toml is a task (a task's own
    /// subdirectories are not searched), instead of reading each path as a task or dataset.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// Output on stdout.
    #[arg(long, value_enum, default_value_t = LoadFormat::Table)]
    format: LoadFormat,
}

/// One task directory, as `--format jsonl` prints it.
#[derive(Debug, Serialize)]
struct LoadLine {
    dir: String,
    loaded: bool,
    name: Option<String>,
    /// The loader's error, with the task directory shown as `.`.
    error: Option<String>,
    /// Warnings, with the task directory shown as `.`.
    warnings: Vec<String>,
    /// `task.toml`, `dockerfile` or `none` (loaded tasks only).
    workdir_source: Option<&'static str>,
    workdir: Option<String>,
    /// Heredocs in the Dockerfile the working dir is read from (loaded tasks with one).
    heredocs: Option<usize>,
    /// Why BuildKit would refuse that Dockerfile (an unterminated heredoc, …).
    dockerfile_error: Option<String>,
    agent_network: Option<&'static str>,
    verifier_network: Option<&'static str>,
    /// Compose file names present under `environment/` (the one read and task data alike).
    compose_files: Vec<&'static str>,
}

pub(super) fn run(cmd: LoadCmd) -> Result<u8, (u8, String)> {
    let dirs = if cmd.recursive {
        let mut dirs = Vec::new();
        for path in &cmd.paths {
            if !path.is_dir() {
                return Err((exit::USAGE, format!("{}: not a directory", path.display())));
            }
            find_task_dirs(path, &mut dirs);
        }
        dirs
    } else {
        task::expand_task_dirs(&cmd.paths).map_err(|e| (exit::USAGE, e.to_string()))?
    };
    let mut refused = 0usize;
    for dir in &dirs {
        let line = load_line(dir);
        refused += usize::from(!line.loaded);
        match cmd.format {
            LoadFormat::Jsonl => match serde_json::to_string(&line) {
                Ok(json) => println!("{json}"),
                Err(e) => return Err((exit::FAILURE, format!("encoding {}: {e}", line.dir))),
            },
            LoadFormat::Table => print_line(&line),
        }
    }
    if cmd.format == LoadFormat::Table {
        println!(
            "{} task(s): {} loaded, {refused} refused",
            dirs.len(),
            dirs.len() - refused
        );
    }
    Ok(if refused > 0 { exit::GATE } else { exit::OK })
}

fn print_line(line: &LoadLine) {
    match (&line.name, &line.error) {
        (Some(name), _) => println!("loaded   {name}  ({})", line.dir),
        (None, Some(error)) => println!("refused  {}: {error}", line.dir),
        (None, None) => println!("refused  {}", line.dir),
    }
    for warning in &line.warnings {
        println!("  warning: {warning}");
    }
}

/// Directories under `root` (itself included) holding a `task.toml`, sorted; not below one.
fn find_task_dirs(root: &Path, out: &mut Vec<PathBuf>) {
    if root.join("task.toml").is_file() {
        out.push(root.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        tracing::debug!(dir = %root.display(), "unreadable, skipped");
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .filter(|p| p.file_name().is_none_or(|n| n != ".git"))
        .collect();
    children.sort();
    for child in children {
        find_task_dirs(&child, out);
    }
}

fn load_line(dir: &Path) -> LoadLine {
    let shown = dir.display().to_string();
    let relative = |text: &str| text.replace(&shown, ".");
    let compose_files = [task::COMPOSE_FILE]
        .into_iter()
        .chain(task::NOT_COMPOSE_FILES)
        .filter(|name| dir.join("environment").join(name).is_file())
        .collect();
    let mut line = LoadLine {
        dir: shown.clone(),
        loaded: false,
        name: None,
        error: None,
        warnings: Vec::new(),
        workdir_source: None,
        workdir: None,
        heredocs: None,
        dockerfile_error: None,
        agent_network: None,
        verifier_network: None,
        compose_files,
    };
    match task::load(dir) {
        Ok(task) => {
            let dockerfile = dockerfile_of(&task);
            let (source, workdir) = workdir_of(&task, dockerfile.as_ref());
            line.heredocs = dockerfile.as_ref().map(|d| d.heredocs().count());
            line.dockerfile_error = dockerfile
                .as_ref()
                .and_then(|d| d.error())
                .map(ToString::to_string);
            line.loaded = true;
            line.name = Some(task.name.clone());
            line.warnings = task.warnings.iter().map(|w| relative(w)).collect();
            line.workdir_source = Some(source);
            line.workdir = workdir;
            line.agent_network = Some(task.environment.network.as_str());
            line.verifier_network = Some(task.verifier.network.as_str());
        }
        Err(e) => line.error = Some(relative(&e.to_string())),
    }
    line
}

/// The Dockerfile the task is built from (or `environment/Dockerfile` beside a prebuilt
/// `docker_image`), read as BuildKit reads it; `None` when there is none to read.
fn dockerfile_of(task: &Task) -> Option<Dockerfile> {
    let path = match &task.environment.source {
        ImageSource::Build { dockerfile, .. } => dockerfile.clone(),
        ImageSource::Image(_) => task.dir.join("environment/Dockerfile"),
    };
    let text = std::fs::read_to_string(path).ok()?;
    Some(Dockerfile::parse(&text))
}

/// Where the working dir of `task` comes from: `[environment] workdir`, else the final-stage
/// `WORKDIR` of its Dockerfile, else neither (the base image's default).
fn workdir_of(task: &Task, dockerfile: Option<&Dockerfile>) -> (&'static str, Option<String>) {
    if let Some(dir) = &task.environment.workdir {
        return ("task.toml", Some(dir.clone()));
    }
    match dockerfile.and_then(Dockerfile::workdir) {
        Some(dir) => ("dockerfile", Some(dir)),
        None => ("none", None),
    }
}
