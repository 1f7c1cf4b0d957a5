//! The four agent presets on the Kubernetes backend (`scripts/k8s up`, then
//! `eval "$(scripts/k8s env)"`): the real CLIs from the host cache, in pods with network
//! `none`, reaching arbiter's model gateway (the scripted provider) through the loopback relay
//! over the pods/exec API — no ingress to this host, no egress from the pod.
//!
//! - one job runs example tasks with every preset — `csv-to-json` and `shell-script-spec` by
//!   default, all six with `ARBITER_K8S_PRESET_TASKS=all` (claude-code, codex, mini-swe-agent
//!   solve them all; aider never runs commands, so `chmod +x` is beyond it and its
//!   shell-script-spec trial is a `false_completion`): verifier passed, claim read by the
//!   adapter, verdict `certified`, usage counted by the gateway, a valid ATIF trajectory,
//!   `backend: kubernetes`;
//! - one job has every preset say "done" without doing it: `false_completion`;
//! - fake `OPENAI_API_KEY` / `ANTHROPIC_API_KEY` in arbiter's environment reach no pod spec
//!   (env, args, annotations, volumes), no ConfigMap or Secret of the namespace, no event and
//!   no job-dir file; no trial token is written to the job dir; no pod of the job is left.
//!
//! Skipped when `KUBECONFIG` is unset or the agents are not cached; a failure under
//! `ARBITER_REQUIRE_K8S=1` / `ARBITER_REQUIRE_DOCKER=1`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;
use std::time::Duration;

use arbiter::agent::PresetKind;
use serde_json::Value;

use common::k8s::*;
use common::presets::*;
use common::*;

/// One job at a time: each runs four trials at once on the two cores the cluster has.
static CLUSTER: Mutex<()> = Mutex::new(());

/// The cluster is configured and the presets are cached (else skip, or panic when required).
fn ready_on_cluster() -> bool {
    configured() && ready(&PresetKind::ALL)
}

/// A finished `arbiter run --backend kubernetes` and every cluster object of its job seen
/// while it ran, as JSON text by uid.
struct Watched {
    out: Output,
    dir: PathBuf,
    objects: BTreeMap<String, String>,
    pods: usize,
    _tmp: tempfile::TempDir,
}

