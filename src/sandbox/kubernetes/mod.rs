//! [`Sandbox`] on a Kubernetes cluster (SPEC §14): one pod per container, exec over the API.
//!
//! The folder owns everything the backend knows: the pod (`pod.rs`), its life (`lifecycle.rs`),
//! exec with the deadline rule and user switching (`exec.rs`), tar transfers checked on both
//! sides (`transfer.rs`), images built locally and pushed once per key (`images.rs`,
//! `registry.rs`), names and labels in the API's syntax (`names.rs`), the checks before any
//! trial (`preflight.rs`) and its errors (`error.rs`). Nothing above the trait learns a
//! Kubernetes word.
//!
//! Compose sidecars are ephemeral containers of the agent's pod (`sidecar.rs`); host
//! directories reach a pod without host mounts (`mounts.rs`). The change set is computed from
//! inside the pod (`changes.rs`, `walk.rs`) and a frozen filesystem is the base image plus the
//! changes kept on this host (`frozen.rs`). The loopback listener (the model gateway and the
//! egress proxy of a pod with network `none`) is a relay over one exec (`relay.rs`).

mod after_stop;
mod base64_lines;
mod carried;
mod carry;
mod changes;
mod client;
mod config;
mod ended;
mod error;
mod exec;
mod exit_status;
mod frozen;
mod hot;
mod images;
mod kept;
mod lifecycle;
mod many;
mod mounts;
mod names;
mod parked;
mod pod;
mod preflight;
mod proof;
mod registry;
mod relay;
mod sidecar;
mod started;
mod starting;
mod stop;
mod toolbox_maps;
mod transfer;
mod walk;
mod warm;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::{Mutex, OnceCell};

pub use config::{CPU_REQUEST_ENV, KubeSettings, NAMESPACE_ENV, REGISTRY_ENV};
pub use error::KubeError;
pub use warm::WARM_PODS_ENV;

// The one reuse between the wings, downward and declared (tests/architecture.rs): images
// are built with the local Docker engine before they are pushed to the registry.
use super::docker::DockerSandbox;
use super::toolbox::Toolbox;
use super::{
    Availability, Change, ContainerId, ContainerSpec, ContainerStatus, DiskUsage, Download,
    ExecOutcome, ExecSpec, Extent, Fetched, FrozenId, ImageConfig, ImageRef, ImageSpec, Listed,
    Network, Owner, Resource, Sandbox, SandboxError, Selector, Stopped,
};

/// How long a pod may live at most (`activeDeadlineSeconds`): a backstop for a pod arbiter
/// lost track of; arbiter's own deadlines end every trial long before.
const BACKSTOP: Duration = Duration::from_secs(48 * 3600);

/// A Kubernetes namespace reached through kube-rs, with the local Docker engine for builds.
pub struct KubernetesSandbox {
    client: kube::Client,
    resolved: config::Resolved,
    toolbox: Option<Toolbox>,
    engine: OnceCell<Arc<DockerSandbox>>,
    /// The toolbox's ConfigMaps in the namespace (toolbox_maps.rs).
    toolbox_maps: OnceCell<toolbox_maps::ToolboxMaps>,
    images: Mutex<HashMap<String, Arc<OnceCell<images::Prepared>>>>,
    /// Prepared images by the reference pods use.
    prepared: Mutex<HashMap<String, images::Prepared>>,
    states: Mutex<HashMap<String, lifecycle::PodState>>,
    /// Compose sidecars (ephemeral containers) by their `pod/container` id.
    sidecars: Mutex<HashMap<String, sidecar::SidecarState>>,
    /// The start-rate cap (`max_starting`).
    slots: Arc<starting::StartSlots>,
    /// How long a pod handed over early waits before its first exec (`await_running`).
    early_wait: Arc<starting::EarlyWait>,
    /// The kubelet's Started events of main containers (started.rs).
    started: Arc<started::StartedEvents>,
    /// Image walks, replayed pods and frozen filesystems (the change set, `freeze`).
    integrity: changes::Integrity,
    /// Pods with a NET_ADMIN init container are admitted (preflight).
    net_admin: AtomicBool,
    /// NetworkPolicies may be created (preflight).
    policies: AtomicBool,
    /// The namespace's deny-all policy of network-`none` pods is in place (or was tried).
    no_network_policy: OnceCell<()>,
    builds: AtomicU64,
    pushes: AtomicU64,
    /// Warm pods per agent pod spec (`warm_pods`).
    warm: warm::WarmPools,
    /// Requests sent, counted by the client's own service stack.
    requests: Arc<AtomicU64>,
    /// Harness output kept in pods (`kept.rs`).
    kept: kept::KeptFiles,
    /// `/logs` as the pods' stops sent it (after_stop.rs).
    stopped_logs: after_stop::StoppedLogs,
    /// Loopback relays to be started by their pod's next command (relay.rs).
    carriers: std::sync::Mutex<HashMap<String, relay::Carrier>>,
}

