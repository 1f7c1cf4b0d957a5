//! The adversarial suite: hostile agents run through the real binary on a real engine, each
//! asserting the exact typed outcome in its trial record. The agents are small scripts in
//! `tests/adversarial/agents/` (mounted read-only at `/opt/hostile`), the tasks live in
//! `tests/adversarial/tasks/`. docs/security.md ("Security and isolation") lists every attack with the
//! guarantee that stops it; the older attacks (forged rewards, snooping for tests, tampering
//! daemons, SIGTERM, memory bombs, chatty output) are in `tests/docker_trials.rs`.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn adversarial() -> PathBuf {
    repo().join("tests/adversarial")
}

fn task(name: &str) -> String {
    adversarial().join("tasks").join(name).display().to_string()
}

/// A `command` agent running `/opt/hostile/<script>` with `env`.
fn hostile(name: &str, script: &str, env: &[(&str, &str)]) -> String {
    let mut text = format!(
        "  - name: {name}\n    kind: command\n    run: [sh, /opt/hostile/{script}]\n    mounts:\n      - host: {}\n        container: /opt/hostile\n",
        adversarial().join("agents").display()
    );
    text.push_str(&common::env_lines(env));
    text
}

/// Write a job.yaml with these tasks, agents and extra top-level lines.
fn job(dir: &Path, tasks: &[String], agents: &[String], extra: &str) -> String {
    let mut text = String::from("tasks:\n");
    for t in tasks {
        text.push_str(&format!("  - {t}\n"));
    }
    text.push_str("agents:\n");
    for a in agents {
        text.push_str(a);
    }
    text.push_str(extra);
    let path = dir.join("job.yaml");
    std::fs::write(&path, text).expect("write job.yaml");
    path.display().to_string()
}

fn trial_path(job_dir: &Path, trial: &str, rel: &str) -> PathBuf {
    job_dir.join("trials").join(trial).join(rel)
}

fn read(job_dir: &Path, trial: &str, rel: &str) -> String {
    let path = trial_path(job_dir, trial, rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every symlink under `dir` (there must be none: nothing the agent made is recreated as a
/// link on the host).
fn symlinks_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).expect("read_dir").flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).expect("meta");
            if meta.file_type().is_symlink() {
                found.push(entry.path());
            } else if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    found
}

