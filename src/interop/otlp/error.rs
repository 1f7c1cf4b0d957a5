//! What can go wrong sending traces.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub(crate) enum OtlpError {
    /// The exporter could not be made for the endpoint.
    #[error("OTLP endpoint {endpoint}: {message}")]
    Exporter { endpoint: String, message: String },
    /// The endpoint did not take a trial's trace.
    #[error("sending the trace of {trial} to {endpoint}: {message}")]
    Send {
        trial: String,
        endpoint: String,
        message: String,
    },
    /// A job dir's file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A job dir's file is not what arbiter writes.
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

impl OtlpError {
    /// Why, without the what: for a summary line that already names the endpoint.
    pub(crate) fn reason(&self) -> String {
        match self {
            OtlpError::Send { message, .. } | OtlpError::Exporter { message, .. } => {
                message.clone()
            }
            other => other.to_string(),
        }
    }

    /// The user's mistake (a wrong path or URL) rather than a failure on the way.
    pub(crate) fn is_usage(&self) -> bool {
        matches!(
            self,
            OtlpError::Exporter { .. } | OtlpError::Read { .. } | OtlpError::Invalid { .. }
        )
    }
}
