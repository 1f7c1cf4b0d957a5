//! `arbiter datasets pull NAME@VERSION --registry FILE|URL`: a dataset of Harbor's
//! `registry.json` (a list of `{name, version, description, tasks: [{name, git_url,
//! git_commit_id, path}]}`) fetched into the local cache, each task from its pinned git commit.
//!
//! Layout: `<cache>/<name>-<version>/` (`name@version` made file-name safe: any character
//! outside `[A-Za-z0-9._-]` becomes `-`) holds one
//! directory per task and a `registry.json` naming them (paths relative to it, commits as
//! resolved), so the directory is a dataset `arbiter run` accepts as is. The cache is
//! `--cache DIR`, else `$ARBITER_DATASET_CACHE`, else `$XDG_CACHE_HOME/arbiter/datasets`,
//! else `~/.cache/arbiter/datasets`. Git repositories are kept bare under `<cache>/.repos/`
//! (one per URL) so a second dataset from the same repository fetches only what it lacks.
//!
//! Rules: every git task must be pinned (`git_commit_id`) and the commit must exist in its
//! repository (else the pull is refused, naming both); a dataset already in the cache is left
//! alone when it holds the same tasks at the same commits (a no-op) and refused when it holds
//! others (remove the directory to pull again). A new dataset is built in a temporary sibling
//! and renamed into place, so a failed pull leaves nothing half-made. Tasks without `git_url`
//! are copied from `path` relative to a registry file (not possible for a URL registry).
//!
//! Hooked into `cli/mod.rs` with `mod datasets;`, a `Command` variant
//! `Datasets(datasets::DatasetsCmd)` and the arm
//! `Command::Datasets(cmd) => Ok(datasets::main(cmd).await),`.
//!
//! Over 600 lines only with its unit tests: the command is ~590 (registry reading, git, the cache layout).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::exit;

/// Env var naming the dataset cache directory.
pub(crate) const CACHE_ENV: &str = "ARBITER_DATASET_CACHE";
const REGISTRY_FILE: &str = "registry.json";
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  arbiter datasets pull terminal-bench@2.0 --registry registry.json\n  arbiter datasets pull hello-world@1.0 --registry https://example.org/registry.json\n  arbiter run ~/.cache/arbiter/datasets/terminal-bench-2.0 --agent oracle"
)]
pub(crate) struct DatasetsCmd {
    #[command(subcommand)]
    command: DatasetsSub,
}

#[derive(Debug, Subcommand)]
enum DatasetsSub {
    /// Fetch a dataset's tasks at their pinned git commits into the local cache (a no-op when
    /// it is there already).
    #[command(
        after_help = "Example:\n  arbiter datasets pull terminal-bench@2.0 --registry registry.json\n\nThe cache is $ARBITER_DATASET_CACHE, else $XDG_CACHE_HOME/arbiter/datasets, else ~/.cache/arbiter/datasets."
    )]
    Pull(PullCmd),
}

#[derive(Debug, Args)]
struct PullCmd {
    /// The dataset, as its registry names it.
    #[arg(value_name = "NAME@VERSION")]
    dataset: String,
    /// Harbor registry: a `registry.json` file, or an http(s):// or file:// URL of one.
    #[arg(long, value_name = "FILE|URL")]
    registry: String,
    /// Cache directory (default: see below).
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
}

