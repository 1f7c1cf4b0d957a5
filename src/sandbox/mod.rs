//! The backend seam: the only module that talks to a container engine or a cluster.
//!
//! Everything above this module speaks in terms of [`Sandbox`], a small, object-safe trait in
//! the terms a trial needs — an environment image, a container with limits and an owner, exec
//! with a deadline, files in and out, "freeze this container's filesystem so a verifier can
//! start from it", the change set, stop, remove, list by owner, what the backend can and
//! cannot give — never in a backend's (commit, tags, pods, label filter strings, exit code
//! 137). The backend is chosen and connected once ([`choose`]) and handed on as an
//! `Arc<dyn Sandbox>`; the two wings implement it (`docker/`: a Docker engine through bollard,
//! `kubernetes/`: pods on a cluster through kube-rs), [`FakeSandbox`] is an in-memory one
//! whose behaviour tests script.
//!
//! Invariants every backend keeps:
//! - every resource carries its [`Owner`], so [`Sandbox::list`] can find it again after a crash;
//! - [`Sandbox::remove`] of something already gone is a success;
//! - an exec's deadline is enforced by the backend (SIGTERM to the container's processes, then
//!   after the grace period every process is killed) and reported as [`ExecEnd::TimedOut`].
//!
//! Over 600 lines only with its unit tests: the trait and its types are ~600.

mod cancel;
pub mod choose;
pub mod docker;
mod error;
mod fake;
mod fetch;
pub(crate) mod handover;
pub mod kubernetes;
mod scope;
mod sink;
mod tarball;
pub mod toolbox;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub(crate) use cancel::Cancellable;
pub use choose::{BackendConfig, BackendKind};
pub use error::{Fault, SandboxError};
pub use fake::{FakeExec, FakeSandbox, Op};
pub(crate) use fetch::{FetchResult, fetch, read_capped};
pub(crate) use scope::Scope;
pub use tarball::{
    ExtractLimits, ExtractReport, ExtractedFile, SkippedEntry, TarEntry, concat_archives,
    dir_to_tar, extract_tar_file, files_to_tar,
};

/// The backend can give containers GPUs but cannot say how many ([`Sandbox::gpus`]).
pub const GPUS_UNCOUNTED: u32 = u32::MAX;

/// Label carried by every resource arbiter creates.
pub const LABEL_MANAGED: &str = "arbiter.managed";
/// Label naming the job a resource belongs to.
pub const LABEL_JOB: &str = "arbiter.job";
/// Label naming the trial a resource belongs to.
pub const LABEL_TRIAL: &str = "arbiter.trial";
/// Label naming what a resource is for within its trial ([`Role`]).
pub const LABEL_ROLE: &str = "arbiter.role";
/// Label naming the compose service a sidecar container runs.
pub const LABEL_SERVICE: &str = "arbiter.service";
/// Label on cached environment images (shared across jobs, never job-owned).
pub const LABEL_CACHE: &str = "arbiter.cache";

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub(crate) String);

        impl $name {
            pub fn new(id: impl Into<String>) -> Self {
                $name(id.into())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A container (a running or stopped sandbox) on the backend.
    ContainerId
);
id_type!(
    /// A frozen filesystem: what a container held when [`Sandbox::freeze`] was called.
    FrozenId
);
id_type!(
    /// An environment image, ready to start containers from.
    ImageRef
);

/// What an image sets for its containers (Docker: the image config's `Env`, `WorkingDir`,
/// `User`); each empty or `None` when the image sets nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// `["PATH=…", …]`.
    pub env: Vec<String>,
    /// The working dir its containers start in (`WORKDIR`), absolute.
    pub workdir: Option<String>,
    pub user: Option<String>,
}

/// Where a task's environment image comes from.
#[derive(Debug, Clone)]
pub enum ImageRecipe {
    /// Build `context` with the recipe file `file` (a path relative to `context`).
    Build { context: PathBuf, file: String },
    /// Use an image the backend can get by name.
    Named(String),
}

