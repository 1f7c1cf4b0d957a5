//! Warm pods (issue 28, opt-in per job: `backend: {warm_pods: N}`).
//!
//! A trial's pod waits for the scheduler, the image pull and the container starts before its
//! agent can run. With warm pods the backend keeps up to N pods of each agent pod spec it has
//! seen started ahead, and a trial claims one instead of creating its own:
//!
//! - **Same spec.** A warm pod is the pod the trial would create, but for its name and the
//!   labels that name a trial; pods are matched by a hash of the pod spec (and the default
//!   user), so a pod of another image, limits, network or env is never claimed.
//! - **Claimed once.** The claim relabels the pod to the trial with one JSON patch whose first
//!   operation tests the `arbiter.warm` label: two claims of one pod cannot both succeed
//!   (the apiserver applies the patch atomically), and a claimed pod has no `arbiter.warm`
//!   label left. A claimed pod is the trial's: deleted at its end, never offered again.
//! - **Offered once running.** A warm pod is offered only once its watch saw its main
//!   container running, or being started with its init containers done (the kubelet reports
//!   "running" up to a second later; the first exec into it asks again while it does not
//!   run yet): a claim never waits for the scheduler, an image pull or the harness init. A
//!   warm pod that does not run within the start deadline is deleted.
//!   Starting warm pods hold start slots like any other (`max_starting` counts every pod
//!   pending or starting, warm or not).
//! - **Proved before it is offered.** A warm pod runs only what a cold one runs before its
//!   start (the harness init, the image's ENTRYPOINT handing over to the keep-alive) and the
//!   proofs of the start (proof.rs: the handover, network `none`; read-only, one exec once it
//!   runs). A pod whose proof fails or gives no answer to trust is deleted, never offered.
//!   So a claim is one request, and the trial's first exec is its own (its uploads).
//! - **Topped up, then gone.** Each claim starts a replacement while trials are still to
//!   start (the job tells the backend how many: a pool keeps no more pods, free or
//!   starting, than that, so the last wave's claims start none); at the job's end
//!   ([`KubernetesSandbox::drain_warm`]) the pools close, warm pods still starting stop
//!   waiting, and every unclaimed pod is deleted; `arbiter gc` removes those of a dead job
//!   (they carry its owner labels).
//!
//! The first trial of a spec creates its own pod (and starts the pool); a job whose trials
//! all start at once gains nothing, a job whose trials come in waves gains from the second.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

use super::error::api_status;
use super::names::{
    ANNOTATION_LABELS, LABEL_NETWORK, LABEL_POD, annotated_labels, object_labels, random_suffix,
};
use super::proof::{self, Answer, Proofs};
use super::starting::{EarlyWait, StartSlots};
use crate::digest::sha256_hex;
use crate::sandbox::handover::HANDOVER_WAIT;
use crate::sandbox::{LABEL_ROLE, LABEL_TRIAL};

/// How long a claim waits for a starting warm pod when none is free (`claim`): about a
/// cold pod's start, after which the trial creates its own.
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Label of an unclaimed warm pod: its spec key.
pub(crate) const LABEL_WARM: &str = "arbiter.warm";
/// The role label's value on an unclaimed warm pod.
const ROLE_WARM: &str = "warm";
/// Environment variable with the default `warm_pods`.
pub const WARM_PODS_ENV: &str = "ARBITER_K8S_WARM_PODS";

/// The key of a pod's spec: what a warm pod and a trial's pod must share (the pod spec and
/// the user execs run as), nothing that names a trial.
pub(crate) fn spec_key(pod: &Pod) -> String {
    let spec = serde_json::to_string(&pod.spec).unwrap_or_default();
    let user = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::names::ANNOTATION_USER))
        .cloned()
        .unwrap_or_default();
    sha256_hex(format!("{spec}\n{user}").as_bytes())[..40].to_string()
}

/// The warm pod of a trial's pod: its spec, another name, the trial's owner labels without
/// the trial (role `warm`, the spec key in [`LABEL_WARM`]).
pub(crate) fn warm_pod_of(trial_pod: &Pod, key: &str) -> Pod {
    let mut pod = trial_pod.clone();
    let name = format!("arb-warm-{}-{}", &key[..12], random_suffix());
    let mut owner = annotated_labels(&pod.metadata).unwrap_or_default();
    owner.remove(LABEL_TRIAL);
    owner.insert(LABEL_ROLE.to_string(), ROLE_WARM.to_string());
    owner.insert(LABEL_WARM.to_string(), key.to_string());
    let mut labels = object_labels(&owner);
    labels.insert(LABEL_POD.to_string(), name.clone());
    if let Some(network) = trial_pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_NETWORK))
    {
        labels.insert(LABEL_NETWORK.to_string(), network.clone());
    }
    let annotations = pod.metadata.annotations.get_or_insert_default();
    annotations.insert(
        ANNOTATION_LABELS.to_string(),
        serde_json::to_string(&owner).unwrap_or_default(),
    );
    pod.metadata.name = Some(name);
    pod.metadata.labels = Some(labels);
    pod
}

