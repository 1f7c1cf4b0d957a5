//! How a pod ended behind arbiter's back, told apart from its status (never from timing):
//! through what ran in it — an OOM kill of its container, an eviction for writing over its
//! own ephemeral-storage limit, its first process exiting — which is the agent's result; or
//! through what the cluster did on its own — the pod deleted or preempted, a node lost or
//! under pressure, a container the runtime lost track of — which is infrastructure.

use k8s_openapi::api::core::v1::{ContainerState, Pod};

use super::names::MAIN;
use crate::sandbox::Lost;

/// Why a pod that no longer runs its main container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// What ran in the pod ended it.
    ByWorkload(Lost),
    /// The cluster ended it (the text says how, for the infra error).
    ByCluster(String),
}

/// Terminated reasons a container's own process gives (its exit, or the OOM killer's).
const OWN_REASONS: &[&str] = &["Error", "Completed"];

/// How `pod` ended, or `None` while its main container still runs (or has not started).
pub(crate) fn ended(pod: &Pod) -> Option<Ended> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Some(Ended::ByCluster("being deleted".to_string()));
    }
    let status = pod.status.as_ref();
    if let Some(reason) = status.and_then(|s| s.reason.as_deref()) {
        let message = status
            .and_then(|s| s.message.as_deref())
            .unwrap_or_default()
            .trim();
        if reason == "Evicted" && over_own_storage_limit(message) {
            return Some(Ended::ByWorkload(Lost::Storage));
        }
        return Some(Ended::ByCluster(if message.is_empty() {
            reason.to_string()
        } else {
            format!("{reason}: {message}")
        }));
    }
    if status.and_then(|s| s.phase.as_deref()) == Some("Unknown") {
        return Some(Ended::ByCluster(
            "its node stopped reporting (phase Unknown)".to_string(),
        ));
    }
    let main = status?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == MAIN)?;
    let Some(ContainerState {
        terminated: Some(t),
        ..
    }) = &main.state
    else {
        return None;
    };
    let reason = t.reason.as_deref().unwrap_or_default();
    Some(if reason == "OOMKilled" {
        Ended::ByWorkload(Lost::Oom)
    } else if OWN_REASONS.contains(&reason) {
        Ended::ByWorkload(Lost::Exited(t.exit_code))
    } else {
        Ended::ByCluster(format!(
            "its container ended ({}, exit {})",
            if reason.is_empty() {
                "no reason"
            } else {
                reason
            },
            t.exit_code
        ))
    })
}

/// The kubelet's eviction messages for a pod over its own limits ("Container main exceeded
/// its local ephemeral storage limit …", "Pod ephemeral local storage usage exceeds the total
/// limit of containers …", "Usage of EmptyDir volume … exceeds the limit …"), as opposed to
/// node pressure ("The node was low on resource: …"), which is the cluster's.
fn over_own_storage_limit(message: &str) -> bool {
    !message.starts_with("The node was low on resource")
        && (message.contains("exceeded its local ephemeral storage limit")
            || message.contains("ephemeral local storage usage exceeds")
            || (message.starts_with("Usage of EmptyDir volume") && message.contains("exceeds")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerStateRunning, ContainerStateTerminated, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(reason: Option<&str>, message: Option<&str>, main: Option<ContainerState>) -> Pod {
        Pod {
            status: Some(PodStatus {
                reason: reason.map(str::to_string),
                message: message.map(str::to_string),
                phase: Some("Running".to_string()),
                container_statuses: main.map(|state| {
                    vec![ContainerStatus {
                        name: MAIN.to_string(),
                        state: Some(state),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn terminated(reason: &str, code: i32) -> Option<ContainerState> {
        Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                reason: Some(reason.to_string()),
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn what_ran_in_the_pod_is_told_from_what_the_cluster_did() {
        let running = Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        });
        assert_eq!(ended(&pod(None, None, running.clone())), None);
        assert_eq!(ended(&pod(None, None, None)), None);
        assert_eq!(
            ended(&pod(None, None, terminated("OOMKilled", 137))),
            Some(Ended::ByWorkload(Lost::Oom))
        );
        assert_eq!(
            ended(&pod(None, None, terminated("Error", 3))),
            Some(Ended::ByWorkload(Lost::Exited(3)))
        );
        for message in [
            "Container main exceeded its local ephemeral storage limit \"64Mi\". ",
            "Pod ephemeral local storage usage exceeds the total limit of containers 64Mi. ",
            "Usage of EmptyDir volume \"arbiter-scratch\" exceeds the limit \"1Gi\". ",
        ] {
            assert_eq!(
                ended(&pod(
                    Some("Evicted"),
                    Some(message),
                    terminated("Error", 137)
                )),
                Some(Ended::ByWorkload(Lost::Storage)),
                "{message}"
            );
        }
        let pressure = "The node was low on resource: ephemeral-storage. Threshold quantity: 1Gi, available: 10Mi. Container main was using 2Gi, request is 0, has larger consumption of ephemeral-storage. ";
        assert!(matches!(
            ended(&pod(Some("Evicted"), Some(pressure), running.clone())),
            Some(Ended::ByCluster(why)) if why.starts_with("Evicted: The node was low")
        ));
        assert_eq!(
            ended(&pod(None, None, terminated("ContainerStatusUnknown", 137))),
            Some(Ended::ByCluster(
                "its container ended (ContainerStatusUnknown, exit 137)".to_string()
            ))
        );
        assert!(matches!(
            ended(&pod(Some("NodeLost"), None, running.clone())),
            Some(Ended::ByCluster(why)) if why == "NodeLost"
        ));
        let mut deleted = pod(None, None, terminated("OOMKilled", 137));
        deleted.metadata.deletion_timestamp = Some(Time(Default::default()));
        assert_eq!(
            ended(&deleted),
            Some(Ended::ByCluster("being deleted".to_string()))
        );
        let mut unknown = pod(None, None, running);
        if let Some(s) = unknown.status.as_mut() {
            s.phase = Some("Unknown".to_string());
        }
        assert!(matches!(ended(&unknown), Some(Ended::ByCluster(_))));
    }
}