/// An environment image to prepare: the recipe, a content key (the same key always means the
/// same environment, so a prepared image is reused), a time limit and the labels cached
/// images carry.
#[derive(Debug, Clone)]
pub struct ImageSpec {
    pub recipe: ImageRecipe,
    /// Stable name of the environment (for a build: derived from a hash of its context).
    pub key: String,
    pub timeout: Duration,
    pub labels: BTreeMap<String, String>,
}

impl ImageSpec {
    /// The name the prepared image goes by.
    pub fn reference(&self) -> &str {
        match &self.recipe {
            ImageRecipe::Named(name) => name,
            ImageRecipe::Build { .. } => &self.key,
        }
    }
}

/// What a resource is for within its trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Agent,
    Snapshot,
    Validation,
    ValidationSnapshot,
    Verifier,
    /// A compose sidecar service of the trial (SPEC §2.1).
    Sidecar,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Snapshot => "snapshot",
            Role::Validation => "validation",
            Role::ValidationSnapshot => "validation-snapshot",
            Role::Verifier => "verifier",
            Role::Sidecar => "sidecar",
        }
    }
}

/// Who a resource belongs to: a job, a trial in it, and the resource's role. `extra` carries
/// further labels (e.g. the owning process, for `arbiter gc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub job: String,
    pub trial: String,
    pub role: Role,
    pub extra: BTreeMap<String, String>,
}

impl Owner {
    /// Every label of a resource with this owner.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.extra.clone();
        labels.extend([
            (LABEL_MANAGED.to_string(), "true".to_string()),
            (LABEL_JOB.to_string(), self.job.clone()),
            (LABEL_TRIAL.to_string(), self.trial.clone()),
            (LABEL_ROLE.to_string(), self.role.as_str().to_string()),
        ]);
        labels
    }

    pub fn with_role(&self, role: Role) -> Owner {
        Owner {
            role,
            ..self.clone()
        }
    }
}

/// Which resources to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// Everything arbiter created (cached environment images included).
    Managed,
    /// Everything of one job.
    Job(String),
    /// Everything of one trial of a job.
    Trial { job: String, trial: String },
}

impl Selector {
    /// Whether a resource with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let is = |key: &str, value: &str| labels.get(key).is_some_and(|v| v == value);
        match self {
            Selector::Managed => is(LABEL_MANAGED, "true"),
            Selector::Job(job) => is(LABEL_JOB, job),
            Selector::Trial { job, trial } => is(LABEL_JOB, job) && is(LABEL_TRIAL, trial),
        }
    }
}

/// A resource on the backend.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Container(ContainerId),
    Frozen(FrozenId),
    /// A cached environment image (only [`Selector::Managed`] lists these).
    Image(ImageRef),
}

/// A resource found by [`Sandbox::list`], with its labels.
#[derive(Debug, Clone)]
pub struct Listed {
    pub resource: Resource,
    pub labels: BTreeMap<String, String>,
}

/// Network attachment of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    None,
    Host,
    Bridge,
}

/// What a container starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    Image(ImageRef),
    Frozen(FrozenId),
}

/// A host directory made visible inside a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub host: PathBuf,
    pub container: String,
    pub read_only: bool,
}

/// Resource limits of a container.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContainerLimits {
    pub cpus: f64,
    pub memory_mb: u64,
    pub pids_limit: i64,
    /// GPUs requested from the backend (0: none).
    pub gpus: u32,
    /// What the container may write to its own filesystem, in MiB (`None`: no bound given).
    /// The trial's watchdog enforces it where the backend measures writes (Docker); a
    /// backend may also give it to its scheduler (Kubernetes: an ephemeral-storage limit, so
    /// the kubelet evicts a pod that writes more — the agent's result, not the cluster's).
    pub storage_mb: Option<u64>,
}

/// Everything needed to create a long-lived container that commands are exec'd into.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub base: Base,
    pub owner: Owner,
    pub env: Vec<(String, String)>,
    pub limits: ContainerLimits,
    pub network: Network,
    pub workdir: Option<String>,
    pub mounts: Vec<Mount>,
    /// How the container's first process starts and what it shares with other containers.
    /// `StartSpec::default()`: arbiter's keep-alive, nothing shared.
    pub start: StartSpec,
}

