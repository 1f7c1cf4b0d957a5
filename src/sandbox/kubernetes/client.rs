//! The API client: kube's own stack (base URI, auth, extra headers, server retries, TLS from
//! the kubeconfig) on a connector with `TCP_NODELAY`. kube's default connector leaves Nagle on,
//! and an exec stream carrying a request/response protocol (the loopback relay's frames: a
//! small OPEN, then the reply) then waits for the apiserver's delayed ACK — about 40 ms per new
//! connection through the relay, against about 1 ms with Nagle off.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ConfigExt};
use tower::ServiceBuilder;

/// A client for `config` whose connections send small writes at once; every request it sends
/// (lists, watches and their restarts, exec and attach upgrades, deletes) adds one to
/// `requests`.
pub(super) fn nodelay_client(
    config: &kube::Config,
    requests: Arc<AtomicU64>,
) -> Result<kube::Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(config.connect_timeout.unwrap_or(CONNECT_TIMEOUT)));
    let https = config.rustls_https_connector_with_connector(http)?;
    let hyper: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_request(move |request: http::Request<Body>| {
            requests.fetch_add(1, Ordering::Relaxed);
            tracing::trace!(method = %request.method(), uri = %request.uri(), "kubernetes api request");
            request
        })
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// kube's own default when the kubeconfig names none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