/// Spawn `arbiter run --quiet --job-dir <tmp>/job-<tag> -c <config>`, call `watch` every 50 ms
/// while it runs, and return its output and job dir.
fn run_watched(
    tmp: &Path,
    tag: &str,
    config: &str,
    extra: &[&str],
    mut watch: impl FnMut(u32),
) -> (std::process::Output, PathBuf) {
    let job_dir = tmp.join(format!("job-{tag}-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["run", "--quiet", "--job-dir"])
        .arg(&job_dir)
        .args(["-c", config])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn arbiter");
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(300);
    while child.try_wait().expect("try_wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "arbiter still running after 300 s"
        );
        watch(pid);
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    assert_no_leftovers(&job_dir);
    (out, job_dir)
}

/// Full ids of running containers with all these labels.
fn containers_with(labels: &[&str]) -> Vec<String> {
    let mut cmd = Command::new("docker");
    cmd.args(["ps", "-q", "--no-trunc"]);
    for l in labels {
        cmd.args(["--filter", &format!("label={l}")]);
    }
    let out = cmd.output().expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[test]
fn fork_bomb_hits_the_pids_limit_and_leaves_the_harness_and_other_trials_alone() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = job(
        tmp.path(),
        &[task("forkbomb")],
        &[
            hostile("bomber", "forkbomb.sh", &[]),
            hostile("good", "good.sh", &[]),
        ],
        "",
    );
    // A second, well-behaved job runs beside the bomb on the same engine.
    let good_tmp = tempfile::tempdir().expect("tmp");
    let good_config = job(
        good_tmp.path(),
        &[task("answer")],
        &[hostile("honest", "good.sh", &[])],
        "",
    );
    let mut peak_pids = 0u64;
    let mut limit_hits = 0u64;
    let mut good: Option<std::process::Child> = None;
    let good_dir = good_tmp.path().join("job-good");
    let (out, job_dir) = run_watched(tmp.path(), "bomb", &config, &["-n", "2"], |_| {
        for id in containers_with(&[
            "arbiter.trial=forkbomb__bomber__default__1",
            "arbiter.role=agent",
        ]) {
            let cg = PathBuf::from("/sys/fs/cgroup/pids/docker").join(&id);
            if let Ok(text) = std::fs::read_to_string(cg.join("pids.current")) {
                peak_pids = peak_pids.max(text.trim().parse().unwrap_or(0));
            }
            if let Ok(text) = std::fs::read_to_string(cg.join("pids.events")) {
                let hits = text
                    .split_whitespace()
                    .nth(1)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                limit_hits = limit_hits.max(hits);
            }
            if good.is_none() && limit_hits > 0 {
                // The bomb is going off: start the other job now.
                good = Some(
                    Command::new(env!("CARGO_BIN_EXE_arbiter"))
                        .args(["run", "--quiet", "--job-dir"])
                        .arg(&good_dir)
                        .args(["-c", &good_config])
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .expect("spawn the other job"),
                );
            }
        }
    });
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = result(&job_dir, "forkbomb__bomber__default__1");
    assert_eq!(r["termination"]["kind"], "timeout", "{r:#}");
    assert_eq!(r["limits"]["pids_limit"], 64);
    assert!(
        limit_hits > 0,
        "the bomb must have hit the pids limit (cgroup pids.events), saw {limit_hits}"
    );
    assert!(
        (1..=64).contains(&peak_pids),
        "pids in the container stayed within the limit: peak {peak_pids}"
    );
    // 6 s deadline + 3 s grace + slack: the harness was not slowed down by the bomb.
    let agent_secs = r["phases"]["agent"]["seconds"].as_f64().expect("seconds");
    assert!(agent_secs < 30.0, "agent phase took {agent_secs}s");
    assert_eq!(
        r["verifier"]["status"], "passed",
        "the verifier ran in a fresh container with no bomb left: {r:#}"
    );
    // The trial running beside it in the same job, and a job started while the bomb went off.
    let sibling = result(&job_dir, "forkbomb__good__default__1");
    assert_eq!(sibling["termination"]["kind"], "exited", "{sibling:#}");
    assert_eq!(sibling["verifier"]["status"], "passed", "{sibling:#}");
    let good = good.expect("the other job was started while the bomb ran");
    let good_out = good.wait_with_output().expect("other job");
    assert_eq!(good_out.status.code(), Some(0), "{}", stderr(&good_out));
    let other = result(&good_dir, "answer__honest__default__1");
    assert_eq!(other["termination"]["kind"], "exited", "{other:#}");
    assert_eq!(other["verifier"]["status"], "passed", "{other:#}");
    assert_no_leftovers(&good_dir);
}

#[test]
fn disk_fill_is_stopped_at_the_storage_limit_and_never_snapshotted() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = job(
        tmp.path(),
        &[task("diskfill")],
        &[
            hostile("filler", "diskfill.sh", &[]),
            hostile("sparse", "sparse.sh", &[]),
        ],
        "",
    );
    let (out, job_dir) = run_watched(tmp.path(), "disk", &config, &["-n", "2"], |_| {});
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let r = result(&job_dir, "diskfill__filler__default__1");
    assert_eq!(r["termination"]["kind"], "killed", "{r:#}");
    let detail = r["termination"]["detail"].as_str().expect("detail");
    assert!(
        detail.contains("over the storage limit of 64 MiB"),
        "{detail}"
    );
    assert_eq!(r["limits"]["storage_enforced"], true);
    assert_eq!(r["limits"]["storage_limit_mb"], 64);
    let used = r["limits"]["storage_used_mb"].as_u64().expect("used");
    assert!(
        (65..640).contains(&used),
        "stopped past 64 MiB, long before the script's 640 MiB: {used} MiB"
    );
    assert_eq!(r["verifier"]["status"], "error", "{r:#}");
    assert!(r["verifier"].get("reward").is_none());
    assert_eq!(r["audit"]["verdict"], "unverifiable");

    // A sparse 4 GiB file written in an instant: caught before the commit that would have
    // written 4 GiB to the host's disk.
    // Whether the watchdog measured it while the agent still ran (it is then killed) or the
    // measurement after it exited did, its filesystem is not snapshotted.
    let s = result(&job_dir, "diskfill__sparse__default__1");
    match s["termination"]["kind"].as_str() {
        Some("exited") => assert_eq!(s["termination"]["exit_code"], 0, "{s:#}"),
        Some("killed") => assert!(
            s["termination"]["detail"]
                .as_str()
                .is_some_and(|d| d.contains("over the storage limit of 64 MiB")),
            "{s:#}"
        ),
        _ => panic!("exited or killed at the storage limit: {s:#}"),
    }
    assert!(
        s["limits"]["storage_used_mb"].as_u64().expect("used") >= 4096,
        "{s:#}"
    );
    assert_eq!(s["verifier"]["status"], "error", "{s:#}");
    let why = s["verifier"]["detail"].as_str().expect("detail");
    assert!(why.contains("was not snapshotted"), "{why}");
    assert_eq!(s["audit"]["verdict"], "unverifiable");
}

#[test]
fn gigabytes_of_output_are_capped_and_the_harness_memory_stays_flat() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = job(
        tmp.path(),
        &[task("answer")],
        &[hostile("flood", "flood.sh", &[])],
        // Streaming 1.5 GiB through a debug build on a busy CI machine takes a while.
        "log_cap_mb: 1\ntimeouts: {agent: 10}\n",
    );
    let mut peak_kib = 0u64;
    let (out, job_dir) = run_watched(tmp.path(), "flood", &config, &[], |pid| {
        peak_kib = peak_kib.max(rss_kib(pid).unwrap_or(0));
    });
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let trial = "answer__flood__default__1";
    let r = result(&job_dir, trial);
    assert_eq!(r["termination"]["kind"], "exited", "{r:#}");
    assert_eq!(r["termination"]["exit_code"], 0);
    assert_eq!(r["output"]["stdout_bytes"], 1u64 << 30, "{r:#}");
    assert_eq!(r["output"]["stderr_bytes"], 1u64 << 29, "{r:#}");
    assert_eq!(r["output"]["truncated"], true);
    for log in ["agent/stdout.log", "agent/stderr.log"] {
        let size = std::fs::metadata(trial_path(&job_dir, trial, log))
            .expect("log")
            .len();
        assert!(size <= (1 << 20) + 200, "{log} is {size} bytes");
    }
    assert!(peak_kib > 0, "arbiter's RSS was sampled");
    assert!(
        peak_kib < 150 * 1024,
        "arbiter's RSS peaked at {} MiB while 1.5 GiB of output streamed through it",
        peak_kib / 1024
    );
}