/// The first process of a container (SPEC §2: Harbor's ENTRYPOINT semantics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Process {
    /// arbiter's keep-alive replaces the image's ENTRYPOINT and CMD (harness containers).
    #[default]
    Keepalive,
    /// Harbor's semantics for the task's own containers: the image's ENTRYPOINT (when it has
    /// one) runs with arbiter's keep-alive as its arguments, so it must end with
    /// `exec "$@"`. [`Sandbox::start`] returns once the keep-alive runs, or fails with
    /// [`SandboxError::Entrypoint`] when the ENTRYPOINT exits or never hands over.
    ImageEntrypoint,
    /// A compose service's own process: its `entrypoint`/`command` over the image's.
    Service {
        entrypoint: Option<Vec<String>>,
        command: Option<Vec<String>>,
    },
}

/// An engine-side healthcheck (compose `healthcheck`), polled with [`Sandbox::status`].
#[derive(Debug, Clone, PartialEq)]
pub struct HealthSpec {
    /// `Exec(argv)` or `Shell(cmd)` (run by the image's `/bin/sh -c`); `None` turns the
    /// image's own HEALTHCHECK off.
    pub test: Option<HealthCommand>,
    pub interval: Option<Duration>,
    pub timeout: Option<Duration>,
    pub start_period: Option<Duration>,
    pub retries: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthCommand {
    Exec(Vec<String>),
    Shell(String),
}

/// How a container starts and what it shares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartSpec {
    pub process: Process,
    /// Join this container's network namespace (pod-style sidecars): `network` is ignored.
    pub join: Option<ContainerId>,
    /// Extra `/etc/hosts` entries (name, address): compose service names on 127.0.0.1.
    pub hosts: Vec<(String, String)>,
    /// The user the first process runs as (a service's `user`).
    pub user: Option<String>,
    pub healthcheck: Option<HealthSpec>,
}

impl StartSpec {
    /// The start of a container of the task's own filesystem for `role`: the agent's and
    /// the verifier's containers run the image's ENTRYPOINT as Harbor does (a `snapshot`
    /// verifier's container starts through it again, so the services it starts are up for
    /// the tests, as they are under Harbor, whose tests run in the agent's container); the
    /// harness's own containers (snapshot sources, validation) run only the keep-alive.
    pub fn for_role(role: Role) -> StartSpec {
        let process = match role {
            Role::Agent | Role::Verifier => Process::ImageEntrypoint,
            Role::Snapshot | Role::Validation | Role::ValidationSnapshot | Role::Sidecar => {
                Process::Keepalive
            }
        };
        StartSpec {
            process,
            ..StartSpec::default()
        }
    }
}

/// What a container is doing, as [`Sandbox::status`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerStatus {
    /// Running; `health` is its healthcheck's verdict when it has one.
    Running { health: Option<Health> },
    /// Its first process ended with this code.
    Exited(i64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Starting,
    Healthy,
    Unhealthy,
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
    /// `grace` every process of the container is killed.
    pub timeout: Option<Duration>,
    pub grace: Duration,
}

impl ExecSpec {
    /// A command with its output sent to `logs` (stdout, stderr), kept up to `cap_bytes` each,
    /// under `timeout` with `grace` between SIGTERM and SIGKILL; no env of its own.
    pub fn logged(
        argv: Vec<String>,
        user: Option<String>,
        workdir: Option<String>,
        timeout: Duration,
        logs: Option<(PathBuf, PathBuf)>,
        cap_bytes: u64,
        grace: Duration,
    ) -> Self {
        let (stdout, stderr) = logs.unzip();
        ExecSpec {
            argv,
            env: Vec::new(),
            user,
            workdir,
            stdout,
            stderr,
            cap_bytes,
            timeout: Some(timeout),
            grace,
        }
    }
}

/// How an exec ended, as the backend decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecEnd {
    /// The process exited with this code (128 + n when it died of signal n).
    Exited(i64),
    /// The deadline fired; the container's processes were terminated, then killed.
    TimedOut,
    /// The process was killed under the exec (its container stopped, or the kernel's OOM
    /// killer, once the container has been stopped and the backend knows).
    Killed { oom: bool },
}

