//! Fault injection: the engine stopped mid-job and started again, an engine that is not there
//! or never answers, a job dir that fills up or turns read-only, a container removed behind
//! arbiter's back. Engine faults run on a PRIVATE dockerd started by the test (its own
//! data-root, exec-root and socket, no bridge), so the shared engine is never touched; only
//! that dockerd's own pid is ever signalled.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

fn require(what: &str) -> bool {
    if std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("ARBITER_REQUIRE_DOCKER=1 but {what}");
    }
    eprintln!("skipping: {what}");
    false
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn quick_task() -> String {
    fixture("quick").display().to_string()
}

/// An agent that solves the quick task after 5 s: long enough that an engine fault injected
/// once it runs lands in its agent phase, however slowly a loaded machine gets there.
const SLOW_AGENT: &str = "agents:\n  - name: slow\n    kind: command\n    run: [sh, -c, 'sleep 5; echo ok > /app/out']\n";

/// Whether some trial of the job has its agent running: the agent's stdout log is opened once
/// its exec has started (the container alone exists from the environment phase on).
fn an_agent_runs(job_dir: &Path) -> bool {
    std::fs::read_dir(job_dir.join("trials"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|t| t.path().join("agent/stdout.log").is_file())
}

/// A dockerd of our own in a temp dir.
struct PrivateEngine {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl PrivateEngine {
    /// Start one (root and `dockerd` needed) and import the busybox base image into it.
    fn start() -> Option<Self> {
        if !docker_available() {
            return None;
        }
        if !is_root() {
            require("fault injection needs root to start a private dockerd");
            return None;
        }
        if Command::new("dockerd").arg("--version").output().is_err() {
            require(
                "no dockerd binary for a private engine (scripts/bootstrap installs docker.io)",
            );
            return None;
        }
        // A short path: the socket's must fit in sun_path.
        let dir = tempfile::Builder::new()
            .prefix("arb-eng-")
            .tempdir_in("/tmp")
            .expect("tmp");
        let mut engine = PrivateEngine { dir, child: None };
        engine.launch();
        let mut save = Command::new("docker")
            .args(["save", "arbiter/busybox:latest"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker save");
        let load = engine
            .docker()
            .arg("load")
            .stdin(save.stdout.take().expect("save stdout"))
            .output()
            .expect("docker load");
        let saved = save.wait().expect("docker save");
        assert!(
            saved.success() && load.status.success(),
            "importing busybox into the private engine: {}",
            String::from_utf8_lossy(&load.stderr)
        );
        Some(engine)
    }

    fn host(&self) -> String {
        format!("unix://{}", self.dir.path().join("docker.sock").display())
    }

    fn docker(&self) -> Command {
        let mut cmd = Command::new("docker");
        cmd.env("DOCKER_HOST", self.host());
        cmd
    }

    fn answers(&self) -> bool {
        self.docker()
            .args(["version", "--format", "{{.Server.APIVersion}}"])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    fn launch(&mut self) {
        let d = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("dockerd.log"))
            .expect("log");
        let child = Command::new("dockerd")
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false"])
            .args(["--shutdown-timeout", "2"])
            .arg("--data-root")
            .arg(d.join("data"))
            .arg("--exec-root")
            .arg(d.join("exec"))
            .arg("--pidfile")
            .arg(d.join("pid"))
            .args(["-H", &self.host()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start dockerd");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.answers() {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "private dockerd exited ({status}): {}",
                    std::fs::read_to_string(d.join("dockerd.log")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "private dockerd did not answer in 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGTERM our dockerd (and only it) and wait until it is gone.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            while child.try_wait().expect("wait dockerd").is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    fn arbiter(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_arbiter"))
            .args(args)
            .env("DOCKER_HOST", self.host())
            .output()
            .expect("run arbiter")
    }

    fn spawn_arbiter(&self, args: &[&str]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_arbiter"))
            .args(args)
            .env("DOCKER_HOST", self.host())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn arbiter")
    }

    /// Containers and images labelled as arbiter's on this engine.
    fn managed(&self) -> Vec<String> {
        let mut out = Vec::new();
        for kind in [&["ps", "-a"][..], &["images"][..]] {
            let o = self
                .docker()
                .args(kind)
                .args(["-q", "--filter", "label=arbiter.managed=true"])
                .output()
                .expect("docker");
            out.extend(
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(str::to_string),
            );
        }
        out
    }
}

impl Drop for PrivateEngine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `arbiter run -c config` into `job` on the private engine, which is stopped and started
/// again while a trial is in its agent phase (`SLOW_AGENT` sleeps 5 s); its output.
fn run_through_an_outage(engine: &mut PrivateEngine, config: &Path, job: &str) -> Output {
    let mut child = engine.spawn_arbiter(&[
        "run",
        "--quiet",
        "--job-dir",
        job,
        "-c",
        config.to_str().expect("utf8"),
    ]);
    // Not once the agent's container exists (a fixed wait after that lands in the environment
    // phase on a loaded machine) but once its agent's exec has started.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !an_agent_runs(Path::new(job)) {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "arbiter ended early"
        );
        assert!(Instant::now() < deadline, "no agent running after 120 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    engine.stop();
    engine.launch();
    wait_output(child, Duration::from_secs(240))
}

fn records(job_dir: &Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let Ok(dirs) = std::fs::read_dir(job_dir.join("trials")) else {
        return out;
    };
    for d in dirs.flatten() {
        let path = d.path().join("result.json");
        if path.exists() {
            let bytes = std::fs::read(&path).expect("read");
            out.push(
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| panic!("{}: corrupt record: {e}", path.display())),
            );
        }
    }
    out
}

/// Every line of trials.jsonl is a whole record of a finished trial.
fn jsonl_ids(job_dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(job_dir.join("trials.jsonl")).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "a torn line: {text:?}"
    );
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("jsonl line is JSON");
            v["id"].as_str().expect("id").to_string()
        })
        .collect()
}

#[test]
fn engine_stopped_mid_job_and_started_again_trials_are_retried_and_the_job_completes() {
    let Some(mut engine) = PrivateEngine::start() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\n{SLOW_AGENT}attempts: 4\nconcurrency: 2\nretries: {{max: 4, backoff_sec: 3}}\n",
            quick_task()
        ),
    );
    let job_dir = tmp.path().join("job-restart");
    let job = job_dir.display().to_string();
    let out = run_through_an_outage(&mut engine, &config, &job);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let recs = records(&job_dir);
    assert_eq!(recs.len(), 4, "every trial finished");
    let mut ids = jsonl_ids(&job_dir);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "one jsonl line per trial");
    let mut retried = 0;
    for r in &recs {
        assert_eq!(r["termination"]["kind"], "exited", "{r:#}");
        assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
        let retries = r["retries"].as_u64().expect("retries");
        assert_eq!(
            r["previous_errors"].as_array().map_or(0, Vec::len) as u64,
            retries
        );
        retried += retries;
    }
    assert!(retried >= 1, "the trials in flight were retried: {recs:#?}");
    let in_flight = recs
        .iter()
        .flat_map(|r| r["previous_errors"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["phase"] == "agent")
        .count();
    assert!(
        in_flight >= 1,
        "a trial lost its engine mid-agent-phase: {recs:#?}"
    );

    // The tries that failed while the engine was away left containers it could not remove
    // then; the job removes them before it ends.
    assert_eq!(
        engine.managed(),
        Vec::<String>::new(),
        "leftovers after the run"
    );
    // Resume: nothing to do, nothing re-run, and no leftovers on the engine afterwards.
    let before = std::fs::read(job_dir.join("trials.jsonl")).expect("jsonl");
    let out = engine.arbiter(&["resume", &job, "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(job_dir.join("trials.jsonl")).expect("jsonl"),
        before
    );
    assert_eq!(
        engine.managed(),
        Vec::<String>::new(),
        "leftovers on the engine"
    );
}

fn wait_output(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("arbiter did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().expect("output")
}

#[test]
fn engine_unreachable_at_start_is_exit_2_with_one_line_and_no_hang() {
    let tmp = tempfile::tempdir().expect("tmp");
    let job = tmp.path().join("job");
    let job = job.display().to_string();
    let task = quick_task();
    // Nothing at the socket.
    let missing = format!("unix://{}", tmp.path().join("none.sock").display());
    // A socket that accepts and never says a word.
    let mute_path = tmp.path().join("mute.sock");
    let listener = std::os::unix::net::UnixListener::bind(&mute_path).expect("bind");
    let held = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for conn in listener.incoming().take(8).flatten() {
            kept.push(conn);
        }
        std::thread::sleep(Duration::from_secs(60));
        drop(kept);
    });
    let mute = format!("unix://{}", mute_path.display());
    for host in [missing, mute] {
        let started = Instant::now();
        let child = Command::new(env!("CARGO_BIN_EXE_arbiter"))
            .args([
                "run",
                &task,
                "--agent",
                "oracle",
                "--quiet",
                "--job-dir",
                &job,
            ])
            .env("DOCKER_HOST", &host)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let out = wait_output(child, Duration::from_secs(90));
        let took = started.elapsed();
        assert_eq!(out.status.code(), Some(2), "{host}: {}", stderr(&out));
        let err = stderr(&out);
        let lines: Vec<&str> = err.lines().collect();
        assert!(
            lines.len() <= 2
                && lines[0].starts_with("error: ")
                && lines.get(1).is_none_or(|l| l.starts_with("hint: ")),
            "{host}: one error line (and a hint): {err}"
        );
        assert!(
            lines[0].contains(&host) || lines[0].contains("did not answer"),
            "{err}"
        );
        assert!(took < Duration::from_secs(60), "{host}: took {took:?}");
        assert!(
            !Path::new(&job).join("trials.jsonl").exists(),
            "nothing was started"
        );
    }
    drop(held);
}

