//! The Kubernetes backend on several nodes and under the start-rate cap (issue 28), against
//! the test cluster with its extra nodes (`scripts/k8s up --nodes 3`, which every test here
//! runs itself: it is idempotent and adds nodes without touching node 0). Skipped with a
//! message when `KUBECONFIG` is unset; a failure when `ARBITER_REQUIRE_K8S=1`.
//!
//! Nodes 1 and 2 are tainted `arbiter.dev/pool=extra:NoSchedule`: the jobs here select and
//! tolerate them, so other tests' pods stay on node 0 and these never land there. What each
//! pod did is read from a watch the test holds while the job runs (its node, when it ran),
//! never from timing.

mod common;

use common::k8s::{PodObserver, PodWatch, configured_by, k8s_job_dir, quick_job, spawn_job};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

/// The tests of this file stop nodes and count pending pods: one at a time.
static CLUSTER: Mutex<()> = Mutex::new(());

const EXTRA_NODES: [&str; 2] = ["127.0.0.2", "127.0.0.3"];

fn script(args: &[&str]) -> Output {
    Command::new("bash")
        .arg(common::repo().join("scripts/k8s"))
        .args(args)
        .output()
        .expect("scripts/k8s")
}

/// The cluster with its two extra nodes, this file's lock held; `None` (skip) without a
/// cluster.
fn three_nodes() -> Option<MutexGuard<'static, ()>> {
    if !configured_by("up --nodes 3") {
        return None;
    }
    let guard = CLUSTER.lock().unwrap_or_else(|p| p.into_inner());
    let up = script(&["up", "--nodes", "3"]);
    assert!(
        up.status.success(),
        "scripts/k8s up --nodes 3: {}",
        common::stderr(&up)
    );
    Some(guard)
}

/// The job's `backend:` on the extra nodes, with `extra` keys added.
fn on_extra_nodes(extra: &str) -> String {
    format!(
        "backend:\n  kind: kubernetes\n  node_selector: {{arbiter.dev/pool: extra}}\n  tolerations: [{{key: arbiter.dev/pool, operator: Equal, value: extra, effect: NoSchedule}}]\n{extra}"
    )
}

// ------------------------------------------------------------------ the watch ---

/// One pod of the job as the watch saw it.
#[derive(Debug, Clone, Default)]
struct Seen {
    trial: String,
    node: Option<String>,
    /// Its main container was seen running.
    ran: bool,
    /// When it was first seen running (for "after the node was lost").
    ran_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Observed {
    pods: BTreeMap<String, Seen>,
    /// Pods that exist and have not run yet.
    starting: BTreeSet<String>,
    /// The most pods pending or starting at once, in the API's order of events.
    max_starting: usize,
}

fn main_running(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "main"))
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

type Watch = PodWatch<Observed>;

impl PodObserver for Observed {
    fn apply(&mut self, pod: &Pod) {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let Some(name) = pod.metadata.name.clone() else {
            return;
        };
        let entry = self.pods.entry(name.clone()).or_default();
        entry.trial = labels.get("arbiter.trial").cloned().unwrap_or_default();
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            entry.node = Some(node);
        }
        if main_running(pod) && !entry.ran {
            entry.ran = true;
            entry.ran_at = Some(Instant::now());
        }
        if entry.ran || pod.metadata.deletion_timestamp.is_some() {
            self.starting.remove(&name);
        } else {
            self.starting.insert(name);
            self.max_starting = self.max_starting.max(self.starting.len());
        }
    }

    fn delete(&mut self, pod: &Pod) {
        if let Some(name) = &pod.metadata.name {
            self.starting.remove(name);
        }
    }
}

// ------------------------------------------------------------------ records ---

/// Fields that differ by nature between two trials of one job: ids, times, the attempt.
const VOLATILE: &[&str] = &[
    "id",
    "attempt",
    "started_at",
    "finished_at",
    "phases",
    "agent_deadline_epoch",
    "verifier.seconds",
    "termination.seconds",
    "agent.seconds",
    "agent.result.seconds",
];

