//! `arbiter serve` through the real binary on a free port (docs/serve.md): refusals are one
//! line of JSON, the token and the root are enforced, and — on a real engine — a submitted job
//! streams its events and records what the CLI records, a trial and a job can be cancelled,
//! and a server killed mid-job is resumed with every trial recorded exactly once.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::serve::*;
use common::*;

/// Entries of `root` (names), sorted.
fn entries(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .expect("root")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_bad_job_is_one_line_4xx_and_nothing_starts() {
    let (_tmp, root, db) = dirs();
    copy_dir(&fixture("quick"), &root.join("tasks/quick"));
    let server = start(&root, &db, &[]);
    let a = &server.addr;
    let cases: Vec<(Value, &str)> = vec![
        (
            json!({"tasks": ["tasks/quick"], "agnets": ["oracle"]}),
            "agnets",
        ),
        (
            json!({"tasks": ["tasks/missing"], "agents": ["oracle"]}),
            "tasks/missing",
        ),
        (
            json!({"tasks": ["tasks/quick"], "agents": ["oracle"], "attempts": 0}),
            "attempts",
        ),
        (
            json!({"config": "tasks: [tasks/quick]\nagents: [oracle]\nconcurrency: zero\n"}),
            "concurrency",
        ),
        (
            json!({"tasks": ["tasks/quick"], "agents": ["oracle"], "job_dir": "../escaped"}),
            "job_dir",
        ),
        (
            json!({"tasks": [fixture("quick")], "agents": ["oracle"]}),
            "not under the served root",
        ),
        (
            json!({"config": "tasks: [tasks/quick]\nagents: [oracle]\njob_dir: /tmp/elsewhere\n"}),
            "job_dir",
        ),
        (
            json!({"tasks": ["tasks/quick"], "agents": ["oracle"], "network": "wide"}),
            "network",
        ),
        (
            json!({"config": "tasks: [tasks/quick]\nagents:\n  - name: peek\n    kind: command\n    run: [cat, /m/passwd]\n    mounts: [{host: /etc, container: /m}]\n"}),
            "agents.peek.mounts: /etc: not under the served root",
        ),
    ];
    for (body, names) in cases {
        let (status, text) = post(a, "/api/jobs", None, &body);
        assert!(
            (400..500).contains(&status),
            "{body}: status {status}: {text}"
        );
        let error = one_line_error(&text);
        assert!(error.contains(names), "{body}: {error:?} names {names:?}");
        assert!(!error.contains(".submitted-"), "{error}");
    }
    // Nothing started: no job dir, no staged config left, nothing listed.
    assert_eq!(entries(&root), vec!["tasks".to_string()]);
    let (status, list) = get(a, "/api/jobs");
    assert_eq!(status, 200);
    assert_eq!(list["jobs"], json!([]));
}

#[test]
fn bad_sql_is_one_line_400() {
    let (_tmp, root, db) = dirs();
    let server = start(&root, &db, &[]);
    let a = &server.addr;
    for sql in [
        "DELETE FROM jobs",
        "CREATE TABLE x (a INT)",
        "SELEC * FROM jobs",
    ] {
        let (status, text) = post(a, "/api/query", None, &json!({ "sql": sql }));
        assert_eq!(status, 400, "{sql}: {text}");
        assert!(one_line_error(&text).contains("query refused"), "{text}");
    }
    let (status, text) = post(
        a,
        "/api/query",
        None,
        &json!({ "sql": "SELECT COUNT(*) AS n FROM jobs" }),
    );
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["rows"], json!([{ "n": 0 }]), "{v}");
}

#[test]
fn a_non_loopback_bind_needs_a_token() {
    let (_tmp, root, db) = dirs();
    let out = serve_command(&root, &db, &["--bind", "0.0.0.0"])
        .stderr(Stdio::piped())
        .output()
        .expect("run serve");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("needs a token"), "{err}");
}

