//! The storage watchdog's file-count bound on the real engine (issues 10, 16): an agent that
//! creates more paths than `[environment] max_files` is stopped while it runs and its
//! filesystem is never frozen or verified (its result, not an infra error); one that creates
//! them and exits at once is caught by the measurement after it is done; one under the bound
//! is verified, with its count recorded. The watchdog asks the engine once per container.

mod common;

use common::*;

fn agent(name: &str, script: &str) -> String {
    format!(
        "  - name: {name}\n    kind: command\n    run: [bash, -c, {}]\n",
        serde_json::to_string(script).expect("json")
    )
}

/// Python that creates `n` empty files under `/app/many`.
fn create(n: u32) -> String {
    format!(
        "mkdir -p /app/many && python3 -c 'import os\nfor i in range({n}): open(\"/app/many/%d\" % i, \"w\").close()'"
    )
}

#[test]
fn an_agent_over_max_files_is_stopped_and_one_under_it_passes() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = repo().join("tests/fixtures/limits/manyfiles");
    let agents = [
        // Creates 60,000 files, then would idle for 100 s (within its 120 s deadline): stopped
        // while it idles. How long the creating takes depends on the machine's load.
        agent("hoarder", &format!("{} && sleep 100", create(60_000))),
        // Creates them and exits before the watchdog's first look.
        agent("burst", &create(60_000)),
        agent("modest", &format!("{} && sleep 3", create(1_000))),
    ]
    .concat();
    let yaml = format!(
        "name: limits\ntasks: [{}]\nconcurrency: 3\nagents:\n{agents}",
        task.display()
    );
    let config = write_job(tmp.path(), &yaml);
    let job_dir = tmp.path().join("job-limits");
    let started = std::time::Instant::now();
    let out = run_config(&config, &job_dir);
    let wall = started.elapsed();
    assert_no_leftovers(&job_dir);
    assert!(
        job_dir.join("trials").is_dir(),
        "stdout: {} stderr: {}",
        stdout(&out),
        stderr(&out)
    );

    let r = result(&job_dir, "manyfiles__hoarder__default__1");
    assert_eq!(r["termination"]["kind"], "killed", "{r:#}");
    let detail = r["termination"]["detail"].as_str().expect("detail");
    assert!(
        detail.contains("over the file limit of 50000 (max_files)"),
        "{detail}"
    );
    assert!(r.get("infra_error").is_none_or(|e| e.is_null()), "{r:#}");
    assert_eq!(r["retries"], 0);
    assert_eq!(r["verifier"]["status"], "error", "{r:#}");
    assert!(r["verifier"].get("reward").is_none_or(|v| v.is_null()));
    let why = r["verifier"]["detail"].as_str().expect("detail");
    assert!(why.contains("was not snapshotted"), "{why}");
    assert_eq!(r["audit"]["verdict"], "unverifiable");
    assert_eq!(r["limits"]["max_files"], 50_000);
    assert_eq!(r["limits"]["files_limit"], 50_000);
    assert_eq!(r["limits"]["files_counted"], "watchdog");
    assert!(
        r["limits"]["files_used"].as_u64().expect("files_used") > 50_000,
        "{r:#}"
    );
    let agent_secs = r["phases"]["agent"]["seconds"].as_f64().expect("seconds");
    // Killed (not exited) already says it was stopped before its idle ended; and well before:
    // its 100 s of idling alone outlast this.
    assert!(
        agent_secs < 90.0,
        "stopped while it idled, not after its 100 s: {agent_secs}s"
    );

    // Whether the watchdog caught it mid-way (a busy machine) or the measurement after it
    // exited did, its filesystem is not verified.
    let b = result(&job_dir, "manyfiles__burst__default__1");
    let kind = b["termination"]["kind"].as_str().expect("kind");
    assert!(kind == "exited" || kind == "killed", "{b:#}");
    assert_eq!(b["verifier"]["status"], "error", "{b:#}");
    let why = b["verifier"]["detail"].as_str().expect("detail");
    assert!(
        why.contains("over the file limit of 50000") && why.contains("not snapshotted"),
        "{why}"
    );
    assert_eq!(b["limits"]["files_counted"], "watchdog");
    assert!(b.get("infra_error").is_none_or(|e| e.is_null()), "{b:#}");
    assert_eq!(b["retries"], 0);

    let m = result(&job_dir, "manyfiles__modest__default__1");
    assert_eq!(m["termination"]["kind"], "exited", "{m:#}");
    assert_eq!(m["verifier"]["status"], "passed", "{m:#}");
    assert_eq!(m["limits"]["files_counted"], "watchdog");
    let used = m["limits"]["files_used"].as_u64().expect("files_used");
    assert!(
        (1_000..1_200).contains(&used),
        "1,000 files, their directory and what the harness put there: {used}"
    );
    assert_eq!(m["limits"]["storage_enforced"], true);
    // Not stuck on any trial's 120 s deadline (the hoarder's idle alone would take 100 s).
    assert!(wall.as_secs() < 100, "the job took {wall:?}");
}