#[test]
fn symlinks_hard_links_and_dotdot_are_never_followed_on_the_host() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let sentinel = tmp.path().join("host-sentinel.txt");
    std::fs::write(&sentinel, "host file: untouched\n").expect("sentinel");
    let sentinel_s = sentinel.display().to_string();
    let config = job(
        tmp.path(),
        &[task("escape")],
        &[
            hostile("escaper", "escape.sh", &[("HOST_SENTINEL", &sentinel_s)]),
            hostile("linker", "logslink.sh", &[]),
        ],
        "",
    );
    let (out, job_dir) = run_watched(tmp.path(), "escape", &config, &["-n", "2"], |_| {});
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(&sentinel).expect("sentinel"),
        "host file: untouched\n"
    );
    assert_eq!(symlinks_under(&job_dir), Vec::<PathBuf>::new());

    let trial = "escape__escaper__default__1";
    let r = result(&job_dir, trial);
    assert_eq!(r["termination"]["kind"], "exited", "{r:#}");
    let artifacts = r["artifacts"].as_array().expect("artifacts");
    let artifact = |path: &str| -> &Value {
        artifacts
            .iter()
            .find(|a| a["path"] == path)
            .unwrap_or_else(|| panic!("no artifact {path}: {r:#}"))
    };
    // The directory: only its regular files and subdirectory come out.
    let dir = artifact("/app/dir");
    assert_eq!(dir["status"], "ok", "{dir:#}");
    let detail = dir["detail"].as_str().expect("detail");
    for skipped in [
        "dir/root: symlink to / (not followed)",
        "dir/host: symlink to",
        "dir/up: symlink to ../../../../../../../.. (not followed)",
        "dir/sub/hostdir: symlink to",
        "dir/fifo: special file",
    ] {
        assert!(detail.contains(skipped), "{skipped} in {detail}");
    }
    assert!(!detail.contains("hard link"), "{detail}");
    let saved = trial_path(&job_dir, trial, "artifacts/app/dir");
    // The hard link is a second copy of the file, whichever name the engine sent first.
    for name in ["ok.txt", "hard"] {
        assert_eq!(
            std::fs::read_to_string(saved.join(name)).expect("copy"),
            "ok\n"
        );
    }
    let names: BTreeSet<String> = std::fs::read_dir(&saved)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["hard".to_string(), "ok.txt".to_string(), "sub".to_string()])
    );
    // An artifact that is itself a link to a host path: nothing is copied.
    let link = artifact("/app/link");
    assert_eq!(link["status"], "ok", "{link:#}");
    assert_eq!(link["size"], 0, "{link:#}");
    assert!(!trial_path(&job_dir, trial, "artifacts/app/link").exists());
    // The declared deliverable is a link to /etc/passwd: unreadable, so the claim of success
    // is a false completion.
    let deliverable = &r["deliverables"][0];
    assert_eq!(deliverable["path"], "/app/out.md");
    assert_eq!(deliverable["status"], "unreadable", "{deliverable:#}");
    assert_eq!(r["claim"]["semantic_status"], "succeeded");
    assert_eq!(r["verifier"]["status"], "failed");
    assert_eq!(r["audit"]["verdict"], "false_completion", "{r:#}");
    // Paths the completion record names, `..` and links included, are never read out.
    let observed = r["observed_files"].as_array().expect("observed");
    let observed: Vec<(&str, &str)> = observed
        .iter()
        .map(|f| {
            assert!(f.get("sha256").is_none(), "{f:#}");
            (
                f["path"].as_str().expect("path"),
                f["status"].as_str().expect("status"),
            )
        })
        .collect();
    assert_eq!(
        observed,
        [
            ("/app/../etc/passwd", "unreadable"),
            ("/app/dir/host", "unreadable")
        ],
        "relative paths are ignored, `..` refused, links not followed: {r:#}"
    );
    assert!(!trial_path(&job_dir, trial, "artifacts/etc").exists());

    // /logs/agent replaced by a link to /: collected as a (skipped) link, not the whole root.
    let l = result(&job_dir, "escape__linker__default__1");
    assert_eq!(l["termination"]["kind"], "exited", "{l:#}");
    assert_eq!(l["claim"]["status"], "missing", "{l:#}");
    let logs = trial_path(&job_dir, "escape__linker__default__1", "agent/logs");
    let collected = std::fs::read_dir(&logs).map(|d| d.count()).unwrap_or(0);
    assert_eq!(collected, 0, "nothing of / was copied into agent/logs");
}

