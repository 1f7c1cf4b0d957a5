//! `--json` on `run` and `resume`: stdout is exactly one `arbiter.packet.v1` object, whatever
//! the ending (success, infra errors, a refused config or argument, an interrupt), with the
//! exit codes of SPEC §9 and no raw argument value in it. Human output goes to stderr.
//! Refusals need no engine; the runs use the real one.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// The one packet on stdout (stdout holds nothing else).
fn packet(out: &Output) -> Value {
    let text = stdout(out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "stdout is one line: {text:?}\nstderr: {}",
        stderr(out)
    );
    let v: Value = serde_json::from_str(lines[0]).expect("stdout is JSON");
    assert_eq!(v["schema"], "arbiter.packet.v1");
    let mut keys: Vec<&str> = v
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "code",
            "command",
            "complete",
            "counts",
            "error",
            "exit_code",
            "job_dir",
            "phase",
            "schema",
            "status"
        ],
        "the same keys for every ending"
    );
    assert_eq!(
        v["exit_code"].as_i64(),
        out.status.code().map(i64::from),
        "exit_code is the process's"
    );
    v
}

fn counts(v: &Value) -> [u64; 7] {
    let c = &v["counts"];
    [
        "planned",
        "finished",
        "passed",
        "failed",
        "unverified",
        "infra_error",
        "not_run",
    ]
    .map(|k| c[k].as_u64().unwrap_or_else(|| panic!("counts.{k}: {v}")))
}