/// The claim of warm pod `name` for the trial whose own pod would have been `trial_pod`:
/// test that it is still unclaimed (its spec key), then take the trial's labels and
/// annotations (its own name as the pod label).
pub(crate) fn claim_patch(trial_pod: &Pod, name: &str, key: &str) -> serde_json::Value {
    let mut labels = trial_pod.metadata.labels.clone().unwrap_or_default();
    labels.insert(LABEL_POD.to_string(), name.to_string());
    serde_json::json!([
        {"op": "test", "path": format!("/metadata/labels/{LABEL_WARM}"), "value": key},
        {"op": "replace", "path": "/metadata/labels", "value": labels},
        {"op": "replace", "path": "/metadata/annotations", "value": trial_pod.metadata.annotations.clone().unwrap_or_default()},
    ])
}

/// One spec's pool.
#[derive(Debug)]
struct Pool {
    /// A trial pod of the spec (the warm pods are made from it).
    template: Pod,
    /// Unclaimed running warm pods, oldest first.
    free: VecDeque<String>,
    /// Warm pods being created or started.
    creating: usize,
    /// Claims waiting for one of those (`claim`): no more than there are.
    waiting: usize,
    /// What the start of a pod of the spec must prove before it is offered.
    proofs: Proofs,
}

#[derive(Debug, Default)]
struct Shared {
    closed: bool,
    pools: HashMap<String, Pool>,
    tasks: Vec<JoinHandle<()>>,
}

/// The warm pools of one backend.
pub(crate) struct WarmPools {
    /// Warm pods kept per spec (0: none).
    target: usize,
    pods: Api<Pod>,
    shared: Arc<Mutex<Shared>>,
    /// The backend's start slots (the start-rate cap).
    slots: Arc<StartSlots>,
    /// Which images ran on which node (a pod is offered early only where its image ran).
    early: Arc<EarlyWait>,
    /// `true` once the pools closed: warm pods still starting stop waiting.
    closing: watch::Sender<bool>,
    /// Trials of the job that will still start (`usize::MAX`: not told): no more warm pods
    /// are started than can still be claimed.
    demand: AtomicUsize,
    /// Warm pods claimed (for tests and benches).
    claimed: AtomicU64,
    /// Bumped whenever a starting warm pod is offered or given up (claims waiting for one).
    offered: Arc<watch::Sender<u64>>,
}