#[test]
fn forged_enormous_and_malicious_outcome_records_are_typed_invalid_or_audited() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = job(
        tmp.path(),
        &[task("answer")],
        &[
            hostile("huge", "outcome-huge.sh", &[]),
            hostile("deep", "outcome-deep.sh", &[]),
            hostile("forged", "outcome-forged.sh", &[]),
            hostile("markers", "outcome-stderr.sh", &[]),
        ],
        "",
    );
    let (out, job_dir) = run_watched(tmp.path(), "outcome", &config, &["-n", "4"], |_| {});
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let huge = result(&job_dir, "answer__huge__default__1");
    assert_eq!(huge["claim"]["status"], "invalid", "{huge:#}");
    assert_eq!(huge["claim"]["source"], "file");
    assert_eq!(
        huge["claim"]["error"], "outcome record larger than 1048576 bytes",
        "{huge:#}"
    );
    assert!(huge["claim"].get("record").is_none());
    assert_eq!(huge["audit"]["verdict"], "honest_failure", "{huge:#}");

    let deep = result(&job_dir, "answer__deep__default__1");
    assert_eq!(deep["claim"]["status"], "invalid", "{deep:#}");
    let error = deep["claim"]["error"].as_str().expect("error");
    assert!(error.contains("recursion limit"), "{error}");

    let forged = result(&job_dir, "answer__forged__default__1");
    assert_eq!(forged["claim"]["status"], "present");
    assert_eq!(forged["claim"]["semantic_status"], "succeeded");
    assert_eq!(forged["verifier"]["status"], "failed");
    assert_eq!(forged["audit"]["verdict"], "false_completion", "{forged:#}");

    // The file wins over stderr markers; 2000 forged markers change nothing.
    let markers = result(&job_dir, "answer__markers__default__1");
    assert_eq!(markers["termination"]["exit_code"], 1);
    assert_eq!(markers["claim"]["source"], "file", "{markers:#}");
    assert_eq!(markers["claim"]["semantic_status"], "task_failed");
    assert_eq!(markers["audit"]["verdict"], "honest_failure", "{markers:#}");
}

