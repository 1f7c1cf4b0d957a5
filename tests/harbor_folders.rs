//! `arbiter export harbor` / `arbiter import harbor` (SPEC §17) on jobs made on the real engine:
//! every exported file loads with Harbor's own pydantic models (and its job statistics are
//! the ones Harbor computes), an export imported back reports the same pass rates and pass@k,
//! and `--leaderboard terminal-bench-2.0` refuses, one line each with exit 2, what the
//! submission bot would.
//!
//! Harbor's models come from a venv (scripts/harbor-venv, which scripts/test runs first):
//! `ARBITER_HARBOR_PYTHON`, else `~/.cache/arbiter/harbor-venv/bin/python`. Without one the
//! Harbor checks skip, or fail under `ARBITER_REQUIRE_DOCKER=1` (CI).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{arbiter, docker_available, repo, run_config, stderr, stdout, write_job};
use serde_json::Value;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8 path")
}

/// The venv's python with Harbor installed, or `None` (skip) — a failure under CI.
fn harbor_python() -> Option<PathBuf> {
    let python = std::env::var_os("ARBITER_HARBOR_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/arbiter/harbor-venv/bin/python"))
        })
        .filter(|p| p.is_file());
    if python.is_none() {
        if std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() == Ok("1") {
            panic!(
                "ARBITER_REQUIRE_DOCKER=1 but no Harbor venv (run scripts/harbor-venv, or set ARBITER_HARBOR_PYTHON)"
            );
        }
        eprintln!("skipping the Harbor model checks: no Harbor venv (scripts/harbor-venv)");
    }
    python
}

/// Load every file of the Harbor job folder `folder` with Harbor's models (tests/harbor/validate.py).
fn assert_harbor_loads(python: &Path, folder: &Path) {
    let out = Command::new(python)
        .arg(repo().join("tests/harbor/validate.py"))
        .arg(folder)
        .output()
        .expect("run validate.py");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "Harbor refused exported files:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("ok stats"),
        "the job stats were not checked:\n{text}"
    );
}

fn task(name: &str) -> String {
    repo()
        .join("tests/fixtures/tasks")
        .join(name)
        .display()
        .to_string()
}

/// A job of the oracle and nop on a pass/fail task, a timeout, a build that fails (infra) and
/// a verifier that writes no reward, two attempts each.
fn mixed_job(tmp: &Path) -> PathBuf {
    let config = write_job(
        tmp,
        &format!(
            "tasks: [{}, {}, {}, {}]\nagents: [oracle, nop]\nattempts: 2\nretries: {{max: 0}}\nconcurrency: 4\n",
            task("quick"),
            task("sleepy"),
            task("badbuild"),
            task("noreward")
        ),
    );
    let job = tmp.join("job");
    let out = run_config(&config, &job);
    // 3: trials ended in infra errors (the build that fails), as intended.
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    job
}

