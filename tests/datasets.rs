//! `arbiter datasets pull NAME@VERSION --registry FILE`: a dataset of a Harbor registry
//! cloned from a local git repository (file:// URL) at its pinned commit into the cache; a
//! second pull is a no-op; a commit the repository lacks, or a cached copy at another
//! commit, is refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.org")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.org")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
    std::fs::write(path, text).expect("write");
}

/// A repository with two Harbor tasks under `tasks/`; returns (repo dir, commit).
fn repository(root: &Path) -> (PathBuf, String) {
    let repo = root.join("upstream");
    std::fs::create_dir_all(&repo).expect("repo");
    git(&repo, &["init", "--quiet", "-b", "main"]);
    for name in ["alpha", "beta"] {
        let dir = repo.join("tasks").join(name);
        write(
            &dir.join("task.toml"),
            &format!(
                "[task]\nname = \"demo/{name}\"\n[environment]\nnetwork_mode = \"no-network\"\ndocker_image = \"arbiter/busybox:latest\"\n"
            ),
        );
        write(&dir.join("instruction.md"), &format!("Task {name}.\n"));
        write(
            &dir.join("tests/test.sh"),
            "echo 1 > /logs/verifier/reward.txt\n",
        );
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "--quiet", "-m", "two tasks"]);
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    (repo, commit)
}

fn registry(root: &Path, repo: &Path, commit: &str) -> PathBuf {
    let url = format!("file://{}", repo.display());
    let file = root.join("registry.json");
    write(
        &file,
        &format!(
            r#"[{{"name": "demo", "version": "1.0", "description": "two tasks",
  "tasks": [
    {{"name": "demo/alpha", "git_url": "{url}", "git_commit_id": "{commit}", "path": "tasks/alpha"}},
    {{"name": "demo/beta", "git_url": "{url}", "git_commit_id": "{commit}", "path": "tasks/beta"}}
  ]}},
 {{"name": "other", "version": "0.1", "description": "", "tasks": []}}]"#
        ),
    );
    file
}

fn pull(registry: &Path, cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["datasets", "pull", "demo@1.0", "--registry"])
        .arg(registry)
        .arg("--cache")
        .arg(cache)
        .output()
        .expect("arbiter")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_pinned_dataset_is_pulled_once_into_a_directory_arbiter_runs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (repo, commit) = repository(tmp.path());
    let reg = registry(tmp.path(), &repo, &commit);
    let cache = tmp.path().join("cache");

    let out = pull(&reg, &cache);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let dir = cache.join("demo-1.0");
    assert_eq!(
        text(&out.stdout).trim(),
        format!("demo@1.0: pulled 2 task(s) into {}", dir.display())
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("demo-alpha/instruction.md")).expect("alpha"),
        "Task alpha.\n"
    );
    // The copy is a dataset directory: its registry.json names the tasks at the commit.
    let tasks = arbiter::task::expand_task_dirs(std::slice::from_ref(&dir)).expect("a dataset");
    assert_eq!(tasks, [dir.join("demo-alpha"), dir.join("demo-beta")]);
    let local: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("registry.json")).expect("registry"))
            .expect("json");
    assert_eq!(local[0]["tasks"][0]["git_commit_id"], commit.as_str());

    // A second pull changes nothing, even after upstream moved on.
    write(&dir.join("demo-alpha/marker"), "kept\n");
    write(&repo.join("tasks/alpha/instruction.md"), "Changed.\n");
    git(&repo, &["commit", "--quiet", "-am", "change"]);
    let again = pull(&reg, &cache);
    assert_eq!(
        again.status.code(),
        Some(0),
        "stderr: {}",
        text(&again.stderr)
    );
    assert!(
        text(&again.stdout).contains("nothing to do"),
        "{}",
        text(&again.stdout)
    );
    assert!(dir.join("demo-alpha/marker").is_file(), "left alone");
    assert_eq!(
        std::fs::read_to_string(dir.join("demo-alpha/instruction.md")).expect("alpha"),
        "Task alpha.\n"
    );

    // The registry now pins the new commit: the cached copy is refused, not silently reused.
    let newer = git(&repo, &["rev-parse", "HEAD"]);
    let reg = registry(tmp.path(), &repo, &newer);
    let refused = pull(&reg, &cache);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "stdout: {}",
        text(&refused.stdout)
    );
    let said = text(&refused.stderr);
    assert!(
        said.starts_with(&format!(
            "error: {}: already holds demo@1.0 with task demo/alpha at ",
            dir.display()
        )) && said.contains(&format!(
            "but the registry pins file://{}@{newer}",
            repo.display()
        )),
        "{said}"
    );
}

#[test]
fn a_commit_the_repository_lacks_is_refused_and_nothing_is_left() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (repo, _) = repository(tmp.path());
    let bogus = "0123456789abcdef0123456789abcdef01234567";
    let reg = registry(tmp.path(), &repo, bogus);
    let cache = tmp.path().join("cache");
    let out = pull(&reg, &cache);
    assert_eq!(out.status.code(), Some(2), "stdout: {}", text(&out.stdout));
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "error: file://{}: commit {bogus} (task demo/alpha) is not in the repository; refusing to pull",
            repo.display()
        )
    );
    assert!(!cache.join("demo-1.0").exists());
    let staging: Vec<_> = std::fs::read_dir(&cache)
        .expect("cache")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".pull-"))
        .collect();
    assert!(staging.is_empty(), "no half-made dataset");
}

#[test]
fn an_unknown_dataset_names_what_the_registry_lists() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (repo, commit) = repository(tmp.path());
    let reg = registry(tmp.path(), &repo, &commit);
    let out = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["datasets", "pull", "demo@9", "--registry"])
        .arg(&reg)
        .arg("--cache")
        .arg(tmp.path().join("cache"))
        .output()
        .expect("arbiter");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "error: {}: no dataset demo@9 (it lists: demo@1.0, other@0.1)",
            reg.display()
        )
    );
}
