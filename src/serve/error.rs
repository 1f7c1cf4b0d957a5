//! What ends `arbiter serve` ([`ServeError`]), and what one request answers when it is refused
//! ([`ApiError`]: a status and a one-line JSON `{"error": "..."}`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    #[error("--bind {bind}: a non-loopback address needs a token (--token or ARBITER_SERVE_TOKEN)")]
    NoToken { bind: IpAddr },
    #[error("--root {}: {source}", path.display())]
    Root {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Results(#[from] crate::results::ResultsError),
}

impl ServeError {
    /// A user mistake (exit 2), else the machine failed (exit 1).
    pub(crate) fn is_usage(&self) -> bool {
        match self {
            ServeError::NoToken { .. } | ServeError::Root { .. } => true,
            ServeError::Results(e) => e.is_usage(),
            ServeError::Bind { .. } => false,
        }
    }
}

/// A refused request: its status and one line saying why.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl std::fmt::Display) -> ApiError {
        // One line, whatever the cause's text.
        let message = message
            .to_string()
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        ApiError { status, message }
    }

    pub(crate) fn bad(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn not_found(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub(crate) fn conflict(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }

    pub(crate) fn internal(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message }).to_string();
        (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            format!("{body}\n"),
        )
            .into_response()
    }
}
