//! The seam's one error type. It names no backend: each wing describes its own failures in
//! its own error type (`docker::DockerError`, `kubernetes::KubeError`) and converts them into
//! [`SandboxError::Backend`] with the [`Fault`] that tells the layers above what kind of
//! failure it was, so a user reads the right backend's words and nobody above the seam needs
//! to know which one it was.

use std::path::PathBuf;

/// What kind of failure a backend's own error was, as far as the layers above care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The backend could not be reached at all (no engine, no cluster, bad credentials).
    Unreachable,
    /// The connection to a container failed, not anything in it: bytes or the end of a
    /// command lost between arbiter and the container.
    Transport,
    /// The backend refused the request (bad input, a conflict, a permission).
    Refused,
    /// What the request was about is gone (a container removed behind arbiter's back).
    Gone,
    /// Any other failure of the backend.
    Failed,
}

/// Failures of the backend or of talking to it. All of them are infrastructure failures
/// from the point of view of a trial: none is the agent's doing.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A failure the backend's wing describes in its own words.
    #[error("{source}")]
    Backend {
        fault: Fault,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{op} failed: {message}")]
    Refused { op: &'static str, message: String },
    #[error("image build {tag} failed: {message}")]
    Build { tag: String, message: String },
    #[error("image {image} not available: {message}")]
    Image { image: String, message: String },
    #[error("{op} did not answer within {seconds}s")]
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
    /// A container cannot be made of a filesystem because its working dir there is not a
    /// directory (the agent replaced it with a file): the filesystem's fault, decided by the
    /// backend that found it, which the verifier reports as such.
    #[error("{message}")]
    WorkdirUnusable { message: String },
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
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    /// A wing's own error, of the given kind.
    pub(crate) fn backend(
        fault: Fault,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> SandboxError {
        SandboxError::Backend {
            fault,
            source: Box::new(source),
        }
    }

    /// The connection to the container failed, not anything in it: bytes lost in transport,
    /// or a command whose end never arrived. Whatever was being read says nothing about the
    /// agent's work.
    pub(crate) fn is_transport(&self) -> bool {
        matches!(
            self,
            SandboxError::Lost { .. }
                | SandboxError::Backend {
                    fault: Fault::Transport,
                    ..
                }
        )
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> SandboxError {
        let path = path.into();
        move |source| SandboxError::Io { path, source }
    }
}