/// What can go wrong pulling a dataset.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DatasetError {
    #[error("{spec}: expected NAME@VERSION (e.g. terminal-bench@2.0)")]
    Spec { spec: String },
    #[error(
        "cannot locate the dataset cache: set {CACHE_ENV}, XDG_CACHE_HOME or HOME (none is set)"
    )]
    NoCache,
    #[error("{registry}: {message}")]
    Registry { registry: String, message: String },
    #[error("{registry}: no dataset {name}@{version} (it lists: {available})")]
    NotFound {
        registry: String,
        name: String,
        version: String,
        available: String,
    },
    #[error("{registry}: task {task} of {dataset}: {message}")]
    Task {
        registry: String,
        dataset: String,
        task: String,
        message: String,
    },
    #[error("{url}: commit {commit} (task {task}) is not in the repository; refusing to pull")]
    CommitMissing {
        url: String,
        commit: String,
        task: String,
    },
    #[error(
        "{dir}: already holds {dataset} with task {task} at {have}, but the registry pins {want}; remove the directory to pull again"
    )]
    Mismatch {
        dir: String,
        dataset: String,
        task: String,
        have: String,
        want: String,
    },
    #[error("git {args}: {message}")]
    Git { args: String, message: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl DatasetError {
    fn code(&self) -> u8 {
        match self {
            DatasetError::Git { .. } | DatasetError::Io { .. } => exit::FAILURE,
            _ => exit::USAGE,
        }
    }
}

type Result<T> = std::result::Result<T, DatasetError>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DatasetError + '_ {
    move |source| DatasetError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One task entry of a Harbor registry dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RegistryTask {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_commit_id: Option<String>,
    pub path: String,
}

/// One dataset of a Harbor registry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RegistryDataset {
    pub name: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub description: String,
    pub tasks: Vec<RegistryTask>,
}

/// How a pull ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pulled {
    /// Fetched now into `dir`.
    Fetched { dir: PathBuf, tasks: usize },
    /// Already in the cache with the same tasks at the same commits: nothing was done.
    Present { dir: PathBuf, tasks: usize },
}

/// Run a `datasets` subcommand; errors are printed here (one line) and mapped to an exit code.
pub(crate) async fn main(cmd: DatasetsCmd) -> u8 {
    let DatasetsSub::Pull(pull_cmd) = cmd.command;
    match run_pull(pull_cmd).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            e.code()
        }
    }
}

async fn run_pull(cmd: PullCmd) -> Result<u8> {
    let (name, version) = parse_spec(&cmd.dataset)?;
    let cache = match cmd.cache {
        Some(dir) => dir,
        None => default_cache().ok_or(DatasetError::NoCache)?,
    };
    let (text, base) = read_registry(&cmd.registry).await?;
    let spec = format!("{name}@{version}");
    let outcome = tokio::task::spawn_blocking(move || {
        pull(
            &cmd.registry,
            &text,
            base.as_deref(),
            &name,
            &version,
            &cache,
        )
    })
    .await
    .map_err(|e| DatasetError::Git {
        args: "pull".to_string(),
        message: e.to_string(),
    })??;
    match outcome {
        Pulled::Fetched { dir, tasks } => {
            println!("{spec}: pulled {tasks} task(s) into {}", dir.display())
        }
        Pulled::Present { dir, tasks } => println!(
            "{spec}: already in {} ({tasks} task(s) at the pinned commits); nothing to do",
            dir.display()
        ),
    }
    Ok(exit::OK)
}

/// `NAME@VERSION` → (name, version); the name may itself hold `@` (the last one splits).
pub(crate) fn parse_spec(spec: &str) -> Result<(String, String)> {
    match spec.rsplit_once('@') {
        Some((name, version)) if !name.is_empty() && !version.is_empty() => {
            Ok((name.to_string(), version.to_string()))
        }
        _ => Err(DatasetError::Spec {
            spec: spec.to_string(),
        }),
    }
}

/// `$ARBITER_DATASET_CACHE`, else `$XDG_CACHE_HOME/arbiter/datasets`, else
/// `~/.cache/arbiter/datasets`.
fn default_cache() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var(CACHE_ENV)
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("arbiter/datasets")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/arbiter/datasets")))
}

/// The registry's text, and the directory its relative task paths start from (a file's).
async fn read_registry(source: &str) -> Result<(String, Option<PathBuf>)> {
    let fail = |message: String| DatasetError::Registry {
        registry: source.to_string(),
        message,
    };
    if source.starts_with("http://") || source.starts_with("https://") {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| fail(e.to_string()))?;
        let response = client
            .get(source)
            .send()
            .await
            .map_err(|e| fail(format!("cannot fetch: {e}")))?;
        if !response.status().is_success() {
            return Err(fail(format!("cannot fetch: HTTP {}", response.status())));
        }
        let text = response
            .text()
            .await
            .map_err(|e| fail(format!("cannot read: {e}")))?;
        return Ok((text, None));
    }
    let path = PathBuf::from(source.strip_prefix("file://").unwrap_or(source));
    let text = std::fs::read_to_string(&path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let base = path.parent().map(Path::to_path_buf);
    Ok((text, base))
}

