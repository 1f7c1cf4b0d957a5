//! `arbiter serve` (SPEC §16, docs/serve.md): one process holding an HTTP JSON API over the
//! job dirs under a root, and the web page over that API ([`web`]).
//!
//! Owns: the routes and their one-line JSON errors ([`api`]), the pages for people ([`web`]), the jobs this server runs and the
//! events they emit ([`jobs`], [`feed`]), what a job dir under the root says of itself — its
//! status, counts, records, files — ([`dirs`]), and following a job another process runs
//! ([`follow`]). It holds no job logic of its own: a submitted job is resolved by the CLI's
//! [`crate::job::resolve`], checked by [`crate::job::preflight`] and run by
//! [`crate::job::run_controlled`]; resume and `retry-infra` are the same call with the job
//! dir's own `job.yaml`, as `arbiter resume` makes it.
//!
//! Invariants:
//! - the job dirs are the truth: the list, the status and the records are read from them on
//!   every request, so a server killed and started again loses nothing (its unfinished jobs
//!   are `interrupted` and resumable, the job store's rules keep every trial recorded once);
//! - every path a request names resolves under the root (canonicalized), else it is refused;
//! - with a token set, every POST carries it (`Authorization: Bearer …`); no cookies;
//! - nothing a response holds comes from anywhere but the job dirs' redacted files, the
//!   records (already scrubbed) and the events (made of records).

mod api;
mod dirs;
mod error;
mod feed;
mod follow;
mod jobs;
mod web;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

pub(crate) use error::ServeError;

/// What `arbiter serve` was started with.
#[derive(Debug, Clone)]
pub(crate) struct ServeConfig {
    pub bind: IpAddr,
    pub port: u16,
    /// The served root: every job dir the server lists, runs or reads lies under it.
    pub root: PathBuf,
    /// `--db` as `arbiter query` takes it (else `ARBITER_DB`, else the default file).
    pub db: Option<String>,
    pub token: Option<String>,
    /// The backend flags every job this server runs gets (over the config's `backend:`).
    pub backend: crate::sandbox::choose::BackendFlags,
}

impl ServeConfig {
    /// A non-loopback address needs a token (SPEC §16).
    pub(crate) fn check(&self) -> Result<(), ServeError> {
        if !self.bind.is_loopback() && self.token.as_deref().is_none_or(str::is_empty) {
            return Err(ServeError::NoToken { bind: self.bind });
        }
        Ok(())
    }
}

/// Bind, tell `ready` the address, and serve until `interrupts` counts one: then every job
/// this server runs is stopped as the first Ctrl-C stops `arbiter run` (running trials
/// stopped, their containers removed, nothing half-done recorded) and waited for; a second
/// removes everything of those jobs at once. Gives how many jobs were stopped.
pub(crate) async fn serve(
    config: ServeConfig,
    ready: impl FnOnce(SocketAddr),
    mut interrupts: tokio::sync::watch::Receiver<u32>,
) -> Result<usize, ServeError> {
    config.check()?;
    let root = config
        .root
        .canonicalize()
        .map_err(|source| ServeError::Root {
            path: config.root.clone(),
            source,
        })?;
    if !root.is_dir() {
        return Err(ServeError::Root {
            path: config.root.clone(),
            source: std::io::Error::other("not a directory"),
        });
    }
    let store = crate::results::Location::chosen(config.db.as_deref())?;
    if let Some(location) = &store {
        // Made (and migrated) once, so a query finds the schema even before a job ended here.
        if let Err(e) = crate::results::Store::open(location).await {
            tracing::warn!("results store: {e}");
        }
    }
    let state = jobs::App::new(root, config.token.clone(), store, config.backend.clone());
    let addr = SocketAddr::new(config.bind, config.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    ready(local);
    tokio::select! {
        served = axum::serve(listener, api::router(state.clone())) => {
            served.map_err(|source| ServeError::Bind { addr, source })?;
            return Ok(0);
        }
        _ = interrupts.wait_for(|n| *n >= 1) => {}
    }
    tracing::info!("interrupted: stopping the jobs of this server");
    let stopped = tokio::select! {
        n = state.stop_all(crate::job::CancelReason::Interrupt) => n,
        _ = interrupts.wait_for(|n| *n >= 2) => {
            state.stop_all(crate::job::CancelReason::HardInterrupt).await
        }
    };
    Ok(stopped)
}
