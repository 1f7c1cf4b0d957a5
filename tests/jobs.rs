//! Batch jobs through the real binary on a real engine: kill -9 and resume, SIGINT, retries of
//! infrastructure failures, variants, and config changes on resume.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn arbiter")
}

fn finished(job_dir: &Path) -> usize {
    std::fs::read_dir(job_dir.join("trials"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().join("result.json").is_file())
                .count()
        })
        .unwrap_or(0)
}

fn wait_for_records(job_dir: &Path, n: usize, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while finished(job_dir) < n {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "arbiter exited before {n} records"
        );
        assert!(Instant::now() < deadline, "no {n} records after 120 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Exactly one record per planned trial, in result.json and in trials.jsonl.
fn assert_complete(job_dir: &Path, expected: usize) {
    assert_eq!(finished(job_dir), expected);
    let jsonl = std::fs::read_to_string(job_dir.join("trials.jsonl")).expect("trials.jsonl");
    let ids: Vec<String> = jsonl
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("jsonl line")["id"]
                .as_str()
                .expect("id")
                .to_string()
        })
        .collect();
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), expected, "one line per trial: {ids:?}");
    assert_eq!(unique.len(), expected, "no duplicates: {ids:?}");
}

fn job_args<'a>(task: &'a str, job_dir: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", task, "--agent", "oracle", "--job-dir", job_dir];
    args.extend_from_slice(extra);
    args
}

#[test]
fn kill_9_mid_run_then_resume_completes_every_trial_exactly_once() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let job_dir = tmp.path().join("job-kill9");
    let job = job_dir.to_string_lossy().into_owned();
    let task = fixture("quick").to_string_lossy().into_owned();
    let mut child = spawn(&job_args(&task, &job, &["-k", "12", "-n", "3", "--quiet"]));
    wait_for_records(&job_dir, 3, &mut child);
    child.kill().expect("kill -9");
    let _ = child.wait();
    assert!(finished(&job_dir) < 12, "killed before the end");

    let out = arbiter(&["resume", &job, "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_complete(&job_dir, 12);
    let gc = arbiter(&["gc"]);
    assert_eq!(gc.status.code(), Some(0), "{}", stderr(&gc));
    assert_no_leftovers(&job_dir);
}

#[test]
fn sigint_exits_130_cleans_up_and_resume_finishes() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let job_dir = tmp.path().join("job-sigint");
    let job = job_dir.to_string_lossy().into_owned();
    let task = fixture("quick").to_string_lossy().into_owned();
    let mut child = spawn(&job_args(&task, &job, &["-k", "12", "-n", "3"]));
    wait_for_records(&job_dir, 2, &mut child);
    let out = interrupt(child);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("resume with: arbiter resume"),
        "{}",
        stdout(&out)
    );
    assert_no_leftovers(&job_dir);
    let before = finished(&job_dir);
    assert!(before < 12);

    let out = arbiter(&["resume", &job, "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_complete(&job_dir, 12);
    assert_no_leftovers(&job_dir);
}

#[test]
fn infra_failures_are_retried_per_policy_and_reported_apart() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{bad}, {good}]\nagents: [oracle]\nretries: {{max: 2, backoff_sec: 0.2}}\n",
            bad = fixture("badbuild").display(),
            good = fixture("quick").display()
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let bad = result(&job_dir, "badbuild__oracle__default__1");
    assert_eq!(bad["termination"]["kind"], "infra_error");
    assert_eq!(bad["retries"], 2, "{bad:#}");
    assert_eq!(bad["previous_errors"].as_array().expect("history").len(), 2);
    let good = result(&job_dir, "quick__oracle__default__1");
    assert_eq!(good["retries"], 0);
    assert_eq!(good["verifier"]["status"], "passed");
    let table = stdout(&out);
    assert!(table.contains("excluded from pass rates"), "{table}");
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("oracle"))
        .expect("row")
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        ["oracle", "default", "2", "1", "0", "1", "100.0%"],
        "{table}"
    );
}

