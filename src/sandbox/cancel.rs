//! A [`Sandbox`] that stops cooperatively when the user cancels.
//!
//! Dropping a future in the middle of an engine call does not undo the call: a container
//! create already sent still lands on the engine, after any cleanup sweep has looked. So a
//! trial is never cancelled by dropping it. Instead every call goes through this wrapper:
//! once cancelled, new calls are refused with [`SandboxError::Cancelled`]; calls already in
//! flight complete (so what they create is registered and cleaned up); only the long waits
//! (an exec, an image build) are cut short — an exec by killing its container.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{
    ContainerSpec, ContainerState, ExecOutcome, ExecSpec, Fetched, ImageSpec, Labelled, Sandbox,
    SandboxError,
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
    async fn ensure_image(&self, spec: &ImageSpec) -> Result<String, SandboxError> {
        self.check()?;
        tokio::select! {
            result = self.inner.ensure_image(spec) => result,
            // Abandoning a build creates no container; a finished image is only a cache entry.
            _ = cancelled(self.cancel.clone()) => Err(SandboxError::Cancelled),
        }
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, SandboxError> {
        self.check()?;
        self.inner.create(spec).await
    }

    async fn start(&self, id: &str) -> Result<(), SandboxError> {
        self.check()?;
        self.inner.start(id).await
    }

    async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, SandboxError> {
        self.check()?;
        let exec = self.inner.exec(id, spec);
        tokio::pin!(exec);
        tokio::select! {
            result = &mut exec => result,
            _ = cancelled(self.cancel.clone()) => {
                if let Err(e) = self.inner.kill(id).await {
                    tracing::debug!(id, "kill on cancel: {e}");
                }
                // The stream ends once the container is dead; let the exec finish its bookkeeping.
                let _ = tokio::time::timeout(Duration::from_secs(10), exec).await;
                Err(SandboxError::Cancelled)
            }
        }
    }

    async fn put_archive(&self, id: &str, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
        self.check()?;
        self.inner.put_archive(id, dest, tar).await
    }

    async fn get_archive(
        &self,
        id: &str,
        path: &str,
        to: &Path,
        limit: u64,
    ) -> Result<Fetched, SandboxError> {
        self.check()?;
        self.inner.get_archive(id, path, to, limit).await
    }

    async fn kill(&self, id: &str) -> Result<(), SandboxError> {
        self.inner.kill(id).await
    }

    async fn inspect(&self, id: &str) -> Result<ContainerState, SandboxError> {
        self.check()?;
        self.inner.inspect(id).await
    }

    async fn disk_usage(&self, id: &str) -> Result<Option<u64>, SandboxError> {
        self.check()?;
        self.inner.disk_usage(id).await
    }

    async fn commit(
        &self,
        id: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<String, SandboxError> {
        self.check()?;
        self.inner.commit(id, labels).await
    }

    async fn remove_container(&self, id: &str) -> Result<(), SandboxError> {
        self.inner.remove_container(id).await
    }

    async fn remove_image(&self, id: &str) -> Result<(), SandboxError> {
        self.inner.remove_image(id).await
    }

    async fn list_containers(&self, labels: &[String]) -> Result<Vec<Labelled>, SandboxError> {
        self.inner.list_containers(labels).await
    }

    async fn list_images(&self, labels: &[String]) -> Result<Vec<Labelled>, SandboxError> {
        self.inner.list_images(labels).await
    }
}
