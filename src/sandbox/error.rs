use std::path::PathBuf;

/// Failures of the container engine or of talking to it. All of them are infrastructure
/// failures from the point of view of a trial: none is the agent's doing.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot reach the Docker engine ({hint}): {source}")]
    Connect {
        hint: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("docker {op} failed: {source}")]
    Engine {
        op: &'static str,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("docker {op} failed: {message}")]
    Refused { op: &'static str, message: String },
    #[error("image build {tag} failed: {message}")]
    Build { tag: String, message: String },
    #[error("image {image} not available: {message}")]
    Image { image: String, message: String },
    #[error("docker {op} did not answer within {seconds}s")]
    Timeout { op: &'static str, seconds: u64 },
    /// The image's ENTRYPOINT did not hand over to arbiter's keep-alive (Harbor runs it with
    /// `sh -c 'sleep infinity'` as its arguments; it must end with `exec "$@"`).
    #[error(
        "the image's ENTRYPOINT {entrypoint} {why}; an ENTRYPOINT must end with `exec \"$@\"` (Harbor runs it with a keep-alive command as its arguments){logs}"
    )]
    Entrypoint {
        entrypoint: String,
        why: String,
        /// ` (last output: …)` or empty.
        logs: String,
    },
    #[error("cancelled")]
    Cancelled,
    /// A transfer whose command in the container ended well but whose bytes did not all
    /// arrive (the stream between arbiter and the container lost them): the harness's
    /// failure, never a fact about what the container holds.
    #[error("{op}: {message}")]
    Lost { op: String, message: String },
    /// The backend cannot do this (yet): a typed refusal, never a silent downgrade; the
    /// caller decides whether the trial goes on without it (the change set on Kubernetes).
    #[error("{op} is not supported by the {backend} backend")]
    Unsupported {
        op: &'static str,
        backend: &'static str,
    },
    #[error(transparent)]
    Kubernetes(#[from] super::kubernetes::KubeError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    pub(crate) fn engine(op: &'static str) -> impl FnOnce(bollard::errors::Error) -> SandboxError {
        move |source| SandboxError::Engine { op, source }
    }

    /// The connection to the container failed, not anything in it: bytes lost in transport,
    /// or a command over Kubernetes' pods/exec whose end never arrived. Whatever was being
    /// read says nothing about the agent's work.
    pub(crate) fn is_transport(&self) -> bool {
        matches!(
            self,
            SandboxError::Lost { .. }
                | SandboxError::Kubernetes(super::kubernetes::KubeError::Exec { .. })
        )
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> SandboxError {
        let path = path.into();
        move |source| SandboxError::Io { path, source }
    }
}

/// HTTP status of an engine error, when there is one.
pub(crate) fn status_of(err: &bollard::errors::Error) -> Option<u16> {
    match err {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}
