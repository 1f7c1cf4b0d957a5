//! The start-rate cap and the wait for a node (issue 28).
//!
//! At scale the control plane, not the trial, is the bottleneck: many pods created at once
//! overload the apiserver and the scheduler, and a pod no node can take starves the ones that
//! could start. So at most `max_starting` of this process's pods are pending or starting at
//! once, whatever the job's concurrency: a slot is taken before the pod is created and given
//! back once its main container runs, or once the pod is removed when it never ran (so the
//! count of pending pods the API shows never passes the cap). And a pod that no node takes
//! within `schedule_timeout_sec` ends its start as an infrastructure failure naming the
//! scheduler's reason, instead of holding a slot for the whole start deadline.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

use super::KubernetesSandbox;

/// How long a pod may wait for a node when the job does not say (`schedule_timeout_sec`):
/// the whole start deadline — a pod waiting for CPU that trials of the same cluster hold is
/// not stuck; a job that wants unschedulable pods to give their start slot back sooner says
/// so.
pub(crate) const SCHEDULE_TIMEOUT: Duration = Duration::from_secs(300);

/// How long after the watch saw a pod's main container being started its first exec waits
/// (`await_running`'s `early`): learnt from the execs that found the container not running
/// yet (each a request, and a pause before the next) and those that found it at once (each
/// perhaps later than needed). After one that came too soon, at least [`EARLY_STEP`] past the
/// moment it was answered (and never shorter than that step more than before); a
/// twentieth shorter after a first exec that did not: so it settles just past the latest
/// start seen, and tries shorter now and then. Within [`EARLY_MIN`]..=[`EARLY_MAX`]. (A pod
/// without an init container is seen being started as soon as the kubelet takes it: its
/// sandbox and its container are still to be made, a few hundred milliseconds.)
///
/// It also knows which images ran on which node (`pulled`): only a pod whose image ran on its
/// node before is handed over early, since the kubelet pulls the main container's image only
/// after the init containers, and a pull that fails must fail the start.
#[derive(Debug)]
pub(crate) struct EarlyWait {
    millis: AtomicU64,
    /// (node, image) of main containers seen running.
    ran: std::sync::Mutex<std::collections::HashSet<(String, String)>>,
    /// Pods handed over early so far.
    handed_over: AtomicU64,
    /// Execs that found a pod handed over early not running yet, so far.
    too_soon: AtomicU64,
}

const EARLY_MIN: Duration = Duration::from_millis(40);
const EARLY_MAX: Duration = Duration::from_millis(800);
const EARLY_STEP: Duration = Duration::from_millis(50);

impl Default for EarlyWait {
    fn default() -> EarlyWait {
        EarlyWait {
            millis: AtomicU64::new(100),
            ran: std::sync::Mutex::default(),
            handed_over: AtomicU64::new(0),
            too_soon: AtomicU64::new(0),
        }
    }
}

/// The node and main image of a pod, once placed.
fn node_image(pod: &Pod) -> Option<(String, String)> {
    let spec = pod.spec.as_ref()?;
    let node = spec.node_name.clone().filter(|n| !n.is_empty())?;
    let image = spec
        .containers
        .iter()
        .find(|c| c.name == super::names::MAIN)?
        .image
        .clone()?;
    Some((node, image))
}

impl EarlyWait {
    /// `pod`'s main container was seen running: its image is on its node.
    pub(crate) fn pulled(&self, pod: &Pod) {
        if let (Some(key), Ok(mut ran)) = (node_image(pod), self.ran.lock()) {
            ran.insert(key);
        }
    }

    /// A main container of `pod`'s image ran on its node before.
    pub(crate) fn was_pulled(&self, pod: &Pod) -> bool {
        match (node_image(pod), self.ran.lock()) {
            (Some(key), Ok(ran)) => ran.contains(&key),
            _ => false,
        }
    }

    /// A pod was handed over early.
    pub(crate) fn handed_over(&self) {
        self.handed_over.fetch_add(1, Ordering::Relaxed);
    }

    /// Pods handed over early and execs that found one not running yet, so far.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.handed_over.load(Ordering::Relaxed),
            self.too_soon.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn get(&self) -> Duration {
        Duration::from_millis(self.millis.load(Ordering::Relaxed))
    }