impl WarmPools {
    pub(crate) fn new(
        target: u32,
        client: kube::Client,
        namespace: &str,
        (slots, early): (Arc<StartSlots>, Arc<EarlyWait>),
    ) -> WarmPools {
        WarmPools {
            target: target as usize,
            pods: Api::namespaced(client, namespace),
            shared: Arc::new(Mutex::new(Shared::default())),
            slots,
            early,
            closing: watch::Sender::new(false),
            demand: AtomicUsize::new(usize::MAX),
            claimed: AtomicU64::new(0),
            offered: Arc::new(watch::Sender::new(0)),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.target > 0
    }

    /// How many trials will still start ([`crate::sandbox::Sandbox::trials_waiting`]).
    pub(crate) fn set_demand(&self, waiting: usize) {
        self.demand.store(waiting, Ordering::SeqCst);
    }

    pub(crate) fn claimed(&self) -> u64 {
        self.claimed.load(Ordering::SeqCst)
    }

    /// Claim a running warm pod for `trial_pod` (the pod the trial would create): its name and
    /// the claimed object as the patch returned it, or `None` (none free: the trial creates
    /// its own). The pool of this spec is started on first sight and topped up after each
    /// claim. With none free but some starting (more than claims already waiting for them),
    /// the claim waits for one, at most [`CLAIM_WAIT`]: a pod well on its way is sooner
    /// than a new one.
    pub(super) async fn claim(&self, trial_pod: &Pod, proofs: Proofs) -> Option<(String, Pod)> {
        let key = spec_key(trial_pod);
        let wait_until = tokio::time::Instant::now() + CLAIM_WAIT;
        loop {
            let mut offered = self.offered.subscribe();
            let (name, wait) = {
                let mut shared = self.shared.lock().await;
                if shared.closed {
                    return None;
                }
                let pool = shared.pools.entry(key.clone()).or_insert_with(|| Pool {
                    template: trial_pod.clone(),
                    free: VecDeque::new(),
                    creating: 0,
                    waiting: 0,
                    proofs,
                });
                let name = pool.free.pop_front();
                let wait = name.is_none()
                    && pool.creating > pool.waiting
                    && tokio::time::Instant::now() < wait_until;
                if wait {
                    pool.waiting += 1;
                }
                (name, wait)
            };
            // One taken (or none free): keep the pool at its size.
            self.top_up(&key).await;
            if wait {
                let _ = tokio::time::timeout_at(wait_until, offered.changed()).await;
                if let Some(pool) = self.shared.lock().await.pools.get_mut(&key) {
                    pool.waiting = pool.waiting.saturating_sub(1);
                }
                continue;
            }
            let name = name?;
            let patch = claim_patch(trial_pod, &name, &key);
            let patch: json_patch::Patch = match serde_json::from_value(patch) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!("warm pod claim not built: {e}");
                    return None;
                }
            };
            match self
                .pods
                .patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
                .await
            {
                Ok(pod) => {
                    self.claimed.fetch_add(1, Ordering::SeqCst);
                    let trial = trial_pod
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_TRIAL))
                        .cloned()
                        .unwrap_or_default();
                    tracing::debug!(pod = name, trial, "warm pod claimed");
                    return Some((name, pod));
                }
                Err(e) => {
                    // Gone, or claimed by someone else (the test failed: 422): the next one.
                    // Any other failure leaves a pod no pool offers any more: deleted.
                    let status = api_status(&e);
                    tracing::debug!(pod = name, ?status, "warm pod not claimed: {e}");
                    if !matches!(status, Some(404 | 409 | 422)) {
                        delete(&self.pods, &name).await;
                    }
                }
            }
        }
    }

    /// Start warm pods of `key` until free and starting ones make the target, or as many as
    /// trials will still start if fewer (the last wave's claims start none).
    async fn top_up(&self, key: &str) {
        let mut shared = self.shared.lock().await;
        if shared.closed {
            return;
        }
        shared.tasks.retain(|t| !t.is_finished());
        let Some(pool) = shared.pools.get_mut(key) else {
            return;
        };
        let want = self.target.min(self.demand.load(Ordering::SeqCst));
        let missing = want.saturating_sub(pool.free.len() + pool.creating);
        pool.creating += missing;
        let template = pool.template.clone();
        let proofs = pool.proofs;
        for _ in 0..missing {
            let pod = warm_pod_of(&template, key);
            let task = tokio::spawn(create_warm(
                Warming {
                    pods: self.pods.clone(),
                    shared: Arc::clone(&self.shared),
                    slots: Arc::clone(&self.slots),
                    early: Arc::clone(&self.early),
                    closing: self.closing.subscribe(),
                    offered: Arc::clone(&self.offered),
                },
                key.to_string(),
                pod,
                proofs,
            ));
            shared.tasks.push(task);
        }
    }

    /// The job's end: no more warm pods; the unclaimed ones are deleted (those still
    /// starting stop waiting and delete themselves first). Returns how many were deleted
    /// here.
    pub(crate) async fn drain(&self) -> usize {
        let tasks = {
            let mut shared = self.shared.lock().await;
            shared.closed = true;
            std::mem::take(&mut shared.tasks)
        };
        self.closing.send_replace(true);
        for task in tasks {
            let _ = task.await;
        }
        let free: Vec<String> = {
            let mut shared = self.shared.lock().await;
            shared
                .pools
                .drain()
                .flat_map(|(_, p)| p.free.into_iter())
                .collect()
        };
        let mut deleted = 0;
        for name in free {
            if delete(&self.pods, &name).await {
                deleted += 1;
            }
        }
        deleted
    }
}

async fn delete(pods: &Api<Pod>, name: &str) -> bool {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::background()
    };
    match pods.delete(name, &params).await {
        Ok(_) => true,
        Err(e) if api_status(&e) == Some(404) => true,
        Err(e) => {
            tracing::warn!(pod = name, "unclaimed warm pod not deleted: {e}");
            false
        }
    }
}

/// What a warm pod's start needs of its pools.
struct Warming {
    pods: Api<Pod>,
    shared: Arc<Mutex<Shared>>,
    slots: Arc<StartSlots>,
    early: Arc<EarlyWait>,
    closing: watch::Receiver<bool>,
    offered: Arc<watch::Sender<u64>>,
}