#[test]
fn with_a_token_every_post_needs_it() {
    let (_tmp, root, db) = dirs();
    let server = start(&root, &db, &["--token", "s3cret-token"]);
    let a = &server.addr;
    let sql = json!({ "sql": "SELECT 1 AS one" });
    for token in [None, Some("wrong"), Some("s3cret-tokenX")] {
        let (status, text) = post(a, "/api/query", token, &sql);
        assert_eq!(status, 401, "{token:?}: {text}");
        one_line_error(&text);
    }
    let (status, text) = post(a, "/api/jobs", None, &json!({}));
    assert_eq!(status, 401, "{text}");
    let (status, text) = post(a, "/api/jobs/x/cancel", None, &json!({}));
    assert_eq!(status, 401, "{text}");
    let (status, text) = post(a, "/api/query", Some("s3cret-token"), &sql);
    assert_eq!(status, 200, "{text}");
    assert!(!text.contains("s3cret"), "{text}");
    // Reads need none.
    assert_eq!(get(a, "/api/jobs").0, 200);
}

/// A job dir made by hand under the root: job.yaml, job-id, one record.
fn fake_job(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("trials/t1")).expect("mkdir");
    std::fs::write(dir.join("job.yaml"), "name: fake\n").expect("job.yaml");
    std::fs::write(dir.join("job-id"), format!("{name}-id\n")).expect("job-id");
    std::fs::write(dir.join("trials/t1/notes.txt"), "inside\n").expect("file");
    dir
}

#[test]
fn files_are_served_only_from_job_dirs_under_the_root() {
    let (tmp, root, db) = dirs();
    let dir = fake_job(&root, "fakejob");
    std::fs::write(tmp.path().join("outside.txt"), "OUTSIDE-SECRET\n").expect("outside");
    std::fs::write(root.join("beside.txt"), "BESIDE-SECRET\n").expect("beside");
    std::os::unix::fs::symlink(tmp.path().join("outside.txt"), dir.join("link.txt"))
        .expect("symlink");
    let server = start(&root, &db, &[]);
    let a = &server.addr;
    let (status, body) = http(
        a,
        "GET",
        "/api/jobs/fakejob-id/files/trials/t1/notes.txt",
        None,
        "",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "inside\n");
    for path in [
        "/api/jobs/fakejob-id/files/../beside.txt",
        "/api/jobs/fakejob-id/files/../../outside.txt",
        "/api/jobs/fakejob-id/files/%2e%2e/beside.txt",
        "/api/jobs/fakejob-id/files/%2e%2e%2f%2e%2e%2foutside.txt",
        "/api/jobs/fakejob-id/files/trials/../../beside.txt",
        "/api/jobs/fakejob-id/files//etc/passwd",
        "/api/jobs/fakejob-id/files/link.txt",
        "/api/jobs/..%2f..%2foutside/files/x",
    ] {
        let (status, body) = http(a, "GET", path, None, "");
        assert!(status == 404 || status == 403, "{path}: {status} {body}");
        assert!(!body.contains("SECRET"), "{path}: {body}");
    }
}