impl KubernetesSandbox {
    /// Read the kubeconfig (`$KUBECONFIG` or `~/.kube/config`, the context `settings` names or
    /// the current one) and make a client; nothing is asked of the cluster yet.
    pub async fn connect(settings: KubeSettings) -> Result<Self, KubeError> {
        let path = config::kubeconfig_path()?;
        let failed = |message: String| KubeError::Config {
            path: path.clone(),
            message,
        };
        let kubeconfig = Kubeconfig::read_from(&path).map_err(|e| failed(e.to_string()))?;
        let context = settings
            .context
            .clone()
            .or_else(|| kubeconfig.current_context.clone())
            .ok_or_else(|| failed("no current context: pass --context".to_string()))?;
        if !kubeconfig.contexts.iter().any(|c| c.name == context) {
            return Err(failed(format!("no context named {context}")));
        }
        let options = KubeConfigOptions {
            context: Some(context.clone()),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let namespace = settings
            .namespace
            .clone()
            .or_else(|| config::env_value(NAMESPACE_ENV))
            .unwrap_or_else(|| config.default_namespace.clone());
        let registry = settings
            .registry
            .clone()
            .or_else(|| config::env_value(REGISTRY_ENV))
            .map(|r| r.trim_end_matches('/').to_string());
        let cpu_request = match settings.cpu_request {
            Some(f) => f,
            None => match config::env_value(CPU_REQUEST_ENV) {
                Some(v) => v.trim().parse::<f64>().map_err(|_| {
                    KubeError::Setup(format!("{CPU_REQUEST_ENV}={v}: not a number in (0, 1]"))
                })?,
                None => 1.0,
            },
        };
        if !(cpu_request > 0.0 && cpu_request <= 1.0) {
            return Err(KubeError::Setup(format!(
                "cpu_request must be in (0, 1] (got {cpu_request})"
            )));
        }
        if settings.max_starting == Some(0) || settings.schedule_timeout_sec == Some(0) {
            return Err(KubeError::Setup(
                "max_starting and schedule_timeout_sec must be at least 1".to_string(),
            ));
        }
        // Every request the client sends is counted under it (lists, watches, exec upgrades).
        let requests = Arc::new(AtomicU64::new(0));
        let client = client::nodelay_client(&config, Arc::clone(&requests))
            .map_err(|e| failed(e.to_string()))?;
        let slots = Arc::new(starting::StartSlots::new(settings.max_starting));
        let warm_pods = match settings.warm_pods {
            Some(n) => n,
            None => match config::env_value(WARM_PODS_ENV) {
                Some(v) => v.trim().parse::<u32>().map_err(|_| {
                    KubeError::Setup(format!("{WARM_PODS_ENV}={v}: not a whole number"))
                })?,
                None => 0,
            },
        };
        let early_wait = Arc::new(starting::EarlyWait::default());
        let started = Arc::new(started::StartedEvents::default());
        let warm = warm::WarmPools::new(
            warm_pods,
            client.clone(),
            &namespace,
            warm::Starts {
                slots: Arc::clone(&slots),
                early: Arc::clone(&early_wait),
                started: Arc::clone(&started),
            },
        );
        Ok(KubernetesSandbox {
            client,
            resolved: config::Resolved {
                kubeconfig: path.clone(),
                context,
                namespace,
                registry,
                settings,
                cpu_request,
                backstop: BACKSTOP,
            },
            toolbox: None,
            engine: OnceCell::new(),
            toolbox_maps: OnceCell::new(),
            images: Mutex::new(HashMap::new()),
            prepared: Mutex::new(HashMap::new()),
            states: Mutex::new(HashMap::new()),
            sidecars: Mutex::new(HashMap::new()),
            slots,
            early_wait,
            started,
            integrity: changes::Integrity::default(),
            kept: kept::KeptFiles::default(),
            stopped_logs: after_stop::StoppedLogs::default(),
            carriers: std::sync::Mutex::default(),
            net_admin: AtomicBool::new(true),
            policies: AtomicBool::new(true),
            no_network_policy: OnceCell::new(),
            builds: AtomicU64::new(0),
            pushes: AtomicU64::new(0),
            warm,
            requests,
        })
    }

    /// The harness toolbox whose busybox goes into every pod (through its ConfigMaps).
    pub fn with_toolbox(mut self, toolbox: &Toolbox) -> Self {
        self.toolbox = Some(toolbox.clone());
        self
    }

    /// The namespace pods go to.
    pub fn namespace(&self) -> &str {
        &self.resolved.namespace
    }

    /// The kubeconfig file read.
    pub fn kubeconfig(&self) -> &Path {
        &self.resolved.kubeconfig
    }

    /// The kubeconfig context in use.
    pub fn context(&self) -> &str {
        &self.resolved.context
    }

    /// Image builds and pushes this process started (for tests and benches).
    pub fn builds_and_pushes(&self) -> (u64, u64) {
        (
            self.builds.load(Ordering::SeqCst),
            self.pushes.load(Ordering::SeqCst),
        )
    }

    /// Whether the watch of the kubelet's Started events runs (started.rs): its requests are
    /// the job's, not a pod's.
    pub fn started_events_live(&self) -> bool {
        self.started.live()
    }

    /// API requests this process sent: every HTTP request of its client (lists, watches and
    /// their restarts, exec and attach upgrades, deletes), counted under kube's client.
    pub fn api_requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Exec streams that arrived short (or without their facts) and were completed from the
    /// output the pod kept (`kept.rs`), so far.
    pub fn kept_rereads(&self) -> u64 {
        self.kept.rereads()
    }

    /// Pods handed over before their main container was reported running (`lifecycle.rs`
    /// `await_running`'s `early`) and execs that found one not running yet, so far.
    pub fn early_starts(&self) -> (u64, u64) {
        self.early_wait.counts()
    }

    /// The job's end: unclaimed warm pods are deleted and no more are started; how many
    /// were deleted.
    pub async fn drain_warm(&self) -> usize {
        self.warm.drain().await
    }

    /// Warm pods trials claimed (for tests and benches).
    pub fn warm_claimed(&self) -> u64 {
        self.warm.claimed()
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.resolved.namespace)
    }