/// Create one warm pod (under a start slot), wait until it runs, prove its start, and offer
/// it; delete it when it does not run or its proof fails, or when the pools closed
/// meanwhile. (A warm pod with network `none`
/// is under the namespace's deny-all policy from its creation: the trial whose pod it copies
/// put the policy in place first.)
async fn create_warm(w: Warming, key: String, pod: Pod, proofs: Proofs) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut closing = w.closing;
    let closed = async move {
        let _ = closing.wait_for(|c| *c).await;
    };
    let mut closed = std::pin::pin!(closed);
    // The start slot: held until the pod runs or is deleted.
    let slot = tokio::select! {
        slot = w.slots.take() => Some(slot),
        () = &mut closed => None,
    };
    let created = match slot {
        None => false,
        Some(_) => match w.pods.create(&PostParams::default(), &pod).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(pod = name, "warm pod not created: {e}");
                false
            }
        },
    };
    let running = created
        && tokio::select! {
            running = runs(&w.pods, &name, proofs, (&w.early, w.slots.capped())) => match running {
                Ok(()) => true,
                Err(why) => {
                    tracing::warn!(pod = name, "warm pod not running: {why}");
                    false
                }
            },
            () = &mut closed => false,
        };
    drop(slot);
    let mut guard = w.shared.lock().await;
    let open = !guard.closed;
    // Offered or given up: a claim waiting for it looks again.
    w.offered.send_modify(|n| *n += 1);
    if let Some(pool) = guard.pools.get_mut(&key) {
        pool.creating = pool.creating.saturating_sub(1);
        if open && running {
            pool.free.push_back(name.clone());
            return;
        }
    }
    drop(guard);
    if created {
        delete(&w.pods, &name).await;
    }
}

