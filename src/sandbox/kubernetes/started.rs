//! The kubelet's `Started` events of main containers, watched once per process for the whole
//! namespace: the earliest word that a pod's main container runs.
//!
//! The API shows a container running only once the kubelet relisted the runtime (once a
//! second: its generic PLEG); the `Started` event is sent right after the runtime started it.
//! A pod being started is handed over at its event (`lifecycle.rs`'s `await_running`), so its
//! first exec never comes too soon: no learnt wait, no exec asked again (`starting.rs`'s
//! `EarlyWait`, which stays the way where this watch cannot run: a Role without `watch` on
//! events, a watch that keeps failing). Two requests for the job (a list, a watch; and the
//! watch's renewals), none per pod.

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
    /// A watch (after its list) was accepted and runs: its word can be waited for.
    live: AtomicBool,
    begun: AtomicBool,
    /// The watch stopped for good (refused, or failing): nothing will be said any more.
    given_up: AtomicBool,
}

impl Default for StartedEvents {
    fn default() -> Self {
        StartedEvents {
            pods: Mutex::new(HashSet::new()),
            seen: watch::channel(0).0,
            live: AtomicBool::new(false),
            begun: AtomicBool::new(false),
            given_up: AtomicBool::new(false),
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

    /// Whether the watch stopped for good.
    fn given_up(&self) -> bool {
        self.given_up.load(Ordering::SeqCst)
    }

    /// `true` once `pod`'s main container was said started (never while the watch does not
    /// run), `false` once the watch stopped for good.
    pub(super) async fn started(&self, pod: &str) -> bool {
        let mut rx = self.seen.subscribe();
        loop {
            if self.live() && self.has(pod) {
                return true;
            }
            if self.given_up() {
                return false;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Whether the watch runs, once it was begun and either runs or stopped for good (a
    /// list and a watch: a few milliseconds; some seconds while its requests fail).
    pub(super) async fn settled(&self) -> bool {
        let mut rx = self.seen.subscribe();
        loop {
            if self.live() {
                return true;
            }
            if self.given_up() || !self.begun.load(Ordering::SeqCst) {
                return false;
            }
            if rx.changed().await.is_err() {
                return false;
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

/// Watch until the [`StartedEvents`] is dropped: a list, then watches from its version (one
/// request each, renewed when one times out); live from the moment a watch was accepted, so
/// every request of a live watch was sent before (`started_events_live`). On a refusal (no
/// `watch` or `list` on events), or failures in a row, stop and leave the pods to the learnt
/// wait.
async fn watch_events(events: std::sync::Weak<StartedEvents>, api: kube::Api<Event>) {
    use futures_util::StreamExt;
    use kube::api::{ListParams, WatchEvent, WatchParams};
    let list_params = ListParams::default().fields(&selector());
    let watch_params = WatchParams::default().fields(&selector()).timeout(290);
    let mut failures = 0u32;
    // Set `live`, waking every waiter to look again; `false` once the owner is gone.
    let set_live = |live: bool| -> bool {
        let Some(events) = events.upgrade() else {
            return false;
        };
        events.live.store(live, Ordering::SeqCst);
        events.seen.send_modify(|n| *n += 1);
        true
    };
    'list: loop {
        if failures > 0 {
            if !set_live(false) {
                return;
            }
            if failures >= 5 {
                tracing::debug!("no watch of Started events: pods wait as learnt");
                if let Some(events) = events.upgrade() {
                    events.given_up.store(true, Ordering::SeqCst);
                    events.seen.send_modify(|n| *n += 1);
                }
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(500 * u64::from(failures))).await;
        }
        let list = match api.list(&list_params).await {
            Ok(list) => list,
            Err(e) => {
                failures = if refused(&e) { 5 } else { failures + 1 };
                tracing::debug!("listing Started events: {e}");
                continue;
            }
        };
        {
            let Some(events) = events.upgrade() else {
                return;
            };
            for e in list.items {
                if let Some(pod) = e.involved_object.name {
                    events.add(pod);
                }
            }
        }
        let mut version = list.metadata.resource_version.unwrap_or_default();
        loop {
            let stream = match api.watch(&watch_params, &version).await {
                Ok(stream) => stream,
                Err(e) => {
                    failures = if refused(&e) { 5 } else { failures + 1 };
                    tracing::debug!("watching Started events: {e}");
                    continue 'list;
                }
            };
            if !set_live(true) {
                return;
            }
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                let Some(events) = events.upgrade() else {
                    return;
                };
                match item {
                    Ok(WatchEvent::Added(e) | WatchEvent::Modified(e)) => {
                        failures = 0;
                        version = e.metadata.resource_version.unwrap_or(version);
                        if let Some(pod) = e.involved_object.name {
                            events.add(pod);
                        }
                    }
                    Ok(WatchEvent::Deleted(e)) => {
                        version = e.metadata.resource_version.unwrap_or(version);
                    }
                    Ok(WatchEvent::Bookmark(b)) => version = b.metadata.resource_version,
                    Ok(WatchEvent::Error(e)) => match skippable(&e.message, &version) {
                        // An event the apiserver could not decode (a delete the store sent
                        // without its previous value): watch again past it, still live.
                        // Nothing is missed: the events before it came in order, and it is
                        // a delete.
                        Some(past) => {
                            tracing::debug!("watching Started events past: {}", e.message);
                            version = past;
                            break;
                        }
                        // Too old a version (410), or another error: list again.
                        None => {
                            tracing::debug!("watching Started events: {}", e.message);
                            failures += 1;
                            continue 'list;
                        }
                    },
                    Err(e) => {
                        tracing::debug!("watching Started events: {e}");
                        failures += 1;
                        continue 'list;
                    }
                }
            }
            // The watch timed out (or skips an event): watch again from where it was.
        }
    }
}

/// The revision to watch from past an event the apiserver failed to decode, from its error
/// (`etcd event received with PrevKv=nil (key=…, modRevision=N, type=DELETE)`): a delete
/// whose previous value the store did not send, as kine does for an expired event and etcd
/// after a compaction. `None` for any other error, or a revision not past `version`.
fn skippable(message: &str, version: &str) -> Option<String> {
    if !message.contains("PrevKv=nil") || !message.contains("type=DELETE") {
        return None;
    }
    let at = message.find("modRevision=")? + "modRevision=".len();
    let digits: String = message[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let revision: u64 = digits.parse().ok()?;
    let past = version.parse::<u64>().map_or(true, |v| revision > v);
    past.then(|| revision.to_string())
}

/// The API refused the request (no access): no use asking again.
fn refused(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 401 || s.code == 403)
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
        assert!(events.started("a").await);
        // A pod whose event comes later.
        let later = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            events.add("b".into());
        };
        let (said, ()) = tokio::join!(events.started("b"), later);
        assert!(said);
        events.forget("b");
        let gone =
            tokio::time::timeout(std::time::Duration::from_millis(50), events.started("b")).await;
        assert!(gone.is_err(), "forgotten");
        // A watch that stopped for good: waiters are told, not left waiting.
        events.live.store(false, Ordering::SeqCst);
        let stop = async {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            events.given_up.store(true, Ordering::SeqCst);
            events.seen.send_modify(|n| *n += 1);
        };
        let (said, ()) = tokio::join!(events.started("c"), stop);
        assert!(!said, "given up: not started");
        assert!(!events.settled().await, "settled, not live");
        assert!(selector().contains("involvedObject.fieldPath=spec.containers{main}"));
    }

    /// The error the test cluster's apiserver sent (kine expiring an event of an hour
    /// before): watched again past it; any other error, or a revision not past the one
    /// watched from, lists again.
    #[test]
    fn an_undecodable_delete_is_watched_past() {
        let kine = "Internal error occurred: etcd event received with PrevKv=nil (key=\"/registry/events/arbiter-test/arb-pytest-check-read-tests-default-1-agent-e036dafc.18eefeb3e5ebc745\", modRevision=27269, type=DELETE)";
        assert_eq!(skippable(kine, "27001").as_deref(), Some("27269"));
        assert_eq!(skippable(kine, "").as_deref(), Some("27269"));
        assert_eq!(skippable(kine, "27269"), None, "not past it");
        assert_eq!(skippable(&kine.replace("DELETE", "PUT"), "1"), None);
        assert_eq!(
            skippable("too old resource version: 5 (27000)", "5"),
            None,
            "a 410 lists again"
        );
        assert_eq!(
            skippable(&kine.replace("modRevision=27269", "modRevision=x"), "1"),
            None
        );
    }
}