#[test]
fn variants_are_separate_trials_that_carry_and_see_their_overrides() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{task}]\nagents: [oracle]\nconcurrency: 2\nvariants:\n  - name: base\n    env: {{ARM: base-arm}}\n  - name: ablated\n    env: {{ARM: ablated-arm, SOME_TOKEN: tok-secret-123}}\n",
            task = fixture("quick").display()
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for (variant, arm) in [("base", "base-arm"), ("ablated", "ablated-arm")] {
        let id = format!("quick__oracle__{variant}__1");
        let r = result(&job_dir, &id);
        assert_eq!(r["variant"], variant);
        assert_eq!(r["overrides"]["ARM"], arm, "{r:#}");
        let seen =
            std::fs::read_to_string(job_dir.join("trials").join(&id).join("agent/logs/arm.txt"))
                .expect("arm.txt");
        assert_eq!(seen.trim(), arm, "the agent saw its variant's env");
    }
    let ablated = result(&job_dir, "quick__oracle__ablated__1");
    assert_eq!(
        ablated["overrides"]["SOME_TOKEN"], "***",
        "secret-named overrides are redacted"
    );
    let mut leaked = Vec::new();
    for entry in files_under(&job_dir) {
        if std::fs::read_to_string(&entry).is_ok_and(|t| t.contains("tok-secret-123")) {
            leaked.push(entry);
        }
    }
    assert!(leaked.is_empty(), "secret value written to {leaked:?}");
    let table = stdout(&out);
    assert!(
        table.contains("base") && table.contains("ablated"),
        "{table}"
    );
}

#[test]
fn changed_config_is_refused_and_added_attempts_run_only_new_trials() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    // A private copy of the task, so that changing it does not disturb other tests.
    let task_dir = tmp.path().join("quick");
    std::fs::create_dir_all(task_dir.join("tests")).expect("mkdir");
    std::fs::create_dir_all(task_dir.join("solution")).expect("mkdir");
    for f in [
        "task.toml",
        "instruction.md",
        "tests/test.sh",
        "solution/solve.sh",
    ] {
        std::fs::copy(fixture("quick").join(f), task_dir.join(f)).expect("copy");
    }
    let task = task_dir.to_string_lossy().into_owned();
    let job_dir = tmp.path().join("job-change");
    let job = job_dir.to_string_lossy().into_owned();

    let out = arbiter(&job_args(&task, &job, &["-k", "2", "-n", "2", "--quiet"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_complete(&job_dir, 2);
    let first =
        std::fs::read_to_string(job_dir.join("trials/quick__oracle__default__1/result.json"))
            .expect("record");

    // More attempts: only the new ones run; earlier records are untouched.
    let out = arbiter(&job_args(&task, &job, &["-k", "3", "--quiet"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_complete(&job_dir, 3);
    let again =
        std::fs::read_to_string(job_dir.join("trials/quick__oracle__default__1/result.json"))
            .expect("record");
    assert_eq!(first, again, "a finished record is never re-run");

    // A changed task is refused, naming what changed, and nothing runs.
    std::fs::write(
        task_dir.join("instruction.md"),
        "Write ok to /app/out, quickly.\n",
    )
    .expect("edit");
    let out = arbiter(&job_args(&task, &job, &["-k", "3", "--quiet"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "error: {job}/job.yaml:tasks.quick: task content changed (sha256:"
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    // Fewer attempts than already recorded is a change too.
    std::fs::write(task_dir.join("instruction.md"), "Write ok to /app/out.\n").expect("restore");
    let out = arbiter(&job_args(&task, &job, &["-k", "1", "--quiet"]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(":attempts: lowered from 3 to 1"),
        "{}",
        stderr(&out)
    );
    assert_complete(&job_dir, 3);
}

#[test]
fn gc_never_touches_a_live_job() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let job_dir = tmp.path().join("job-gc-live");
    let job = job_dir.to_string_lossy().into_owned();
    let task = fixture("quick").to_string_lossy().into_owned();
    let mut child = spawn(&job_args(&task, &job, &["-k", "6", "-n", "2", "--quiet"]));
    // Wait until one of the job's containers exists, then collect garbage while it runs. gc's
    // count of live resources is every live job's on the engine (other test binaries run jobs
    // beside this one), so the job's own containers are looked for by its exact label.
    let deadline = Instant::now() + Duration::from_secs(60);
    let kept = loop {
        if !job_containers(&job_dir, "{{.ID}}").is_empty() {
            let gc = arbiter(&["gc", "--dry-run"]);
            let text = stdout(&gc);
            let live: usize = text
                .split("kept ")
                .nth(1)
                .and_then(|t| t.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if live > 0 {
                break live;
            }
        }
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "the job ended before gc saw it live"
        );
        assert!(Instant::now() < deadline, "never saw a live container");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(kept > 0);
    let gc = arbiter(&["gc"]);
    assert_eq!(gc.status.code(), Some(0), "{}", stderr(&gc));
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(0),
        "the live job was not disturbed: {}",
        stderr(&out)
    );
    assert_complete(&job_dir, 6);
    for i in 1..=6 {
        let r = result(&job_dir, &format!("quick__oracle__default__{i}"));
        assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
        assert_eq!(r["retries"], 0, "{r:#}");
    }
}