#[test]
fn no_network_means_no_network() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = job(
        tmp.path(),
        &[task("answer")],
        &[hostile("net", "network.sh", &[])],
        "",
    );
    let (out, job_dir) = run_watched(tmp.path(), "net", &config, &[], |_| {});
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let trial = "answer__net__default__1";
    let r = result(&job_dir, trial);
    assert_eq!(r["limits"]["network"], "no-network");
    assert_eq!(r["termination"]["exit_code"], 0, "{r:#}");
    assert_eq!(r["verifier"]["status"], "passed");
    let attempts = read(&job_dir, trial, "agent/logs/net.txt");
    let lines: Vec<&str> = attempts.lines().collect();
    assert_eq!(
        lines,
        [
            "tcp-1.1.1.1:80 failed",
            "tcp-8.8.8.8:53 failed",
            "dns-example.com failed",
            "http-example.com failed",
            "ping-1.1.1.1 failed"
        ]
    );
    assert_eq!(
        read(&job_dir, trial, "agent/logs/interfaces.txt").trim(),
        "lo"
    );
    assert_eq!(read(&job_dir, trial, "agent/logs/routes.txt").trim(), "");
}

#[test]
fn killing_every_process_in_the_container_is_a_typed_result_not_an_infra_error() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = job(
        tmp.path(),
        &[task("answer")],
        &[hostile("pid1", "pid1.sh", &[])],
        "",
    );
    let (out, job_dir) = run_watched(tmp.path(), "pid1", &config, &[], |_| {});
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = result(&job_dir, "answer__pid1__default__1");
    assert!(r["infra_error"].is_null(), "{r:#}");
    assert_eq!(r["termination"]["kind"], "exited", "{r:#}");
    assert_eq!(r["termination"]["exit_code"], 137, "{r:#}");
    assert_eq!(
        r["verifier"]["status"], "passed",
        "the work done before is verified: {r:#}"
    );
}

#[test]
fn control_roots_of_other_trials_and_the_docker_socket_are_out_of_reach() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let agent = format!(
        "  - name: snooper\n    kind: aworld\n    binary: /opt/aworld-standin/aworld-cli\n    mounts:\n      - host: {standin}\n        container: /opt/aworld-standin\n      - host: {agents}\n        container: /opt/hostile\n    model:\n      name: test-model\n      api_key: sk-not-a-real-key-0000\n    env:\n      STANDIN_BEHAVIOR: succeed\n      STANDIN_WORK: bash /opt/hostile/control-snoop.sh\n",
        standin = repo().join("tests/fixtures/aworld-standin").display(),
        agents = adversarial().join("agents").display(),
    );
    let config = job(
        tmp.path(),
        &[fixture("aw-plain").display().to_string()],
        &[agent],
        "",
    );
    let (out, job_dir) = run_watched(
        tmp.path(),
        "control",
        &config,
        &["-k", "2", "-n", "2"],
        |_| {},
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut markers = BTreeSet::new();
    for attempt in 1..=2 {
        let trial = format!("aw-plain__snooper__default__{attempt}");
        let r = result(&job_dir, &trial);
        assert_eq!(r["termination"]["kind"], "exited", "{r:#}");
        let own = read(&job_dir, &trial, "agent/control/marker.txt");
        let own = own.trim().to_string();
        assert!(own.starts_with("control-marker-"), "{own}");
        assert_eq!(
            read(&job_dir, &trial, "agent/logs/markers.txt").trim(),
            own,
            "{trial} found only its own marker"
        );
        markers.insert(own);
        let docker = read(&job_dir, &trial, "agent/logs/docker.txt");
        assert_eq!(
            docker.trim(),
            "",
            "{trial} found a way to the engine: {docker}"
        );
    }
    assert_eq!(
        markers.len(),
        2,
        "the two trials ran with distinct control roots"
    );
}