/// Pull `name@version` of the registry `text` (read from `registry`; relative local task
/// paths start at `base`) into `cache`.
pub(crate) fn pull(
    registry: &str,
    text: &str,
    base: Option<&Path>,
    name: &str,
    version: &str,
    cache: &Path,
) -> Result<Pulled> {
    let dataset = find_dataset(registry, text, name, version)?;
    let label = format!("{name}@{version}");
    let task_err = |task: &str, message: String| DatasetError::Task {
        registry: registry.to_string(),
        dataset: label.clone(),
        task: task.to_string(),
        message,
    };
    // Everything is checked before anything is fetched.
    let mut dirs: BTreeMap<String, &RegistryTask> = BTreeMap::new();
    for task in &dataset.tasks {
        check_relative(&task.path).map_err(|m| task_err(&task.name, m))?;
        if task.git_url.is_some() && task.git_commit_id.as_deref().is_none_or(str::is_empty) {
            return Err(task_err(
                &task.name,
                "not pinned to a commit (git_commit_id); arbiter pulls pinned sources only"
                    .to_string(),
            ));
        }
        if task.git_url.is_none() && base.is_none() {
            return Err(task_err(
                &task.name,
                "has no git_url, and a local path cannot be read from a URL registry".to_string(),
            ));
        }
        let dir = crate::trial::safe_name(&task.name);
        if let Some(other) = dirs.insert(dir.clone(), task) {
            return Err(task_err(
                &task.name,
                format!("has the same directory name ({dir}) as task {}", other.name),
            ));
        }
    }
    if dataset.tasks.is_empty() {
        return Err(DatasetError::Registry {
            registry: registry.to_string(),
            message: format!("{label} lists no task"),
        });
    }
    let dest = cache.join(crate::trial::safe_name(&label));
    if dest.join(REGISTRY_FILE).is_file() {
        check_present(&dest, &label, &dataset)?;
        return Ok(Pulled::Present {
            dir: dest,
            tasks: dataset.tasks.len(),
        });
    }
    std::fs::create_dir_all(cache).map_err(io(cache))?;
    let staging = tempfile::Builder::new()
        .prefix(&format!(".pull-{}-", crate::trial::safe_name(&label)))
        .tempdir_in(cache)
        .map_err(io(cache))?;
    let mut written = Vec::with_capacity(dataset.tasks.len());
    for (dir, task) in &dirs {
        let into = staging.path().join(dir);
        let commit = match (&task.git_url, &task.git_commit_id) {
            (Some(url), Some(commit)) => {
                let repo = repository(cache, url)?;
                let resolved = resolve_commit(&repo, url, commit, &task.name)?;
                extract(&repo, &resolved, &task.path, &into)?;
                Some(resolved)
            }
            _ => {
                let from = base.unwrap_or(Path::new(".")).join(&task.path);
                copy_tree(&from, &into)?;
                None
            }
        };
        if !into.join("task.toml").is_file() {
            return Err(task_err(
                &task.name,
                format!("{} holds no task.toml", task.path),
            ));
        }
        written.push(RegistryTask {
            name: task.name.clone(),
            git_url: task.git_url.clone(),
            git_commit_id: commit,
            path: dir.clone(),
        });
    }
    let local = vec![RegistryDataset {
        name: dataset.name.clone(),
        version: dataset.version.clone(),
        description: dataset.description.clone(),
        tasks: written,
    }];
    let json = serde_json::to_vec_pretty(&local).map_err(|e| DatasetError::Registry {
        registry: registry.to_string(),
        message: e.to_string(),
    })?;
    let file = staging.path().join(REGISTRY_FILE);
    std::fs::write(&file, json).map_err(io(&file))?;
    let staged = staging.keep();
    std::fs::rename(&staged, &dest).map_err(io(&dest))?;
    Ok(Pulled::Fetched {
        dir: dest,
        tasks: dataset.tasks.len(),
    })
}