#[test]
fn the_web_pages_keep_to_their_policies() {
    let (tmp, root, db) = dirs();
    fake_job(&root, "fakejob");
    std::fs::write(tmp.path().join("outside.txt"), "OUTSIDE-SECRET\n").expect("outside");
    std::fs::write(root.join("beside.txt"), "BESIDE-SECRET\n").expect("beside");
    let server = start(&root, &db, &[]);
    let a = &server.addr;
    // The shells: script only from the server itself, nothing from elsewhere.
    for path in ["/", "/jobs/fakejob-id", "/static/app.js", "/static/app.css"] {
        let (status, head, body) = page(a, path);
        assert_eq!(status, 200, "{path}: {body}");
        assert!(
            head.contains("content-security-policy: default-src 'none'; script-src 'self';"),
            "{path}: {head}"
        );
        assert!(head.contains("x-content-type-options: nosniff"), "{path}");
        assert!(!head.contains("set-cookie"), "{path}: {head}");
        assert!(
            !body.contains("http://") && !body.contains("https://") && !body.contains("innerHTML"),
            "{path} names another origin or writes markup"
        );
    }
    assert_eq!(page(a, "/jobs/no-such-job").0, 404);
    // The job dir's pages and files: sandboxed, and only under the job dir.
    for path in [
        "/jobs/fakejob-id/report.html",
        "/jobs/fakejob-id/trials/t1/notes.txt",
    ] {
        let (status, head, body) = page(a, path);
        assert_eq!(status, 200, "{path}: {body}");
        assert!(
            head.contains("content-security-policy: sandbox; default-src 'none';"),
            "{path}: {head}"
        );
    }
    assert_eq!(
        page(a, "/jobs/fakejob-id/trials/t1/notes.txt").2,
        "inside\n"
    );
    assert!(
        page(a, "/jobs/fakejob-id/report.html")
            .2
            .contains("No report yet")
    );
    assert_eq!(page(a, "/jobs/fakejob-id/trials/t1/trial.html").0, 404);
    for path in [
        "/jobs/fakejob-id/../beside.txt",
        "/jobs/fakejob-id/%2e%2e/beside.txt",
        "/jobs/fakejob-id/%2e%2e%2f%2e%2e%2foutside.txt",
        "/jobs/fakejob-id/trials/../../beside.txt",
        "/jobs/fakejob-id//etc/passwd",
    ] {
        let (status, _, body) = page(a, path);
        assert!(status == 404 || status == 403, "{path}: {status} {body}");
        assert!(!body.contains("SECRET"), "{path}: {body}");
    }
    // History and compare: made here, no script; their JSON from the store and the report.
    let (status, head, body) = page(a, "/history");
    assert_eq!(status, 200, "{body}");
    assert!(
        head.contains("content-security-policy: default-src 'none'; style-src 'unsafe-inline';"),
        "{head}"
    );
    assert!(!body.contains("<script"), "{body}");
    assert!(body.contains("Nothing indexed yet"), "{body}");
    let (status, v) = get(a, "/api/history?name=nightly&agent=oracle");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["points"], json!([]), "{v}");
    let (status, v) = get(a, "/api/history?name=nightly");
    assert_eq!(status, 400, "{v}");
    let (status, v) = get(a, "/api/compare?a=fakejob-id&b=nope");
    assert_eq!(status, 404, "{v}");
    let (status, _, body) = page(a, "/compare?a=fakejob-id&b=nope");
    assert_eq!(status, 200);
    assert!(body.contains("nope: no such job under the root"), "{body}");
}

/// Records of a job dir by trial id, without what differs between two runs of one job.
fn comparable(job_dir: &Path) -> std::collections::BTreeMap<String, Value> {
    const VOLATILE: &[&str] = &[
        "job",
        "started_at",
        "finished_at",
        "phases",
        "agent_deadline_epoch",
        "verifier.seconds",
        "termination.seconds",
        "agent.seconds",
        "agent.result.seconds",
    ];
    let mut out = std::collections::BTreeMap::new();
    for (id, mut r) in common::presets::records(job_dir) {
        strip_fields(&mut r, VOLATILE);
        out.insert(id, r);
    }
    out
}

const SECRET: &str = "sk-serve-literal-0123456789";

