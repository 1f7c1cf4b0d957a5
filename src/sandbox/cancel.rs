//! A [`Sandbox`] that stops cooperatively when the user cancels.
//!
//! Dropping a future in the middle of an engine call does not undo the call: a container
//! create already sent still lands on the engine, after any cleanup sweep has looked. So a
//! trial is never cancelled by dropping it. Instead every call goes through this wrapper:
//! once cancelled, new calls are refused with [`SandboxError::Cancelled`]; calls already in
//! flight complete (so what they create is registered and cleaned up); only the long waits
//! (an exec, an image build) are cut short — an exec by killing its container.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{
    Change, ContainerId, ContainerSpec, DiskUsage, ExecOutcome, ExecSpec, Fetched, FrozenId,
    ImageConfig, ImageRef, ImageSpec, Listed, Network, Owner, Resource, Sandbox, SandboxError,
    Selector, Stopped,
};

pub struct Cancellable<S> {
    inner: Arc<S>,
    cancel: watch::Receiver<bool>,
}

impl<S: Sandbox> Cancellable<S> {
    pub fn new(inner: Arc<S>, cancel: watch::Receiver<bool>) -> Self {
        Cancellable { inner, cancel }
    }

    pub fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    fn check(&self) -> Result<(), SandboxError> {
        if self.is_cancelled() {
            Err(SandboxError::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// Resolves when cancellation is requested; never if the sender is gone without requesting it.
pub async fn cancelled(mut cancel: watch::Receiver<bool>) {
    if cancel.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl<S: Sandbox> Sandbox for Cancellable<S> {
    async fn prepare_image(&self, spec: &ImageSpec) -> Result<ImageRef, SandboxError> {
        self.check()?;
        tokio::select! {
            result = self.inner.prepare_image(spec) => result,
            // Abandoning a build creates no container; a finished image is only a cache entry.
            _ = cancelled(self.cancel.clone()) => Err(SandboxError::Cancelled),
        }
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<ContainerId, SandboxError> {
        self.check()?;
        self.inner.create(spec).await
    }

    async fn start(&self, id: &ContainerId) -> Result<(), SandboxError> {
        self.check()?;
        self.inner.start(id).await
    }

    async fn exec(&self, id: &ContainerId, spec: &ExecSpec) -> Result<ExecOutcome, SandboxError> {
        self.check()?;
        let exec = self.inner.exec(id, spec);
        tokio::pin!(exec);
        tokio::select! {
            result = &mut exec => result,
            _ = cancelled(self.cancel.clone()) => {
                if let Err(e) = self.inner.stop(id).await {
                    tracing::debug!(%id, "stop on cancel: {e}");
                }
                // The stream ends once the container is dead; let the exec finish its bookkeeping.
                let _ = tokio::time::timeout(Duration::from_secs(10), exec).await;
                Err(SandboxError::Cancelled)
            }
        }
    }

    async fn upload(&self, id: &ContainerId, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
        self.check()?;
        self.inner.upload(id, dest, tar).await
    }

    async fn collect_mounts(&self, id: &ContainerId) -> Result<(), SandboxError> {
        self.check()?;
        self.inner.collect_mounts(id).await
    }

    async fn download_entry(
        &self,
        id: &ContainerId,
        path: &str,
        to: &Path,
        limit: u64,
    ) -> Result<Fetched, SandboxError> {
        self.check()?;
        self.inner.download_entry(id, path, to, limit).await
    }

    async fn upload_replacing(
        &self,
        id: &ContainerId,
        paths: &[&str],
        tar: Vec<u8>,
    ) -> Result<(), SandboxError> {
        self.check()?;
        self.inner.upload_replacing(id, paths, tar).await
    }

    async fn download(
        &self,
        id: &ContainerId,
        path: &str,
        to: &Path,
        limit: u64,
    ) -> Result<Fetched, SandboxError> {
        self.check()?;
        self.inner.download(id, path, to, limit).await
    }

    async fn stop(&self, id: &ContainerId) -> Result<Stopped, SandboxError> {
        self.inner.stop(id).await
    }

    async fn upload_before_start(
        &self,
        id: &ContainerId,
        tar: &[u8],
    ) -> Result<bool, SandboxError> {
        self.check()?;
        self.inner.upload_before_start(id, tar).await
    }

    async fn halt(&self, id: &ContainerId) -> Result<(), SandboxError> {
        self.check()?;
        self.inner.halt(id).await
    }

    async fn disk_usage(
        &self,
        id: &ContainerId,
        count_files_to: u64,
    ) -> Result<Option<DiskUsage>, SandboxError> {
        self.check()?;
        self.inner.disk_usage(id, count_files_to).await
    }

    async fn freeze(&self, id: &ContainerId, owner: &Owner) -> Result<FrozenId, SandboxError> {
        self.check()?;
        self.inner.freeze(id, owner).await
    }

    async fn changes(&self, id: &ContainerId) -> Result<Vec<Change>, SandboxError> {
        self.check()?;
        self.inner.changes(id).await
    }

    async fn remove(&self, resource: &Resource) -> Result<(), SandboxError> {
        self.inner.remove(resource).await
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Listed>, SandboxError> {
        self.inner.list(selector).await
    }

    async fn status(&self, id: &ContainerId) -> Result<super::ContainerStatus, SandboxError> {
        self.check()?;
        self.inner.status(id).await
    }

    async fn gpus(&self) -> Result<u32, SandboxError> {
        self.check()?;
        self.inner.gpus().await
    }

    async fn network_available(&self, network: Network) -> Result<bool, SandboxError> {
        self.check()?;
        self.inner.network_available(network).await
    }

    async fn image_config(&self, image: &ImageRef) -> Result<ImageConfig, SandboxError> {
        self.check()?;
        self.inner.image_config(image).await
    }

    async fn image_id(&self, image: &ImageRef) -> Result<Option<String>, SandboxError> {
        self.check()?;
        self.inner.image_id(image).await
    }

    async fn loopback_listener(
        &self,
        id: &ContainerId,
        port: u16,
    ) -> Result<std::net::TcpListener, SandboxError> {
        self.check()?;
        self.inner.loopback_listener(id, port).await
    }

    fn harness_argv(&self, applet: &str, args: &[&str]) -> Vec<String> {
        self.inner.harness_argv(applet, args)
    }
}