fn find_dataset(registry: &str, text: &str, name: &str, version: &str) -> Result<RegistryDataset> {
    let datasets: Vec<RegistryDataset> =
        serde_json::from_str(text).map_err(|e| DatasetError::Registry {
            registry: registry.to_string(),
            message: format!("not a Harbor registry (a list of datasets): {e}"),
        })?;
    let found = datasets
        .iter()
        .find(|d| d.name == name && d.version.as_deref() == Some(version));
    match found {
        Some(d) => Ok(d.clone()),
        None => Err(DatasetError::NotFound {
            registry: registry.to_string(),
            name: name.to_string(),
            version: version.to_string(),
            available: datasets
                .iter()
                .map(|d| format!("{}@{}", d.name, d.version.as_deref().unwrap_or("?")))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

fn check_relative(path: &str) -> std::result::Result<(), String> {
    let p = Path::new(path);
    if p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(format!(
            "path must be relative inside its repository (got {path:?})"
        ));
    }
    Ok(())
}

/// The cached dataset at `dest` holds the registry's tasks at the same commits.
fn check_present(dest: &Path, label: &str, want: &RegistryDataset) -> Result<()> {
    let file = dest.join(REGISTRY_FILE);
    let text = std::fs::read_to_string(&file).map_err(io(&file))?;
    let have: Vec<RegistryDataset> =
        serde_json::from_str(&text).map_err(|e| DatasetError::Registry {
            registry: file.display().to_string(),
            message: format!("not a registry arbiter wrote: {e}"),
        })?;
    let have: BTreeMap<&str, &RegistryTask> = have
        .iter()
        .flat_map(|d| d.tasks.iter())
        .map(|t| (t.name.as_str(), t))
        .collect();
    let mismatch = |task: &str, have: String, want: String| DatasetError::Mismatch {
        dir: dest.display().to_string(),
        dataset: label.to_string(),
        task: task.to_string(),
        have,
        want,
    };
    for task in &want.tasks {
        let Some(held) = have.get(task.name.as_str()) else {
            return Err(mismatch(
                &task.name,
                "nothing (not in the cached copy)".to_string(),
                task.git_commit_id
                    .clone()
                    .unwrap_or_else(|| "a local copy".to_string()),
            ));
        };
        let same_commit = match (&held.git_commit_id, &task.git_commit_id) {
            (Some(h), Some(w)) => h.to_ascii_lowercase().starts_with(&w.to_ascii_lowercase()),
            (None, None) => true,
            _ => false,
        };
        if held.git_url != task.git_url || !same_commit {
            let show = |t: &RegistryTask| {
                format!(
                    "{}@{}",
                    t.git_url.as_deref().unwrap_or("local"),
                    t.git_commit_id.as_deref().unwrap_or("-")
                )
            };
            return Err(mismatch(&task.name, show(held), show(task)));
        }
    }
    if have.len() != want.tasks.len() {
        return Err(mismatch(
            "(set)",
            format!("{} tasks", have.len()),
            format!("{} tasks", want.tasks.len()),
        ));
    }
    Ok(())
}

fn git(args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new("git")
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| DatasetError::Git {
            args: args.join(" "),
            message: format!("cannot run git: {e}"),
        })?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        return Err(DatasetError::Git {
            args: args.join(" "),
            message: said.lines().last().unwrap_or("failed").trim().to_string(),
        });
    }
    Ok(out.stdout)
}

/// The bare clone of `url` under `<cache>/.repos/` (cloned when missing).
fn repository(cache: &Path, url: &str) -> Result<PathBuf> {
    let digest = Sha256::digest(url.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let repos = cache.join(".repos");
    let repo = repos.join(format!("{hex}.git"));
    if repo.join("HEAD").is_file() {
        return Ok(repo);
    }
    std::fs::create_dir_all(&repos).map_err(io(&repos))?;
    let tmp = tempfile::Builder::new()
        .prefix(".clone-")
        .tempdir_in(&repos)
        .map_err(io(&repos))?;
    let into = tmp.path().join("repo.git");
    let into_s = into.to_string_lossy().into_owned();
    git(&["clone", "--bare", "--quiet", "--", url, &into_s])?;
    std::fs::rename(&into, &repo).map_err(io(&repo))?;
    Ok(repo)
}

/// The full hash of `commit` in `repo` (fetched from `url` when the clone lacks it).
fn resolve_commit(repo: &Path, url: &str, commit: &str, task: &str) -> Result<String> {
    let missing = || DatasetError::CommitMissing {
        url: url.to_string(),
        commit: commit.to_string(),
        task: task.to_string(),
    };
    if commit.len() < 7 || !commit.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(missing());
    }
    let repo_s = repo.to_string_lossy().into_owned();
    let object = format!("{commit}^{{commit}}");
    let lookup = |repo_s: &str| git(&["-C", repo_s, "rev-parse", "--verify", "--quiet", &object]);
    let found = match lookup(&repo_s) {
        Ok(out) => out,
        Err(_) => {
            // A commit the clone does not have yet: fetch it (servers that refuse fetching by
            // hash leave it missing).
            let _ = git(&["-C", &repo_s, "fetch", "--quiet", "origin", commit]);
            let _ = git(&[
                "-C",
                &repo_s,
                "fetch",
                "--quiet",
                "origin",
                "+refs/*:refs/*",
            ]);
            lookup(&repo_s).map_err(|_| missing())?
        }
    };
    let full = String::from_utf8_lossy(&found).trim().to_string();
    if !full
        .to_ascii_lowercase()
        .starts_with(&commit.to_ascii_lowercase())
    {
        return Err(missing());
    }
    Ok(full)
}

/// `path` of `repo` at `commit` into `into`.
fn extract(repo: &Path, commit: &str, path: &str, into: &Path) -> Result<()> {
    let repo_s = repo.to_string_lossy().into_owned();
    let trimmed = path.trim_matches('/');
    let tree = if trimmed.is_empty() || trimmed == "." {
        commit.to_string()
    } else {
        format!("{commit}:{trimmed}")
    };
    let tar = git(&["-C", &repo_s, "archive", "--format=tar", &tree])?;
    std::fs::create_dir_all(into).map_err(io(into))?;
    tar::Archive::new(tar.as_slice())
        .unpack(into)
        .map_err(io(into))
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    for entry in std::fs::read_dir(from).map_err(io(from))? {
        let entry = entry.map_err(io(from))?;
        let kind = entry.file_type().map_err(io(from))?;
        let dest = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &dest).map_err(io(&dest))?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(entry.path()).map_err(io(&dest))?;
            std::os::unix::fs::symlink(target, &dest).map_err(io(&dest))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_splits_at_the_last_at() {
        assert_eq!(
            parse_spec("terminal-bench@2.0").expect("spec"),
            ("terminal-bench".to_string(), "2.0".to_string())
        );
        assert_eq!(
            parse_spec("@org/x@1").expect("spec"),
            ("@org/x".to_string(), "1".to_string())
        );
        for bad in ["tb", "tb@", "@1"] {
            assert_eq!(
                parse_spec(bad).expect_err(bad).to_string(),
                format!("{bad}: expected NAME@VERSION (e.g. terminal-bench@2.0)")
            );
        }
    }

    #[test]
    fn an_unpinned_task_or_an_escaping_path_is_refused_before_anything_is_fetched() {
        let cache = tempfile::tempdir().expect("tmp");
        let registry = r#"[{"name": "d", "version": "1", "tasks": [
            {"name": "org/a", "git_url": "file:///nowhere", "path": "a"}]}]"#;
        let e = pull("reg.json", registry, None, "d", "1", cache.path()).expect_err("unpinned");
        assert_eq!(
            e.to_string(),
            "reg.json: task org/a of d@1: not pinned to a commit (git_commit_id); arbiter pulls pinned sources only"
        );
        let registry = r#"[{"name": "d", "version": "1", "tasks": [
            {"name": "a", "git_url": "file:///x", "git_commit_id": "abcdef0", "path": "../a"}]}]"#;
        let e = pull("reg.json", registry, None, "d", "1", cache.path()).expect_err("path");
        assert!(e.to_string().contains("path must be relative"), "{e}");
        let e = pull("reg.json", registry, None, "d", "2", cache.path()).expect_err("version");
        assert_eq!(e.to_string(), "reg.json: no dataset d@2 (it lists: d@1)");
        assert_eq!(
            std::fs::read_dir(cache.path()).expect("cache").count(),
            0,
            "nothing written"
        );
    }
}