#[test]
fn a_submitted_job_streams_its_events_and_records_what_the_cli_records() {
    if !docker_available() {
        return;
    }
    let (tmp, root, db) = dirs();
    copy_dir(&fixture("quick"), &root.join("tasks/quick"));
    let config = format!(
        "tasks: [tasks/quick]\nagents: [oracle]\nattempts: 2\nconcurrency: 2\nvariants:\n  - name: keyed\n    env: {{ API_KEY: \"{SECRET}\", ARM: keyed }}\n"
    );
    let server = start(&root, &db, &[]);
    let a = &server.addr;
    let (status, text) = post(
        a,
        "/api/jobs",
        None,
        &json!({ "config": config, "job_dir": "jobs/served" }),
    );
    assert_eq!(status, 201, "{text}");
    let id = serde_json::from_str::<Value>(&text).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string();
    let events = wait_ended(a, &id);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"started"), "{names:?}");
    assert_eq!(
        events.last().expect("ended").1["status"],
        "finished",
        "{names:?}"
    );
    let finished: BTreeSet<&str> = events
        .iter()
        .filter(|(n, _)| n == "trial_finished")
        .map(|(_, d)| d["trial"].as_str().expect("trial"))
        .collect();
    assert_eq!(finished.len(), 2, "{names:?}");
    assert!(names.contains(&"phase"), "{names:?}");
    for (_, data) in &events {
        assert!(
            !data.to_string().contains(SECRET),
            "an event echoes the key"
        );
    }
    let served = root.join("jobs/served");
    assert_no_leftovers(&served);
    let job = job_of(a, &id);
    assert_eq!(job["status"], "finished", "{job}");
    assert_eq!(job["counts"]["trials"], 2, "{job}");
    assert_eq!(job["counts"]["passed"], 2, "{job}");
    assert_eq!(job["counts"]["pass_rate"], 1.0, "{job}");
    let whole = job.to_string();
    assert!(!whole.contains(SECRET), "the job echoes the key");
    let (_, list) = http(a, "GET", "/api/jobs", None, "");
    assert!(!list.contains(SECRET));
    let (_, yaml) = http(
        a,
        "GET",
        &format!("/api/jobs/{id}/files/job.yaml"),
        None,
        "",
    );
    assert!(!yaml.contains(SECRET), "{yaml}");

    // The same job by the CLI.
    let cli_root = tmp.path().join("cli");
    copy_dir(&fixture("quick"), &cli_root.join("tasks/quick"));
    let cli_config = write_job(&cli_root, &config);
    let cli_dir = cli_root.join("jobs/served");
    let out = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["run", "--quiet", "-c"])
        .arg(&cli_config)
        .arg("--job-dir")
        .arg(&cli_dir)
        .env("ARBITER_DB", "off")
        .output()
        .expect("arbiter run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(comparable(&served), comparable(&cli_dir));
}

#[test]
fn a_trial_and_a_job_are_cancelled_mid_run() {
    if !docker_available() {
        return;
    }
    let (_tmp, root, db) = dirs();
    copy_dir(&fixture("quick"), &root.join("tasks/quick"));
    let server = start(&root, &db, &["--token", "tok"]);
    let a = &server.addr;
    let (status, text) = post(
        a,
        "/api/jobs",
        Some("tok"),
        &json!({ "config": SLEEPER, "job_dir": "jobs/sleepers" }),
    );
    assert_eq!(status, 201, "{text}");
    let id = serde_json::from_str::<Value>(&text).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string();
    let mut events = Events::open(a, &id);
    let running = wait_running(a, &id, 2);
    let victim = &running[0];
    let (status, text) = post(
        a,
        &format!("/api/jobs/{id}/trials/{victim}/cancel"),
        Some("tok"),
        &json!({}),
    );
    assert_eq!(status, 202, "{text}");
    // Its record says cancelled; the job goes on (the third trial starts).
    let job_dir = root.join("jobs/sleepers");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !has_record(&job_dir, victim) {
        assert!(
            Instant::now() < deadline,
            "no record of the cancelled trial"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = result(&job_dir, victim);
    assert_eq!(r["termination"]["kind"], "cancelled", "{r:#}");
    let running = wait_running(a, &id, 2);
    assert!(!running.contains(victim), "{running:?}");
    let (status, text) = post(
        a,
        &format!("/api/jobs/{id}/cancel"),
        Some("tok"),
        &json!({}),
    );
    assert_eq!(status, 202, "{text}");
    let seen = events.until_end();
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"trial_cancelled"), "{names:?}");
    assert_eq!(
        seen.last().expect("ended").1["status"],
        "interrupted",
        "{names:?}"
    );
    // The job's trials stopped by the job's cancel are not recorded (they run on resume).
    let job = job_of(a, &id);
    assert_eq!(job["status"], "interrupted", "{job}");
    assert_eq!(job["cancelled"], true, "{job}");
    assert_eq!(job["counts"]["trials"], 1, "{job}");
    // The user's stop is neither the agent's failure nor the harness's: not scored, apart.
    assert_eq!(job["counts"]["cancelled"], 1, "{job}");
    assert_eq!(job["counts"]["scored"], 0, "{job}");
    assert_eq!(job["counts"]["infra"], 0, "{job}");
    assert_eq!(job["counts"]["pass_rate"], Value::Null, "{job}");
    assert_eq!(job["resume"], format!("/api/jobs/{id}/resume"), "{job}");
    assert_no_leftovers(&job_dir);
}