impl ExecEnd {
    /// The exit code, when the process exited.
    pub fn exit_code(self) -> Option<i64> {
        match self {
            ExecEnd::Exited(code) => Some(code),
            ExecEnd::TimedOut | ExecEnd::Killed { .. } => None,
        }
    }

    /// What the end turns out to have been once the container is stopped: a process that
    /// died of SIGKILL (exit 137) or vanished, in a container whose memory limit the kernel
    /// enforced by killing, was killed by the OOM killer.
    pub fn after_stop(self, stopped: Stopped) -> ExecEnd {
        match self {
            ExecEnd::Exited(137) | ExecEnd::Killed { .. } if stopped.oom_killed => {
                ExecEnd::Killed { oom: true }
            }
            other => other,
        }
    }
}

/// What an exec did.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecOutcome {
    pub end: ExecEnd,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// Some output was dropped because of `cap_bytes`.
    pub truncated: bool,
    pub seconds: f64,
}

/// A container after [`Sandbox::stop`]: every process is gone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stopped {
    /// The kernel's OOM killer killed a process of the container during its life.
    pub oom_killed: bool,
    /// The container's filesystem can no longer be read or started from, because of what ran
    /// in it (a backend whose containers do not outlive their first process: Kubernetes).
    pub lost: Option<Lost>,
}

/// Why a container's filesystem was lost through what ran in it — the agent's result, never
/// the harness's failure (a pod deleted or a node lost is [`SandboxError`] instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// The OOM killer ended the container's first process (on cgroup v2 it kills the whole
    /// container's group at once).
    Oom,
    /// The container was evicted for writing more than its ephemeral-storage limit.
    Storage,
    /// The container's first process exited with this code while commands ran in it.
    Exited(i32),
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lost::Oom => f.write_str("the OOM killer ended its container"),
            Lost::Storage => f.write_str(
                "its container was evicted for writing more than its ephemeral-storage limit",
            ),
            Lost::Exited(code) => write!(f, "its container's first process exited ({code})"),
        }
    }
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

/// How much of a path [`Sandbox::download`] archives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// The path and everything beneath it.
    Whole,
    /// The path's own entry, as the whole archive of it begins: a file with its content, a
    /// directory without what is beneath it (the change set needs no more of a modified
    /// directory whose content did not change).
    Entry,
}

/// What [`Sandbox::download`] fetches: `path` in the container, as a tar archive written to
/// `to` on the host, at most `limit` bytes.
#[derive(Debug, Clone, Copy)]
pub struct Download<'a> {
    pub path: &'a str,
    pub to: &'a Path,
    pub limit: u64,
    pub extent: Extent,
}

impl<'a> Download<'a> {
    /// `path` and everything beneath it.
    pub fn whole(path: &'a str, to: &'a Path, limit: u64) -> Self {
        Download {
            path,
            to,
            limit,
            extent: Extent::Whole,
        }
    }

    /// `path`'s own entry.
    pub fn entry(path: &'a str, to: &'a Path, limit: u64) -> Self {
        Download {
            extent: Extent::Entry,
            ..Download::whole(path, to, limit)
        }
    }
}

/// How a path differs from the container's base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One entry of a container's change set (its filesystem against its base).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Change {
    pub path: String,
    pub kind: ChangeKind,
}

/// What a container wrote to its own filesystem ([`Sandbox::disk_usage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiskUsage {
    /// Apparent size of what it wrote (a sparse file in full; a hard link once).
    pub bytes: u64,
    /// Paths in its writable layer (files, directories, links, deletion markers), when the
    /// backend counts them; `None` when only a full change list could tell.
    pub files: Option<u64>,
}

/// Whether the backend can give something a job asks for ([`Sandbox::network_available`]),
/// and if not, why — in the backend's own words, with what to do instead, so the job's
/// preflight can refuse it in one line without knowing the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    Available,
    /// Not here: the reason, e.g. "this Docker engine has no default bridge network; …".
    Unavailable(String),
}