    fn policies_allowed(&self) -> bool {
        self.policies.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Sandbox for KubernetesSandbox {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    /// The namespace, the permissions, the registry and the toolbox's ConfigMaps
    /// (`preflight.rs`), and whether network `none` can be given here.
    async fn preflight(&self) -> Vec<String> {
        let problems = self.check_ready().await;
        if problems.is_empty() {
            tracing::info!(
                namespace = self.namespace(),
                context = self.context(),
                "running on kubernetes"
            );
        }
        problems
    }

    /// Warm pods left unclaimed are deleted; the API requests, builds, pushes and warm
    /// claims of the job are logged (scripts/bench-k8s reads them).
    async fn finish(&self, trials: usize) {
        let unclaimed = self.drain_warm().await;
        let (builds, pushes) = self.builds_and_pushes();
        tracing::info!(
            requests = self.api_requests(),
            trials,
            builds,
            pushes,
            warm_claimed = self.warm_claimed(),
            warm_unclaimed = unclaimed,
            rereads = self.kept.rereads(),
            "kubernetes api requests"
        );
    }

    async fn prepare_image(&self, spec: &ImageSpec) -> Result<ImageRef, SandboxError> {
        self.prepare(spec).await
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<ContainerId, SandboxError> {
        match &spec.start.join {
            Some(join) => self.create_sidecar(spec, join).await,
            None => self.create_pod(spec).await,
        }
    }

    async fn start(&self, id: &ContainerId) -> Result<(), SandboxError> {
        if sidecar::is_sidecar(id.as_str()) {
            return self.start_sidecar(id).await;
        }
        self.start_pod(id).await
    }

    async fn exec(&self, id: &ContainerId, spec: &ExecSpec) -> Result<ExecOutcome, SandboxError> {
        self.exec_carrying(id.as_str(), spec, None).await
    }

    /// The halt by the command's own wrapper, `next` sent along in its facts line when small
    /// (one exec for the three); where it did not halt, a stop after it.
    async fn exec_then_halt(
        &self,
        id: &ContainerId,
        spec: &ExecSpec,
        next: &str,
    ) -> Result<ExecOutcome, SandboxError> {
        let pod = id.as_str();
        let out = self.exec_carrying(pod, spec, Some(next)).await?;
        match self.stopped_logs.take_halted(pod) {
            Some(sent) => {
                if let Some(archive) = sent {
                    self.stopped_logs.keep_sent(pod, next, archive);
                }
            }
            None => self.halt(id).await?,
        }
        Ok(out)
    }

    /// Held for the pod's next command when small (`carry.rs`).
    async fn upload(&self, id: &ContainerId, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
        self.upload_or_hold(id.as_str(), dest, tar, &[]).await
    }

    async fn upload_replacing(
        &self,
        id: &ContainerId,
        paths: &[&str],
        tar: Vec<u8>,
    ) -> Result<(), SandboxError> {
        self.upload_or_hold(id.as_str(), "/", tar, paths).await
    }

    async fn download(
        &self,
        id: &ContainerId,
        want: Download<'_>,
    ) -> Result<Fetched, SandboxError> {
        let entry = want.extent == Extent::Entry;
        self.send_held(id.as_str()).await?;
        self.download_tar(id.as_str(), want.path, want.to, want.limit, entry)
            .await
    }

    /// One exec for them all (many.rs).
    async fn download_many(
        &self,
        id: &ContainerId,
        wants: &[Download<'_>],
    ) -> Result<Vec<Result<Fetched, SandboxError>>, SandboxError> {
        let Some(first) = wants.first() else {
            return Ok(Vec::new());
        };
        self.send_held(id.as_str()).await?;
        let mut name = first.to.file_name().unwrap_or_default().to_os_string();
        name.push(".all");
        let scratch = first.to.with_file_name(name);
        Ok(self.download_tars(id.as_str(), wants, &scratch).await)
    }

    async fn stop(&self, id: &ContainerId) -> Result<Stopped, SandboxError> {
        if sidecar::is_sidecar(id.as_str()) {
            return self.stop_sidecar(id).await;
        }
        self.stop_pod(id).await
    }

    async fn collect_mounts(&self, id: &ContainerId) -> Result<(), SandboxError> {
        self.send_held(id.as_str()).await?;
        self.collect_pod_mounts(id).await
    }

    /// Not measured yet: the record says the storage bound was not enforced.
    async fn disk_usage(
        &self,
        _id: &ContainerId,
        _count_files_to: u64,
    ) -> Result<Option<DiskUsage>, SandboxError> {
        Ok(None)
    }

    async fn freeze(&self, id: &ContainerId, owner: &Owner) -> Result<FrozenId, SandboxError> {
        self.send_held(id.as_str()).await?;
        self.freeze_pod(id, owner).await
    }

    async fn changes(&self, id: &ContainerId) -> Result<Vec<Change>, SandboxError> {
        self.send_held(id.as_str()).await?;
        self.change_list(id).await
    }

    async fn remove(&self, resource: &Resource) -> Result<(), SandboxError> {
        if let Resource::Container(id) = resource
            && sidecar::is_sidecar(id.as_str())
        {
            return self.remove_sidecar(id).await;
        }
        self.remove_resource(resource).await
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Listed>, SandboxError> {
        self.list_pods(selector).await
    }

    fn trials_waiting(&self, waiting: usize) {
        self.warm.set_demand(waiting);
    }

    /// The most `nvidia.com/gpu` any node can allocate.
    async fn gpus(&self) -> Result<u32, SandboxError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let list = nodes
            .list(&Default::default())
            .await
            .map_err(KubeError::api("node list"))?;
        Ok(list
            .items
            .iter()
            .filter_map(|n| {
                n.status
                    .as_ref()?
                    .allocatable
                    .as_ref()?
                    .get("nvidia.com/gpu")?
                    .0
                    .parse::<u32>()
                    .ok()
            })
            .max()
            .unwrap_or(0))
    }

    /// `none`: the pod's interfaces taken down by a NET_ADMIN init container, where the
    /// namespace admits one; `bridge`: the pod network; `host`: never.
    async fn network_available(&self, network: Network) -> Result<Availability, SandboxError> {
        Ok(match network {
            Network::None if !self.net_admin.load(Ordering::SeqCst) => Availability::Unavailable(format!(
                "namespace {} does not admit the NET_ADMIN init container that takes a pod's network down (Pod Security baseline forbids it), so the Kubernetes backend cannot give it there; run it with --backend docker",
                self.namespace()
            )),
            Network::None | Network::Bridge => Availability::Available,
            Network::Host => Availability::Unavailable(
                "pods on Kubernetes do not share their node's network; run it with --backend docker"
                    .to_string(),
            ),
        })
    }

    async fn image_config(&self, image: &ImageRef) -> Result<ImageConfig, SandboxError> {
        Ok(self.config_of(image.as_str()).await.unwrap_or_default())
    }

    async fn image_id(&self, image: &ImageRef) -> Result<Option<String>, SandboxError> {
        Ok(self.digest_of(image.as_str()).await)
    }

    async fn status(&self, id: &ContainerId) -> Result<ContainerStatus, SandboxError> {
        if sidecar::is_sidecar(id.as_str()) {
            return self.sidecar_status(id).await;
        }
        self.pod_status(id).await
    }

    /// A relay over one exec from the pod's `127.0.0.1:port` (`relay.rs`), the exec of the
    /// pod's next command where it can be; the listener is on this host's loopback, on the
    /// same port where it is free.
    async fn loopback_listener(
        &self,
        id: &ContainerId,
        port: u16,
    ) -> Result<std::net::TcpListener, SandboxError> {
        self.relay_listener(id, port).await
    }

    fn harness_argv(&self, applet: &str, args: &[&str]) -> Vec<String> {
        super::toolbox::toolbox_argv(applet, args)
    }
}
