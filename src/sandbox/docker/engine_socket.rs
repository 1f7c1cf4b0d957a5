//! The connection to a local engine's unix socket: a pooled HTTP client (bollard's own
//! connects anew for every request), and the count of requests this process made.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;

/// Requests sent to a local engine by this process (for `scripts/bench`: requests per trial).
static ENGINE_REQUESTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many requests this process has sent to a local engine so far.
pub fn engine_requests() -> u64 {
    ENGINE_REQUESTS.load(std::sync::atomic::Ordering::Relaxed)
}

/// The engine's unix socket, when arbiter talks to a local one (`DOCKER_HOST` unset or
/// `unix://…`).
pub(super) fn local_socket() -> Option<String> {
    match std::env::var("DOCKER_HOST") {
        Err(_) => Some("/var/run/docker.sock".to_string()),
        Ok(host) if host.is_empty() => Some("/var/run/docker.sock".to_string()),
        Ok(host) => host.strip_prefix("unix://").map(str::to_string),
    }
}

/// A client of the engine's unix socket that keeps connections open between requests
/// (bollard's own connects anew for every request: a socket accept and an engine goroutine
/// per call). Upgraded connections (exec attach) leave the pool as hyper requires.
pub(super) fn pooled_unix(socket: String) -> Result<Docker, bollard::errors::Error> {
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;
    if !Path::new(&socket).exists() {
        return Err(bollard::errors::Error::SocketNotFoundError(socket));
    }
    let client = Arc::new(
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(hyperlocal::UnixConnector),
    );
    let transport = move |req: bollard::BollardRequest| {
        let client = Arc::clone(&client);
        let socket = socket.clone();
        ENGINE_REQUESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async move {
            let (mut parts, body) = req.into_parts();
            let path = parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
            tracing::trace!(method = %parts.method, path, "engine request");
            parts.uri = hyperlocal::Uri::new(&socket, &path).into();
            client
                .request(bollard::BollardRequest::from_parts(parts, body))
                .await
                .map_err(bollard::errors::Error::from)
        }
    };
    Docker::connect_with_custom_transport(
        transport,
        Some("unix://engine"),
        120,
        bollard::API_DEFAULT_VERSION,
    )
}
