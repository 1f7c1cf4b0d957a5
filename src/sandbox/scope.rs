//! A trial's resources: everything created through a [`Scope`] is registered the moment the
//! backend returns its id, and [`Scope::cleanup`] removes it on every path (plus, after a
//! cancellation or failure, a sweep by owner for a create that was still in flight).

use std::sync::Mutex;

use super::{
    ContainerId, ContainerSpec, FrozenId, Owner, Resource, Role, Sandbox, SandboxError, Selector,
};

#[derive(Debug)]
pub(crate) struct Scope {
    owner: Owner,
    held: Mutex<Vec<Resource>>,
}

impl Scope {
    /// A scope for resources of `owner`'s job and trial (the owner's role is set per call).
    pub(crate) fn new(owner: Owner) -> Self {
        Scope {
            owner,
            held: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn owner(&self, role: Role) -> Owner {
        self.owner.with_role(role)
    }

    fn hold(&self, resource: Resource) {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(resource);
    }

    /// Resources still held (for tests and diagnostics).
    pub(crate) fn held(&self) -> Vec<Resource> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Create and start a container, registered before it is started.
    pub(crate) async fn launch<S: Sandbox + ?Sized>(
        &self,
        sb: &S,
        spec: &ContainerSpec,
    ) -> Result<ContainerId, SandboxError> {
        let id = self.create(sb, spec).await?;
        sb.start(&id).await?;
        Ok(id)
    }

    /// Create a container without starting it (registered).
    pub(crate) async fn create<S: Sandbox + ?Sized>(
        &self,
        sb: &S,
        spec: &ContainerSpec,
    ) -> Result<ContainerId, SandboxError> {
        let id = sb.create(spec).await?;
        self.hold(Resource::Container(id.clone()));
        Ok(id)
    }

    /// Freeze a stopped container's filesystem (registered).
    pub(crate) async fn freeze<S: Sandbox + ?Sized>(
        &self,
        sb: &S,
        id: &ContainerId,
        role: Role,
    ) -> Result<FrozenId, SandboxError> {
        let frozen = sb.freeze(id, &self.owner(role)).await?;
        self.hold(Resource::Frozen(frozen.clone()));
        Ok(frozen)
    }

    /// Remove one resource now (it is forgotten once removed).
    pub(crate) async fn remove<S: Sandbox + ?Sized>(
        &self,
        sb: &S,
        resource: Resource,
    ) -> Result<(), SandboxError> {
        sb.remove(&resource).await?;
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|r| r != &resource);
        Ok(())
    }

    /// Remove everything held; with `sweep`, also anything the backend lists for this trial.
    /// Containers go before the frozen filesystems they may have started from.
    pub(crate) async fn cleanup<S: Sandbox + ?Sized>(
        &self,
        sb: &S,
        sweep: bool,
    ) -> Result<(), String> {
        let mut resources = std::mem::take(
            &mut *self
                .held
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        let mut errors = Vec::new();
        if sweep {
            let selector = Selector::Trial {
                job: self.owner.job.clone(),
                trial: self.owner.trial.clone(),
            };
            match sb.list(&selector).await {
                Ok(found) => resources.extend(found.into_iter().map(|l| l.resource)),
                Err(e) => errors.push(e.to_string()),
            }
        }
        resources.sort();
        resources.dedup();
        for resource in &resources {
            if let Err(e) = sb.remove(resource).await {
                errors.push(e.to_string());
                self.hold(resource.clone());
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}