/// A job of the quick task on the extra nodes (`backend`: more backend settings), its agent
/// `(name, shell command)`, `(attempts, concurrency)`, run to its end (exit 0) under a pod
/// watch: its dir and the watch.
fn watched_quick_job(
    tmp: &Path,
    label: &str,
    (agent, run): (&str, &str),
    (attempts, concurrency): (u32, u32),
    backend: &str,
) -> (PathBuf, Watch) {
    let config = quick_job(
        tmp,
        &[(agent, run)],
        &format!(
            "attempts: {attempts}\nconcurrency: {concurrency}\n{}",
            on_extra_nodes(backend)
        ),
    );
    let job_dir = k8s_job_dir(tmp, label);
    let watch = Watch::start(&job_dir);
    let out = spawn_job(&config, &job_dir, &[])
        .wait_with_output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    (job_dir, watch)
}

fn trial(i: u32, agent: &str) -> String {
    format!("quick-k8s__{agent}__default__{i}")
}

// -------------------------------------------------------------------- tests ---

/// The scheduler places a job's trials on both extra nodes (none on node 0), and the
/// records do not depend on the node: identical but for ids and times.
#[test]
fn a_jobs_trials_spread_over_two_nodes_with_identical_records() {
    let Some(_cluster) = three_nodes() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (job_dir, watch) = watched_quick_job(
        tmp.path(),
        "spread",
        ("slow", "sleep 3; echo ok > /app/out"),
        (6, 6),
        "",
    );
    let seen = watch.observed().pods.clone();
    drop(watch);
    let mut nodes_of: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for pod in seen.values().filter(|p| p.ran) {
        nodes_of
            .entry(pod.trial.clone())
            .or_default()
            .insert(pod.node.clone().unwrap_or_default());
    }
    eprintln!("trial -> node: {nodes_of:?}");
    assert_eq!(
        nodes_of.len(),
        6,
        "every trial's pod was seen running: {seen:?}"
    );
    let used: BTreeSet<&str> = nodes_of.values().flatten().map(String::as_str).collect();
    assert_eq!(
        used,
        BTreeSet::from(EXTRA_NODES),
        "both extra nodes, never node 0: {nodes_of:?}"
    );
    let mut first: Option<serde_json::Value> = None;
    for i in 1..=6 {
        let mut r = common::result(&job_dir, &trial(i, "slow"));
        assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
        assert_eq!(r["retries"], 0, "{r:#}");
        assert_eq!(r["sandbox"]["backend"], "kubernetes", "{r:#}");
        common::strip_fields(&mut r, VOLATILE);
        match &first {
            None => first = Some(r),
            Some(f) => assert_eq!(f, &r, "trial {i} differs from trial 1"),
        }
    }
}

/// Restarts a node this test stopped, whatever happens.
struct NodeBack(String);

impl Drop for NodeBack {
    fn drop(&mut self) {
        let out = script(&["node", "start", &self.0]);
        if !out.status.success() {
            eprintln!(
                "scripts/k8s node start {}: {}",
                self.0,
                common::stderr(&out)
            );
        }
    }
}

