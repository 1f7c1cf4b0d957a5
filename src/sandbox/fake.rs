//! An in-memory [`Sandbox`] whose behaviour a test scripts: what each exec does and how long
//! it takes, which call fails, a container that vanishes, OOM kills, slow calls, disk usage.
//!
//! Containers hold a flat map of files (path → bytes): uploads unpack into it, scripted execs
//! write into it, downloads pack it, freezing copies it and a container started from a frozen
//! filesystem starts with the copy. Time is tokio's, so tests run under
//! `tokio::time::pause()` and a 30-minute agent takes no real time.
//!
//! Over 600 lines: a whole in-memory backend (files, freeze, changes, scripted execs, failures) so trial and job logic can be tested without an engine.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use super::{
    Availability, Base, Change, ChangeKind, ContainerId, ContainerSpec, ContainerStatus, DiskUsage,
    Download, ExecEnd, ExecOutcome, ExecSpec, Extent, Fetched, FrozenId, ImageConfig, ImageRef,
    ImageSpec, Listed, Lost, Network, Owner, Resource, Sandbox, SandboxError, Selector, Stopped,
};

/// The backend operations, for scripting failures and reading the call log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    PrepareImage,
    Create,
    Start,
    Exec,
    Upload,
    Download,
    Stop,
    Halt,
    DiskUsage,
    Freeze,
    Changes,
    Remove,
    List,
    Gpus,
    ImageConfig,
    Status,
}

impl Op {
    pub const ALL: [Op; 16] = [
        Op::PrepareImage,
        Op::Create,
        Op::Start,
        Op::Exec,
        Op::Upload,
        Op::Download,
        Op::Stop,
        Op::Halt,
        Op::DiskUsage,
        Op::Freeze,
        Op::Changes,
        Op::Remove,
        Op::List,
        Op::Gpus,
        Op::ImageConfig,
        Op::Status,
    ];
}

/// What a scripted exec does.
#[derive(Debug, Clone)]
pub struct FakeExec {
    pub end: ExecEnd,
    /// How long the process runs (under its deadline it is cut short with `TimedOut`).
    pub duration: Duration,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Files it writes into its container (absolute path → content) when it ends.
    pub writes: Vec<(String, Vec<u8>)>,
    /// The kernel's OOM killer killed it (the exec ends `Exited(137)`, the container's stop
    /// reports `oom_killed`).
    pub oom: bool,
    /// It ends its container's filesystem (a backend whose containers do not outlive their
    /// first process): the exec ends `Killed`, the stop reports it, and the container can no
    /// longer be read.
    pub lost: Option<Lost>,
    /// It ignores SIGTERM: on its deadline it runs until the grace period is over.
    pub ignores_term: bool,
    /// The container's disk usage while it runs.
    pub disk_bytes: Option<u64>,
    /// Paths in the container's writable layer while it runs, as a backend that counts them
    /// reports (unset: the fake reports no count, like a remote engine).
    pub disk_files: Option<u64>,
}

impl Default for FakeExec {
    fn default() -> Self {
        FakeExec {
            end: ExecEnd::Exited(0),
            duration: Duration::ZERO,
            stdout: Vec::new(),
            stderr: Vec::new(),
            writes: Vec::new(),
            oom: false,
            lost: None,
            ignores_term: false,
            disk_bytes: None,
            disk_files: None,
        }
    }
}

impl FakeExec {
    pub fn exits(code: i64) -> Self {
        FakeExec {
            end: ExecEnd::Exited(code),
            ..FakeExec::default()
        }
    }

    pub fn writes(mut self, path: &str, content: &[u8]) -> Self {
        self.writes.push((path.to_string(), content.to_vec()));
        self
    }

