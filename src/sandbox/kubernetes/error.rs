//! The Kubernetes backend's failures, each mapped to [`SandboxError`] in one place
//! (`From<KubeError>`): every one of them is infrastructure from a trial's point of view.

use std::path::PathBuf;

use crate::sandbox::{Fault, SandboxError};

/// What went wrong talking to the cluster, its registry or inside a pod.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The kubeconfig could not be read or has no usable context.
    #[error("kubeconfig {path}: {message}")]
    Config { path: PathBuf, message: String },
    /// An API request failed (a dropped connection, a 5xx, a refusal).
    #[error("kubernetes {op} failed: {source}")]
    Api {
        op: &'static str,
        #[source]
        source: kube::Error,
    },
    /// A pod arbiter created is gone (deleted or evicted behind arbiter's back).
    #[error("pod {pod} is gone ({why})")]
    PodGone { pod: String, why: String },
    /// A pod did not start: why, with the pod's events quoted.
    #[error("pod {pod} did not start: {why}{events}")]
    NotStarted {
        pod: String,
        why: String,
        /// `; events: …` or empty.
        events: String,
    },
    /// An image the kubelet could not pull, with the pod's events.
    #[error("image {image} could not be pulled: {why}{events}")]
    Pull {
        image: String,
        why: String,
        events: String,
    },
    /// A command over pods/exec that did not report how it ended.
    #[error("exec in pod {pod} failed: {message}")]
    Exec { pod: String, message: String },
    /// A transfer whose far side saw other bytes than were sent (or none).
    #[error("{op} in pod {pod}: {message}")]
    Transfer {
        op: &'static str,
        pod: String,
        message: String,
    },
    /// The image registry did not answer or refused.
    #[error("registry {registry}: {message}")]
    Registry { registry: String, message: String },
    /// The local engine that builds and pushes images failed.
    #[error("pushing {image} to the registry failed: {message}")]
    Push { image: String, message: String },
    /// Something the backend was not configured for.
    #[error("kubernetes backend: {0}")]
    Setup(String),
}

impl KubeError {
    pub(crate) fn api(op: &'static str) -> impl FnOnce(kube::Error) -> KubeError {
        move |source| KubeError::Api { op, source }
    }
}

/// The HTTP status of an API error, when the API answered one.
pub(crate) fn api_status(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

impl From<KubeError> for SandboxError {
    fn from(e: KubeError) -> SandboxError {
        let fault = match &e {
            KubeError::Config { .. } | KubeError::Setup(_) => Fault::Unreachable,
            KubeError::Api { source, .. } => match api_status(source) {
                Some(404) => Fault::Gone,
                Some(400..=499) => Fault::Refused,
                _ => Fault::Failed,
            },
            KubeError::PodGone { .. } => Fault::Gone,
            // The pods/exec stream ended without the command's end: the connection's failure.
            KubeError::Exec { .. } => Fault::Transport,
            _ => Fault::Failed,
        };
        SandboxError::backend(fault, e)
    }
}
