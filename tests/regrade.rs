//! `arbiter verify` through the real binary on a real engine: a verifier bug fixed with
//! `--tests` (rewards change, history kept, report updated), regrading after `gc` (from the
//! change set), a trial that cannot be regraded, and kill -9 mid-regrade then rerun.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A task whose solution writes `/app/answer.txt` (and `extra` shell lines); its verifier
/// (`test_sh`) decides the reward.
fn task(root: &Path, name: &str, test_sh: &str, extra: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("tests")).expect("tests");
    std::fs::create_dir_all(dir.join("solution")).expect("solution");
    std::fs::write(
        dir.join("task.toml"),
        "version = \"1.0\"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\nnetwork_mode = \"no-network\"\ndocker_image = \"arbiter/busybox:latest\"\ncpus = 0.5\nmemory_mb = 64\npids_limit = 64\nworkdir = \"/app\"\n",
    )
    .expect("task.toml");
    std::fs::write(dir.join("instruction.md"), "Write 42 to /app/answer.txt.\n").expect("md");
    std::fs::write(dir.join("tests/test.sh"), test_sh).expect("test.sh");
    std::fs::write(
        dir.join("solution/solve.sh"),
        format!("#!/bin/sh\nmkdir -p /app\necho 42 > /app/answer.txt\n{extra}\n"),
    )
    .expect("solve.sh");
    dir
}

/// The verifier with the bug: it reads the wrong file, so nobody passes.
const BUGGY: &str = "#!/bin/sh\nif [ \"$(cat /app/answer 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";
/// The fixed one.
const FIXED: &str = "#!/bin/sh\nif [ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

