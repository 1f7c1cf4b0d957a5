//! The kubelet's `Started` events of main containers, watched once per process for the whole
//! namespace: the earliest word that a pod's main container runs.
//!
//! The API shows a container running only once the kubelet relisted the runtime (once a
//! second: its generic PLEG); the `Started` event is sent right after the runtime started it.
//! A pod being started is handed over at its event (`lifecycle.rs`'s `await_running`), so its
//! first exec never comes too soon: no learnt wait, no exec asked again (`starting.rs`'s
//! `EarlyWait`, which stays the way where this watch cannot run: a Role without `watch` on
//! events, a watch that keeps failing). One request for the job (and the watch's own
//! renewals), none per pod.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::Event;
use tokio::sync::watch;

/// The field selector of the events watched: the main container's `Started`.
fn selector() -> String {
    format!(
        "reason=Started,involvedObject.kind=Pod,involvedObject.fieldPath=spec.containers{{{}}}",
        super::names::MAIN
    )
}

/// Pods whose main container the kubelet said it started.
pub(super) struct StartedEvents {
    pods: Mutex<HashSet<String>>,
    /// Bumped at each pod added: what a waiter waits on.
    seen: watch::Sender<u64>,
    /// The watch runs and has listed once: its word can be waited for.
    live: AtomicBool,
    begun: AtomicBool,
}

impl Default for StartedEvents {
    fn default() -> Self {
        StartedEvents {
            pods: Mutex::new(HashSet::new()),
            seen: watch::channel(0).0,
            live: AtomicBool::new(false),
            begun: AtomicBool::new(false),
        }
    }
}

impl StartedEvents {
    /// Start the watch, once (a task of its own, as long as `self` lives).
    pub(super) fn begin(self: &std::sync::Arc<Self>, api: kube::Api<Event>) {
        if self.begun.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = std::sync::Arc::downgrade(self);
        tokio::spawn(async move { watch_events(weak, api).await });
    }

    /// Whether the watch runs: a pod may wait for its event.
    pub(super) fn live(&self) -> bool {
        self.live.load(Ordering::SeqCst)
    }

    fn add(&self, pod: String) {
        let new = self
            .pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pod);
        if new {
            self.seen.send_modify(|n| *n += 1);
        }
    }

    fn has(&self, pod: &str) -> bool {
        self.pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(pod)
    }

    /// Resolves once `pod`'s main container was said started (never while the watch does
    /// not run).
    pub(super) async fn started(&self, pod: &str) {
        let mut rx = self.seen.subscribe();
        loop {
            if self.live() && self.has(pod) {
                return;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// `pod` is gone: forget it.
    pub(super) fn forget(&self, pod: &str) {
        self.pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pod);
    }
}

/// Watch until the [`StartedEvents`] is dropped; on a refusal (no `watch` on events) or
/// errors in a row, stop and leave the pods to the learnt wait.
async fn watch_events(events: std::sync::Weak<StartedEvents>, api: kube::Api<Event>) {
    use futures_util::StreamExt;
    use kube::runtime::watcher::{Config, Event as Change, watcher};
    let config = Config::default().fields(&selector());
    let mut stream = std::pin::pin!(watcher(api, config));
    let mut errors = 0u32;
    while let Some(change) = stream.next().await {
        let Some(events) = events.upgrade() else {
            return;
        };
        match change {
            Ok(Change::InitApply(e) | Change::Apply(e)) => {
                errors = 0;
                if let Some(pod) = e.involved_object.name {
                    events.add(pod);
                }
            }
            Ok(Change::InitDone) => {
                errors = 0;
                if !events.live.swap(true, Ordering::SeqCst) {
                    tracing::debug!("watching the main containers' Started events");
                }
                // A waiter that found the watch not live yet looks again.
                events.seen.send_modify(|n| *n += 1);
            }
            Ok(Change::Init | Change::Delete(_)) => {}
            Err(e) => {
                errors += 1;
                let refused = matches!(
                    &e,
                    kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(s))
                        | kube::runtime::watcher::Error::WatchStartFailed(kube::Error::Api(s))
                        if s.code == 403
                );
                if refused || errors >= 5 {
                    tracing::debug!("no watch of Started events ({e}): pods wait as learnt");
                    events.live.store(false, Ordering::SeqCst);
                    events.seen.send_modify(|n| *n += 1);
                    return;
                }
                // Not live while the watch is down: an event missed then would never come.
                events.live.store(false, Ordering::SeqCst);
                events.seen.send_modify(|n| *n += 1);
                tokio::time::sleep(std::time::Duration::from_millis(500 * u64::from(errors))).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pod_waits_for_its_event_only_while_the_watch_is_live() {
        let events = StartedEvents::default();
        events.add("a".into());
        // Not live: never resolves.
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(50), events.started("a")).await;
        assert!(waited.is_err(), "not live yet");
        events.live.store(true, Ordering::SeqCst);
        events.seen.send_modify(|n| *n += 1);
        events.started("a").await;
        // A pod whose event comes later.
        let later = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            events.add("b".into());
        };
        let ((), ()) = tokio::join!(events.started("b"), later);
        events.forget("b");
        let gone =
            tokio::time::timeout(std::time::Duration::from_millis(50), events.started("b")).await;
        assert!(gone.is_err(), "forgotten");
        assert!(selector().contains("involvedObject.fieldPath=spec.containers{main}"));
    }
}
