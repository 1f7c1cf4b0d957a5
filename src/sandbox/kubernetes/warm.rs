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
//! - **Offered once started.** A warm pod is offered once the kubelet said its main
//!   container started (its `Started` event, started.rs: no request of its own), or, where
//!   those events are not watched, once its watch saw the container running or being started
//!   with its init containers done (the kubelet reports "running" up to a second later; the
//!   first exec into it asks again while it does not run yet): a claim never waits for the
//!   scheduler, an image pull or the harness init. A warm pod that does not start within the
//!   start deadline is deleted. Starting warm pods hold start slots like any other
//!   (`max_starting` counts every pod pending or starting, warm or not).
//! - **Proved by its trial's first command.** A warm pod runs only what a cold one runs
//!   before its start (the harness init, the image's ENTRYPOINT handing over to the
//!   keep-alive). The proofs of the start (proof.rs: the handover, network `none`) ride on
//!   the claiming trial's first exec as they do on a cold pod's (carry.rs): nothing of the
//!   trial runs before they held, a pod whose proof fails fails its start, and they cost no
//!   request of their own. So a warm pod costs its create and its claim, one request each.
//! - **Topped up, then gone.** Each claim starts a replacement while trials are still to
//!   start (the job tells the backend how many: a pool keeps no more pods, free or
//!   starting, than that, so the last wave's claims start none); at the job's end
//!   ([`KubernetesSandbox::drain_warm`]) the pools close, warm pods still starting stop
//!   waiting, and every unclaimed pod is deleted; `arbiter gc` removes those of a dead job
//!   (they carry its owner labels).
//!
//! - **Only where there is room.** Warm pods take the room trials would start in: once a
//!   pod of the job waits for the scheduler for want of room (its `PodScheduled` condition
//!   false, seen by a trial's own watch: `no_room`), the job starts no more warm pods, and
//!   those not started yet are given up (deleted), so that the trials' own pods take their
//!   place; started ones are still claimed. On a cluster the job fills, warm pods would
//!   only queue before the trials' pods at the scheduler (each refused placement an event,
//!   each retry later than the last).
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
use super::hot::HotExec;
use super::names::{
    ANNOTATION_LABELS, LABEL_NETWORK, LABEL_POD, annotated_labels, object_labels, random_suffix,
};
use super::started::StartedEvents;
use super::starting::{EarlyWait, StartSlots};
use crate::digest::sha256_hex;
use crate::sandbox::{LABEL_ROLE, LABEL_TRIAL};

/// How long a claim waits for a starting warm pod when none is free (`claim`): about a
/// cold pod's start, after which the trial creates its own.
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long before a claim a starting warm pod must have been created for the claim to wait
/// for it: one created since (by this claim's own wave, when a job's first trials start at
/// once) is no sooner than the trial's own pod would be.
const WELL_ON_ITS_WAY: std::time::Duration = std::time::Duration::from_millis(500);

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
    /// Unclaimed started warm pods, oldest first.
    free: VecDeque<Offered>,
    /// When each warm pod being created or started was asked for, oldest first.
    creating: VecDeque<tokio::time::Instant>,
    /// Claims waiting for one of those (`claim`): no more than there are.
    waiting: usize,
}

/// A warm pod on offer.
#[derive(Debug)]
struct Offered {
    name: String,
    /// Offered at its main container's `Started` event: it runs (the API may show it only a
    /// second later).
    by_event: bool,
    /// Its first exec, opened ahead (hot.rs).
    hot: Option<HotExec>,
}

/// A claimed warm pod.
#[derive(Debug)]
pub(super) struct Claimed {
    pub name: String,
    /// The pod as the claim's answer showed it.
    pub pod: Pod,
    /// Its main container runs (its `Started` event was seen), whatever the answer shows.
    pub by_event: bool,
}

/// What the pools share with the backend's own starts.
#[derive(Clone)]
pub(super) struct Starts {
    /// The backend's start slots (the start-rate cap).
    pub slots: Arc<StartSlots>,
    /// Which images ran on which node (a pod is offered early only where its image ran).
    pub early: Arc<EarlyWait>,
    /// The kubelet's Started events (a pod is offered at its event where they are watched).
    pub started: Arc<StartedEvents>,
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
    starts: Starts,
    /// `true` once the pools closed: warm pods still starting stop waiting.
    closing: watch::Sender<bool>,
    /// `true` once a pod of the job waited for room (`no_room`): no more warm pods, and
    /// those still starting are given up.
    full: watch::Sender<bool>,
    /// Trials of the job that will still start (`usize::MAX`: not told): no more warm pods
    /// are started than can still be claimed.
    demand: AtomicUsize,
    /// Warm pods claimed (for tests and benches).
    claimed: AtomicU64,
    /// Bumped whenever a starting warm pod is offered or given up (claims waiting for one).
    offered: Arc<watch::Sender<u64>>,
    /// The execs opened ahead of a pod's next command (a claimed pod's first, a stopped
    /// pod's next: parked.rs), until it takes them.
    hot: std::sync::Mutex<HashMap<String, HotExec>>,
}

