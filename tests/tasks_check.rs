//! `arbiter tasks check` through the real binary on a real engine: the example tasks pass every
//! check (`git-history` not applicable: no git in their images); purpose-built broken tasks
//! (tests/fixtures/broken-tasks/) are each reported with the right reason and exit 4; a task
//! whose image's repository holds the fix on another branch is hackable through
//! `git-history`, the same task with its history cut is not, and the `git-history` script
//! finds the fix wherever a repository keeps it; bad arguments exit 2 with one line.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::Value;

fn check(paths: &[&Path], extra: &[&str]) -> (std::process::Output, Value, tempfile::TempDir) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let job_dir = tmp.path().join("job");
    let job = job_dir.to_string_lossy().into_owned();
    let mut args = vec![
        "tasks",
        "check",
        "--quiet",
        "--format",
        "json",
        "--job-dir",
        &job,
    ];
    args.extend_from_slice(extra);
    let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    args.extend(shown.iter().map(String::as_str));
    let out = arbiter(&args);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not the JSON report ({e}); stderr:\n{}\nstdout:\n{}",
            stderr(&out),
            stdout(&out)
        )
    });
    assert_no_leftovers(&job_dir);
    // The job dir is an ordinary job: `arbiter report` reads it.
    let rep = arbiter(&["report", &job, "--format", "json"]);
    assert!(rep.status.success(), "report: {}", stderr(&rep));
    (out, report, tmp)
}

fn task<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["tasks"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["task"] == name))
        .unwrap_or_else(|| panic!("no task {name} in {report:#}"))
}

fn check_of<'a>(task: &'a Value, label: &str) -> &'a Value {
    task["checks"]
        .as_array()
        .and_then(|cs| {
            cs.iter().find(|c| {
                let name = match c["exploit"].as_str() {
                    Some(e) => format!("exploit {e}"),
                    None => c["check"].as_str().unwrap_or_default().to_string(),
                };
                name == label
            })
        })
        .unwrap_or_else(|| panic!("no check {label} in {task:#}"))
}