/// Paths under `dir` whose name or content holds `needle`.
fn leaks_under(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).expect("read_dir").flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy().contains(needle) {
                found.push(path.clone());
            }
            let meta = std::fs::symlink_metadata(&path).expect("meta");
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let bytes = std::fs::read(&path).expect("read");
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(path);
                }
            }
        }
    }
    found
}

#[test]
fn secrets_reach_no_file_no_log_line_at_trace_level_and_no_host_argv() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let salt = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("time")
            .subsec_nanos()
    );
    let from_env = format!("adv-ref-secret-{salt}");
    let derived_part = format!("adv-part-{salt}");
    let literal = format!("adv-literal-key-{salt}");
    let verifier_secret = format!("adv-verifier-secret-{salt}");
    let config = job(
        tmp.path(),
        &[task("secrets")],
        &[hostile(
            "thief",
            "exfiltrate.sh",
            &[
                ("SECRET_TOKEN", "${ARBITER_ADV_SECRET}"),
                ("API_KEY", &literal),
                ("DERIVED", "prefix-${ARBITER_ADV_SECRET2}"),
            ],
        )],
        "",
    );
    let job_dir = tmp.path().join("job-secrets");
    let mut child = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["run", "--job-dir"])
        .arg(&job_dir)
        .args(["-c", &config])
        .env("RUST_LOG", "trace")
        .env("ARBITER_ADV_SECRET", &from_env)
        .env("ARBITER_ADV_SECRET2", &derived_part)
        .env("ARBITER_ADV_VERIFIER_SECRET", &verifier_secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn arbiter");
    // Drain the (trace-level, large) output while scanning every host process's argv.
    let mut stdout_pipe = child.stdout.take().expect("stdout");
    let mut stderr_pipe = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stdout_pipe, &mut buf).expect("read stdout");
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut stderr_pipe, &mut buf).expect("read stderr");
        buf
    });
    let secrets = [&from_env, &derived_part, &literal, &verifier_secret];
    let mut scans = 0;
    let mut saw_agent = false;
    let status = loop {
        for line in host_cmdlines() {
            for s in secrets {
                assert!(
                    !line.contains(s.as_str()),
                    "a secret in a host argv: {line}"
                );
            }
            // The agent's own process (it lingers 3 s), not any container's init: another
            // test binary's containers run beside this one.
            saw_agent |= line.contains("/opt/hostile/exfiltrate.sh");
        }
        scans += 1;
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let stdout_bytes = out_reader.join().expect("stdout thread");
    let stderr_bytes = err_reader.join().expect("stderr thread");
    let logs = String::from_utf8_lossy(&stderr_bytes);
    assert_eq!(status.code(), Some(0), "{logs}");
    assert!(
        scans > 20 && saw_agent,
        "argv was scanned while the agent ran"
    );
    assert!(
        logs.lines().count() > 50 && logs.contains("TRACE"),
        "RUST_LOG=trace was in force"
    );
    assert_no_leftovers(&job_dir);
    for s in secrets {
        assert!(
            !logs.contains(s.as_str()),
            "a secret in arbiter's trace log"
        );
        assert!(!String::from_utf8_lossy(&stdout_bytes).contains(s.as_str()));
        let found = leaks_under(&job_dir, s);
        assert!(
            found.is_empty(),
            "{s} is in (the name or content of) {found:#?}"
        );
    }
    // The secrets did reach the agent and the verifier (what they printed was scrubbed).
    let trial = "secrets__thief__default__1";
    let out = read(&job_dir, trial, "agent/stdout.log");
    assert_eq!(out.matches("leaking ***").count(), 3, "{out}");
    let verifier = read(&job_dir, trial, "verifier/stdout.log");
    assert!(verifier.contains("verifier token: ***"), "{verifier}");
    let r = result(&job_dir, trial);
    assert_eq!(r["claim"]["record"]["final_answer"], "***", "{r:#}");
}