    pub fn takes(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    pub fn stderr(mut self, bytes: &[u8]) -> Self {
        self.stderr = bytes.to_vec();
        self
    }

    /// While it runs, its container's writable layer holds `n` paths (as counted by a backend
    /// that can count them).
    pub fn files(mut self, n: u64) -> Self {
        self.disk_files = Some(n);
        self
    }
}

#[derive(Debug)]
struct Container {
    files: BTreeMap<String, Vec<u8>>,
    base_files: BTreeMap<String, Vec<u8>>,
    labels: BTreeMap<String, String>,
    running: watch::Sender<bool>,
    oom: bool,
    lost: Option<Lost>,
    disk_bytes: Option<u64>,
    disk_files: Option<u64>,
}

/// A filesystem: path → content.
type Files = BTreeMap<String, Vec<u8>>;
type Labels = BTreeMap<String, String>;

#[derive(Debug, Default)]
struct State {
    containers: BTreeMap<String, Container>,
    frozen: BTreeMap<String, (Files, Labels)>,
    images: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    calls: Vec<(Op, String)>,
    counts: HashMap<Op, usize>,
    failures: Vec<(Op, usize, String)>,
    delays: HashMap<Op, Duration>,
    vanish: Vec<(Op, usize)>,
    /// Paths whose next download loses its bytes in transport ([`SandboxError::Lost`]).
    lost_downloads: Vec<String>,
    execs: Vec<(String, FakeExec)>,
    /// Every exec's argv (joined by spaces) and env, in call order.
    exec_envs: Vec<(String, Vec<(String, String)>)>,
    gpus: u32,
    /// Networks [`Sandbox::network_available`] says no to, with its reason.
    unavailable: Vec<(Network, String)>,
    /// What [`Sandbox::preflight`] reports.
    preflight: Vec<String>,
    /// What [`Sandbox::image_config`] answers, per image reference.
    image_configs: HashMap<String, ImageConfig>,
    image_ids: HashMap<String, String>,
    next_id: u64,
    /// Every container spec created, in call order.
    specs: Vec<ContainerSpec>,
    /// Scripted [`Sandbox::status`] answers by the container's `arbiter.service` label.
    statuses: HashMap<String, Vec<ContainerStatus>>,
}

/// The in-memory backend. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct FakeSandbox {
    state: Mutex<State>,
}