/// The operations a trial needs from a backend. Object-safe: the backend is chosen once and
/// erased (`Arc<dyn Sandbox>`); every wrapper ([`Cancellable`]) and backend implements every
/// method (`sandbox::cancel`'s unit test checks the wrapper).
#[async_trait::async_trait]
pub trait Sandbox: Send + Sync + 'static {
    /// The backend's name, as records give it (`sandbox.backend`).
    fn name(&self) -> &'static str;
    /// What must hold before any trial of a job starts (permissions, a registry, the
    /// toolbox's ConfigMaps): one line per problem, none when ready. By default nothing to check.
    async fn preflight(&self) -> Vec<String> {
        Vec::new()
    }
    /// The job has ended (`trials` recorded): release what the backend kept for the job's
    /// trials (Kubernetes' warm pods) and log what it counted. By default nothing.
    async fn finish(&self, trials: usize) {
        let _ = trials;
    }
    /// Make an environment image available (build or fetch it unless it already exists).
    async fn prepare_image(&self, spec: &ImageSpec) -> Result<ImageRef, SandboxError>;
    async fn create(&self, spec: &ContainerSpec) -> Result<ContainerId, SandboxError>;
    async fn start(&self, id: &ContainerId) -> Result<(), SandboxError>;
    async fn exec(&self, id: &ContainerId, spec: &ExecSpec) -> Result<ExecOutcome, SandboxError>;
    /// [`Sandbox::exec`], then [`Sandbox::halt`] once it ended (not when it failed): a
    /// command whose container ends with it (a verifier's tests). `next` is the path the
    /// caller reads next, which a backend may send along with the halt, so that the command,
    /// the halt and that read are one round trip. By default the two calls.
    async fn exec_then_halt(
        &self,
        id: &ContainerId,
        spec: &ExecSpec,
        next: &str,
    ) -> Result<ExecOutcome, SandboxError> {
        let _ = next;
        let out = self.exec(id, spec).await?;
        self.halt(id).await?;
        Ok(out)
    }
    /// Unpack a tar archive at `dest` (a directory that must exist) inside the container.
    /// A backend may hold a small archive back and unpack it in the container's next
    /// [`Sandbox::exec`], before the command and only then running it, or before anything
    /// else reads the container's files (Kubernetes: one request, not two); an error placing
    /// it is then that call's error, the command not run. This holds for
    /// [`Sandbox::upload_replacing`] too, whose `Refused` may so come from `exec`.
    async fn upload(&self, id: &ContainerId, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError>;
    /// Replace each of `paths` (absolute) by what `tar` unpacked at `/` holds there: whatever
    /// the container had at those paths (a directory with planted files, a symlink, a file)
    /// is gone first, never merged. For the verifier's `/tests` and `/logs/verifier` in a
    /// filesystem the agent shaped. `Refused` when the container's own filesystem would not
    /// let the paths be removed (the agent's doing). By default a harness `rm -rf` (from the
    /// toolbox, as root), then the upload.
    async fn upload_replacing(
        &self,
        id: &ContainerId,
        paths: &[&str],
        tar: Vec<u8>,
    ) -> Result<(), SandboxError> {
        let mut args = vec!["-rf", "--"];
        args.extend(paths.iter().copied());
        let spec = ExecSpec {
            argv: self.harness_argv("rm", &args),
            env: Vec::new(),
            user: Some("0".to_string()),
            workdir: None,
            stdout: None,
            stderr: None,
            cap_bytes: 64 * 1024,
            timeout: Some(std::time::Duration::from_secs(60)),
            grace: std::time::Duration::from_secs(2),
        };
        let removed = self.exec(id, &spec).await?;
        if removed.end != ExecEnd::Exited(0) {
            return Err(SandboxError::Refused {
                op: "replace",
                message: format!("removing {} failed ({:?})", paths.join(" "), removed.end),
            });
        }
        self.upload(id, "/", tar).await
    }
    /// Unpack `tar` at `/` in a container created and never started, so that it is in place
    /// when the container starts, exactly as [`Sandbox::upload`] would leave it once
    /// started; `false` when the backend cannot (nothing is written: the caller uploads
    /// after the start). A backend that says `true` must know that nothing of the
    /// container's own runs at its start (only the harness's keep-alive). By default `false`.
    async fn upload_before_start(
        &self,
        id: &ContainerId,
        tar: &[u8],
    ) -> Result<bool, SandboxError> {
        let _ = (id, tar);
        Ok(false)
    }
    /// Write a tar archive of `want.path` inside the container to `want.to` on the host, at
    /// most `want.limit` bytes: the whole subtree, or the path's own entry
    /// ([`Extent::Entry`]). A backend may build it without a round trip to the engine once
    /// the container is stopped (the Docker backend reads the container's writable layer on
    /// this host when that alone holds everything at and beneath the path); the archive is
    /// the same.
    async fn download(&self, id: &ContainerId, want: Download<'_>)
    -> Result<Fetched, SandboxError>;
    /// [`Sandbox::download`] of each of `wants`, their results in the same order (an error
    /// of one path is that path's); `Err` only when none can be read (cancelled). By default
    /// all at once, a request each; a backend may read them in one round trip (Kubernetes:
    /// one exec).
    async fn download_many(
        &self,
        id: &ContainerId,
        wants: &[Download<'_>],
    ) -> Result<Vec<Result<Fetched, SandboxError>>, SandboxError> {
        let each = wants.iter().map(|want| self.download(id, *want));
        Ok(futures_util::future::join_all(each).await)
    }
    /// Kill every process of the container and wait until none is left. A container that is
    /// not running is fine.
    async fn stop(&self, id: &ContainerId) -> Result<Stopped, SandboxError>;
    /// Make each read-write host directory of the container's spec (a [`Mount`] with
    /// `read_only: false`) hold what the container left in it, and the container's side of
    /// it nothing more than the host directory will hold once the caller empties it. A
    /// backend whose mounts are the host directories themselves (Docker's bind mounts) has
    /// nothing to do, the default; one that copies them in (Kubernetes: a pod gets no host
    /// mounts) copies them back here. Called once the agent's processes are done, before
    /// the host directory is read.
    async fn collect_mounts(&self, id: &ContainerId) -> Result<(), SandboxError> {
        let _ = id;
        Ok(())
    }
    /// Kill every process of a container whose end nobody judges (no OOM verdict: the
    /// verifier's, once its tests have exited), so that what it left is read from a
    /// filesystem nothing writes to any more. By default [`Sandbox::stop`]; a backend may
    /// need fewer round trips for it.
    async fn halt(&self, id: &ContainerId) -> Result<(), SandboxError> {
        self.stop(id).await.map(drop)
    }
    /// What the container has written to its own filesystem, when the backend can tell:
    /// bytes (apparent size: a sparse file counts in full, as it would once frozen) and, when
    /// the backend can count them without listing every change, the paths of its writable
    /// layer (a count may stop early once above `count_files_to`: it is then a lower bound
    /// over that figure).
    async fn disk_usage(
        &self,
        id: &ContainerId,
        count_files_to: u64,
    ) -> Result<Option<DiskUsage>, SandboxError>;
    /// Freeze a stopped container's filesystem so that containers can start from it.
    async fn freeze(&self, id: &ContainerId, owner: &Owner) -> Result<FrozenId, SandboxError>;
    /// What the container changed against its base: added, modified and deleted paths.
    async fn changes(&self, id: &ContainerId) -> Result<Vec<Change>, SandboxError>;
    /// Remove a container (force) or a frozen filesystem; one already gone counts as removed.
    async fn remove(&self, resource: &Resource) -> Result<(), SandboxError>;
    /// Every resource (containers in any state, frozen filesystems, cached images with
    /// [`Selector::Managed`]) the selector matches.
    async fn list(&self, selector: &Selector) -> Result<Vec<Listed>, SandboxError>;
    /// How many GPUs a container can be given (0: none; [`GPUS_UNCOUNTED`]: some, the
    /// backend cannot say how many). Asked once per job, before any trial starts, when a task
    /// wants GPUs.
    async fn gpus(&self) -> Result<u32, SandboxError>;
    /// How many trials of the job wait to start (queued or waiting for a retry), told by the
    /// job as it changes: a backend that starts containers ahead of its trials (Kubernetes'
    /// warm pods) starts no more than can still be claimed. By default nothing.
    fn trials_waiting(&self, _waiting: usize) {}
    /// Whether containers can be attached to `network` here, and if not why (Docker:
    /// [`Network::Bridge`] needs the engine's default bridge, which an engine started with
    /// `--bridge=none` lacks; Kubernetes: `none` needs a namespace that admits arbiter's
    /// NET_ADMIN init container, `host` is never given). Asked once per job and network,
    /// before any trial starts, so a task is never run with less network than it asked for.
    async fn network_available(&self, network: Network) -> Result<Availability, SandboxError>;
    /// What an image gives its containers where task.toml says nothing: its environment
    /// (the integrity classifier reads the image's own `PATH`), the working dir a container
    /// starts in (the Dockerfile's `WORKDIR`) and its user.
    async fn image_config(&self, image: &ImageRef) -> Result<ImageConfig, SandboxError>;
    /// The image's content identity, when the backend has one: the same id always means the
    /// same files, so what was learnt about an image (the integrity classifier's index of its
    /// files) can be kept between jobs under it. `None`: no such identity.
    async fn image_id(&self, image: &ImageRef) -> Result<Option<String>, SandboxError>;
    /// Whether a container runs (and its healthcheck's verdict) or how it ended.
    async fn status(&self, id: &ContainerId) -> Result<ContainerStatus, SandboxError>;
    /// A listener on `127.0.0.1:port` of the running container's own loopback (its network
    /// namespace), served from the host: how a container with network `none` reaches the
    /// model gateway and nothing else.
    async fn loopback_listener(
        &self,
        id: &ContainerId,
        port: u16,
    ) -> Result<std::net::TcpListener, SandboxError>;
    /// The argv of a harness command (a busybox applet such as `sh`, `rm`, `kill`) in this
    /// backend's containers: from the harness-owned, read-only toolbox by absolute path when
    /// the backend has one, so nothing the agent planted runs with the harness's authority and
    /// an image without a shell still works; else the applet as the container's `PATH` finds it.
    fn harness_argv(&self, applet: &str, args: &[&str]) -> Vec<String> {
        let mut argv = vec![applet.to_string()];
        argv.extend(args.iter().map(|a| a.to_string()));
        argv
    }
}

/// A download's archive at `to` cut to its first entry ([`Extent::Entry`]).
pub(crate) fn first_entry_of(got: Fetched, to: &Path) -> Result<Fetched, SandboxError> {
    let Fetched::Archive { .. } = got else {
        return Ok(got);
    };
    let bytes = tarball::keep_first_entry(to).map_err(SandboxError::io(to))?;
    Ok(Fetched::Archive { bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_is_decided_once_stopped() {
        let oom = Stopped {
            oom_killed: true,
            lost: None,
        };
        let clean = Stopped::default();
        assert_eq!(
            ExecEnd::Exited(137).after_stop(oom),
            ExecEnd::Killed { oom: true }
        );
        assert_eq!(
            ExecEnd::Killed { oom: false }.after_stop(oom),
            ExecEnd::Killed { oom: true }
        );
        assert_eq!(ExecEnd::Exited(137).after_stop(clean), ExecEnd::Exited(137));
        assert_eq!(ExecEnd::Exited(1).after_stop(oom), ExecEnd::Exited(1));
        assert_eq!(ExecEnd::TimedOut.after_stop(oom), ExecEnd::TimedOut);
    }

    #[test]
    fn selectors_match_owner_labels() {
        let owner = Owner {
            job: "j".into(),
            trial: "t".into(),
            role: Role::Agent,
            extra: BTreeMap::from([("arbiter.owner".into(), "h/1/2".into())]),
        };
        let labels = owner.labels();
        assert!(Selector::Managed.matches(&labels));
        assert!(Selector::Job("j".into()).matches(&labels));
        assert!(!Selector::Job("k".into()).matches(&labels));
        assert!(
            Selector::Trial {
                job: "j".into(),
                trial: "t".into()
            }
            .matches(&labels)
        );
        assert!(
            !Selector::Trial {
                job: "j".into(),
                trial: "u".into()
            }
            .matches(&labels)
        );
        assert_eq!(labels["arbiter.role"], "agent");
        assert_eq!(labels["arbiter.owner"], "h/1/2");
    }
}
