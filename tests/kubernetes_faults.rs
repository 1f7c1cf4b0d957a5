//! What the cluster does on its own mid-job is never the agent's result: the apiserver killed
//! (`kill -9`) and started again, the kubelet killed and started again, while trials' agents
//! run. Each trial either goes on with no error at all, or ends its try as an `infra_error`
//! that is retried — never `killed`, never a failed verdict. Running pods survive.
//!
//! These tests stop components of the cluster `scripts/k8s up` started (and start them again
//! with it), so they run one at a time, in their own test binary: nothing else of the suite
//! runs while they do (cargo runs test binaries one after another). Skipped without a
//! cluster; a failure with `ARBITER_REQUIRE_K8S=1`.

mod common;

use common::k8s::{configured, k8s_job_dir, kubectl, quick_job, spawn_job};

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One fault at a time.
static CLUSTER: Mutex<()> = Mutex::new(());

fn state_dir() -> PathBuf {
    std::env::var_os("ARBITER_K8S_STATE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/arbiter-k8s"))
}

/// `kill -9` a component `scripts/k8s up` started (by its pid file).
fn kill_component(name: &str) {
    let pid_file = state_dir().join("run").join(format!("{name}.pid"));
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
    let out = std::process::Command::new("kill")
        .args(["-9", pid.trim()])
        .output()
        .expect("kill");
    assert!(
        out.status.success(),
        "kill -9 {name}: {}",
        common::stderr(&out)
    );
}

/// `scripts/k8s up`: starts what is not running (and waits until the cluster is ready).
fn cluster_up() -> Duration {
    let started = Instant::now();
    let out = std::process::Command::new(common::repo().join("scripts/k8s"))
        .arg("up")
        .output()
        .expect("scripts/k8s up");
    assert!(
        out.status.success(),
        "scripts/k8s up: {}",
        common::stderr(&out)
    );
    started.elapsed()
}

/// The running agent pods of a job's trials, once there are `n`.
fn agent_pods(job: &str, n: usize, deadline: Instant) -> Vec<String> {
    loop {
        let out = kubectl(&[
            "get",
            "pods",
            "-l",
            "arbiter.role=agent",
            "--field-selector",
            "status.phase=Running",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.arbiter\\.job}{\"\\n\"}{end}",
        ]);
        let names: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| {
                l.split(' ')
                    .nth(1)
                    .is_some_and(|j| j.starts_with(&format!("{job}-")))
            })
            .filter_map(|l| l.split(' ').next().map(str::to_string))
            .collect();
        if names.len() >= n {
            return names;
        }
        assert!(Instant::now() < deadline, "no {n} agent pods of {job}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Kill `component` while two trials' agents run, start it again, and check the job.
fn survives(component: &str) {
    let _one = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    if !configured() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let agent = "sleep 20; echo ok > /app/out";
    let config = quick_job(
        tmp.path(),
        &[("a", agent), ("b", agent)],
        "concurrency: 2\nretries: {max: 2, backoff_sec: 1}\n",
    );
    let job_dir = k8s_job_dir(tmp.path(), component);
    let name = job_dir.file_name().unwrap().to_string_lossy().into_owned();
    let child = spawn_job(&config, &job_dir, &["--backend", "kubernetes"]);
    let before = agent_pods(&name, 2, Instant::now() + Duration::from_secs(240));
    // Once both agents' commands are in flight.
    std::thread::sleep(Duration::from_secs(3));
    kill_component(component);
    std::thread::sleep(Duration::from_secs(2));
    let back = cluster_up();
    eprintln!("{component} killed; scripts/k8s up had it back in {back:?}");
    // Running pods survive the restart.
    for pod in &before {
        let out = kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.phase}"]);
        let phase = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            phase == "Running" || phase.is_empty(),
            "{pod} after the {component} restart: {phase:?} {}",
            common::stderr(&out)
        );
    }
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    for agent in ["a", "b"] {
        let r = common::result(&job_dir, &format!("quick-k8s__{agent}__default__1"));
        assert!(r["infra_error"].is_null(), "{agent}: {r:#}");
        assert_eq!(r["verifier"]["status"], "passed", "{agent}: {r:#}");
        assert_eq!(r["termination"]["kind"], "exited", "{agent}: {r:#}");
        // Either the trial went on, or its tries before were infra errors (never the agent's).
        if let Some(earlier) = r["previous_errors"].as_array() {
            for e in earlier {
                assert!(
                    e["phase"].is_string() && e["message"].is_string(),
                    "{agent}: {r:#}"
                );
            }
            assert_eq!(r["retries"].as_u64(), Some(earlier.len() as u64), "{r:#}");
        }
        eprintln!(
            "{component} restart, trial {agent}: retries {} previous errors {}",
            r["retries"], r["previous_errors"]
        );
    }
}

#[test]
fn the_apiserver_killed_and_started_again_mid_job_is_never_the_agents_result() {
    survives("kube-apiserver");
}

#[test]
fn the_kubelet_killed_and_started_again_mid_trial_is_never_the_agents_result() {
    survives("kubelet-0");
}
