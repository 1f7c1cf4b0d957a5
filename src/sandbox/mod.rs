//! The only module that talks to a container engine.
//!
//! Everything above this module speaks in terms of [`Sandbox`]: ensure an image, create a
//! container with limits and labels, exec with a deadline, copy tar archives in and out, commit
//! a stopped container, remove. The Docker implementation lives in [`docker`]; the trait keeps
//! the door open for other backends and lets the scheduler be tested without an engine.

mod cancel;
mod docker;
mod error;
mod tarball;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

pub use cancel::{Cancellable, cancelled};
pub use docker::DockerSandbox;
pub use error::SandboxError;
pub use tarball::{
    ExtractLimits, ExtractReport, ExtractedFile, SkippedEntry, TarEntry, dir_to_tar,
    extract_tar_file, files_to_tar,
};

/// Label carried by every resource arbiter creates.
pub const LABEL_MANAGED: &str = "arbiter.managed";
/// Label naming the job a resource belongs to.
pub const LABEL_JOB: &str = "arbiter.job";
/// Label naming the trial a resource belongs to.
pub const LABEL_TRIAL: &str = "arbiter.trial";
/// Label on cached environment images (shared across jobs, never job-owned).
pub const LABEL_CACHE: &str = "arbiter.cache";

/// Where an image comes from.
#[derive(Debug, Clone)]
pub enum ImageSpec {
    /// Build `context` (a directory with a Dockerfile) and tag the result `tag`.
    /// The tag is expected to carry a content hash, so an existing tag is reused as is.
    Build {
        context: PathBuf,
        dockerfile: String,
        tag: String,
        timeout: Duration,
        labels: BTreeMap<String, String>,
    },
    /// Use an existing image; pulled if absent.
    Existing { name: String, timeout: Duration },
}

impl ImageSpec {
    /// The image reference the spec resolves to.
    pub fn reference(&self) -> &str {
        match self {
            ImageSpec::Build { tag, .. } => tag,
            ImageSpec::Existing { name, .. } => name,
        }
    }
}

/// Network attachment of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    None,
    Host,
    Bridge,
}

impl Network {
    pub fn docker_mode(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Host => "host",
            Network::Bridge => "bridge",
        }
    }
}

/// Everything needed to create a long-lived container that commands are exec'd into.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub image: String,
    pub name: Option<String>,
    pub env: Vec<(String, String)>,
    pub labels: BTreeMap<String, String>,
    pub cpus: f64,
    pub memory_mb: u64,
    pub pids_limit: i64,
    pub network: Network,
    pub workdir: Option<String>,
    /// Read-only host bind mounts: (host path, container path).
    pub ro_mounts: Vec<(PathBuf, String)>,
    /// Read-write host bind mounts: (host path, container path).
    pub rw_mounts: Vec<(PathBuf, String)>,
}

/// A command run inside a running container.
#[derive(Debug, Clone)]
pub struct ExecSpec {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    /// Files that receive the command's stdout / stderr (`None` discards).
    pub stdout: Option<PathBuf>,
    pub stderr: Option<PathBuf>,
    /// At most this many bytes are kept per stream; the rest is counted and dropped.
    pub cap_bytes: u64,
    /// Wall-clock limit. On expiry the container's processes get SIGTERM, then after
    /// `grace` the whole container is killed.
    pub timeout: Option<Duration>,
    pub grace: Duration,
}

/// How an exec ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecOutcome {
    /// Exit code reported by the engine (`None` when the container was killed under it).
    pub exit_code: Option<i64>,
    /// The deadline fired; the container has been killed.
    pub timed_out: bool,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// Some output was dropped because of `cap_bytes`.
    pub truncated: bool,
    pub seconds: f64,
}

/// State of a container as the engine reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerState {
    pub running: bool,
    pub oom_killed: bool,
    pub exit_code: Option<i64>,
}

/// Result of fetching a path out of a container as a tar archive.
#[derive(Debug, Clone, PartialEq)]
pub enum Fetched {
    /// The archive was written to the given file.
    Archive { bytes: u64 },
    /// The path does not exist in the container.
    NotFound,
    /// The archive exceeded the cap and was abandoned.
    TooLarge { limit: u64 },
}

/// A resource found by label (for leftovers checks and garbage collection).
#[derive(Debug, Clone)]
pub struct Labelled {
    pub id: String,
    pub labels: BTreeMap<String, String>,
}

/// The engine operations a trial needs. Implementations must be cheap to share (`Arc`).
pub trait Sandbox: Send + Sync + 'static {
    fn ensure_image(
        &self,
        spec: &ImageSpec,
    ) -> impl Future<Output = Result<String, SandboxError>> + Send;
    fn create(
        &self,
        spec: &ContainerSpec,
    ) -> impl Future<Output = Result<String, SandboxError>> + Send;
    fn start(&self, id: &str) -> impl Future<Output = Result<(), SandboxError>> + Send;
    fn exec(
        &self,
        id: &str,
        spec: &ExecSpec,
    ) -> impl Future<Output = Result<ExecOutcome, SandboxError>> + Send;
    /// Unpack a tar archive at `dest` (a directory that must exist) inside the container.
    fn put_archive(
        &self,
        id: &str,
        dest: &str,
        tar: Vec<u8>,
    ) -> impl Future<Output = Result<(), SandboxError>> + Send;
    /// Write a tar archive of `path` inside the container to `to` on the host, at most `limit` bytes.
    fn get_archive(
        &self,
        id: &str,
        path: &str,
        to: &std::path::Path,
        limit: u64,
    ) -> impl Future<Output = Result<Fetched, SandboxError>> + Send;
    /// SIGKILL every process of the container. A container that is not running is fine.
    fn kill(&self, id: &str) -> impl Future<Output = Result<(), SandboxError>> + Send;
    fn inspect(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<ContainerState, SandboxError>> + Send;
    /// Bytes the container has written to its own filesystem (its writable layer, apparent
    /// size: a sparse file counts in full, as it would once committed), when the engine says.
    fn disk_usage(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<u64>, SandboxError>> + Send {
        let _ = id;
        async { Ok(None) }
    }
    /// Commit a (stopped) container to a new untagged image carrying `labels`.
    fn commit(
        &self,
        id: &str,
        labels: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<String, SandboxError>> + Send;
    /// Force-remove a container; one that is already gone counts as removed.
    fn remove_container(&self, id: &str) -> impl Future<Output = Result<(), SandboxError>> + Send;
    /// Remove an image; one that is already gone counts as removed.
    fn remove_image(&self, id: &str) -> impl Future<Output = Result<(), SandboxError>> + Send;
    /// Containers (all states) matching every label filter (`key` or `key=value`).
    fn list_containers(
        &self,
        labels: &[String],
    ) -> impl Future<Output = Result<Vec<Labelled>, SandboxError>> + Send;
    /// Images matching every label filter (`key` or `key=value`).
    fn list_images(
        &self,
        labels: &[String],
    ) -> impl Future<Output = Result<Vec<Labelled>, SandboxError>> + Send;
}