/// Wait until warm pod `name`'s main container runs, at most the start deadline, and prove
/// its start; why not.
async fn runs(
    pods: &Api<Pod>,
    name: &str,
    proofs: Proofs,
    (early, capped): (&EarlyWait, bool),
) -> Result<(), String> {
    started(pods, name, early, capped).await?;
    let Some(argv) = proofs.argv() else {
        return Ok(());
    };
    let begun = tokio::time::Instant::now();
    let mut unclear = 0;
    loop {
        match proof::run(pods, name, super::pod::MAIN, &argv).await {
            Answer::Proven => {
                tracing::debug!(
                    pod = name,
                    proofs_s = begun.elapsed().as_secs_f64(),
                    "warm pod proved"
                );
                return Ok(());
            }
            Answer::Refused(why) if proofs.no_network => {
                return Err(format!("network none not in place: {why}"));
            }
            Answer::NotYet | Answer::Refused(_) => {}
            // Offered early (`started`): the container may not run yet; nothing ran.
            Answer::Unclear(why) if super::exec::not_running_yet(&why) => {
                if begun.elapsed() >= HANDOVER_WAIT {
                    return Err(format!("its main container did not run: {why}"));
                }
                tokio::time::sleep(EARLY_WAIT).await;
                continue;
            }
            Answer::Unclear(why) => {
                unclear += 1;
                if unclear >= proof::UNCLEAR_TRIES {
                    return Err(format!("its proof gave no answer to trust: {why}"));
                }
                continue;
            }
        }
        if begun.elapsed() >= HANDOVER_WAIT {
            return Err(format!(
                "the image's ENTRYPOINT had not run its arguments after {}s",
                HANDOVER_WAIT.as_secs()
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// How long after its main container was seen being started a warm pod waits for "running"
/// before it is proved or offered (`started`).
const EARLY_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Wait until warm pod `name`'s main container runs, or is being started and no later state
/// came within [`EARLY_WAIT`] (the kubelet reports "running" only at its next relist, up to
/// a second later: the proofs' exec, or the claiming trial's first, asks again while it
/// does not run yet), at most the start deadline; why not.
async fn started(
    pods: &Api<Pod>,
    name: &str,
    early: &EarlyWait,
    capped: bool,
) -> Result<(), String> {
    use futures_util::TryStreamExt;
    let deadline = tokio::time::Instant::now() + super::lifecycle::START_DEADLINE;
    let mut starting: Option<tokio::time::Instant> = None;
    let mut stream = std::pin::pin!(super::starting::watch_pod(pods.clone(), name));
    loop {
        let until = starting.map_or(deadline, |at| deadline.min(at + EARLY_WAIT));
        match tokio::time::timeout_at(until, stream.try_next()).await {
            Ok(Ok(Some(Some(p)))) => {
                if let Some(verdict) = super::lifecycle::start_verdict(&p) {
                    if verdict.is_ok() {
                        early.pulled(&p);
                    }
                    return verdict;
                }
                // Only where its image ran before (a pull that fails is the start's), and
                // without a start cap (its slot is held until the API shows it running).
                if starting.is_none()
                    && !capped
                    && super::lifecycle::main_starting(&p)
                    && early.was_pulled(&p)
                {
                    starting = Some(tokio::time::Instant::now());
                }
            }
            Err(_) if until < deadline => return Ok(()),
            Ok(Ok(Some(None))) => return Err("deleted while starting".to_string()),
            Ok(Ok(None)) => return Err("the watch ended".to_string()),
            // The apiserver's (a dropped connection, a too-old version): the watcher
            // re-lists on the next poll.
            Ok(Err(e)) => {
                tracing::debug!(pod = name, error = %e, "warm pod watch error; watching again");
                tokio::time::sleep(super::lifecycle::WATCH_RETRY_PAUSE).await;
            }
            Err(_) => {
                return Err(format!(
                    "not running after {}s",
                    super::lifecycle::START_DEADLINE.as_secs()
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn trial_pod(trial: &str, image: &str) -> Pod {
        let owner = BTreeMap::from([
            ("arbiter.managed".to_string(), "true".to_string()),
            ("arbiter.job".to_string(), "job".to_string()),
            (LABEL_TRIAL.to_string(), trial.to_string()),
            (LABEL_ROLE.to_string(), "agent".to_string()),
            ("arbiter.owner".to_string(), "h/1/2".to_string()),
        ]);
        let mut labels = object_labels(&owner);
        labels.insert(LABEL_POD.to_string(), format!("arb-{trial}"));
        labels.insert(LABEL_NETWORK.to_string(), "none".to_string());
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("arb-{trial}")),
                labels: Some(labels),
                annotations: Some(BTreeMap::from([(
                    ANNOTATION_LABELS.to_string(),
                    serde_json::to_string(&owner).unwrap(),
                )])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn the_key_ignores_the_trial_and_follows_the_spec() {
        let a = trial_pod("t1", "img@sha256:1");
        let b = trial_pod("t2", "img@sha256:1");
        let c = trial_pod("t1", "img@sha256:2");
        assert_eq!(spec_key(&a), spec_key(&b));
        assert_ne!(spec_key(&a), spec_key(&c));
        let warm = warm_pod_of(&a, &spec_key(&a));
        assert_eq!(
            spec_key(&warm),
            spec_key(&a),
            "a warm pod has the trial's spec"
        );
        let labels = warm.metadata.labels.as_ref().unwrap();
        assert!(
            !labels.contains_key(LABEL_TRIAL),
            "a warm pod names no trial"
        );
        assert_eq!(labels[LABEL_WARM], spec_key(&a));
        assert_eq!(labels[LABEL_ROLE], ROLE_WARM);
        assert_eq!(labels[LABEL_POD], warm.metadata.name.clone().unwrap());
        assert_eq!(
            labels[LABEL_NETWORK], "none",
            "under the no-network policy from its creation"
        );
        assert!(labels.contains_key("arbiter.owner"), "gc finds it by owner");
        let exact: BTreeMap<String, String> =
            serde_json::from_str(&warm.metadata.annotations.as_ref().unwrap()[ANNOTATION_LABELS])
                .unwrap();
        assert_eq!(exact["arbiter.owner"], "h/1/2");
        assert!(warm.metadata.name.unwrap().starts_with("arb-warm-"));
    }

    #[test]
    fn the_claim_tests_the_warm_label_then_takes_the_trials_labels() {
        let a = trial_pod("t1", "img");
        let key = spec_key(&a);
        let patch = claim_patch(&a, "arb-warm-x", &key);
        let ops = patch.as_array().unwrap();
        assert_eq!(ops[0]["op"], "test");
        assert_eq!(ops[0]["path"], "/metadata/labels/arbiter.warm");
        assert_eq!(ops[0]["value"], key.as_str());
        let labels = &ops[1]["value"];
        assert_eq!(labels[LABEL_TRIAL], "t1");
        assert_eq!(labels[LABEL_POD], "arb-warm-x");
        assert!(
            labels.get(LABEL_WARM).is_none(),
            "a claimed pod is not offered again"
        );
        let parsed: Result<json_patch::Patch, _> = serde_json::from_value(patch);
        assert!(parsed.is_ok());
    }
}