impl WarmPools {
    pub(crate) fn new(
        target: u32,
        client: kube::Client,
        namespace: &str,
        starts: Starts,
    ) -> WarmPools {
        WarmPools {
            target: target as usize,
            pods: Api::namespaced(client, namespace),
            shared: Arc::new(Mutex::new(Shared::default())),
            starts,
            closing: watch::Sender::new(false),
            full: watch::Sender::new(false),
            demand: AtomicUsize::new(usize::MAX),
            claimed: AtomicU64::new(0),
            offered: Arc::new(watch::Sender::new(0)),
            hot: std::sync::Mutex::default(),
        }
    }

    /// The exec opened ahead of claimed pod `pod`, taken (its first command's).
    pub(super) fn take_hot(&self, pod: &str) -> Option<HotExec> {
        self.hot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pod)
    }

    /// Keep `hot`, an exec opened ahead of `pod`'s next command (a parked stop's,
    /// parked.rs), until that command takes it; one kept before is closed.
    pub(super) fn keep_hot(&self, pod: &str, hot: HotExec) {
        let old = self
            .hot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pod.to_string(), hot);
        if let Some(old) = old {
            old.abort();
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.target > 0
    }

    /// How many trials will still start ([`crate::sandbox::Sandbox::trials_waiting`]).
    pub(crate) fn set_demand(&self, waiting: usize) {
        self.demand.store(waiting, Ordering::SeqCst);
    }

    /// A pod of the job waits for the scheduler for want of room: start no more warm pods,
    /// and give up those not started yet (module docs).
    pub(super) fn no_room(&self) {
        if self.enabled() && !self.full.send_replace(true) {
            tracing::info!(
                "a pod waits for room on the cluster: no more warm pods for this job, those not started given up"
            );
        }
    }

    pub(crate) fn claimed(&self) -> u64 {
        self.claimed.load(Ordering::SeqCst)
    }

    /// Claim a started warm pod for `trial_pod` (the pod the trial would create), or `None`
    /// (none free: the trial creates its own). The pool of this spec is started on first
    /// sight and topped up after each claim. With none free but some starting that were asked for at least
    /// [`WELL_ON_ITS_WAY`] before (more than claims already waiting for them), the claim waits
    /// for one, at most [`CLAIM_WAIT`]: a pod well on its way is sooner than a new one, and
    /// one asked for by this claim's own wave is not.
    pub(super) async fn claim(&self, trial_pod: &Pod) -> Option<Claimed> {
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
                    creating: VecDeque::new(),
                    waiting: 0,
                });
                let offered = pool.free.pop_front();
                let now = tokio::time::Instant::now();
                let wait = offered.is_none()
                    && now < wait_until
                    && waits_for_one(&pool.creating, pool.waiting, now);
                if wait {
                    pool.waiting += 1;
                }
                (offered, wait)
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
            let Offered {
                name,
                by_event,
                hot,
            } = name?;
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
                // Ended since it was offered (evicted, its container gone): the next one.
                Ok(pod) if let Some(Err(why)) = super::lifecycle::start_verdict(&pod) => {
                    tracing::warn!(pod = name, "claimed warm pod ended: {why}");
                    delete(&self.pods, &self.starts.started, &name).await;
                }
                Ok(pod) => {
                    self.claimed.fetch_add(1, Ordering::SeqCst);
                    let trial = trial_pod
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_TRIAL))
                        .cloned()
                        .unwrap_or_default();
                    tracing::debug!(
                        pod = name,
                        trial,
                        by_event,
                        hot = hot.is_some(),
                        "warm pod claimed"
                    );
                    if let Some(hot) = hot {
                        self.hot
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(name.clone(), hot);
                    }
                    return Some(Claimed {
                        name,
                        pod,
                        by_event,
                    });
                }
                Err(e) => {
                    // Gone, or claimed by someone else (the test failed: 422): the next one.
                    // Any other failure leaves a pod no pool offers any more: deleted.
                    let status = api_status(&e);
                    tracing::debug!(pod = name, ?status, "warm pod not claimed: {e}");
                    if !matches!(status, Some(404 | 409 | 422)) {
                        delete(&self.pods, &self.starts.started, &name).await;
                    }
                }
            }
        }
    }

    /// Start warm pods of `key` until free and starting ones make the target, or as many as
    /// trials will still start if fewer (the last wave's claims start none).
    async fn top_up(&self, key: &str) {
        let mut shared = self.shared.lock().await;
        if shared.closed || *self.full.borrow() {
            return;
        }
        shared.tasks.retain(|t| !t.is_finished());
        let Some(pool) = shared.pools.get_mut(key) else {
            return;
        };
        let want = self.target.min(self.demand.load(Ordering::SeqCst));
        let missing = want.saturating_sub(pool.free.len() + pool.creating.len());
        let now = tokio::time::Instant::now();
        pool.creating.extend(std::iter::repeat_n(now, missing));
        let template = pool.template.clone();
        for _ in 0..missing {
            let pod = warm_pod_of(&template, key);
            let task = tokio::spawn(create_warm(
                Warming {
                    pods: self.pods.clone(),
                    shared: Arc::clone(&self.shared),
                    starts: self.starts.clone(),
                    closing: self.closing.subscribe(),
                    full: self.full.subscribe(),
                    offered: Arc::clone(&self.offered),
                },
                key.to_string(),
                pod,
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
        // Claimed pods' execs no command took: closed (their trampolines run nothing).
        self.hot.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let free: Vec<String> = {
            let mut shared = self.shared.lock().await;
            shared
                .pools
                .drain()
                .flat_map(|(_, p)| p.free.into_iter().map(|o| o.name))
                .collect()
        };
        let mut deleted = 0;
        for name in free {
            if delete(&self.pods, &self.starts.started, &name).await {
                deleted += 1;
            }
        }
        deleted
    }
}

/// Whether a claim that found no free warm pod waits for a starting one: only where more
/// were asked for [`WELL_ON_ITS_WAY`] or longer ago than claims already wait for them.
fn waits_for_one(
    creating: &VecDeque<tokio::time::Instant>,
    waiting: usize,
    now: tokio::time::Instant,
) -> bool {
    let ahead = creating
        .iter()
        .filter(|at| now.saturating_duration_since(**at) >= WELL_ON_ITS_WAY)
        .count();
    ahead > waiting
}

async fn delete(pods: &Api<Pod>, started: &StartedEvents, name: &str) -> bool {
    started.forget(name);
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
    starts: Starts,
    closing: watch::Receiver<bool>,
    full: watch::Receiver<bool>,
    offered: Arc<watch::Sender<u64>>,
}

/// Create one warm pod (under a start slot), wait until it started, and offer it; delete it
/// when it does not start, or when the pools closed or a pod of the job waited for room
/// (`no_room`) meanwhile. (A warm pod with network
/// `none` is under the namespace's deny-all policy from its creation: the trial whose pod it
/// copies put the policy in place first.)
async fn create_warm(w: Warming, key: String, pod: Pod) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let mut closing = w.closing;
    let closed = async move {
        let _ = closing.wait_for(|c| *c).await;
    };
    let mut closed = std::pin::pin!(closed);
    let mut full = w.full;
    let no_room = async move {
        let _ = full.wait_for(|f| *f).await;
    };
    let mut no_room = std::pin::pin!(no_room);
    // The start slot: held until the pod runs or is deleted.
    let slot = tokio::select! {
        slot = w.starts.slots.take() => Some(slot),
        () = &mut closed => None,
        () = &mut no_room => None,
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
    let started = if created {
        tokio::select! {
            started = started(&w.pods, &name, &w.starts) => match started {
                Ok(by_event) => Some(by_event),
                Err(why) => {
                    tracing::warn!(pod = name, "warm pod not running: {why}");
                    None
                }
            },
            () = &mut closed => None,
            () = &mut no_room => {
                tracing::debug!(pod = name, "warm pod given up: no room");
                None
            }
        }
    } else {
        None
    };
    // Started (or given up): its start slot goes to the next pod.
    drop(slot);
    // Its first exec, opened now (hot.rs); without it the claiming trial opens its own.
    let hot = match started {
        Some(_) => tokio::select! {
            hot = HotExec::open(&w.pods, &name, super::pod::MAIN) => hot
                .inspect_err(|why| tracing::debug!(pod = name, "no exec opened ahead: {why}"))
                .ok(),
            () = &mut closed => None,
        },
        None => None,
    };
    let mut guard = w.shared.lock().await;
    let open = !guard.closed;
    // Offered or given up: a claim waiting for it looks again.
    w.offered.send_modify(|n| *n += 1);
    if let Some(pool) = guard.pools.get_mut(&key) {
        // Pods start about in the order they were asked for.
        pool.creating.pop_front();
        if let (true, Some(by_event)) = (open, started) {
            tracing::debug!(pod = name, by_event, "warm pod offered");
            pool.free.push_back(Offered {
                name,
                by_event,
                hot,
            });
            return;
        }
    }
    drop(guard);
    if created {
        delete(&w.pods, &w.starts.started, &name).await;
    }
}

/// How long after its main container was seen being started a warm pod waits for "running"
/// before it is offered, where no `Started` event says it (`watched`).
const EARLY_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Wait until warm pod `name`'s main container started, at most the start deadline: at its
/// `Started` event where those are watched and the start rate is not capped (no request of
/// its own; `true`), else as its own watch shows it (`watched`; `false`); why not.
async fn started(pods: &Api<Pod>, name: &str, starts: &Starts) -> Result<bool, String> {
    let deadline = tokio::time::Instant::now() + super::lifecycle::START_DEADLINE;
    // Capped: its slot is held until the API shows it running.
    let capped = starts.slots.capped();
    if !capped && starts.started.settled().await {
        match tokio::time::timeout_at(deadline, starts.started.started(name)).await {
            Ok(true) => return Ok(true),
            // The events' watch stopped for good: the pod's own.
            Ok(false) => {}
            Err(_) => {
                return Err(format!(
                    "not started after {}s",
                    super::lifecycle::START_DEADLINE.as_secs()
                ));
            }
        }
    }
    watched(pods, name, &starts.early, capped, deadline)
        .await
        .map(|()| false)
}

/// Wait until warm pod `name`'s main container runs, or is being started and no later state
/// came within [`EARLY_WAIT`] (the kubelet reports "running" only at its next relist, up to
/// a second later: the claiming trial's first exec asks again while it does not run yet),
/// at most until `deadline`; why not.
async fn watched(
    pods: &Api<Pod>,
    name: &str,
    early: &EarlyWait,
    capped: bool,
    deadline: tokio::time::Instant,
) -> Result<(), String> {
    use futures_util::TryStreamExt;
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

    /// Once a pod of the job waited for room, the pools ask for no more warm pods (those
    /// asked for before end: here never created, the API answering nothing).
    #[tokio::test]
    async fn a_job_with_no_room_starts_no_more_warm_pods() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let starts = Starts {
            slots: Arc::new(StartSlots::new(None)),
            early: Arc::default(),
            started: Arc::default(),
        };
        let pools = WarmPools::new(2, client, "ns", starts);
        let pod = trial_pod("t1", "img@sha256:1");
        let key = spec_key(&pod);
        pools.shared.lock().await.pools.insert(
            key.clone(),
            Pool {
                template: pod,
                free: VecDeque::new(),
                creating: VecDeque::new(),
                waiting: 0,
            },
        );
        pools.top_up(&key).await;
        assert_eq!(pools.shared.lock().await.pools[&key].creating.len(), 2);
        pools.no_room();
        let tasks = std::mem::take(&mut pools.shared.lock().await.tasks);
        for task in tasks {
            task.await.unwrap();
        }
        pools.top_up(&key).await;
        let shared = pools.shared.lock().await;
        assert!(shared.tasks.is_empty(), "none asked for again");
        assert!(shared.pools[&key].creating.is_empty());
        assert!(shared.pools[&key].free.is_empty());
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
    fn a_claim_waits_only_for_warm_pods_well_on_their_way() {
        let now = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        let ago = |ms: u64| now - std::time::Duration::from_millis(ms);
        // Asked for by this very wave (a job's first trials at once): no sooner than its own.
        let just = VecDeque::from([ago(5), ago(3), ago(1)]);
        assert!(!waits_for_one(&just, 0, now));
        // Asked for well before: worth the wait, one claim per pod.
        let before = VecDeque::from([ago(1500), ago(800), ago(10)]);
        assert!(waits_for_one(&before, 0, now));
        assert!(waits_for_one(&before, 1, now));
        assert!(
            !waits_for_one(&before, 2, now),
            "two already wait for the two"
        );
        assert!(!waits_for_one(&VecDeque::new(), 0, now));
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