/// A node lost while a trial's agent runs on it (its kubelet, containerd and the pod's
/// processes gone): that trial is an `infra_error`, retried on the other node, and passes
/// there.
#[test]
fn a_node_lost_mid_job_is_an_infra_error_retried_on_the_other_node() {
    let Some(_cluster) = three_nodes() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let config = quick_job(
        tmp.path(),
        &[("slow", "sleep 25; echo ok > /app/out")],
        &format!(
            "attempts: 2\nconcurrency: 2\nretries: {{max: 2, backoff_sec: 0.5}}\n{}",
            on_extra_nodes("")
        ),
    );
    let job_dir = k8s_job_dir(tmp.path(), "node-lost");
    let watch = Watch::start(&job_dir);
    let child = spawn_job(&config, &job_dir, &[]);
    // The first trial pod seen running: its node is the one lost.
    let deadline = Instant::now() + Duration::from_secs(240);
    let (pod, node) = loop {
        let running = watch
            .observed()
            .pods
            .iter()
            .find(|(_, p)| p.ran)
            .map(|(name, p)| (name.clone(), p.node.clone().unwrap_or_default()));
        if let Some(found) = running {
            break found;
        }
        assert!(Instant::now() < deadline, "no trial pod ran");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(EXTRA_NODES.contains(&node.as_str()), "{pod} on {node}");
    let index = if node == EXTRA_NODES[0] { "1" } else { "2" };
    let other = if index == "1" {
        EXTRA_NODES[1]
    } else {
        EXTRA_NODES[0]
    };
    // Once the agent's command runs (it sleeps 25 s).
    std::thread::sleep(Duration::from_secs(4));
    let back = NodeBack(index.to_string());
    let lost_at = Instant::now();
    let stopped = script(&["node", "stop", index]);
    assert!(stopped.status.success(), "{}", common::stderr(&stopped));
    let on_lost: BTreeSet<String> = watch
        .observed()
        .pods
        .values()
        .filter(|p| p.node.as_deref() == Some(node.as_str()))
        .map(|p| p.trial.clone())
        .collect();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.code().is_some(), "{}", common::stderr(&out));
    let seen = watch.observed().pods.clone();
    drop(watch);
    eprintln!("lost {node} ({index}) under {pod}; pods: {seen:?}");
    // Every pod that ran after the loss ran on the other node.
    for (name, p) in &seen {
        if p.ran_at.is_some_and(|t| t > lost_at) {
            assert_eq!(
                p.node.as_deref(),
                Some(other),
                "{name} ran on the lost node"
            );
        }
    }
    for i in 1..=2 {
        let id = trial(i, "slow");
        let r = common::result(&job_dir, &id);
        assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
        if on_lost.contains(&id) {
            assert!(r["retries"].as_u64().unwrap_or(0) >= 1, "{r:#}");
            let first = &r["previous_errors"][0];
            eprintln!("{id}: first try {first}");
            assert!(
                first["message"]
                    .as_str()
                    .is_some_and(|m| seen.keys().any(|name| m.contains(name.as_str()))),
                "the first try failed naming its pod: {r:#}"
            );
            let retried: Vec<&Seen> = seen
                .values()
                .filter(|p| p.trial == id && p.ran && p.ran_at.is_some_and(|t| t > lost_at))
                .collect();
            assert!(
                !retried.is_empty() && retried.iter().all(|p| p.node.as_deref() == Some(other)),
                "{id} retried on {other}: {seen:?}"
            );
        } else {
            assert_eq!(r["retries"], 0, "{r:#}");
        }
    }
    assert!(on_lost.contains(&seen[&pod].trial));
    drop(back);
    let status = script(&["status"]);
    assert!(status.status.success(), "{}", common::stdout(&status));
}

/// `max_starting: 2` under a burst of six trials at concurrency 6: never more than two of the
/// job's pods pending or starting at once, in the order the API saw them; every trial passes.
#[test]
fn the_start_cap_holds_under_a_burst() {
    let Some(_cluster) = three_nodes() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (job_dir, watch) = watched_quick_job(
        tmp.path(),
        "cap",
        ("quick", "echo ok > /app/out"),
        (6, 6),
        "  max_starting: 2\n",
    );
    // Besides the trials' pods, the change set's probe pods (one per image and node, role
    // `snapshot`) start under the same cap.
    let (max, pods, all) = {
        let o = watch.observed();
        let agents = o.pods.keys().filter(|n| n.contains("-agent-")).count();
        (o.max_starting, agents, o.pods.len())
    };
    drop(watch);
    eprintln!("{pods} trial pods ({all} in all), at most {max} pending or starting at once");
    assert_eq!(pods, 6, "one pod per trial");
    assert!(max <= 2, "{max} pods pending or starting at once");
    assert!(max >= 1);
    for i in 1..=6 {
        let r = common::result(&job_dir, &trial(i, "quick"));
        assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    }
}