/// The items of `kubectl get KINDS -o json`.
fn items(kinds: &str) -> Vec<Value> {
    let out = kubectl(&["get", kinds, "-o", "json"]);
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

/// `arbiter run --quiet --backend kubernetes -n 4 -c CONFIG` with the fake keys in its
/// environment; the job's pods, and every ConfigMap and Secret of the namespace, are read
/// while it runs, the namespace's events after it.
fn run_on_cluster(config: &Path) -> Watched {
    let _one = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().expect("tmp");
    let unique = unique_name(tmp.path());
    let name = format!("k8spresets{unique}").to_lowercase();
    let dir = tmp.path().join(&name);
    let mut run = KeyedRun::start(&["--backend", "kubernetes", "-n", "4"], &dir, config);
    let of_job = |v: &Value| {
        v["metadata"]["labels"]["arbiter.job"]
            .as_str()
            .is_some_and(|j| is_job_label(j, &name))
    };
    let mut objects = BTreeMap::new();
    let mut pods = 0;
    let status = loop {
        for pod in items("pods").iter().filter(|p| of_job(p)) {
            let uid = pod["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if objects.insert(uid, pod.to_string()).is_none() {
                pods += 1;
            }
        }
        for other in items("configmaps,secrets") {
            let uid = other["metadata"]["uid"].as_str().unwrap_or_default();
            objects.insert(uid.to_string(), other.to_string());
        }
        if let Some(status) = run.child.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    for event in items("events") {
        let uid = event["metadata"]["uid"].as_str().unwrap_or_default();
        objects.insert(uid.to_string(), event.to_string());
    }
    let out = run.output(status);
    let left: Vec<String> = items("pods")
        .iter()
        .filter(|p| of_job(p))
        .map(|p| p["metadata"]["name"].to_string())
        .collect();
    assert!(left.is_empty(), "pods of the job left: {left:?}");
    Watched {
        out,
        dir,
        objects,
        pods,
        _tmp: tmp,
    }
}

/// Neither fake key in any cluster object seen, nor a key or a token in the job dir.
fn assert_no_secrets(w: &Watched) {
    assert!(w.pods > 0, "no pod of the job was seen");
    for (uid, text) in &w.objects {
        assert!(
            !text.contains(FAKE_OPENAI_KEY) && !text.contains(FAKE_ANTHROPIC_KEY),
            "a real key in cluster object {uid}: {text}"
        );
    }
    assert_no_secret_in(&w.dir);
}

fn on_kubernetes(r: &Value) {
    assert_eq!(r["sandbox"]["backend"], "kubernetes", "{r:#}");
}

/// Every preset solves the example tasks it can, on the cluster, through the gateway.
#[test]
fn the_four_presets_solve_the_example_tasks_on_kubernetes_through_the_gateway() {
    if !ready_on_cluster() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let mut models = String::new();
    let mut agents = String::new();
    for kind in PresetKind::ALL {
        let k = kind.name();
        std::fs::write(
            tmp.path().join(format!("{k}.json")),
            all_tasks_script(kind).to_string(),
        )
        .expect("script");
        models += &format!("  - {{name: m-{k}, api: scripted, script: {k}.json}}\n");
        agents += &format!(
            "  - {{name: {k}, kind: {k}, model: {{provider: m-{k}, name: scripted-model}}}}\n"
        );
    }
    let names: Vec<&str> = if std::env::var("ARBITER_K8S_PRESET_TASKS").as_deref() == Ok("all") {
        TASKS.to_vec()
    } else {
        vec!["csv-to-json", "shell-script-spec"]
    };
    let tasks: Vec<String> = names.iter().map(|t| task_dir(t)).collect();
    let config = write_job(
        tmp.path(),
        &format!("tasks: {tasks:?}\nmodels:\n{models}agents:\n{agents}"),
    );
    let w = run_on_cluster(&config);
    let all = records(&w.dir);
    assert_eq!(all.len(), 4 * names.len(), "{}", stderr(&w.out));
    let mut solved: BTreeMap<String, usize> = BTreeMap::new();
    for (id, r) in &all {
        let task = r["task"].as_str().unwrap_or_default();
        let agent = r["agent"].as_str().unwrap_or_default().to_string();
        eprintln!(
            "{agent} {task}: verifier {} claim {} verdict {} agent phase {:.2} s",
            r["verifier"]["status"],
            r["claim"]["semantic_status"],
            r["audit"]["verdict"],
            agent_secs(r)
        );
        on_kubernetes(r);
        assert!(r["infra_error"].is_null(), "{id}: {r:#}");
        assert_eq!(r["claim"]["source"], "adapter", "{id}: {r:#}");
        assert_eq!(r["claim"]["status"], "present", "{id}: {r:#}");
        assert!(r["usage"]["requests"].as_u64() >= Some(1), "{id}: {r:#}");
        valid_atif(&w.dir.join("trials").join(id));
        if agent == "aider" && task == "shell-script-spec" {
            assert_eq!(r["verifier"]["status"], "failed", "{id}: {r:#}");
            assert_eq!(r["audit"]["verdict"], "false_completion", "{id}: {r:#}");
        } else {
            assert_eq!(r["verifier"]["status"], "passed", "{id}: {r:#}");
            assert_eq!(r["audit"]["verdict"], "certified", "{id}: {r:#}");
            *solved.entry(agent).or_default() += 1;
        }
    }
    let want: BTreeMap<String, usize> = PresetKind::ALL
        .iter()
        .map(|k| {
            let n = if *k == PresetKind::Aider {
                names.len() - 1
            } else {
                names.len()
            };
            (k.name().to_string(), n)
        })
        .collect();
    assert_eq!(solved, want);
    assert_eq!(w.out.status.code(), Some(0), "{}", stderr(&w.out));
    assert_no_secrets(&w);
}

/// "Done" without doing it, from every preset on the cluster: `false_completion`.
#[test]
fn a_false_done_is_a_false_completion_for_every_preset_on_kubernetes() {
    if !ready_on_cluster() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    // As in preset_runs: `echo COMPLETE_…` is how mini-swe-agent says done; nothing writes
    // the report exact-deliverable's verifier checks.
    std::fs::write(
        tmp.path().join("done.json"),
        r#"{"turns": [{"run": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}], "end": "Done: /app/out/report.txt is written."}"#,
    )
    .expect("script");
    let agents: String = PresetKind::ALL
        .iter()
        .map(|kind| {
            format!(
                "  - {{name: {k}, kind: {k}, model: {{provider: done, name: scripted-model}}}}\n",
                k = kind.name()
            )
        })
        .collect();
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nmodels:\n  - {{name: done, api: scripted, script: done.json}}\nagents:\n{agents}",
            task_dir("exact-deliverable")
        ),
    );
    let w = run_on_cluster(&config);
    let all = records(&w.dir);
    assert_eq!(all.len(), 4, "{}", stderr(&w.out));
    for (id, r) in &all {
        on_kubernetes(r);
        assert!(r["infra_error"].is_null(), "{id}: {r:#}");
        assert_eq!(r["verifier"]["status"], "failed", "{id}: {r:#}");
        assert_eq!(r["claim"]["source"], "adapter", "{id}: {r:#}");
        assert_eq!(r["claim"]["semantic_status"], "succeeded", "{id}: {r:#}");
        assert_eq!(r["audit"]["verdict"], "false_completion", "{id}: {r:#}");
    }
    assert_eq!(w.out.status.code(), Some(0), "{}", stderr(&w.out));
    assert_no_secrets(&w);
}

/// A provider with the real key pointed at a port nothing listens on: every preset's trial on
/// the cluster is an infrastructure error, not an agent failure; the job exits 3.
#[test]
fn an_unreachable_model_is_an_infra_error_for_every_preset_on_kubernetes() {
    if !ready_on_cluster() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = unreachable_models_job(tmp.path());
    let w = run_on_cluster(&config);
    let all = records(&w.dir);
    assert_eq!(all.len(), 4, "{}", stderr(&w.out));
    for (id, r) in &all {
        on_kubernetes(r);
        let message = r["infra_error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("model_unavailable"), "{id}: {r:#}");
        assert_eq!(r["verifier"]["status"], "skipped", "{id}: {r:#}");
        assert!(r["audit"].is_null(), "{id}: no agent verdict {r:#}");
    }
    assert_eq!(w.out.status.code(), Some(3), "{}", stderr(&w.out));
    assert_no_secrets(&w);
}