    /// An early pod's first command ran after `too_soon` execs that found it not running,
    /// the last of them answered `late` after the main container was seen being started.
    pub(crate) fn learn(&self, too_soon: u32, late: Option<Duration>) {
        self.too_soon
            .fetch_add(u64::from(too_soon), Ordering::Relaxed);
        let step = EARLY_STEP.as_millis() as u64;
        let (min, max) = (EARLY_MIN.as_millis() as u64, EARLY_MAX.as_millis() as u64);
        let late = late.map_or(0, |d| d.as_millis() as u64);
        let _ = self
            .millis
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |m| {
                let next = if too_soon == 0 {
                    m - m / 20
                } else {
                    (m + step).max(late + step)
                };
                Some(next.clamp(min, max))
            });
    }
}

/// The start slots of one backend: unlimited without `max_starting`.
#[derive(Debug, Default)]
pub(crate) struct StartSlots {
    cap: Option<Arc<Semaphore>>,
    /// Slots held by pods that have not run yet, by pod name.
    held: Mutex<HashMap<String, OwnedSemaphorePermit>>,
}

impl StartSlots {
    /// `max_starting` slots (`None`: no cap). Zero is refused by the caller.
    pub(crate) fn new(max_starting: Option<u32>) -> StartSlots {
        StartSlots {
            cap: max_starting.map(|n| Arc::new(Semaphore::new(n as usize))),
            held: Mutex::new(HashMap::new()),
        }
    }

    /// Wait for a free slot (at once without a cap). The slot is given back when the
    /// returned permit is dropped, unless [`StartSlots::hold`] keeps it for a pod.
    pub(crate) async fn take(&self) -> Option<OwnedSemaphorePermit> {
        let cap = self.cap.as_ref()?;
        // The semaphore is never closed: acquiring fails only if it were.
        Arc::clone(cap).acquire_owned().await.ok()
    }

    /// Keep `slot` until `pod` runs or is removed.
    pub(crate) async fn hold(&self, pod: &str, slot: Option<OwnedSemaphorePermit>) {
        if let Some(slot) = slot {
            self.held.lock().await.insert(pod.to_string(), slot);
        }
    }

    /// Give back `pod`'s slot, if it holds one.
    pub(crate) async fn release(&self, pod: &str) {
        self.held.lock().await.remove(pod);
    }

    /// Slots free now (`None` without a cap); for tests.
    #[cfg(test)]
    fn free(&self) -> Option<usize> {
        self.cap.as_ref().map(|c| c.available_permits())
    }

    /// A cap is set: a slot is given back only once the API shows the pod running (so no
    /// pod is handed over early: the pods the API shows pending never pass the cap).
    pub(crate) fn capped(&self) -> bool {
        self.cap.is_some()
    }
}

impl KubernetesSandbox {
    /// How long a pod may wait for a node.
    pub(super) fn schedule_timeout(&self) -> Duration {
        self.resolved
            .settings
            .schedule_timeout_sec
            .map_or(SCHEDULE_TIMEOUT, Duration::from_secs)
    }
}

/// Every state of one pod: `Some(pod)` as it changes, `None` once it is gone. One request
/// where the apiserver streams the initial state (`sendInitialEvents`, WatchList), else a
/// list and a watch.
pub(crate) fn watch_pod(
    api: kube::Api<Pod>,
    pod: &str,
) -> impl futures_util::Stream<Item = Result<Option<Pod>, kube::runtime::watcher::Error>> + Send {
    use futures_util::StreamExt;
    use kube::runtime::watcher::{Config, Event, watcher};
    let config = Config::default()
        .fields(&format!("metadata.name={pod}"))
        .streaming_lists();
    // (seen in this initial list, ever seen). A pod just created may be missing from the
    // first initial list (the apiserver's watch cache lags under a burst of creates): only
    // a pod seen before and missing from a later list, or a delete, is gone.
    watcher(api, config)
        .scan((false, false), |(seen, ever), event| {
            let out = match event {
                Ok(Event::Init) => {
                    *seen = false;
                    None
                }
                Ok(Event::InitApply(p) | Event::Apply(p)) => {
                    *seen = true;
                    *ever = true;
                    Some(Ok(Some(p)))
                }
                Ok(Event::Delete(_)) => Some(Ok(None)),
                Ok(Event::InitDone) if !*seen && *ever => Some(Ok(None)),
                Ok(Event::InitDone) => None,
                Err(e) => Some(Err(e)),
            };
            futures_util::future::ready(Some(out))
        })
        .filter_map(futures_util::future::ready)
}