/// A tmpfs of `size` mounted at `dir` (unmounted on drop).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mkdir");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "arbiter-test"])
            .arg(dir)
            .status()
            .expect("mount");
        assert!(status.success(), "mount tmpfs at {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }

    fn remount(&self, opts: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{opts}")])
            .arg(&self.0)
            .status()
            .expect("remount");
        assert!(status.success(), "remount {opts}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn job_dir_full_or_read_only_is_a_typed_error_with_no_corrupt_record_and_resume_finishes() {
    if !docker_available() {
        return;
    }
    if !is_root() {
        require("mounting a small tmpfs as the job dir needs root");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let mnt = Tmpfs::mount(&tmp.path().join("mnt"), "1m");
    let job_dir = tmp.path().join("mnt/job-full");
    let job = job_dir.display().to_string();
    // Each trial writes 400 KB of logs: the 1 MiB disk fills on the second or third.
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nagents:\n  - name: writer\n    kind: command\n    run: [sh, -c, 'head -c 400000 /dev/zero | tr \"\\\\0\" x; echo ok > /app/out']\nattempts: 4\nconcurrency: 1\nretries: {{max: 0}}\n",
            quick_task()
        ),
    );
    let out = arbiter(&[
        "run",
        "--quiet",
        "--job-dir",
        &job,
        "-c",
        config.to_str().expect("utf8"),
    ]);
    let err = stderr(&out);
    assert_ne!(
        out.status.code(),
        Some(0),
        "a full disk is not a success: {err}"
    );
    assert!(
        err.contains("No space left on device"),
        "the error names the cause: {err}"
    );
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
    assert_no_leftovers(&job_dir);
    // Whatever was written is whole: every result.json parses, every jsonl line is a record.
    let recs = records(&job_dir);
    let ids = jsonl_ids(&job_dir);
    assert!(recs.len() < 4, "the disk filled before the end");
    assert!(ids.len() <= recs.len());

    // Read-only: refused at once, one line, nothing touched.
    mnt.remount("ro");
    let before = records(&job_dir).len();
    let out = arbiter(&["resume", &job, "--quiet"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("Read-only file system"),
        "{err}"
    );
    assert_eq!(records(&job_dir).len(), before);

    // Room again: resume finishes every trial exactly once.
    mnt.remount("rw,size=64m");
    let out = arbiter(&["resume", &job, "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = records(&job_dir);
    assert_eq!(recs.len(), 4);
    let mut ids = jsonl_ids(&job_dir);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4);
    for r in &recs {
        assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    }
    assert_no_leftovers(&job_dir);
}

#[test]
fn container_removed_behind_arbiters_back_is_an_infra_error_and_retried() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nagents:\n  - name: slow\n    kind: command\n    run: [sh, -c, 'sleep 3; echo ok > /app/out']\nretries: {{max: 1, backoff_sec: 0.5}}\n",
            quick_task()
        ),
    );
    let job_dir = tmp
        .path()
        .join(format!("job-vanish-{}", std::process::id()));
    let job = job_dir.display().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args([
            "run",
            "--quiet",
            "--job-dir",
            &job,
            "-c",
            config.to_str().expect("utf8"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let trial = "quick__slow__default__1";
    let deadline = Instant::now() + Duration::from_secs(120);
    let removed = loop {
        let ps = Command::new("docker")
            .args([
                "ps",
                "-q",
                "--filter",
                &format!("label=arbiter.trial={trial}"),
                "--filter",
                "label=arbiter.role=agent",
            ])
            .output()
            .expect("docker ps");
        let ids = String::from_utf8_lossy(&ps.stdout).trim().to_string();
        let ours = ids.lines().next().map(str::to_string);
        // Only once the agent runs (its exec is in flight, 3 s of sleep): its stdout log is
        // opened when the exec has started. A fixed wait after the container appears could
        // land in the environment phase on a loaded machine.
        if let Some(id) = ours.filter(|_| an_agent_runs(&job_dir)) {
            let rm = Command::new("docker")
                .args(["rm", "-f", &id])
                .output()
                .expect("rm");
            assert!(rm.status.success());
            break id;
        }
        assert!(
            child.try_wait().expect("wait").is_none(),
            "arbiter ended early"
        );
        assert!(Instant::now() < deadline, "no agent container");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = wait_output(child, Duration::from_secs(120));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_no_leftovers(&job_dir);
    let r = result(&job_dir, trial);
    assert_eq!(r["termination"]["kind"], "exited", "{r:#}");
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    assert_eq!(r["retries"], 1, "{r:#}");
    let first = &r["previous_errors"][0];
    assert!(
        first["message"]
            .as_str()
            .is_some_and(|m| m.contains("No such container")
                || m.contains(&removed[..12])
                || m.contains("404")
                || m.contains("is not running")
                // Removed while arbiter read its layers on the host: the engine refuses the
                // verifier's restart of the container it is removing.
                || m.contains("marked for removal")
                // The removal raced the collect phase: the engine answers for the container
                // but its writable layer is already gone.
                || (m.contains("overlay2") && m.contains("no such file or directory"))),
        "the first try failed on the vanished container: {r:#}"
    );
}

/// Issue 24: an outage that outlasts the retries leaves `infra_error` records; `arbiter
/// resume --retry-infra` once the engine is back runs exactly those again, and their new
/// records keep the outage's errors.
#[test]
fn after_an_outage_resume_with_retry_infra_runs_only_the_unscored_trials_again() {
    let Some(mut engine) = PrivateEngine::start() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\n{SLOW_AGENT}attempts: 4\nconcurrency: 2\nretries: {{max: 0}}\n",
            quick_task()
        ),
    );
    let job_dir = tmp.path().join("job-outage");
    let job = job_dir.display().to_string();
    let out = run_through_an_outage(&mut engine, &config, &job);
    let recs = records(&job_dir);
    assert_eq!(recs.len(), 4, "every trial has a record: {}", stderr(&out));
    let infra: Vec<String> = recs
        .iter()
        .filter(|r| !r["infra_error"].is_null())
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect();
    assert!(!infra.is_empty(), "the outage cost trials: {recs:#?}");
    assert_eq!(
        out.status.code(),
        Some(3),
        "infra errors: exit 3; {}",
        stderr(&out)
    );
    let scored: Vec<(String, Vec<u8>)> = recs
        .iter()
        .filter(|r| r["infra_error"].is_null())
        .map(|r| {
            let id = r["id"].as_str().expect("id").to_string();
            let bytes = std::fs::read(job_dir.join("trials").join(&id).join("result.json"))
                .expect("result.json");
            (id, bytes)
        })
        .collect();

    // A plain resume leaves the infra records alone.
    let out = engine.arbiter(&["resume", &job, "--quiet"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // With --retry-infra they run again, and only they.
    let out = engine.arbiter(&["resume", &job, "--quiet", "--retry-infra"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = records(&job_dir);
    assert_eq!(recs.len(), 4);
    for r in &recs {
        let id = r["id"].as_str().expect("id");
        assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
        assert!(r["infra_error"].is_null(), "{r:#}");
        if infra.iter().any(|i| i == id) {
            let errors = r["previous_errors"].as_array().expect("previous_errors");
            assert!(!errors.is_empty(), "the outage's error is kept: {r:#}");
            assert_eq!(r["retries"].as_u64(), Some(errors.len() as u64), "{r:#}");
        }
    }
    for (id, bytes) in &scored {
        assert_eq!(
            &std::fs::read(job_dir.join("trials").join(id).join("result.json")).expect("read"),
            bytes,
            "{id}: a scored trial never runs again"
        );
    }
    let mut ids = jsonl_ids(&job_dir);
    assert_eq!(ids.len(), 4, "one line per trial: {ids:?}");
    ids.dedup();
    assert_eq!(ids.len(), 4);
    assert_eq!(engine.managed(), Vec::<String>::new(), "leftovers");
}