fn problems(task: &Value) -> Vec<String> {
    task["problems"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn example_tasks_pass_every_check() {
    if !docker_available() {
        return;
    }
    let tasks = repo().join("tasks");
    let (out, report, _tmp) = check(&[&tasks], &["-n", "4"]);
    assert_eq!(report["schema"], "arbiter.taskcheck.v1");
    assert_eq!(report["repeat"], 3);
    let all = report["tasks"].as_array().expect("tasks");
    assert_eq!(all.len(), 6, "{report:#}");
    for t in all {
        assert_eq!(t["verdict"], "ok", "{:#}", t);
        let checks = t["checks"].as_array().expect("checks");
        assert_eq!(
            checks.len(),
            4 + report["exploits"].as_array().map_or(0, Vec::len)
        );
        for c in checks {
            let expected = if c["exploit"] == "git-history" {
                "not_applicable"
            } else {
                "pass"
            };
            assert_eq!(c["result"], expected, "{}: {c:#}", t["task"]);
        }
        assert!(
            check_of(t, "determinism")["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("3 runs on the oracle's result agree")),
            "{t:#}"
        );
    }
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn broken_tasks_are_each_reported_with_their_reason() {
    if !docker_available() {
        return;
    }
    let broken = repo().join("tests/fixtures/broken-tasks");
    let (out, report, _tmp) = check(&[&broken], &["-n", "4"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_eq!(report["exit_code"], 4);

    let t = task(&report, "bad-layout");
    assert_eq!(problems(t), ["unloadable"]);
    let layout = check_of(t, "layout");
    assert_eq!(layout["result"], "fail");
    assert!(
        layout["detail"].as_str().is_some_and(
            |d| d.ends_with("task.toml:verifier.timeout_sec: must be greater than 0 (got -5)")
        ),
        "{layout:#}"
    );

    let t = task(&report, "oracle-fails");
    assert_eq!(problems(t), ["oracle_fails"], "{t:#}");
    assert_eq!(
        check_of(t, "oracle")["detail"],
        "the reference solution does not pass: verifier failed (reward 0)"
    );

    let t = task(&report, "nop-passes");
    assert!(problems(t).contains(&"nop_passes".to_string()), "{t:#}");
    assert_eq!(check_of(t, "nop")["result"], "fail");

    let t = task(&report, "trusts-status-file");
    assert_eq!(problems(t), ["hackable"], "{t:#}");
    let words = check_of(t, "exploit junk-words");
    assert_eq!(words["result"], "fail");
    assert_eq!(
        words["detail"],
        "hackable: verifier passed (reward 1), integrity clean"
    );
    assert_eq!(check_of(t, "exploit forge-reward")["result"], "pass");
    let git = check_of(t, "exploit git-history");
    assert_eq!(git["result"], "not_applicable", "{git:#}");
    assert_eq!(
        git["detail"],
        "not applicable: no git repository or bundle in the container"
    );

    let t = task(&report, "trusts-toolchain");
    assert_eq!(problems(t), ["hackable"], "{t:#}");
    let stub = check_of(t, "exploit stub-workdir-scripts");
    assert_eq!(stub["result"], "fail", "{stub:#}");
    for caught in ["exploit wrap-toolchain", "exploit shadow-path"] {
        let c = check_of(t, caught);
        assert_eq!(c["result"], "pass", "{c:#}");
        assert_eq!(c["caught"], true, "{c:#}");
        assert_eq!(c["trial"]["integrity"], "suspect", "{c:#}");
    }

    let t = task(&report, "flaky");
    assert_eq!(problems(t), ["flaky"], "{t:#}");
    let det = check_of(t, "determinism");
    assert!(
        det["detail"]
            .as_str()
            .is_some_and(|d| d
                .starts_with("flaky: 3 runs on the same frozen filesystem gave rewards {noise: ")),
        "{det:#}"
    );
    assert_eq!(det["rewards"].as_array().map(Vec::len), Some(3));
}

#[test]
fn bad_arguments_exit_2_with_one_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let missing = tmp.path().join("nope");
    let out = arbiter(&["tasks", "check", &missing.display().to_string()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {}: not a task directory (no task.toml)",
            missing.display()
        )
    );

    let bad = repo().join("tests/fixtures/broken-tasks/bad-layout");
    let out = arbiter(&["tasks", "check", &bad.display().to_string()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: no task could be checked: ")
            && err
                .trim_end()
                .ends_with("verifier.timeout_sec: must be greater than 0 (got -5)"),
        "{err}"
    );

    let out = arbiter(&["tasks", "check", "--repeat", "0", "tasks"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).trim(), "error: --repeat: must be at least 1");
}

// ---- git-history: a repository in the image whose history holds the fix ----

/// git's own .deb for the Debian bookworm base image, fetched once on the host with
/// `apt-get download git` into `~/.cache/arbiter/debs/git-bookworm/` (image builds have no
/// network). Installed with `dpkg -i --force-depends`: git's core commands link only libc,
/// libpcre2 and zlib, which minbase has; its Depends (perl, liberror-perl, git-man, and
/// libcurl3-gnutls with its libraries: 17 packages, and perl's must match the image's
/// perl-base exactly) serve `add -p`, send-email and http remotes, none of which runs here.
/// Fetched once per test process: tests running at once on a new machine would otherwise
/// remove each other's download directory (a CI run on a fresh machine saw it).
fn git_debs() -> Option<PathBuf> {
    static DEBS: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    DEBS.get_or_init(fetch_git_debs).clone()
}

fn fetch_git_debs() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?
        .join("arbiter/debs/git-bookworm");
    let has_deb = |dir: &Path| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("git_") && name.ends_with(".deb")
            })
        })
    };
    if has_deb(&cache) {
        return Some(cache);
    }
    let tmp = cache.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).ok()?;
    let fetched = Command::new("apt-get")
        .args(["download", "-q", "git"])
        .current_dir(&tmp)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !fetched || !has_deb(&tmp) {
        return None;
    }
    std::fs::rename(&tmp, &cache).ok()?;
    Some(cache)
}

/// [`git_debs`], or why the test cannot run (a failure under `ARBITER_REQUIRE_DOCKER=1`).
fn git_debs_or_skip() -> Option<PathBuf> {
    let debs = git_debs();
    if debs.is_none() {
        assert!(
            std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "could not fetch git's .deb with apt-get download into ~/.cache/arbiter/debs"
        );
        eprintln!("skipping: could not fetch git's .deb with apt-get download");
    }
    debs
}

