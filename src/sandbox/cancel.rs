//! A [`Sandbox`] that stops cooperatively when the user cancels.
//!
//! Dropping a future in the middle of an engine call does not undo the call: a container
//! create already sent still lands on the engine, after any cleanup sweep has looked. So a
//! trial is never cancelled by dropping it. Instead every call goes through this wrapper:
//! once cancelled, new calls are refused with [`SandboxError::Cancelled`]; calls already in
//! flight complete (so what they create is registered and cleaned up); only the long waits
//! (an exec, an image build) are cut short — an exec by killing its container.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{
    Availability, Change, ContainerId, ContainerSpec, ContainerStatus, DiskUsage, Download,
    ExecOutcome, ExecSpec, Fetched, FrozenId, ImageConfig, ImageRef, ImageSpec, Listed, Network,
    Owner, Resource, Sandbox, SandboxError, Selector, Stopped,
};

pub struct Cancellable<S: ?Sized> {
    inner: Arc<S>,
    cancel: watch::Receiver<bool>,
}

impl<S: Sandbox + ?Sized> Cancellable<S> {
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

/// The wrapper's every trait method, generated: the `refused` ones are refused once the job
/// is cancelled, the `passed` ones always reach the backend (what cleans up after a cancel,
/// and what the job asks of the backend itself); the long waits are written out below them.
/// The unit test below fails when a trait method is in neither list, so no method is left
/// to the trait's default behind the wrapper's back.
macro_rules! cancellable {
    (
        refused { $( fn $r:ident(&self $(, $ra:ident: $rt:ty)*) -> $rr:ty; )* }
        passed { $( fn $p:ident(&self $(, $pa:ident: $pt:ty)*) -> $pr:ty; )* }
        $($special:tt)*
    ) => {
        #[async_trait::async_trait]
        impl<S: Sandbox + ?Sized> Sandbox for Cancellable<S> {
            $(
                async fn $r(&self $(, $ra: $rt)*) -> $rr {
                    self.check()?;
                    self.inner.$r($($ra),*).await
                }
            )*
            $(
                async fn $p(&self $(, $pa: $pt)*) -> $pr {
                    self.inner.$p($($pa),*).await
                }
            )*
            $($special)*
        }
    };
}

cancellable! {
    refused {
        fn create(&self, spec: &ContainerSpec) -> Result<ContainerId, SandboxError>;
        fn start(&self, id: &ContainerId) -> Result<(), SandboxError>;
        fn upload(&self, id: &ContainerId, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError>;
        fn upload_replacing(&self, id: &ContainerId, paths: &[&str], tar: Vec<u8>) -> Result<(), SandboxError>;
        fn upload_before_start(&self, id: &ContainerId, tar: &[u8]) -> Result<bool, SandboxError>;
        fn download(&self, id: &ContainerId, want: Download<'_>) -> Result<Fetched, SandboxError>;
        fn download_many(&self, id: &ContainerId, wants: &[Download<'_>]) -> Result<Vec<Result<Fetched, SandboxError>>, SandboxError>;
        fn collect_mounts(&self, id: &ContainerId) -> Result<(), SandboxError>;
        fn halt(&self, id: &ContainerId) -> Result<(), SandboxError>;
        fn disk_usage(&self, id: &ContainerId, count_files_to: u64) -> Result<Option<DiskUsage>, SandboxError>;
        fn freeze(&self, id: &ContainerId, owner: &Owner) -> Result<FrozenId, SandboxError>;
        fn changes(&self, id: &ContainerId) -> Result<Vec<Change>, SandboxError>;
        fn status(&self, id: &ContainerId) -> Result<ContainerStatus, SandboxError>;
        fn gpus(&self) -> Result<u32, SandboxError>;
        fn network_available(&self, network: Network) -> Result<Availability, SandboxError>;
        fn image_config(&self, image: &ImageRef) -> Result<ImageConfig, SandboxError>;
        fn image_id(&self, image: &ImageRef) -> Result<Option<String>, SandboxError>;
        fn loopback_listener(&self, id: &ContainerId, port: u16) -> Result<std::net::TcpListener, SandboxError>;
    }
    passed {
        fn stop(&self, id: &ContainerId) -> Result<Stopped, SandboxError>;
        fn remove(&self, resource: &Resource) -> Result<(), SandboxError>;
        fn list(&self, selector: &Selector) -> Result<Vec<Listed>, SandboxError>;
        fn preflight(&self) -> Vec<String>;
        fn finish(&self, trials: usize) -> ();
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn trials_waiting(&self, waiting: usize) {
        self.inner.trials_waiting(waiting)
    }

    fn harness_argv(&self, applet: &str, args: &[&str]) -> Vec<String> {
        self.inner.harness_argv(applet, args)
    }

    async fn prepare_image(&self, spec: &ImageSpec) -> Result<ImageRef, SandboxError> {
        self.check()?;
        tokio::select! {
            result = self.inner.prepare_image(spec) => result,
            // Abandoning a build creates no container; a finished image is only a cache entry.
            _ = cancelled(self.cancel.clone()) => Err(SandboxError::Cancelled),
        }
    }

    async fn exec(&self, id: &ContainerId, spec: &ExecSpec) -> Result<ExecOutcome, SandboxError> {
        self.check()?;
        self.cut_short(id, self.inner.exec(id, spec)).await
    }

    async fn exec_then_halt(
        &self,
        id: &ContainerId,
        spec: &ExecSpec,
        next: &str,
    ) -> Result<ExecOutcome, SandboxError> {
        self.check()?;
        self.cut_short(id, self.inner.exec_then_halt(id, spec, next))
            .await
    }
}

impl<S: Sandbox + ?Sized> Cancellable<S> {
    /// An exec, cut short by a cancel: its container killed, its bookkeeping let finish.
    async fn cut_short(
        &self,
        id: &ContainerId,
        exec: impl std::future::Future<Output = Result<ExecOutcome, SandboxError>>,
    ) -> Result<ExecOutcome, SandboxError> {
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
}

#[cfg(test)]
mod tests {
    /// The names of the `fn`s declared between `from` and the next line that is `to`.
    fn fns_in(source: &str, from: &str, to: &str) -> Vec<String> {
        let start = source.find(from).expect("block start");
        let rest = &source[start..];
        let end = rest.find(to).expect("block end");
        rest[..end]
            .split("fn ")
            .skip(1)
            .filter_map(|tail| {
                let name: String = tail
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                (!name.is_empty() && tail[name.len()..].starts_with('(')).then_some(name)
            })
            .collect()
    }

    #[test]
    fn the_wrapper_handles_every_trait_method() {
        let seam = include_str!("mod.rs");
        let trait_fns = fns_in(seam, "pub trait Sandbox:", "\n}\n");
        assert!(trait_fns.len() >= 25, "{trait_fns:?}");
        let wrapper = include_str!("cancel.rs");
        let handled = fns_in(wrapper, "cancellable! {", "\n}\n");
        for name in &trait_fns {
            assert!(
                handled.contains(name),
                "Cancellable does not handle Sandbox::{name}: add it to cancellable! in sandbox/cancel.rs"
            );
        }
        // And nothing it handles is unknown to the trait (a stale name would not compile).
        for name in &handled {
            assert!(trait_fns.contains(name), "{name} is not a trait method");
        }
    }

    #[test]
    fn the_method_lister_sees_a_missing_method() {
        let trait_src = "pub trait Sandbox: Send {\n    fn a(&self);\n    async fn b(&self) -> u8 {\n        0\n    }\n}\n";
        assert_eq!(
            super::tests::fns_in(trait_src, "pub trait Sandbox:", "\n}\n"),
            ["a", "b"]
        );
    }
}