fn fixed_tests(root: &Path, slow: bool) -> PathBuf {
    let dir = root.join(if slow { "fixed-slow" } else { "fixed" });
    std::fs::create_dir_all(&dir).expect("dir");
    let body = if slow {
        FIXED.replacen("#!/bin/sh\n", "#!/bin/sh\nsleep 2\n", 1)
    } else {
        FIXED.to_string()
    };
    std::fs::write(dir.join("test.sh"), body).expect("test.sh");
    dir
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn run(root: &Path, tasks: &[&Path], extra: &[&str]) -> PathBuf {
    let job_dir = root.join(format!(
        "job-{}",
        root.file_name()
            .expect("name")
            .to_string_lossy()
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect::<String>()
    ));
    let mut args = vec!["run".to_string(), "--quiet".to_string()];
    args.extend(tasks.iter().map(|t| s(t)));
    args.extend(["--job-dir".to_string(), s(&job_dir)]);
    args.extend(extra.iter().map(|a| a.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = arbiter(&args);
    assert!(
        out.status.success(),
        "run: {}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_no_leftovers(&job_dir);
    job_dir
}

fn reward(rec: &Value) -> Option<f64> {
    rec["verifier"]["reward"]["reward"].as_f64()
}

fn jsonl(job_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(job_dir.join("trials.jsonl"))
        .expect("trials.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("line"))
        .collect()
}

#[test]
fn a_fixed_tests_dir_regrades_after_gc_from_the_change_set_and_the_report_follows() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let t = task(tmp.path(), "answer", BUGGY, "");
    let job_dir = run(
        tmp.path(),
        &[&t],
        &["--agent", "oracle", "--agent", "nop", "-k", "2", "-n", "2"],
    );
    let oracle = "answer__oracle__default__1";
    let before = result(&job_dir, oracle);
    assert_eq!(
        reward(&before),
        Some(0.0),
        "the buggy verifier fails the oracle"
    );
    assert_eq!(before["change_content"]["regradable"], true, "{before:#}");
    assert!(
        job_dir
            .join("trials")
            .join(oracle)
            .join("agent/changes.tar")
            .is_file()
    );

    // The frozen filesystems are gone (removed at the end of each trial; gc finds nothing of
    // this job): the regrade works from the recorded change set.
    let gc = arbiter(&["gc"]);
    assert!(gc.status.success(), "{}", stderr(&gc));

    let fixed = fixed_tests(tmp.path(), false);
    let out = arbiter(&["verify", &s(&job_dir), "--tests", &s(&fixed), "-n", "2"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(
        text.contains("4 regraded, 0 not regradable, 0 infra error(s)"),
        "{text}"
    );
    assert_no_leftovers(&job_dir);
    for attempt in 1..=2 {
        let rec = result(&job_dir, &format!("answer__oracle__default__{attempt}"));
        assert_eq!(reward(&rec), Some(1.0), "{rec:#}");
        assert_eq!(rec["verifier"]["status"], "passed");
        assert_eq!(rec["audit"]["verdict"], "unclaimed_success");
        let history = rec["verifier_history"].as_array().expect("history");
        assert_eq!(history.len(), 2);
        assert_eq!(history[0]["source"], "original");
        assert_eq!(history[0]["outcome"]["reward"]["reward"], 0.0);
        assert_eq!(history[1]["source"], "change_set");
        assert_eq!(history[1]["outcome"]["reward"]["reward"], 1.0);
        assert_eq!(
            history[1]["tests_dir"],
            s(&fixed.canonicalize().expect("canon"))
        );
        assert_ne!(
            history[0]["verifier_checksum"],
            history[1]["verifier_checksum"]
        );
        let nop = result(&job_dir, &format!("answer__nop__default__{attempt}"));
        assert_eq!(reward(&nop), Some(0.0), "the nop agent still fails");
    }
    // trials.jsonl and the report use the current verdict.
    let lines = jsonl(&job_dir);
    assert_eq!(lines.len(), 4);
    let report = arbiter(&["report", &s(&job_dir), "--format", "json"]);
    assert!(report.status.success(), "{}", stderr(&report));
    let report: Value = serde_json::from_slice(&report.stdout).expect("report json");
    let text = report.to_string();
    assert!(
        text.contains("\"passed\":2"),
        "oracle passes twice now: {text}"
    );
}

#[test]
fn a_trial_over_the_content_cap_cannot_be_regraded_and_says_why() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let small = task(tmp.path(), "small", FIXED, "");
    let big = task(
        tmp.path(),
        "big",
        FIXED,
        "head -c 2097152 /dev/zero > /app/big.bin",
    );
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}, {}]\nagents: [oracle]\nchange_content_cap_mb: 1\n",
            s(&small),
            s(&big)
        ),
    );
    let job_dir = run(tmp.path(), &[], &["-c", &s(&config)]);
    let rec = result(&job_dir, "big__oracle__default__1");
    assert_eq!(rec["change_content"]["regradable"], false);
    let why = rec["change_content"]["reason"].as_str().expect("reason");
    assert!(why.contains("exceed the cap of 1 MiB"), "{why}");
    assert!(
        !job_dir
            .join("trials/big__oracle__default__1/agent/changes.tar")
            .exists()
    );

    let out = arbiter(&["verify", &s(&job_dir)]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("1 regraded, 1 not regradable"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("big__oracle__default__1")
                && l.contains("not regradable: the agent's changed files exceed the cap of 1 MiB")),
        "{text}"
    );
    let rec = result(&job_dir, "big__oracle__default__1");
    assert_eq!(rec["regrade"]["status"], "not_regradable");
    assert!(
        rec["regrade"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("cap"))
    );
    assert_eq!(
        rec["verifier"]["status"], "passed",
        "its verdict is untouched"
    );
    let ok = result(&job_dir, "small__oracle__default__1");
    assert_eq!(ok["regrade"]["status"], "regraded");
    assert_eq!(ok["verifier_history"].as_array().map(Vec::len), Some(2));

    // Bad arguments: exit 2, naming the path and flag.
    let out = arbiter(&["verify", &s(&job_dir), "--trial", "nope__x__default__1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("nope__x__default__1: --trial: no finished trial with this id"),
        "{}",
        stderr(&out)
    );
    let out = arbiter(&[
        "verify",
        &s(&job_dir),
        "--tests",
        &s(&tmp.path().join("missing")),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("missing: --tests: not a directory"),
        "{}",
        stderr(&out)
    );
}

fn marked(job_dir: &Path) -> usize {
    std::fs::read_dir(job_dir.join("trials"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    std::fs::read(e.path().join("result.json"))
                        .ok()
                        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                        .is_some_and(|r| r["regrade"]["status"] == "regraded")
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn kill_9_mid_regrade_then_rerun_regrades_every_trial_exactly_once() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let t = task(tmp.path(), "answer", BUGGY, "");
    let job_dir = run(
        tmp.path(),
        &[&t],
        &["--agent", "oracle", "-k", "6", "-n", "3"],
    );
    let fixed = fixed_tests(tmp.path(), true);
    let args = ["verify", &s(&job_dir), "--tests", &s(&fixed), "-n", "1"].map(str::to_string);
    let mut child = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(120);
    while marked(&job_dir) < 2 {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "verify ended early"
        );
        assert!(
            Instant::now() < deadline,
            "no 2 regraded trials after 120 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().expect("kill -9");
    let _ = child.wait();
    let first = marked(&job_dir);
    assert!(first < 6, "killed before the end ({first} regraded)");

    let out = arbiter(&args.each_ref().map(String::as_str));
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("(continued)"), "{text}");
    assert!(text.contains("6 regraded"), "{text}");
    assert_no_leftovers(&job_dir);
    let plans: Vec<PathBuf> = std::fs::read_dir(job_dir.join("regrade"))
        .expect("regrade dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(plans.len(), 1, "one regrade: {plans:?}");
    let plan: Value =
        serde_json::from_slice(&std::fs::read(&plans[0]).expect("plan")).expect("json");
    assert!(plan["finished_at"].is_string());
    let id = plan["id"].as_str().expect("id");
    for attempt in 1..=6 {
        let rec = result(&job_dir, &format!("answer__oracle__default__{attempt}"));
        let entries = rec["verifier_history"]
            .as_array()
            .expect("history")
            .iter()
            .filter(|h| h["regrade"] == id)
            .count();
        assert_eq!(
            entries, 1,
            "attempt {attempt} regraded exactly once: {rec:#}"
        );
        assert_eq!(reward(&rec), Some(1.0));
    }
    let lines = jsonl(&job_dir);
    assert_eq!(lines.len(), 6, "one line per trial");
    assert!(lines.iter().all(|r| reward(r) == Some(1.0)));
}