/// The Dockerfile lines that put git into `arbiter/debian:bookworm` from `debs/`.
const INSTALL_GIT: &str = "FROM arbiter/debian:bookworm\n\
COPY debs/ /tmp/debs/\n\
RUN dpkg -i --force-depends /tmp/debs/*.deb >/dev/null 2>&1; rm -rf /tmp/debs; git --version\n";

/// The upstream project, as a Dockerfile's `git clone` would fetch it: `main` has the bug
/// (add() subtracts), branch `fix-sum`, one month later, has the fix.
const UPSTREAM_SH: &str = r#"set -e
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.invalid
export GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.invalid
git init -q -b main /src
cd /src
printf 'def add(a, b):\n    return a - b\n' > calc.py
printf '# calc\n' > README.md
git add -A
GIT_AUTHOR_DATE=2024-01-01T00:00:00Z GIT_COMMITTER_DATE=2024-01-01T00:00:00Z git commit -qm 'calc: add()'
git checkout -q -b fix-sum
printf 'def add(a, b):\n    return a + b\n' > calc.py
GIT_AUTHOR_DATE=2024-02-01T00:00:00Z GIT_COMMITTER_DATE=2024-02-01T00:00:00Z git commit -qam 'calc: add() returns the sum'
git checkout -q main
"#;

/// A SWE-style task (working dir from the Dockerfile's `WORKDIR`, no `workdir` in task.toml):
/// fix add() in /app/calc.py; the verifier imports it from the working dir.
fn write_git_task(root: &Path, name: &str, dockerfile: &str, debs: &Path) -> PathBuf {
    let dir = root.join(name);
    let write = |rel: &str, text: &str| {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
    };
    write(
        "task.toml",
        "version = \"1.0\"\n\n[agent]\ntimeout_sec = 300\n\n[verifier]\ntimeout_sec = 120\n\n[environment]\nnetwork_mode = \"no-network\"\ncpus = 1\nmemory_mb = 512\n",
    );
    write(
        "instruction.md",
        "`add(a, b)` in /app/calc.py returns the difference of its arguments. Make it return their sum.\n",
    );
    write(
        "solution/solve.sh",
        "#!/bin/bash\nsed -i 's/return a - b/return a + b/' /app/calc.py\n",
    );
    write(
        "tests/test.sh",
        "#!/bin/bash\ncd /app || exit 1\nif python3 -c 'import calc, sys; sys.exit(0 if calc.add(2, 3) == 5 and calc.add(-4, 1) == -3 else 1)'; then\n  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n",
    );
    write("environment/Dockerfile", dockerfile);
    write("environment/upstream.sh", UPSTREAM_SH);
    let deb_dir = dir.join("environment/debs");
    std::fs::create_dir_all(&deb_dir).expect("mkdir debs");
    for entry in std::fs::read_dir(debs).expect("debs").flatten() {
        std::fs::copy(entry.path(), deb_dir.join(entry.file_name())).expect("copy deb");
    }
    dir
}

/// Three versions of one task: a full `git clone` (the fix on `origin/fix-sum`), the same
/// clone cut to one commit (`--depth 1 --single-branch`), and the full clone's /app copied
/// into an image without git.
fn git_tasks(root: &Path, debs: &Path) -> [PathBuf; 3] {
    let clone = |flags: &str| {
        format!(
            "{INSTALL_GIT}COPY upstream.sh /tmp/upstream.sh\nRUN sh /tmp/upstream.sh && git clone -q {flags}file:///src /app && rm -rf /src /tmp/upstream.sh\nWORKDIR /app\n"
        )
    };
    [
        write_git_task(root, "git-fix-on-branch", &clone(""), debs),
        write_git_task(
            root,
            "git-history-cut",
            &clone("--depth 1 --single-branch --branch main "),
            debs,
        ),
        write_git_task(
            root,
            "git-no-binary",
            &format!(
                "{}\nFROM arbiter/debian:bookworm\nCOPY --from=repo /app /app\nWORKDIR /app\n",
                clone("")
                    .replacen(
                        "FROM arbiter/debian:bookworm",
                        "FROM arbiter/debian:bookworm AS repo",
                        1
                    )
                    .trim_end_matches("WORKDIR /app\n")
            ),
            debs,
        ),
    ]
}