/// Warm pods start under the same cap: `max_starting: 1` with `warm_pods: 2` at concurrency
/// 2 (six trials in waves, the agent sleeping so that warm pods are started while a wave
/// runs): never more than one of the job's pods — trial, warm or probe — pending or starting
/// at once; later trials claim warm pods, and no more are started than trials are left to
/// claim them; every trial passes.
#[test]
fn warm_pods_start_under_the_start_cap() {
    let Some(_cluster) = three_nodes() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (job_dir, watch) = watched_quick_job(
        tmp.path(),
        "warmcap",
        ("quick", "sleep 3; echo ok > /app/out"),
        (6, 2),
        "  max_starting: 1\n  warm_pods: 2\n",
    );
    let (max, claimed, warm, all) = {
        let o = watch.observed();
        let warm: Vec<&Seen> = o
            .pods
            .iter()
            .filter(|(n, _)| n.starts_with("arb-warm-"))
            .map(|(_, p)| p)
            .collect();
        let claimed = warm.iter().filter(|p| !p.trial.is_empty()).count();
        (o.max_starting, claimed, warm.len(), o.pods.len())
    };
    drop(watch);
    eprintln!("{all} pods, {warm} warm, {claimed} claimed, at most {max} pending or starting");
    assert!(max <= 1, "{max} pods pending or starting at once");
    assert!(claimed >= 1, "no trial claimed a warm pod");
    // No more warm pods than trials left to claim them: the first trial starts the pool, and
    // every later one may claim a warm pod (the first wave's second waits for a starting one
    // rather than start its own); the last claims start none.
    assert!(
        warm <= 5,
        "{warm} warm pods started for the five trials after the first"
    );
    for i in 1..=6 {
        let r = common::result(&job_dir, &trial(i, "quick"));
        assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    }
}

/// A trial no node can take (a node selector no node has) gives its start slot back after
/// `schedule_timeout_sec` and ends as an `infra_error` naming the scheduler's reason; with
/// one slot, the second trial could start only because the first gave it back.
#[test]
fn an_unschedulable_trial_frees_its_slot_and_names_the_reason() {
    let Some(_cluster) = three_nodes() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let config = quick_job(
        tmp.path(),
        &[("quick", "echo ok > /app/out")],
        "attempts: 2\nconcurrency: 2\nretries: {max: 0}\nbackend:\n  kind: kubernetes\n  node_selector: {arbiter.dev/pool: nowhere}\n  max_starting: 1\n  schedule_timeout_sec: 5\n",
    );
    let job_dir = k8s_job_dir(tmp.path(), "unschedulable");
    let watch = Watch::start(&job_dir);
    let out = spawn_job(&config, &job_dir, &[])
        .wait_with_output()
        .unwrap();
    assert!(out.status.code().is_some(), "{}", common::stderr(&out));
    let (max, pods) = {
        let o = watch.observed();
        (o.max_starting, o.pods.clone())
    };
    drop(watch);
    assert_eq!(max, 1, "one slot: {pods:?}");
    assert!(
        pods.values().all(|p| p.node.is_none() && !p.ran),
        "{pods:?}"
    );
    let mut by_trial: HashMap<String, usize> = HashMap::new();
    for p in pods.values() {
        *by_trial.entry(p.trial.clone()).or_default() += 1;
    }
    assert_eq!(by_trial.len(), 2, "both trials made a pod: {pods:?}");
    for i in 1..=2 {
        let r = common::result(&job_dir, &trial(i, "quick"));
        let message = r["infra_error"]["message"].as_str().unwrap_or_default();
        assert_eq!(r["infra_error"]["phase"], "environment", "{r:#}");
        assert!(message.contains("no node took it within 5s"), "{r:#}");
        assert!(
            message.contains("didn't match Pod's node affinity/selector"),
            "the scheduler's reason: {r:#}"
        );
    }
}