impl FakeSandbox {
    pub fn new() -> Self {
        FakeSandbox::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An exec whose argv (joined by spaces) contains `pattern` does `exec`. The script set
    /// last wins; an exec matching none exits 0 at once.
    pub fn on_exec(&self, pattern: &str, exec: FakeExec) {
        self.lock().execs.insert(0, (pattern.to_string(), exec));
    }

    /// The next download of `path` loses its bytes on the way ([`SandboxError::Lost`]: the
    /// transport's failure, not the container's).
    pub fn lose_download(&self, path: &str) {
        self.lock().lost_downloads.push(path.to_string());
    }

    /// The `nth` call (1-based) of `op` fails with an engine error.
    pub fn fail(&self, op: Op, nth: usize) {
        self.lock()
            .failures
            .push((op, nth, format!("fake {op:?} failure")));
    }

    /// Every call of `op` takes `delay` first.
    pub fn delay(&self, op: Op, delay: Duration) {
        self.lock().delays.insert(op, delay);
    }

    /// Every container disappears when the `nth` call of `op` starts (that call and every
    /// later one on a container fails as for a missing container).
    pub fn vanish_at(&self, op: Op, nth: usize) {
        self.lock().vanish.push((op, nth));
    }

    /// Operations in the order they were called, with a short detail (e.g. an exec's argv).
    pub fn calls(&self) -> Vec<(Op, String)> {
        self.lock().calls.clone()
    }

    /// Every exec's argv (joined by spaces) with the env it was given, in call order.
    pub fn exec_envs(&self) -> Vec<(String, Vec<(String, String)>)> {
        self.lock().exec_envs.clone()
    }

    /// What [`Sandbox::image_config`] answers for `reference` (default: nothing set).
    pub fn set_image_config(&self, reference: &str, config: ImageConfig) {
        self.lock()
            .image_configs
            .insert(reference.to_string(), config);
    }

    /// What [`Sandbox::image_id`] answers for `reference` (default: no identity).
    pub fn set_image_id(&self, reference: &str, id: &str) {
        self.lock()
            .image_ids
            .insert(reference.to_string(), id.to_string());
    }

    /// What [`Sandbox::status`] answers for the containers labelled
    /// `arbiter.service=<service>`: one answer per call, the last repeated. Unscripted: a
    /// running container without a healthcheck (an exited one once stopped: 137).
    pub fn on_status(&self, service: &str, answers: Vec<ContainerStatus>) {
        self.lock().statuses.insert(service.to_string(), answers);
    }

    /// Every spec given to [`Sandbox::create`], in call order (failed creates included).
    pub fn specs(&self) -> Vec<ContainerSpec> {
        self.lock().specs.clone()
    }

    /// What [`Sandbox::gpus`] answers (default 0).
    pub fn set_gpus(&self, gpus: u32) {
        self.lock().gpus = gpus;
    }

    /// Say no to `network`, for `reason`.
    pub fn set_unavailable(&self, network: Network, reason: &str) {
        self.lock().unavailable.push((network, reason.to_string()));
    }

    /// Report these problems at [`Sandbox::preflight`].
    pub fn set_preflight_problems(&self, problems: &[&str]) {
        self.lock().preflight = problems.iter().map(|p| p.to_string()).collect();
    }

    /// How many times `op` was called.
    pub fn count(&self, op: Op) -> usize {
        self.lock().counts.get(&op).copied().unwrap_or(0)
    }

    /// Resources that exist now (containers and frozen filesystems; not environment images).
    pub fn live(&self) -> Vec<Resource> {
        let state = self.lock();
        let mut out: Vec<Resource> = state
            .containers
            .keys()
            .map(|id| Resource::Container(ContainerId::new(id.clone())))
            .collect();
        out.extend(
            state
                .frozen
                .keys()
                .map(|id| Resource::Frozen(FrozenId::new(id.clone()))),
        );
        out
    }

    /// Files of a live container (for assertions).
    pub fn files(&self, id: &ContainerId) -> Option<BTreeMap<String, Vec<u8>>> {
        self.lock()
            .containers
            .get(id.as_str())
            .map(|c| c.files.clone())
    }

    /// Seed an environment image's files (containers created from it start with them).
    pub fn image_files(&self, reference: &str, files: &[(&str, &[u8])]) {
        self.lock().images.insert(
            reference.to_string(),
            files
                .iter()
                .map(|(p, c)| (p.to_string(), c.to_vec()))
                .collect(),
        );
    }

    /// Count the call, apply its delay, decide whether it fails.
    async fn enter(&self, op: Op, detail: &str) -> Result<(), SandboxError> {
        let (delay, failure) = {
            let mut state = self.lock();
            state.calls.push((op, detail.to_string()));
            let n = {
                let count = state.counts.entry(op).or_insert(0);
                *count += 1;
                *count
            };
            if state.vanish.iter().any(|&(o, k)| o == op && k == n) {
                for container in state.containers.values() {
                    container.running.send_replace(false);
                }
                state.containers.clear();
            }
            let failure = state
                .failures
                .iter()
                .find(|(o, k, _)| *o == op && *k == n)
                .map(|(_, _, m)| m.clone());
            (state.delays.get(&op).copied(), failure)
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        match failure {
            Some(message) => Err(SandboxError::Refused {
                op: op_name(op),
                message,
            }),
            None => Ok(()),
        }
    }

    fn next_id(&self, prefix: &str) -> String {
        let mut state = self.lock();
        state.next_id += 1;
        format!("{prefix}-{}", state.next_id)
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::PrepareImage => "image prepare",
        Op::Create => "container create",
        Op::Start => "container start",
        Op::Exec => "exec",
        Op::Upload => "copy into container",
        Op::Download => "copy from container",
        Op::Stop => "container stop",
        Op::Halt => "container kill",
        Op::DiskUsage => "container inspect",
        Op::Freeze => "commit",
        Op::Changes => "container changes",
        Op::Remove => "remove",
        Op::List => "list",
        Op::Gpus => "info",
        Op::ImageConfig => "image inspect",
        Op::Status => "container inspect",
    }
}

fn missing(op: Op, id: &ContainerId) -> SandboxError {
    SandboxError::Refused {
        op: op_name(op),
        message: format!("no such container: {id}"),
    }
}

/// Unpack `tar` into `files` under `dest`.
fn unpack(files: &mut BTreeMap<String, Vec<u8>>, dest: &str, tar: &[u8]) -> std::io::Result<()> {
    use std::io::Read;
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries()? {
        let mut entry = entry?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let rel = entry.path()?.to_string_lossy().into_owned();
        let mut content = Vec::new();
        entry.read_to_end(&mut content)?;
        let path = format!("{}/{}", dest.trim_end_matches('/'), rel);
        files.insert(path, content);
    }
    Ok(())
}

/// A tar archive of `path` (a file or a directory) as the engine would give it: rooted at the
/// path's base name.
fn pack(files: &BTreeMap<String, Vec<u8>>, path: &str) -> Option<Vec<u8>> {
    let path = path.trim_end_matches('/');
    let base = path.rsplit('/').next().unwrap_or(path);
    let mut builder = tar::Builder::new(Vec::new());
    let mut any = false;
    let mut add = |name: String, content: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        let _ = builder.append_data(&mut header, name, content);
    };
    if let Some(content) = files.get(path) {
        add(base.to_string(), content);
        any = true;
    } else {
        let prefix = format!("{path}/");
        for (p, content) in files.range(prefix.clone()..) {
            let Some(rel) = p.strip_prefix(&prefix) else {
                break;
            };
            // The archive of `/` has no root component (tar names must be relative).
            add(
                if base.is_empty() {
                    rel.to_string()
                } else {
                    format!("{base}/{rel}")
                },
                content,
            );
            any = true;
        }
    }
    if !any {
        return None;
    }
    builder.into_inner().ok()
}

impl FakeSandbox {
    /// A download of the whole subtree at the path.
    async fn download_whole(
        &self,
        id: &ContainerId,
        want: Download<'_>,
    ) -> Result<Fetched, SandboxError> {
        let Download {
            path, to, limit, ..
        } = want;
        self.enter(Op::Download, path).await?;
        {
            let mut state = self.lock();
            if let Some(i) = state.lost_downloads.iter().position(|p| p == path) {
                state.lost_downloads.remove(i);
                return Err(SandboxError::Lost {
                    op: "fake download".to_string(),
                    message: format!("{path}: received 0 bytes, the container sent 512"),
                });
            }
        }
        let packed = {
            let state = self.lock();
            let container = state
                .containers
                .get(id.as_str())
                .ok_or_else(|| missing(Op::Download, id))?;
            pack(&container.files, path)
        };
        let Some(bytes) = packed else {
            return Ok(Fetched::NotFound);
        };
        if bytes.len() as u64 > limit {
            return Ok(Fetched::TooLarge { limit });
        }
        std::fs::write(to, &bytes).map_err(SandboxError::io(to))?;
        Ok(Fetched::Archive {
            bytes: bytes.len() as u64,
        })
    }
}

#[async_trait::async_trait]
impl Sandbox for FakeSandbox {
    fn name(&self) -> &'static str {
        "fake"
    }