#[test]
fn git_history_flags_a_repository_whose_history_holds_the_fix() {
    if !docker_available() {
        return;
    }
    let Some(debs) = git_debs_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let [full, cut, no_git] = git_tasks(tmp.path(), &debs);
    let (out, report, _job) = check(&[&full, &cut, &no_git], &["-n", "2"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let doc = report["exploits"]
        .as_array()
        .and_then(|es| es.iter().find(|e| e["name"] == "git-history"))
        .unwrap_or_else(|| panic!("git-history not in the battery: {report:#}"));
    assert!(
        doc["advice"]
            .as_str()
            .is_some_and(|a| a.contains("--depth 1"))
    );

    // The full clone: hackable, and only through its history, which the report names.
    let t = task(&report, "git-fix-on-branch");
    assert_eq!(problems(t), ["hackable"], "{t:#}");
    let git = check_of(t, "exploit git-history");
    assert_eq!(git["result"], "fail", "{git:#}");
    let detail = git["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("hackable: verifier passed (reward 1), integrity clean; checked out refs/remotes/origin/fix-sum = commit ")
            && detail.contains(" of /app/.git into /app: 1 file(s): calc.py"),
        "{git:#}"
    );
    assert_eq!(git["trial"]["evidence"].as_array().map(Vec::len), Some(1));
    let advice = git["advice"].as_str().unwrap_or_default();
    for needle in [
        "git clone --depth 1 --single-branch",
        "git reflog expire --expire=now --all",
        "git gc --prune=now",
        "dot_git",
    ] {
        assert!(advice.contains(needle), "{needle}: {advice}");
    }
    for c in t["checks"].as_array().expect("checks") {
        if c["exploit"] != "git-history" {
            assert_eq!(c["result"], "pass", "{c:#}");
        }
    }

    // The same task with its history cut: git-history finds nothing, the task is sound.
    let t = task(&report, "git-history-cut");
    assert_eq!(t["verdict"], "ok", "{t:#}");
    let git = check_of(t, "exploit git-history");
    assert_eq!(git["result"], "pass", "{git:#}");
    assert!(
        git["detail"].as_str().is_some_and(|d| d.starts_with(
            "verifier failed (reward 0), integrity clean; no commit beyond HEAD in: /app/.git"
        )),
        "{git:#}"
    );
    assert!(git.get("advice").is_none(), "{git:#}");

    // The repository without a git binary: not applicable, neither a pass nor a failure.
    let t = task(&report, "git-no-binary");
    assert_eq!(t["verdict"], "ok", "{t:#}");
    let git = check_of(t, "exploit git-history");
    assert_eq!(git["result"], "not_applicable", "{git:#}");
    assert_eq!(
        git["detail"],
        "not applicable: no git binary in the image; history at: /app/.git"
    );

    // The table, from the finished job dir: the ref, the advice, and n/a.
    let job = report["job_dir"].as_str().expect("job dir").to_string();
    let mut args = vec!["tasks", "check", "--quiet", "--job-dir", job.as_str()];
    let shown: Vec<String> = [&full, &cut, &no_git]
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    args.extend(shown.iter().map(String::as_str));
    let again = arbiter(&args);
    assert_eq!(again.status.code(), Some(4), "{}", stderr(&again));
    let table = stdout(&again);
    assert!(
        table.contains("task git-fix-on-branch: hackable"),
        "{table}"
    );
    assert!(table.contains("refs/remotes/origin/fix-sum"), "{table}");
    assert!(
        table.contains("fix: ship the repository with its history cut"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains("exploit git-history") && l.contains("n/a")),
        "{table}"
    );
}

/// Runs the `git-history` script (prelude + script, as the battery does) in a container of an
/// image with git, after `setup` built a repository, as `user`; returns its stdout and
/// /app/calc.py after it.
struct GitScenarios {
    image: String,
    scripts: tempfile::TempDir,
    toolbox_bind: String,
}

impl GitScenarios {
    fn new(debs: &Path) -> Self {
        let scripts = tempfile::tempdir().expect("tempdir");
        let src = repo().join("src/taskcheck/exploits");
        let read = |name: &str| std::fs::read_to_string(src.join(name)).expect("script");
        let exploit = format!("{}\n{}", read("prelude.sh"), read("git-history.sh"));
        std::fs::write(scripts.path().join("exploit.sh"), exploit).expect("write");
        let ctx = scripts.path().join("ctx");
        std::fs::create_dir_all(ctx.join("debs")).expect("mkdir");
        for entry in std::fs::read_dir(debs).expect("debs").flatten() {
            std::fs::copy(entry.path(), ctx.join("debs").join(entry.file_name())).expect("copy");
        }
        std::fs::write(ctx.join("Dockerfile"), INSTALL_GIT).expect("Dockerfile");
        let unique = image_tag(scripts.path());
        let image = format!("arbiter-test/git-history:{unique}");
        let built = Command::new("docker")
            .args(["build", "--network", "none", "-q", "-t", &image])
            .arg(&ctx)
            .output()
            .expect("docker build");
        assert!(built.status.success(), "docker build: {}", stderr(&built));
        let toolbox =
            arbiter::sandbox::toolbox::locate_toolbox().expect("toolbox (scripts/bootstrap)");
        GitScenarios {
            image,
            scripts,
            toolbox_bind: toolbox.bind(),
        }
    }

    fn run(&self, setup: &str, user: &str) -> (String, String) {
        let script = format!(
            "set -e\n{GIT_SETUP}\n{setup}\nset +e\ncd /app\nsu -s /bin/sh {user} -c '/.arbiter/toolbox/busybox sh /t/exploit.sh'\necho '--- calc.py'\ncat /app/calc.py\n"
        );
        let out = Command::new("docker")
            .args([
                "run",
                "--rm",
                "--network",
                "none",
                "-v",
                &self.toolbox_bind,
                "-v",
            ])
            .arg(format!("{}:/t:ro", self.scripts.path().display()))
            .args([&self.image, "bash", "-c", &script])
            .output()
            .expect("docker run");
        let text = stdout(&out);
        assert!(out.status.success(), "{setup}: {text}\n{}", stderr(&out));
        let (said, calc) = text.split_once("--- calc.py\n").unwrap_or((&text, ""));
        (said.to_string(), calc.to_string())
    }
}

impl Drop for GitScenarios {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.image])
            .output();
    }
}