/// Finished trials of a job dir (a `result.json` each).
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
fn a_server_killed_mid_job_is_resumed_with_every_trial_once() {
    if !docker_available() {
        return;
    }
    let (_tmp, root, db) = dirs();
    copy_dir(&fixture("quick"), &root.join("tasks/quick"));
    let job_dir = root.join("jobs/killed");
    let config = "tasks: [tasks/quick]\nagents: [oracle]\nattempts: 8\nconcurrency: 2\n";
    let id = {
        let mut server = start(&root, &db, &[]);
        let (status, text) = post(
            &server.addr,
            "/api/jobs",
            None,
            &json!({ "config": config, "job_dir": "jobs/killed" }),
        );
        assert_eq!(status, 201, "{text}");
        let deadline = Instant::now() + Duration::from_secs(180);
        while finished(&job_dir) < 2 {
            assert!(Instant::now() < deadline, "no 2 records");
            std::thread::sleep(Duration::from_millis(100));
        }
        server.child.kill().expect("kill -9");
        let _ = server.child.wait();
        serde_json::from_str::<Value>(&text).expect("json")["id"]
            .as_str()
            .expect("id")
            .to_string()
    };
    assert!(finished(&job_dir) < 8, "the job ended before the kill");
    let server = start(&root, &db, &[]);
    let a = &server.addr;
    let (_, list) = get(a, "/api/jobs");
    let listed = &list["jobs"].as_array().expect("jobs")[0];
    assert_eq!(listed["id"], id.as_str(), "{list}");
    assert_eq!(listed["status"], "interrupted", "{list}");
    let resume = listed["resume"].as_str().expect("a resume endpoint");
    let (status, text) = post(a, resume, None, &json!({}));
    assert_eq!(status, 201, "{text}");
    let events = wait_ended(a, &id);
    assert_eq!(events.last().expect("ended").1["status"], "finished");
    assert_eq!(finished(&job_dir), 8);
    let jsonl = std::fs::read_to_string(job_dir.join("trials.jsonl")).expect("jsonl");
    let ids: Vec<String> = jsonl
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("line")["id"].to_string())
        .collect();
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), 8, "{ids:?}");
    assert_eq!(unique.len(), 8, "{ids:?}");
    let job = job_of(a, &id);
    assert_eq!(job["status"], "finished", "{job}");
    assert_eq!(job["counts"]["trials"], 8, "{job}");
    assert_no_leftovers(&job_dir);
}