fn report_json(dir: &Path) -> Value {
    let out = arbiter(&["report", s(dir), "--format", "json", "--pages", "none"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("report --format json prints JSON")
}

/// Per arm: (trials, scored, infra, passed, pass rate, pass@k values).
fn rates(report: &Value) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = report["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .map(|a| {
            let keep = [
                "trials",
                "scored",
                "infra",
                "passed",
                "failed",
                "unverified",
                "pass_rate",
                "pass_at_k",
                "pass_hat_k",
                "mean_reward",
            ];
            let facts: serde_json::Map<String, Value> = keep
                .iter()
                .map(|k| (k.to_string(), a[*k].clone()))
                .collect();
            (
                a["arm"].as_str().unwrap_or_default().to_string(),
                Value::Object(facts),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn trial_result(folder: &Path, trial: &str) -> Value {
    let bytes = std::fs::read(folder.join(trial).join("result.json")).expect("result.json");
    serde_json::from_slice(&bytes).expect("JSON")
}

#[test]
fn exported_jobs_load_with_harbors_models_and_import_back_to_the_same_rates() {
    if !docker_available() {
        return;
    }
    let python = harbor_python();
    let tmp = tempfile::tempdir().expect("tmp");
    let job = mixed_job(tmp.path());
    let folder = tmp.path().join("harbor");
    let out = arbiter(&["export", "harbor", s(&job), "--out", s(&folder)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("exported 16 trial(s)"),
        "{}",
        stdout(&out)
    );

    // Harbor's layout and meanings.
    for f in ["config.json", "result.json"] {
        assert!(folder.join(f).is_file(), "{f}");
    }
    let pass = trial_result(&folder, "quick__oracle__default__1");
    assert_eq!(pass["verifier_result"]["rewards"]["reward"], 1.0);
    assert_eq!(pass["exception_info"], Value::Null);
    assert_eq!(pass["reward_valid"], true);
    // Harbor's own checksum of the task dir (validate.py recomputes it with Harbor).
    let checksum = pass["task_checksum"].as_str().expect("task_checksum");
    assert_eq!(checksum.len(), 64, "{checksum}");
    assert_eq!(
        pass["agent_result"]["metadata"]["arbiter"]["claim"]["status"],
        "missing"
    );
    let fail = trial_result(&folder, "quick__nop__default__1");
    assert_eq!(fail["verifier_result"]["rewards"]["reward"], 0.0);
    let timeout = trial_result(&folder, "sleepy__oracle__default__1");
    assert_eq!(
        timeout["exception_info"]["exception_type"],
        "AgentTimeoutError"
    );
    assert_eq!(
        timeout["exception_info"]["policy"]["has_valid_reward"],
        true
    );
    let infra = trial_result(&folder, "badbuild__oracle__default__1");
    assert_eq!(
        infra["exception_info"]["exception_type"],
        "SandboxBuildFailedError"
    );
    assert_eq!(infra["exception_info"]["policy"]["should_grade"], false);
    assert_eq!(infra["verifier_result"], Value::Null);
    assert_eq!(infra["reward_valid"], false);
    let no_reward = trial_result(&folder, "noreward__oracle__default__1");
    assert_eq!(
        no_reward["verifier_result"],
        Value::Null,
        "no reward is not a zero"
    );
    let trial = folder.join("quick__oracle__default__1");
    assert!(trial.join("config.json").is_file());
    assert!(trial.join("verifier/test-stdout.txt").is_file());
    assert!(trial.join("verifier/reward.txt").is_file());
    assert!(trial.join("arbiter/record.json").is_file());
    assert!(trial.join("arbiter/changes.json").is_file());
    assert!(!trial.join("agent/changes.json").exists());

    if let Some(python) = &python {
        assert_harbor_loads(python, &folder);
    }

    // Round trip: the imported job reports what the original did.
    let imported = tmp.path().join("imported");
    let out = arbiter(&["import", "harbor", s(&folder), "--out", s(&imported)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let before = rates(&report_json(&job));
    let after = rates(&report_json(&imported));
    assert_eq!(before, after);
    assert_eq!(before.len(), 2);
    let out = arbiter(&["compare", s(&job), s(&imported), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // Read-only: resume and verify refuse it, one line, exit 2.
    for args in [vec!["resume", s(&imported)], vec!["verify", s(&imported)]] {
        let out = arbiter(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("error: {}/imported.json:from: ", s(&imported)))
                && err.contains("read-only"),
            "{err}"
        );
    }

    // An imported job is not exported again (its Harbor folder is the original).
    let again = tmp.path().join("again");
    let out = arbiter(&["export", "harbor", s(&imported), "--out", s(&again)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!("error: {}/imported.json:from: ", s(&imported))),
        "{err}"
    );
    assert!(!again.exists());

    // An export over an existing dir is refused, and nothing is changed.
    let out = arbiter(&["export", "harbor", s(&job), "--out", s(&folder)]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {}:--out: exists; the export writes a new directory",
            s(&folder)
        )
    );

    // A Harbor folder without arbiter's metadata (as Harbor writes one) imports with what
    // Harbor knows: the same outcomes, the claim unknown.
    let native = tmp.path().join("native");
    common::copy_dir(&folder, &native);
    for entry in std::fs::read_dir(&native).expect("dir") {
        let dir = entry.expect("entry").path();
        let path = dir.join("result.json");
        if !dir.is_dir() || !path.is_file() {
            continue;
        }
        let mut v: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        v["agent_result"]["metadata"] = Value::Null;
        std::fs::write(&path, serde_json::to_vec(&v).expect("json")).expect("write");
        std::fs::remove_dir_all(dir.join("arbiter")).expect("rm arbiter/");
    }
    let from_native = tmp.path().join("from-native");
    let out = arbiter(&["import", "harbor", s(&native), "--out", s(&from_native)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let native_rates = rates(&report_json(&from_native));
    assert_eq!(native_rates, before);
    let rec: Value = serde_json::from_slice(
        &std::fs::read(from_native.join("trials/quick__oracle__default__1/result.json"))
            .expect("record"),
    )
    .expect("json");
    assert_eq!(rec["claim"]["status"], "unknown");
    assert!(rec.get("integrity").is_none());
    assert_eq!(rec["imported"]["from"], "harbor");
}

/// A dataset dir of two copies of the `quick` task.
fn dataset(tmp: &Path) -> PathBuf {
    let ds = tmp.join("tb");
    for name in ["quick-a", "quick-b"] {
        common::copy_dir(&repo().join("tests/fixtures/tasks/quick"), &ds.join(name));
    }
    ds
}

const META: &[&str] = &[
    "--leaderboard",
    "terminal-bench-2.0",
    "--agent-url",
    "https://example.org/oracle",
    "--agent-display-name",
    "Oracle",
    "--agent-org",
    "Example",
    "--model",
    "anthropic/claude-sonnet-4-5:Claude Sonnet 4.5:Anthropic",
];

fn export_for_board(job: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["export", "harbor", s(job), "--out", s(out)];
    args.extend_from_slice(extra);
    arbiter(&args)
}

/// The refusal lines of `out`: exit 2, each line `error: …`, nothing written.
fn refusals(out: &Output, dest: &Path) -> Vec<String> {
    assert_eq!(out.status.code(), Some(2), "{}{}", stdout(out), stderr(out));
    assert!(!dest.exists(), "a refused export wrote {}", dest.display());
    let err = stderr(out);
    let lines: Vec<String> = err.lines().map(str::to_string).collect();
    for l in &lines {
        assert!(l.starts_with("error: "), "{err}");
    }
    lines
}

#[test]
fn the_leaderboard_export_refuses_what_the_bot_would_one_line_each() {
    if !docker_available() {
        return;
    }
    let python = harbor_python();
    let tmp = tempfile::tempdir().expect("tmp");
    let ds = dataset(tmp.path());
    let dest = tmp.path().join("Oracle__Sonnet");

    // Four attempts of one of the dataset's two tasks.
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nagents: [oracle]\nattempts: 4\n",
            ds.join("quick-a").display()
        ),
    );
    let job = tmp.path().join("job");
    let out = run_config(&config, &job);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // Metadata flags missing: one line each (and the job's own problems with them).
    let lines = refusals(
        &export_for_board(&job, &dest, &["--leaderboard", "terminal-bench-2.0"]),
        &dest,
    );
    for field in [
        "agent_url",
        "agent_display_name",
        "agent_org_display_name",
        "models",
    ] {
        let want = format!("error: metadata.yaml:{field}: required by the leaderboard; give --");
        assert_eq!(
            lines.iter().filter(|l| l.starts_with(&want)).count(),
            1,
            "{lines:#?}"
        );
    }

    // Too few attempts, a task of the dataset missing: one line each.
    let lines = refusals(&export_for_board(&job, &dest, META), &dest);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(lines[0].starts_with(&format!(
        "error: {}:attempt: the leaderboard's pass@k needs at least 5 attempts per task; 1 task(s) have fewer: quick-a (4); ",
        s(&job.join("trials.jsonl"))
    )), "{lines:#?}");
    assert_eq!(
        lines[1],
        format!(
            "error: {}:tasks: 1 task(s) of the dataset {} were not run: quick-b",
            s(&job.join("job.yaml")),
            s(&ds)
        )
    );

    // The same job with the other task and a fifth attempt: accepted, and Harbor loads it.
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}, {}]\nagents: [oracle]\nattempts: 5\n",
            ds.join("quick-a").display(),
            ds.join("quick-b").display()
        ),
    );
    let out = run_config(&config, &job);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = export_for_board(&job, &dest, META);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let meta: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(dest.join("metadata.yaml")).expect("metadata.yaml"),
    )
    .expect("YAML");
    assert_eq!(
        meta["agent_url"].as_str(),
        Some("https://example.org/oracle")
    );
    assert_eq!(meta["agent_org_display_name"].as_str(), Some("Example"));
    assert_eq!(
        meta["models"][0]["model_provider"].as_str(),
        Some("anthropic")
    );
    assert_eq!(
        meta["models"][0]["model_display_name"].as_str(),
        Some("Claude Sonnet 4.5")
    );
    let folder = dest.join("job");
    let result: Value =
        serde_json::from_slice(&std::fs::read(folder.join("result.json")).expect("job result"))
            .expect("json");
    let eval = &result["stats"]["evals"]["oracle__adhoc"];
    assert_eq!(eval["pass_at_k"]["5"], 1.0, "{eval}");
    if let Some(python) = &python {
        assert_harbor_loads(python, &folder);
    }

    // A task changed since the run: its trials are not the dataset's.
    std::fs::write(ds.join("quick-b/instruction.md"), "something else\n").expect("edit");
    let again = tmp.path().join("again");
    let lines = refusals(&export_for_board(&job, &again, META), &again);
    assert_eq!(
        lines,
        vec![format!(
            "error: {}:tasks: 1 task(s) ran at other content than the dataset's: quick-b",
            s(&job.join("lock.json"))
        )]
    );

    // A bad --model is one line too.
    let mut bad = META.to_vec();
    *bad.last_mut().expect("model") = "claude-sonnet";
    let lines = refusals(&export_for_board(&job, &again, &bad), &again);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("error: --model: expected PROVIDER/NAME:DISPLAY NAME:ORG")),
        "{lines:#?}"
    );
}