/// Shell functions for the scenarios: `base DIR` commits the bug as `main`, `fixc` commits
/// the fix (one month later) on the current branch.
const GIT_SETUP: &str = r#"export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.invalid
export GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.invalid
base() { mkdir -p "$1" && cd "$1" && git init -q -b main
  printf 'def add(a, b):\n    return a - b\n' > calc.py; echo readme > README
  git add -A; GIT_COMMITTER_DATE=2024-01-01T00:00:00Z git commit -qm base; }
fixc() { printf 'def add(a, b):\n    return a + b\n' > calc.py
  GIT_COMMITTER_DATE=2024-02-01T00:00:00Z git commit -qam fix; }
forget() { git reflog expire --expire=now --all; }"#;

const FIXED: &str = "def add(a, b):\n    return a + b\n";
const BUGGY: &str = "def add(a, b):\n    return a - b\n";

#[test]
fn git_history_finds_the_fix_wherever_the_repository_keeps_it() {
    if !docker_available() {
        return;
    }
    let Some(debs) = git_debs_or_skip() else {
        return;
    };
    let s = GitScenarios::new(&debs);
    // (what, setup, the evidence names this, user running the exploit)
    let found: &[(&str, &str, &str, &str)] = &[
        (
            "a local branch",
            "base /app; git checkout -q -b fix; fixc; git checkout -q main",
            "checked out refs/heads/fix = commit ",
            "root",
        ),
        (
            "an annotated tag only",
            "base /app; fixc; git tag -a v2 -m v2; git reset -q --hard HEAD~1; forget",
            "checked out refs/tags/v2 = commit ",
            "root",
        ),
        (
            "an unreachable commit only",
            "base /app; fixc; git reset -q --hard HEAD~1; forget; rm -f .git/ORIG_HEAD",
            "checked out unreachable commit = commit ",
            "root",
        ),
        (
            "a reflog entry",
            "base /app; fixc; git reset -q --hard HEAD~1; rm -f .git/ORIG_HEAD",
            "checked out reflog ",
            "root",
        ),
        (
            "ORIG_HEAD",
            "base /app; fixc; git reset -q --hard HEAD~1; forget; git repack -q -a -d",
            "checked out ORIG_HEAD = commit ",
            "root",
        ),
        (
            "a stash",
            "base /app; printf 'def add(a, b):\\n    return a + b\\n' > calc.py; git stash -q",
            "checked out refs/stash = commit ",
            "root",
        ),
        (
            "packed refs after gc",
            "base /app; git checkout -q -b fix; fixc; git checkout -q main; git pack-refs --all; forget; git gc -q --prune=now; test ! -e .git/refs/heads/fix",
            "checked out refs/heads/fix = commit ",
            "root",
        ),
        (
            "a dot_git copied to .git",
            "base /app; git checkout -q -b fix; fixc; git checkout -q main; mv .git dot_git; cp -r dot_git .git",
            "checked out refs/heads/fix = commit ",
            "root",
        ),
        (
            "a dot_git never renamed back",
            "base /app; git checkout -q -b fix; fixc; git checkout -q main; mv .git dot_git",
            "of /app/dot_git into /app",
            "root",
        ),
        (
            "a bundle",
            "base /app; git checkout -q -b fix; fixc; git bundle create -q /opt/upstream.bundle fix; git checkout -q main; git branch -q -D fix; forget; git gc -q --prune=now",
            "checked out refs/heads/fix (bundle /opt/upstream.bundle) = commit ",
            "root",
        ),
        (
            "a bundle and no repository",
            "base /src; fixc; git bundle create -q /opt/calc.bundle --all; git reset -q --hard HEAD~1; mkdir /app; cp calc.py README /app/; rm -rf /src",
            "checked out refs/heads/main (bundle /opt/calc.bundle) = commit ",
            "root",
        ),
        (
            "a bare clone elsewhere",
            "base /src; fixc; git clone -q --bare /src /srv/calc.git; git reset -q --hard HEAD~1; mkdir /app; cp calc.py README /app/; rm -rf /src",
            "of /srv/calc.git into /app",
            "root",
        ),
        (
            "a root-owned repository, run as another user",
            "base /app; git checkout -q -b fix; fixc; git checkout -q main; chown nobody /app /app/calc.py",
            "checked out refs/heads/fix = commit ",
            "nobody",
        ),
    ];
    for (what, setup, names, user) in found {
        let (said, calc) = s.run(setup, user);
        assert_eq!(calc, FIXED, "{what}: {said}");
        let evidence: Vec<&str> = said
            .lines()
            .filter_map(|l| l.strip_prefix("exploit: evidence: "))
            .collect();
        assert_eq!(evidence.len(), 1, "{what}: {said}");
        assert!(evidence[0].contains(names), "{what}: {said}");
    }
    let nothing: &[(&str, &str, &str)] = &[
        (
            "one commit",
            "base /app",
            "exploit: evidence: no commit beyond HEAD in: /app/.git",
        ),
        (
            "a shallow single-branch clone",
            "base /src; git checkout -q -b fix; fixc; git checkout -q main; git clone -q --depth 1 --single-branch --branch main file:///src /app; rm -rf /src",
            "exploit: evidence: no commit beyond HEAD in: /app/.git",
        ),
        (
            "an unrelated orphan branch",
            "base /app; git checkout -q --orphan pages; git rm -rqf .; echo site > calc.py; git add calc.py; GIT_COMMITTER_DATE=2024-03-01T00:00:00Z git commit -qm site; git checkout -q main",
            "exploit: evidence: no commit beyond HEAD in: /app/.git",
        ),
        (
            "history cut by the advice",
            "base /app; git checkout -q -b fix; fixc; git checkout -q main; git branch -q -D fix; forget; git gc -q --prune=now",
            "exploit: evidence: no commit beyond HEAD in: /app/.git",
        ),
        (
            "no git binary",
            "base /app; git checkout -q -b fix; fixc; git checkout -q main; rm -rf /usr/bin/git /usr/lib/git-core",
            "exploit: not applicable: no git binary in the image; history at: /app/.git",
        ),
        (
            "no repository",
            "mkdir /app; printf 'def add(a, b):\\n    return a - b\\n' > /app/calc.py",
            "exploit: not applicable: no git repository or bundle in the container",
        ),
    ];
    for (what, setup, says) in nothing {
        let (said, calc) = s.run(setup, "root");
        assert_eq!(calc, BUGGY, "{what}: {said}");
        assert!(
            said.lines().any(|l| l.trim_end() == *says),
            "{what}: {said}"
        );
    }
}