/// Why a pod was not placed within `secs`: the scheduler's reason from its last state.
pub(crate) fn unplaced(last: Option<&Pod>, secs: u64) -> String {
    format!(
        "no node took it within {secs}s ({})",
        last.and_then(unschedulable_reason)
            .unwrap_or_else(|| "the scheduler gave no reason".to_string())
    )
}

/// Whether the scheduler has bound the pod to a node.
pub(crate) fn scheduled(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some()
}

/// Why the scheduler could not place the pod (its `PodScheduled` condition), when it said.
pub(crate) fn unschedulable_reason(pod: &Pod) -> Option<String> {
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
    let reason = condition.reason.as_deref().unwrap_or("not scheduled");
    Some(match condition.message.as_deref().map(str::trim) {
        Some(message) if !message.is_empty() => format!("{reason}: {message}"),
        _ => reason.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};

    #[test]
    fn the_early_wait_grows_with_execs_too_soon_and_shrinks_without_within_bounds() {
        let wait = EarlyWait::default();
        assert_eq!(wait.get(), Duration::from_millis(100));
        // Too soon, answered 420 ms after the start was seen: next time past that.
        wait.learn(2, Some(Duration::from_millis(420)));
        assert_eq!(wait.get(), Duration::from_millis(470));
        wait.learn(0, None);
        assert_eq!(wait.get(), Duration::from_millis(447));
        // Too soon, answered earlier than the wait is now: a step longer still.
        wait.learn(1, Some(Duration::from_millis(100)));
        assert_eq!(wait.get(), Duration::from_millis(497));
        wait.learn(1, None);
        assert_eq!(wait.get(), Duration::from_millis(547));
        for _ in 0..200 {
            wait.learn(0, None);
        }
        assert_eq!(wait.get(), EARLY_MIN);
        wait.learn(1, Some(Duration::from_secs(5)));
        assert_eq!(wait.get(), EARLY_MAX);
    }

    #[test]
    fn only_an_image_seen_running_on_a_node_counts_as_pulled_there() {
        use k8s_openapi::api::core::v1::Container;
        let pod = |node: &str, image: &str| Pod {
            spec: Some(PodSpec {
                node_name: (!node.is_empty()).then(|| node.to_string()),
                containers: vec![Container {
                    name: super::super::names::MAIN.into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let wait = EarlyWait::default();
        assert!(!wait.was_pulled(&pod("n0", "img@sha256:a")));
        wait.pulled(&pod("n0", "img@sha256:a"));
        assert!(wait.was_pulled(&pod("n0", "img@sha256:a")));
        assert!(!wait.was_pulled(&pod("n1", "img@sha256:a")));
        assert!(!wait.was_pulled(&pod("n0", "img@sha256:b")));
        // Not placed: nothing known.
        wait.pulled(&pod("", "img@sha256:c"));
        assert!(!wait.was_pulled(&pod("", "img@sha256:c")));
    }

    #[tokio::test]
    async fn a_slot_is_held_until_released_and_a_dropped_one_comes_back() {
        let slots = StartSlots::new(Some(2));
        let a = slots.take().await;
        let b = slots.take().await;
        assert!(a.is_some() && b.is_some());
        assert_eq!(slots.free(), Some(0));
        // A third waits while both are held.
        let third = tokio::time::timeout(Duration::from_millis(50), slots.take()).await;
        assert!(third.is_err(), "a third slot while two are held");
        slots.hold("pod-a", a).await;
        drop(b); // a create that failed gives its slot back at once
        assert_eq!(slots.free(), Some(1));
        slots.release("pod-a").await;
        assert_eq!(slots.free(), Some(2));
        slots.release("pod-a").await; // twice is harmless
        assert_eq!(slots.free(), Some(2));
    }

    #[tokio::test]
    async fn without_a_cap_nothing_waits() {
        let slots = StartSlots::new(None);
        assert!(slots.take().await.is_none());
        slots.hold("p", None).await;
        slots.release("p").await;
        assert_eq!(slots.free(), None);
    }

    #[test]
    fn the_reason_is_the_schedulers_condition() {
        let mut pod = Pod {
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    message: Some(
                        "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
                            .into(),
                    ),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(!scheduled(&pod));
        assert_eq!(
            unschedulable_reason(&pod).as_deref(),
            Some(
                "Unschedulable: 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
            )
        );
        pod.spec = Some(PodSpec {
            node_name: Some("127.0.0.2".into()),
            ..Default::default()
        });
        assert!(scheduled(&pod));
        pod.status = None;
        assert_eq!(unschedulable_reason(&pod), None);
    }
}
