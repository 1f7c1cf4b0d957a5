//! The backend a job runs on, chosen once by the CLI (`--backend`, `backend:`): an enum
//! that forwards every [`Sandbox`] operation, so `job::run` and the trial stay generic over
//! one type and never learn which backend they run on (the trait is not object-safe).

use std::path::Path;

use super::{
    Change, ContainerId, ContainerSpec, ContainerStatus, DiskUsage, DockerSandbox, ExecOutcome,
    ExecSpec, Fetched, FrozenId, ImageConfig, ImageRef, ImageSpec, KubernetesSandbox, Listed,
    Network, Owner, Resource, Sandbox, SandboxError, Selector, Stopped,
};

/// One of arbiter's backends.
pub enum Backend {
    Docker(Box<DockerSandbox>),
    Kubernetes(Box<KubernetesSandbox>),
}

impl Backend {
    /// `docker` or `kubernetes`, as records name it.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Docker(_) => "docker",
            Backend::Kubernetes(_) => "kubernetes",
        }
    }
}

impl Sandbox for Backend {
    async fn prepare_image(&self, spec: &ImageSpec) -> Result<ImageRef, SandboxError> {
        match self {
            Backend::Docker(b) => b.prepare_image(spec).await,
            Backend::Kubernetes(b) => b.prepare_image(spec).await,
        }
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<ContainerId, SandboxError> {
        match self {
            Backend::Docker(b) => b.create(spec).await,
            Backend::Kubernetes(b) => b.create(spec).await,
        }
    }

    async fn start(&self, id: &ContainerId) -> Result<(), SandboxError> {
        match self {
            Backend::Docker(b) => b.start(id).await,
            Backend::Kubernetes(b) => b.start(id).await,
        }
    }

    async fn exec(&self, id: &ContainerId, spec: &ExecSpec) -> Result<ExecOutcome, SandboxError> {
        match self {
            Backend::Docker(b) => b.exec(id, spec).await,
            Backend::Kubernetes(b) => b.exec(id, spec).await,
        }
    }

    async fn upload(&self, id: &ContainerId, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
        match self {
            Backend::Docker(b) => b.upload(id, dest, tar).await,
            Backend::Kubernetes(b) => b.upload(id, dest, tar).await,
        }
    }

    async fn upload_replacing(
        &self,
        id: &ContainerId,
        paths: &[&str],
        tar: Vec<u8>,
    ) -> Result<(), SandboxError> {
        match self {
            Backend::Docker(b) => b.upload_replacing(id, paths, tar).await,
            Backend::Kubernetes(b) => b.upload_replacing(id, paths, tar).await,
        }
    }

    async fn upload_before_start(
        &self,
        id: &ContainerId,
        tar: &[u8],
    ) -> Result<bool, SandboxError> {
        match self {
            Backend::Docker(b) => b.upload_before_start(id, tar).await,
            Backend::Kubernetes(b) => b.upload_before_start(id, tar).await,
        }
    }

    async fn download(
        &self,
        id: &ContainerId,
        path: &str,
        to: &Path,
        limit: u64,
    ) -> Result<Fetched, SandboxError> {
        match self {
            Backend::Docker(b) => b.download(id, path, to, limit).await,
            Backend::Kubernetes(b) => b.download(id, path, to, limit).await,
        }
    }

    async fn download_entry(
        &self,
        id: &ContainerId,
        path: &str,
        to: &Path,
        limit: u64,
    ) -> Result<Fetched, SandboxError> {
        match self {
            Backend::Docker(b) => b.download_entry(id, path, to, limit).await,
            Backend::Kubernetes(b) => b.download_entry(id, path, to, limit).await,
        }
    }

    async fn stop(&self, id: &ContainerId) -> Result<Stopped, SandboxError> {
        match self {
            Backend::Docker(b) => b.stop(id).await,
            Backend::Kubernetes(b) => b.stop(id).await,
        }
    }

    async fn collect_mounts(&self, id: &ContainerId) -> Result<(), SandboxError> {
        match self {
            Backend::Docker(b) => b.collect_mounts(id).await,
            Backend::Kubernetes(b) => b.collect_mounts(id).await,
        }
    }

    async fn halt(&self, id: &ContainerId) -> Result<(), SandboxError> {
        match self {
            Backend::Docker(b) => b.halt(id).await,
            Backend::Kubernetes(b) => b.halt(id).await,
        }
    }

    async fn disk_usage(
        &self,
        id: &ContainerId,
        count_files_to: u64,
    ) -> Result<Option<DiskUsage>, SandboxError> {
        match self {
            Backend::Docker(b) => b.disk_usage(id, count_files_to).await,
            Backend::Kubernetes(b) => b.disk_usage(id, count_files_to).await,
        }
    }

    async fn freeze(&self, id: &ContainerId, owner: &Owner) -> Result<FrozenId, SandboxError> {
        match self {
            Backend::Docker(b) => b.freeze(id, owner).await,
            Backend::Kubernetes(b) => b.freeze(id, owner).await,
        }
    }

    async fn changes(&self, id: &ContainerId) -> Result<Vec<Change>, SandboxError> {
        match self {
            Backend::Docker(b) => b.changes(id).await,
            Backend::Kubernetes(b) => b.changes(id).await,
        }
    }

    async fn remove(&self, resource: &Resource) -> Result<(), SandboxError> {
        match self {
            Backend::Docker(b) => b.remove(resource).await,
            Backend::Kubernetes(b) => b.remove(resource).await,
        }
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Listed>, SandboxError> {
        match self {
            Backend::Docker(b) => b.list(selector).await,
            Backend::Kubernetes(b) => b.list(selector).await,
        }
    }

    fn trials_waiting(&self, waiting: usize) {
        match self {
            Backend::Docker(b) => b.trials_waiting(waiting),
            Backend::Kubernetes(b) => b.trials_waiting(waiting),
        }
    }

    async fn gpus(&self) -> Result<u32, SandboxError> {
        match self {
            Backend::Docker(b) => b.gpus().await,
            Backend::Kubernetes(b) => b.gpus().await,
        }
    }

    async fn network_available(&self, network: Network) -> Result<bool, SandboxError> {
        match self {
            Backend::Docker(b) => b.network_available(network).await,
            Backend::Kubernetes(b) => b.network_available(network).await,
        }
    }

    async fn image_config(&self, image: &ImageRef) -> Result<ImageConfig, SandboxError> {
        match self {
            Backend::Docker(b) => b.image_config(image).await,
            Backend::Kubernetes(b) => b.image_config(image).await,
        }
    }

    async fn image_id(&self, image: &ImageRef) -> Result<Option<String>, SandboxError> {
        match self {
            Backend::Docker(b) => b.image_id(image).await,
            Backend::Kubernetes(b) => b.image_id(image).await,
        }
    }

    async fn status(&self, id: &ContainerId) -> Result<ContainerStatus, SandboxError> {
        match self {
            Backend::Docker(b) => b.status(id).await,
            Backend::Kubernetes(b) => b.status(id).await,
        }
    }

    async fn loopback_listener(
        &self,
        id: &ContainerId,
        port: u16,
    ) -> Result<std::net::TcpListener, SandboxError> {
        match self {
            Backend::Docker(b) => b.loopback_listener(id, port).await,
            Backend::Kubernetes(b) => b.loopback_listener(id, port).await,
        }
    }

    fn harness_argv(&self, applet: &str, args: &[&str]) -> Vec<String> {
        match self {
            Backend::Docker(b) => b.harness_argv(applet, args),
            Backend::Kubernetes(b) => b.harness_argv(applet, args),
        }
    }
}
