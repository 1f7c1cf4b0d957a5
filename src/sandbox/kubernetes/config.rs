//! Where the backend runs pods: the kubeconfig context, the namespace, the registry built
//! images are pushed to, and the optional scheduling knobs (SPEC §14's `backend:` block).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Toleration;
use serde::{Deserialize, Serialize};

use super::KubeError;

/// Environment variable naming the default namespace (printed by `scripts/k8s env`).
pub const NAMESPACE_ENV: &str = "ARBITER_K8S_NAMESPACE";
/// Environment variable naming the default registry (printed by `scripts/k8s env`).
pub const REGISTRY_ENV: &str = "ARBITER_K8S_REGISTRY";
/// Environment variable with the default `cpu_request` (printed by `scripts/k8s env`: the
/// development cluster runs every node on the same two cores).
pub const CPU_REQUEST_ENV: &str = "ARBITER_K8S_CPU_REQUEST";

/// The Kubernetes backend's settings; every field optional (the kubeconfig's current context
/// and its namespace, `$ARBITER_K8S_NAMESPACE`, `$ARBITER_K8S_REGISTRY`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// `host[:port][/path]` that task images built from `environment/` are pushed to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// At most this many pods pending or starting at once (issue 28), apart from the job's
    /// concurrency; none: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_starting: Option<u32>,
    /// Seconds a pod may wait for a node before its start fails naming the scheduler's
    /// reason (default 300, the start deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_sec: Option<u64>,
    /// The share of a pod's CPU limit it requests from the scheduler, in (0, 1]: 1 (the
    /// default) asks for all of it (requests = limits); less packs more trials on a node, as
    /// a Docker host does, for agents that mostly wait on a model. Memory is always requested
    /// whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_request: Option<f64>,
    /// Warm pods kept per agent pod spec, claimed by trials (issue 28; warm.rs); none or 0:
    /// every trial creates its own pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_pods: Option<u32>,
}

/// What `connect` settled: the settings with every default filled in.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub kubeconfig: PathBuf,
    pub context: String,
    pub namespace: String,
    pub registry: Option<String>,
    pub settings: KubeSettings,
    /// `settings.cpu_request`, else `$ARBITER_K8S_CPU_REQUEST`, else 1.
    pub cpu_request: f64,
    /// `activeDeadlineSeconds` of every pod: a backstop only, arbiter's deadlines decide.
    pub backstop: Duration,
}

/// The kubeconfig file: the first of `$KUBECONFIG`'s paths, else `~/.kube/config`.
pub(crate) fn kubeconfig_path() -> Result<PathBuf, KubeError> {
    if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty())
        && let Some(first) = std::env::split_paths(&list).find(|p| !p.as_os_str().is_empty())
    {
        return Ok(first);
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".kube/config")),
        None => Err(KubeError::Config {
            path: PathBuf::from("~/.kube/config"),
            message: "no KUBECONFIG and no HOME: set KUBECONFIG".to_string(),
        }),
    }
}

/// A variable's value, when set and not empty.
pub(crate) fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}
