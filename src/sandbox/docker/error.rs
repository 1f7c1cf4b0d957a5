//! The Docker wing's own failures, converted into the seam's [`SandboxError`] with their
//! [`Fault`].

use crate::sandbox::{Fault, SandboxError};

/// A failure of the Docker engine or of talking to it.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
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
}

impl From<DockerError> for SandboxError {
    fn from(e: DockerError) -> SandboxError {
        let fault = match &e {
            DockerError::Connect { .. } => Fault::Unreachable,
            DockerError::Engine { source, .. } => match status_of(source) {
                Some(404) => Fault::Gone,
                Some(400..=499) => Fault::Refused,
                _ => Fault::Failed,
            },
        };
        SandboxError::backend(fault, e)
    }
}

/// An engine error of the operation `op`, as the seam's error.
pub(super) fn engine(op: &'static str) -> impl FnOnce(bollard::errors::Error) -> SandboxError {
    move |source| DockerError::Engine { op, source }.into()
}

/// HTTP status of an engine error, when there is one.
pub(super) fn status_of(err: &bollard::errors::Error) -> Option<u16> {
    match err {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// An engine error of creating or starting a container of `op`: a working dir that is not a
/// directory in the container's filesystem (`Cannot mkdir: /app is not a directory`) is that
/// filesystem's fault (the agent replaced it by a file), not the engine's.
pub(super) fn container_engine(
    op: &'static str,
) -> impl FnOnce(bollard::errors::Error) -> SandboxError {
    move |source| {
        if let bollard::errors::Error::DockerResponseServerError { message, .. } = &source
            && message.contains("not a directory")
        {
            return SandboxError::WorkdirUnusable {
                message: DockerError::Engine { op, source }.to_string(),
            };
        }
        engine(op)(source)
    }
}