    async fn preflight(&self) -> Vec<String> {
        self.lock().preflight.clone()
    }

    async fn prepare_image(&self, spec: &ImageSpec) -> Result<ImageRef, SandboxError> {
        self.enter(Op::PrepareImage, spec.reference()).await?;
        self.lock()
            .images
            .entry(spec.reference().to_string())
            .or_default();
        Ok(ImageRef::new(spec.reference()))
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<ContainerId, SandboxError> {
        self.lock().specs.push(spec.clone());
        self.enter(Op::Create, spec.owner.role.as_str()).await?;
        let id = self.next_id("container");
        let mut state = self.lock();
        let files = match &spec.base {
            Base::Image(image) => state.images.get(image.as_str()).cloned(),
            Base::Frozen(frozen) => state.frozen.get(frozen.as_str()).map(|(f, _)| f.clone()),
        }
        .ok_or_else(|| SandboxError::Refused {
            op: "container create",
            message: format!("no such image: {:?}", spec.base),
        })?;
        let (running, _) = watch::channel(false);
        state.containers.insert(
            id.clone(),
            Container {
                base_files: files.clone(),
                files,
                labels: spec.owner.labels(),
                running,
                oom: false,
                lost: None,
                disk_bytes: None,
                disk_files: None,
            },
        );
        Ok(ContainerId::new(id))
    }

    async fn start(&self, id: &ContainerId) -> Result<(), SandboxError> {
        self.enter(Op::Start, id.as_str()).await?;
        let state = self.lock();
        let container = state
            .containers
            .get(id.as_str())
            .ok_or_else(|| missing(Op::Start, id))?;
        container.running.send_replace(true);
        Ok(())
    }

    async fn exec(&self, id: &ContainerId, spec: &ExecSpec) -> Result<ExecOutcome, SandboxError> {
        let argv = spec.argv.join(" ");
        self.enter(Op::Exec, &argv).await?;
        let (script, mut running) = {
            let mut state = self.lock();
            state.exec_envs.push((argv.clone(), spec.env.clone()));
            let script = state
                .execs
                .iter()
                .find(|(pattern, _)| argv.contains(pattern.as_str()))
                .map(|(_, exec)| exec.clone())
                .unwrap_or_default();
            let container = state
                .containers
                .get_mut(id.as_str())
                .ok_or_else(|| missing(Op::Exec, id))?;
            if !*container.running.borrow() {
                return Err(SandboxError::Refused {
                    op: "exec create",
                    message: format!("container {id} is not running"),
                });
            }
            if script.disk_bytes.is_some() {
                container.disk_bytes = script.disk_bytes;
            }
            if script.disk_files.is_some() {
                container.disk_files = script.disk_files;
            }
            (script, container.running.subscribe())
        };
        let started = tokio::time::Instant::now();
        let deadline = spec.timeout.filter(|t| *t < script.duration);
        let runs_for = match deadline {
            Some(t) if script.ignores_term => t + spec.grace,
            Some(t) => t,
            None => script.duration,
        };
        let stopped = tokio::select! {
            _ = tokio::time::sleep(runs_for) => false,
            _ = running.wait_for(|r| !*r) => true,
        };
        let end = if stopped {
            ExecEnd::Killed { oom: false }
        } else if deadline.is_some() {
            ExecEnd::TimedOut
        } else {
            let mut state = self.lock();
            let container = state
                .containers
                .get_mut(id.as_str())
                .ok_or_else(|| missing(Op::Exec, id))?;
            for (path, content) in &script.writes {
                container.files.insert(path.clone(), content.clone());
            }
            if let Some(lost) = script.lost {
                container.lost = Some(lost);
                container.running.send_replace(false);
                ExecEnd::Killed {
                    oom: lost == Lost::Oom,
                }
            } else if script.oom {
                container.oom = true;
                ExecEnd::Exited(137)
            } else {
                script.end
            }
        };
        let cap = spec.cap_bytes as usize;
        for (sink, bytes) in [
            (&spec.stdout, &script.stdout),
            (&spec.stderr, &script.stderr),
        ] {
            if let Some(path) = sink {
                std::fs::write(path, &bytes[..bytes.len().min(cap)])
                    .map_err(SandboxError::io(path))?;
            }
        }
        Ok(ExecOutcome {
            end,
            stdout_bytes: script.stdout.len() as u64,
            stderr_bytes: script.stderr.len() as u64,
            truncated: script.stdout.len() > cap || script.stderr.len() > cap,
            seconds: started.elapsed().as_secs_f64(),
        })
    }

    async fn upload(&self, id: &ContainerId, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
        self.enter(Op::Upload, dest).await?;
        let mut state = self.lock();
        let container = state
            .containers
            .get_mut(id.as_str())
            .ok_or_else(|| missing(Op::Upload, id))?;
        unpack(&mut container.files, dest, &tar).map_err(SandboxError::io(dest))
    }

    async fn download(
        &self,
        id: &ContainerId,
        want: Download<'_>,
    ) -> Result<Fetched, SandboxError> {
        let got = self.download_whole(id, want).await?;
        match want.extent {
            Extent::Whole => Ok(got),
            Extent::Entry => super::first_entry_of(got, want.to),
        }
    }

    async fn stop(&self, id: &ContainerId) -> Result<Stopped, SandboxError> {
        self.enter(Op::Stop, id.as_str()).await?;
        let state = self.lock();
        let container = state
            .containers
            .get(id.as_str())
            .ok_or_else(|| missing(Op::Stop, id))?;
        container.running.send_replace(false);
        Ok(Stopped {
            oom_killed: container.oom || container.lost == Some(Lost::Oom),
            lost: container.lost,
        })
    }

    async fn halt(&self, id: &ContainerId) -> Result<(), SandboxError> {
        self.enter(Op::Halt, id.as_str()).await?;
        let state = self.lock();
        let container = state
            .containers
            .get(id.as_str())
            .ok_or_else(|| missing(Op::Halt, id))?;
        container.running.send_replace(false);
        Ok(())
    }

    async fn disk_usage(
        &self,
        id: &ContainerId,
        count_files_to: u64,
    ) -> Result<Option<DiskUsage>, SandboxError> {
        self.enter(Op::DiskUsage, id.as_str()).await?;
        let state = self.lock();
        let container = state
            .containers
            .get(id.as_str())
            .ok_or_else(|| missing(Op::DiskUsage, id))?;
        Ok(Some(DiskUsage {
            bytes: container
                .disk_bytes
                .unwrap_or_else(|| container.files.values().map(|f| f.len() as u64).sum()),
            // Like the engine's bounded count: it stops once above the bound.
            files: container
                .disk_files
                .map(|n| n.min(count_files_to.saturating_add(1))),
        }))
    }

    async fn freeze(&self, id: &ContainerId, owner: &Owner) -> Result<FrozenId, SandboxError> {
        self.enter(Op::Freeze, id.as_str()).await?;
        let frozen = self.next_id("frozen");
        let mut state = self.lock();
        let files = state
            .containers
            .get(id.as_str())
            .ok_or_else(|| missing(Op::Freeze, id))?
            .files
            .clone();
        state.frozen.insert(frozen.clone(), (files, owner.labels()));
        Ok(FrozenId::new(frozen))
    }

    async fn changes(&self, id: &ContainerId) -> Result<Vec<Change>, SandboxError> {
        self.enter(Op::Changes, id.as_str()).await?;
        let state = self.lock();
        let c = state
            .containers
            .get(id.as_str())
            .ok_or_else(|| missing(Op::Changes, id))?;
        let mut out = Vec::new();
        for (path, content) in &c.files {
            match c.base_files.get(path) {
                None => out.push(Change {
                    path: path.clone(),
                    kind: ChangeKind::Added,
                }),
                Some(before) if before != content => out.push(Change {
                    path: path.clone(),
                    kind: ChangeKind::Modified,
                }),
                Some(_) => {}
            }
        }
        out.extend(
            c.base_files
                .keys()
                .filter(|p| !c.files.contains_key(*p))
                .map(|p| Change {
                    path: p.clone(),
                    kind: ChangeKind::Deleted,
                }),
        );
        Ok(out)
    }

    async fn remove(&self, resource: &Resource) -> Result<(), SandboxError> {
        let detail = format!("{resource:?}");
        self.enter(Op::Remove, &detail).await?;
        let mut state = self.lock();
        match resource {
            Resource::Container(id) => {
                if let Some(c) = state.containers.remove(id.as_str()) {
                    c.running.send_replace(false);
                }
            }
            Resource::Frozen(id) => {
                state.frozen.remove(id.as_str());
            }
            Resource::Image(image) => {
                state.images.remove(image.as_str());
            }
        }
        Ok(())
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Listed>, SandboxError> {
        self.enter(Op::List, &format!("{selector:?}")).await?;
        let state = self.lock();
        let mut out: Vec<Listed> = state
            .containers
            .iter()
            .filter(|(_, c)| selector.matches(&c.labels))
            .map(|(id, c)| Listed {
                resource: Resource::Container(ContainerId::new(id.clone())),
                labels: c.labels.clone(),
            })
            .collect();
        out.extend(
            state
                .frozen
                .iter()
                .filter(|(_, (_, labels))| selector.matches(labels))
                .map(|(id, (_, labels))| Listed {
                    resource: Resource::Frozen(FrozenId::new(id.clone())),
                    labels: labels.clone(),
                }),
        );
        Ok(out)
    }

    async fn status(&self, id: &ContainerId) -> Result<ContainerStatus, SandboxError> {
        self.enter(Op::Status, id.as_str()).await?;
        let mut state = self.lock();
        let (running, service) = {
            let c = state
                .containers
                .get(id.as_str())
                .ok_or_else(|| missing(Op::Status, id))?;
            (
                *c.running.borrow(),
                c.labels.get(super::LABEL_SERVICE).cloned(),
            )
        };
        if let Some(answers) = service.and_then(|s| state.statuses.get_mut(&s)) {
            let answer = if answers.len() > 1 {
                answers.remove(0)
            } else {
                answers
                    .first()
                    .copied()
                    .unwrap_or(ContainerStatus::Exited(137))
            };
            if let ContainerStatus::Exited(_) = answer
                && let Some(c) = state.containers.get(id.as_str())
            {
                c.running.send_replace(false);
            }
            return Ok(answer);
        }
        Ok(if running {
            ContainerStatus::Running { health: None }
        } else {
            ContainerStatus::Exited(137)
        })
    }

    async fn gpus(&self) -> Result<u32, SandboxError> {
        self.enter(Op::Gpus, "").await?;
        Ok(self.lock().gpus)
    }

    async fn network_available(&self, network: Network) -> Result<Availability, SandboxError> {
        let state = self.lock();
        Ok(
            match state.unavailable.iter().find(|(n, _)| *n == network) {
                Some((_, reason)) => Availability::Unavailable(reason.clone()),
                None => Availability::Available,
            },
        )
    }

    async fn image_config(&self, image: &ImageRef) -> Result<ImageConfig, SandboxError> {
        self.enter(Op::ImageConfig, image.as_str()).await?;
        Ok(self
            .lock()
            .image_configs
            .get(image.as_str())
            .cloned()
            .unwrap_or_default())
    }

    async fn image_id(&self, image: &ImageRef) -> Result<Option<String>, SandboxError> {
        Ok(self.lock().image_ids.get(image.as_str()).cloned())
    }

    /// The fake has no namespaces: a listener on the host's loopback (any free port).
    async fn loopback_listener(
        &self,
        id: &ContainerId,
        _port: u16,
    ) -> Result<std::net::TcpListener, SandboxError> {
        if !self.lock().containers.contains_key(id.as_str()) {
            return Err(missing(Op::Exec, id));
        }
        std::net::TcpListener::bind("127.0.0.1:0").map_err(SandboxError::io("127.0.0.1:0"))
    }
}