#[test]
fn a_bad_argument_is_a_packet_with_exit_2_naming_the_flag_not_the_value() {
    let out = arbiter(&["run", "--json", "-k", "sk-live-secret-value"]);
    assert_eq!(out.status.code(), Some(2));
    let p = packet(&out);
    assert_eq!(p["status"], "error");
    assert_eq!(p["phase"], "arguments");
    assert_eq!(p["code"], "invalid_value");
    assert_eq!(p["command"], "run");
    assert_eq!(p["error"]["field"], "--attempts");
    assert_eq!(p["complete"], false);
    assert!(!stdout(&out).contains("sk-live"), "no value echoed");
    assert!(
        stderr(&out).contains("error:"),
        "the human error is on stderr"
    );

    // an unknown flag: the name typed is itself a raw value, so not even that
    let out = arbiter(&["resume", "--token=sk-live-secret-value", "--json", "jobs/x"]);
    assert_eq!(out.status.code(), Some(2));
    let p = packet(&out);
    assert_eq!(
        (p["code"].as_str(), p["command"].as_str()),
        (Some("unknown_argument"), Some("resume"))
    );
    assert_eq!(p["error"]["field"], Value::Null);
    assert!(!stdout(&out).contains("sk-live"));

    // without --json a parse error stays clap's text on stderr, stdout empty
    let out = arbiter(&["run", "-k", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout(&out), "");
}

#[test]
fn a_bad_config_is_a_packet_with_exit_2_and_nothing_started() {
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_job(
        tmp.path(),
        "tasks: []\nagents: [oracle]\nattempts: 1\nconcurency: 2\n",
    );
    let job = tmp.path().join("job");
    let out = arbiter(&[
        "run",
        "-c",
        config.to_str().expect("utf8"),
        "--job-dir",
        job.to_str().expect("utf8"),
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let p = packet(&out);
    assert_eq!(p["phase"], "configuration");
    assert_eq!(p["code"], "config_invalid");
    assert_eq!(p["status"], "error");
    assert_eq!(p["job_dir"], Value::Null);
    assert!(
        !stdout(&out).contains(&tmp.path().display().to_string()),
        "no path from the arguments: {}",
        stdout(&out)
    );
    assert!(!job.exists(), "nothing started");
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));

    // a task that is not one
    let not_a_task = tmp.path().join("empty");
    std::fs::create_dir_all(&not_a_task).expect("mkdir");
    let out = arbiter(&["run", not_a_task.to_str().expect("utf8"), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let p = packet(&out);
    assert_eq!(
        (p["phase"].as_str(), p["code"].as_str()),
        (Some("configuration"), Some("task_not_found"))
    );

    // resume of a directory that is no job
    let out = arbiter(&["resume", not_a_task.to_str().expect("utf8"), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let p = packet(&out);
    assert_eq!(
        (
            p["command"].as_str(),
            p["phase"].as_str(),
            p["code"].as_str()
        ),
        (
            Some("resume"),
            Some("configuration"),
            Some("config_invalid")
        )
    );
    assert_eq!(p["error"]["field"], "job.yaml");
}

#[test]
fn a_run_ends_in_one_packet_with_counts_and_human_output_on_stderr() {
    if !docker_available() {
        return;
    }
    let (out, job_dir, _g) = run_job(&[
        fixture("quick").to_str().expect("utf8"),
        "--agent",
        "oracle",
        "--agent",
        "nop",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = packet(&out);
    assert_eq!(p["command"], "run");
    assert_eq!(p["status"], "ok");
    assert_eq!(p["code"], "ok");
    assert_eq!(p["phase"], "finished");
    assert_eq!(p["complete"], true);
    assert_eq!(p["error"], Value::Null);
    assert_eq!(p["job_dir"], job_dir.display().to_string());
    // planned, finished, passed, failed, unverified, infra, not run
    assert_eq!(counts(&p), [2, 2, 1, 1, 0, 0, 0], "{p}");
    let err = stderr(&out);
    assert!(
        err.contains("pass rate"),
        "the summary table went to stderr: {err}"
    );
    assert!(err.contains("job dir:"), "{err}");

    // resume of the finished job: nothing to run, the same counts, `resume`
    let out = arbiter(&["resume", job_dir.to_str().expect("utf8"), "--json", "-q"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = packet(&out);
    assert_eq!(
        (p["command"].as_str(), p["complete"].as_bool()),
        (Some("resume"), Some(true))
    );
    assert_eq!(counts(&p), [2, 2, 1, 1, 0, 0, 0], "{p}");

    // verify of the same job: one packet, counted per trial, the table on stderr
    let out = arbiter(&["verify", job_dir.to_str().expect("utf8"), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let p = packet(&out);
    assert_eq!(
        (p["command"].as_str(), p["status"].as_str()),
        (Some("verify"), Some("ok"))
    );
    assert_eq!(counts(&p), [2, 2, 1, 1, 0, 0, 0], "{p}");
    assert!(stderr(&out).contains("regrade"), "{}", stderr(&out));
}

#[test]
fn verify_and_tasks_check_refusals_are_packets_with_exit_2() {
    let tmp = tempfile::tempdir().expect("tmp");
    let missing = tmp.path().join("no-such-job");
    let out = arbiter(&["verify", missing.to_str().expect("utf8"), "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let p = packet(&out);
    assert_eq!(
        (p["command"].as_str(), p["phase"].as_str()),
        (Some("verify"), Some("configuration"))
    );
    assert_eq!(p["complete"], false);
    let out = arbiter(&[
        "tasks",
        "check",
        fixture("quick").to_str().expect("utf8"),
        "-n",
        "0",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let p = packet(&out);
    assert_eq!(p["command"], "tasks check");
    assert_eq!(p["code"], "invalid_value");
    assert!(stderr(&out).contains("-n: concurrency"), "{}", stderr(&out));
}

#[test]
fn infra_errors_are_exit_3_and_counted_apart_in_the_packet() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{bad}, {good}]\nagents: [oracle]\nretries: {{max: 0}}\n",
            bad = fixture("badbuild").display(),
            good = fixture("quick").display()
        ),
    );
    let (out, _job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8"), "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let p = packet(&out);
    assert_eq!(p["status"], "infra_error");
    assert_eq!(p["code"], "infra_errors");
    assert_eq!(p["phase"], "finished");
    assert_eq!(p["complete"], true, "every trial has a record");
    assert_eq!(counts(&p), [2, 2, 1, 0, 0, 1, 0], "{p}");
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

#[test]
fn an_interrupted_run_is_exit_130_incomplete_with_what_did_not_run() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let job_dir = tmp.path().join("job-json-sigint");
    let mut child = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args([
            "run",
            fixture("quick").to_str().expect("utf8"),
            "--agent",
            "oracle",
            "-k",
            "12",
            "-n",
            "2",
            "--json",
            "--job-dir",
            job_dir.to_str().expect("utf8"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(120);
    while finished(&job_dir) < 1 {
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "exited early"
        );
        assert!(Instant::now() < deadline, "no record after 120 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = interrupt(child);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let p = packet(&out);
    assert_eq!(p["status"], "interrupted");
    assert_eq!(p["code"], "interrupted");
    assert_eq!(p["phase"], "run");
    assert_eq!(p["complete"], false);
    let [planned, done, .., not_run] = counts(&p);
    assert_eq!(planned, 12);
    assert_eq!(done, finished(&job_dir) as u64, "{p}");
    assert_eq!(done + not_run, 12, "{p}");
    assert!(not_run > 0, "{p}");
    assert!(stderr(&out).contains("resume with: arbiter resume"));
    assert_no_leftovers(&job_dir);
}