#[test]
fn a_job_the_cli_runs_under_the_root_is_followed_through_its_dir() {
    if !docker_available() {
        return;
    }
    let (_tmp, root, db) = dirs();
    copy_dir(&fixture("quick"), &root.join("tasks/quick"));
    let server = start(&root, &db, &[]);
    let a = &server.addr;
    let job_dir = root.join("jobs/by-cli");
    let mut cli = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args([
            "run",
            "--quiet",
            "--agent",
            "oracle",
            "-k",
            "3",
            "--job-dir",
        ])
        .arg(&job_dir)
        .arg(root.join("tasks/quick"))
        .env("ARBITER_DB", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("arbiter run");
    // Listed as running while the CLI holds it.
    let deadline = Instant::now() + Duration::from_secs(120);
    let id = loop {
        let (_, list) = get(a, "/api/jobs");
        if let Some(job) = list["jobs"].as_array().and_then(|j| j.first())
            && job["status"] == "running"
        {
            break job["id"].as_str().expect("id").to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the CLI's job is not listed: {list}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let events = wait_ended(a, &id);
    assert!(cli.wait().expect("wait").success());
    let finished: BTreeSet<&str> = events
        .iter()
        .filter(|(n, _)| n == "trial_finished")
        .map(|(_, d)| d["trial"].as_str().expect("trial"))
        .collect();
    assert_eq!(finished.len(), 3, "{events:?}");
    assert_eq!(events.last().expect("ended").1["status"], "finished");
    // It was not this server's: it cannot cancel it.
    let (status, text) = post(a, &format!("/api/jobs/{id}/cancel"), None, &json!({}));
    assert_eq!(status, 409, "{text}");
    one_line_error(&text);
    let job = job_of(a, &id);
    assert_eq!(job["status"], "finished", "{job}");
    assert_eq!(job["counts"]["planned"], 3, "{job}");
}

#[test]
fn retry_infra_runs_again_only_the_infra_errors_and_keeps_their_errors() {
    if !docker_available() {
        return;
    }
    let (_tmp, root, db) = dirs();
    copy_dir(&fixture("quick"), &root.join("tasks/quick"));
    copy_dir(&fixture("badbuild"), &root.join("tasks/badbuild"));
    let config = "tasks: [tasks/quick, tasks/badbuild]\nagents: [oracle]\nretries: { max: 0 }\n";
    let server = start(&root, &db, &[]);
    let a = &server.addr;
    let (status, text) = post(
        a,
        "/api/jobs",
        None,
        &json!({ "config": config, "job_dir": "jobs/outage" }),
    );
    assert_eq!(status, 201, "{text}");
    let id = serde_json::from_str::<Value>(&text).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string();
    wait_ended(a, &id);
    let job = job_of(a, &id);
    assert_eq!(job["counts"]["infra"], 1, "{job}");
    assert_eq!(job["counts"]["passed"], 1, "{job}");
    let job_dir = root.join("jobs/outage");
    let quick_before = result(&job_dir, "quick__oracle__default__1");
    let (status, text) = post(a, &format!("/api/jobs/{id}/retry-infra"), None, &json!({}));
    assert_eq!(status, 201, "{text}");
    let events = wait_ended(a, &id);
    let ran: Vec<&str> = events
        .iter()
        .filter(|(n, _)| n == "trial_started")
        .map(|(_, d)| d["trial"].as_str().expect("trial"))
        .collect();
    assert_eq!(ran, vec!["badbuild__oracle__default__1"], "{events:?}");
    let again = result(&job_dir, "badbuild__oracle__default__1");
    assert_eq!(
        again["previous_errors"].as_array().map(Vec::len),
        Some(1),
        "{again:#}"
    );
    assert_eq!(result(&job_dir, "quick__oracle__default__1"), quick_before);
    let jsonl = std::fs::read_to_string(job_dir.join("trials.jsonl")).expect("jsonl");
    assert_eq!(jsonl.lines().count(), 2, "{jsonl}");
    assert_no_leftovers(&job_dir);
}

#[test]
fn sigterm_stops_the_servers_jobs_and_leaves_nothing() {
    if !docker_available() {
        return;
    }
    let (_tmp, root, db) = dirs();
    copy_dir(&fixture("quick"), &root.join("tasks/quick"));
    let mut server = start(&root, &db, &[]);
    let (status, text) = post(
        &server.addr,
        "/api/jobs",
        None,
        &json!({ "config": SLEEPER, "job_dir": "jobs/termed" }),
    );
    assert_eq!(status, 201, "{text}");
    let id = serde_json::from_str::<Value>(&text).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string();
    wait_running(&server.addr, &id, 2);
    let pid = server.child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(120);
    let code = loop {
        if let Some(status) = server.child.try_wait().expect("try_wait") {
            break status.code();
        }
        assert!(Instant::now() < deadline, "serve did not stop");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(code, Some(0));
    let job_dir = root.join("jobs/termed");
    assert_no_leftovers(&job_dir);
    assert_eq!(finished(&job_dir), 0, "nothing half-done is recorded");
    let server = start(&root, &db, &[]);
    let job = job_of(&server.addr, &id);
    assert_eq!(job["status"], "interrupted", "{job}");
}

/// The server's `--backend kubernetes` (issue 36): a submitted job's trials run as pods of the
/// test cluster and record what they record there, a trial cancelled through the API is
/// recorded `cancelled` and not scored, and a cancelled job leaves no pod behind.
#[test]
fn on_kubernetes_a_submitted_job_runs_as_pods_and_cancelling_leaves_none() {
    let Some(flags) = common::k8s::kubernetes_flags() else {
        return;
    };
    let (_tmp, root, db) = dirs();
    common::k8s::quick_built(&root.join("tasks"));
    let server = start(&root, &db, &flags);
    let a = &server.addr;

    let submit = |config: &str, dir: &str| {
        let (status, text) = post(
            a,
            "/api/jobs",
            None,
            &json!({ "config": config, "job_dir": dir }),
        );
        assert_eq!(status, 201, "{text}");
        serde_json::from_str::<Value>(&text).expect("json")["id"]
            .as_str()
            .expect("id")
            .to_string()
    };

    let id = submit(
        "tasks: [tasks/quick-k8s]\nagents: [oracle]\nattempts: 2\nconcurrency: 2\n",
        "jobs/pods",
    );
    let events = wait_ended(a, &id);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        events.last().expect("ended").1["status"],
        "finished",
        "{names:?}"
    );
    let job = job_of(a, &id);
    assert_eq!(job["counts"]["trials"], 2, "{job}");
    assert_eq!(job["counts"]["passed"], 2, "{job}");
    let pods = root.join("jobs/pods");
    for (trial, record) in common::presets::records(&pods) {
        assert_eq!(
            record["sandbox"]["backend"], "kubernetes",
            "{trial}: {record:#}"
        );
        assert_eq!(
            record["verifier"]["status"], "passed",
            "{trial}: {record:#}"
        );
    }

    let sleepers = SLEEPER.replace("tasks/quick]", "tasks/quick-k8s]");
    assert_ne!(sleepers, SLEEPER);
    let id = submit(&sleepers, "jobs/sleepers-k8s");
    let running = wait_running(a, &id, 1);
    let victim = &running[0];
    let (status, text) = post(
        a,
        &format!("/api/jobs/{id}/trials/{victim}/cancel"),
        None,
        &json!({}),
    );
    assert_eq!(status, 202, "{text}");
    let job_dir = root.join("jobs/sleepers-k8s");
    let deadline = Instant::now() + Duration::from_secs(180);
    while !has_record(&job_dir, victim) {
        assert!(
            Instant::now() < deadline,
            "no record of the cancelled trial"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let r = result(&job_dir, victim);
    assert_eq!(r["termination"]["kind"], "cancelled", "{r:#}");
    assert_eq!(r["sandbox"]["backend"], "kubernetes", "{r:#}");
    let (status, text) = post(a, &format!("/api/jobs/{id}/cancel"), None, &json!({}));
    assert_eq!(status, 202, "{text}");
    let events = wait_ended(a, &id);
    assert_eq!(events.last().expect("ended").1["status"], "interrupted");
    let job = job_of(a, &id);
    assert_eq!(job["counts"]["cancelled"], 1, "{job}");
    assert_eq!(job["counts"]["scored"], 0, "{job}");
    // Pod deletion is asynchronous (the kubelet's grace period): wait for the namespace to
    // hold none of the job's pods.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let left = common::k8s::pods_of(&job_dir);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "pods left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}