#[test]
fn a_leaderboard_export_of_a_job_with_infra_errors_or_two_arms_is_refused() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nagents: [oracle, nop]\nattempts: 5\nretries: {{max: 0}}\nconcurrency: 4\n",
            task("badbuild")
        ),
    );
    let job = tmp.path().join("job");
    let out = run_config(&config, &job);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let dest = tmp.path().join("sub");
    let fixtures = repo().join("tests/fixtures/tasks");
    let mut args = META.to_vec();
    args.extend_from_slice(&["--dataset", s(&fixtures)]);
    let lines = refusals(&export_for_board(&job, &dest, &args), &dest);
    let one = |prefix: String| {
        assert_eq!(
            lines.iter().filter(|l| l.starts_with(&prefix)).count(),
            1,
            "{prefix}\n{lines:#?}"
        )
    };
    one(format!(
        "error: {}:agents: a submission is one agent configuration; this job has 2 (nop/default, oracle/default)",
        s(&job.join("job.yaml"))
    ));
    one(format!(
        "error: {}:infra_error: 10 trial(s) ended in a harness error (",
        s(&job.join("trials.jsonl"))
    ));
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with(&format!("arbiter resume {} --retry-infra", s(&job)))),
        "{lines:#?}"
    );
}

/// A folder Harbor wrote (tests/fixtures/harbor-folder, made with Harbor's own models by
/// tests/harbor/make_fixture.py) imports with what Harbor knows, and nothing more.
#[test]
fn a_folder_harbor_wrote_imports_with_what_harbor_knows() {
    let tmp = tempfile::tempdir().expect("tmp");
    let folder = repo().join("tests/fixtures/harbor-folder");
    let job = tmp.path().join("from-harbor");
    let out = arbiter(&["import", "harbor", s(&folder), "--out", s(&job)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("imported 8 trial(s) into "),
        "{}",
        stdout(&out)
    );

    let report = report_json(&job);
    let arms = report["arms"].as_array().expect("arms");
    assert_eq!(arms.len(), 1);
    let arm = &arms[0];
    assert_eq!(arm["arm"], "terminus-2/default");
    // Not graded (the build) and an API error with no valid reward: harness errors.
    assert_eq!(arm["infra"], 2, "{arm}");
    assert_eq!(arm["scored"], 6, "{arm}");
    // A, D (its agent exited 2, its reward stands) and H pass; B and C fail; F has no reward.
    assert_eq!(arm["passed"], 3, "{arm}");
    assert_eq!(arm["unverified"], 1, "{arm}");
    assert_eq!(arm["pass_rate"], 0.5, "{arm}");

    let record = |trial: &str| -> Value {
        let path = job.join("trials").join(trial).join("result.json");
        serde_json::from_slice(&std::fs::read(&path).expect("record")).expect("JSON")
    };
    let timeout = record("hello__CCCCCCC");
    assert_eq!(timeout["termination"]["kind"], "timeout");
    assert_eq!(timeout["verifier"]["status"], "failed");
    let exited = record("hello__DDDDDDD");
    assert_eq!(exited["termination"]["kind"], "exited");
    assert_eq!(exited["termination"]["exit_code"], 2);
    assert_eq!(exited["verifier"]["status"], "passed");
    let build = record("build__EEEEEEE");
    assert_eq!(build["infra_error"]["phase"], "environment");
    let verifier = record("build__FFFFFFF");
    assert_eq!(verifier["verifier"]["status"], "error");
    assert!(verifier.get("infra_error").is_none());
    let api = record("build__GGGGGGG");
    assert_eq!(api["infra_error"]["phase"], "agent");
    let pass = record("hello__AAAAAAA");
    assert_eq!(pass["claim"]["status"], "unknown");
    assert!(
        pass.get("usage").is_none(),
        "Harbor's tokens are not arbiter's gateway usage"
    );
    assert_eq!(pass["harbor_usage"]["n_input_tokens"], 1200);
    assert_eq!(pass["imported"]["agent_version"], "2.0.0");
    assert_eq!(pass["phases"]["agent"]["seconds"], 5.5);
    assert!(
        pass["started_at"]
            .as_str()
            .expect("start")
            .starts_with("2026-11-30T02:31:48")
    );
    let dir = job.join("trials/hello__AAAAAAA");
    assert!(dir.join("agent/trajectory.atif.json").is_file());
    assert!(dir.join("verifier/stdout.log").is_file());
    assert!(dir.join("harbor/result.json").is_file());
    // Attempts by start time within the task.
    assert_eq!(record("hello__BBBBBBB")["attempt"], 2);
    assert_eq!(record("build__HHHHHHH")["attempt"], 4);

    // Not a Harbor folder: one line, exit 2, nothing written.
    let bad = tmp.path().join("bad");
    std::fs::create_dir_all(&bad).expect("mkdir");
    std::fs::write(bad.join("config.json"), "{}").expect("write");
    let dest = tmp.path().join("nothing");
    let out = arbiter(&["import", "harbor", s(&bad), "--out", s(&dest)]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {}:file: not a Harbor 0.26 document: missing field `job_name`",
            s(&bad.join("config.json"))
        )
    );
    assert!(!dest.exists());
}
