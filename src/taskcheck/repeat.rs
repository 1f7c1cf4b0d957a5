//! Re-verification of a kept frozen filesystem: how `arbiter tasks check` measures whether a
//! task's verifier is deterministic. The oracle's trial keeps a second copy of its frozen
//! filesystem (see [`keep_snapshot`]); the verifier phase (`verifier::verify`, the same code a
//! trial runs) is run on it again N-1 times, each run in its own directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sandbox::{
    ContainerId, FrozenId, Network, Owner, Resource, Role, Sandbox, SandboxError, Scope, Selector,
};
use crate::task::{NetworkMode, Task};
use crate::trial::TrialPlan;
use crate::verifier::{self, Target, VerifierOutcome, VerifyInput};

/// Suffix of the job label carried by kept snapshots: the job's own end-of-run sweep (which
/// removes everything labelled with the job) leaves them alone; `tasks check` removes them
/// once the repeats are done, and `arbiter gc` once the process that made them is gone.
pub(crate) const KEPT_SUFFIX: &str = ".kept";

/// The label under which snapshots of `job_label`'s trials are kept.
pub(crate) fn kept_label(job_label: &str) -> String {
    format!("{job_label}{KEPT_SUFFIX}")
}

/// Called by the collect phase right after it froze the agent's container (still there,
/// stopped): when the trial's agent is in `settings.keep_snapshots`, freeze it once more under
/// the kept label, outside the trial's scope, so it outlives the trial. No-op otherwise.
pub(crate) async fn keep_snapshot<S: Sandbox + ?Sized>(
    sb: &S,
    plan: &TrialPlan,
    scope: &Scope,
    container: &ContainerId,
) -> Result<(), SandboxError> {
    if !plan.settings.keep_snapshots.contains(&plan.agent.name) {
        return Ok(());
    }
    let mut owner = scope.owner(Role::Snapshot);
    owner.job = kept_label(&owner.job);
    let frozen = sb.freeze(container, &owner).await?;
    tracing::debug!(trial = plan.id, %frozen, "kept the frozen filesystem for re-verification");
    Ok(())
}

/// The kept snapshot of `trial` in the job labelled `job_label`, if it is still there.
pub(crate) async fn find_kept<S: Sandbox + ?Sized>(
    sb: &S,
    job_label: &str,
    trial: &str,
) -> Result<Option<FrozenId>, SandboxError> {
    let selector = Selector::Trial {
        job: kept_label(job_label),
        trial: trial.to_string(),
    };
    Ok(sb.list(&selector).await?.into_iter().find_map(as_frozen))
}

/// A listed kept snapshot as a frozen filesystem. A commit inherits the labels of the image it
/// was made from, so a snapshot of a built environment also carries `arbiter.cache` and is
/// listed as an `Image`; under the kept label every image is a kept snapshot.
fn as_frozen(listed: crate::sandbox::Listed) -> Option<FrozenId> {
    match listed.resource {
        Resource::Frozen(f) => Some(f),
        Resource::Image(image) => Some(FrozenId::new(image.as_str())),
        Resource::Container(_) => None,
    }
}

/// Remove every kept snapshot of the job labelled `job_label`; how many were removed.
pub(crate) async fn reap_kept<S: Sandbox + ?Sized>(sb: &S, job_label: &str) -> usize {
    let found = match sb.list(&Selector::Job(kept_label(job_label))).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!("listing kept snapshots: {e}");
            return 0;
        }
    };
    let mut removed = 0;
    for frozen in found.into_iter().filter_map(as_frozen) {
        match sb.remove(&Resource::Frozen(frozen.clone())).await {
            Ok(()) => removed += 1,
            Err(e) => tracing::warn!(%frozen, "removing a kept snapshot: {e}"),
        }
    }
    removed
}

/// The job knobs a re-verification uses (the same the trial used).
#[derive(Debug, Clone)]
pub(crate) struct RepeatSettings {
    pub job_label: String,
    pub pass_threshold: f64,
    pub timeout_multiplier: f64,
    pub log_cap_bytes: u64,
    pub grace: std::time::Duration,
    /// Extra labels (the owning process, for `gc`).
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Why a re-verification failed (the harness's failure, never the task's).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RepeatError {
    #[error("re-verifying {trial}: {message}")]
    Verify { trial: String, message: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Run `task`'s verifier on `frozen` (the oracle's kept filesystem of trial `trial`) once, with
/// its logs and reward under `dir/verifier/`, and the outcome saved as `dir/outcome.json`. A
/// run whose `outcome.json` exists is not run again (resumable); its saved outcome is returned.
///
/// Call once per repeat with `dir = <job>/check/repeats/<trial>/<n>`; containers are labelled
/// with the job and the trial (role `verifier`) and removed before this returns.
pub(crate) async fn reverify<S: Sandbox + ?Sized>(
    sb: Arc<S>,
    settings: &RepeatSettings,
    task: &Task,
    trial: &str,
    frozen: &FrozenId,
    dir: &Path,
) -> Result<VerifierOutcome, RepeatError> {
    let saved = dir.join("outcome.json");
    if let Ok(bytes) = std::fs::read(&saved)
        && let Ok(outcome) = serde_json::from_slice::<VerifierOutcome>(&bytes)
    {
        return Ok(outcome);
    }
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RepeatError::Io { path, source }
    };
    let _ = std::fs::remove_dir_all(dir);
    let logs = dir.join("verifier");
    std::fs::create_dir_all(&logs).map_err(io(&logs))?;
    let scope = Scope::new(Owner {
        job: settings.job_label.clone(),
        trial: trial.to_string(),
        role: Role::Verifier,
        extra: settings.labels.clone(),
    });
    let env = &task.environment;
    let egress_events = std::sync::Mutex::new(Vec::new());
    let input = VerifyInput {
        task,
        dir,
        limits: crate::trial::limits_of(env),
        network: network(task.verifier.network),
        pass_threshold: settings.pass_threshold,
        timeout_multiplier: settings.timeout_multiplier,
        log_cap_bytes: settings.log_cap_bytes,
        grace: settings.grace,
        // The attempts through its proxy are not kept: only the trial's own run records them.
        egress: crate::verifier::VerifierEgress::for_task(task, &egress_events),
    };
    let result = verifier::verify(&*sb, &scope, &input, &Target::Frozen(frozen.clone())).await;
    if let Err(message) = scope.cleanup(&*sb, result.is_err()).await {
        tracing::warn!(trial, "cleaning up a re-verification: {message}");
    }
    let outcome = result.map_err(|e| RepeatError::Verify {
        trial: trial.to_string(),
        message: e.to_string(),
    })?;
    let bytes = serde_json::to_vec_pretty(&outcome).map_err(|e| RepeatError::Io {
        path: saved.clone(),
        source: e.into(),
    })?;
    crate::job::write_atomic(&saved, &bytes).map_err(|e| RepeatError::Io {
        path: saved.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(outcome)
}

/// The verifier's network, as a trial's verifier phase chooses it.
fn network(mode: NetworkMode) -> Network {
    match mode {
        NetworkMode::NoNetwork | NetworkMode::Allowlist => Network::None,
        NetworkMode::Host => Network::Host,
        NetworkMode::Bridge => Network::Bridge,
    }
}
