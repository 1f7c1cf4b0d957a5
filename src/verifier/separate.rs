//! `separate` mode (SPEC §5, Harbor's): the verifier runs in a fresh container of its **own**
//! image (`[verifier.environment]`, `tests/Dockerfile`, else the task's image as built), into
//! which arbiter copies only the task's artifacts (`artifacts = [...]` and `/logs/artifacts`)
//! from the agent's frozen filesystem. Nothing else the agent did — a wrapped interpreter, a
//! planted start-up hook, a process — exists where the verifier runs.

use std::time::Duration;

use crate::sandbox::{
    Base, ContainerId, ContainerSpec, ExecEnd, FrozenId, ImageRef, Resource, Role, Sandbox,
    SandboxError, Scope,
};
use crate::task::EnvironmentSpec;

use super::clean::{copy_subtree, parent};
use super::phase::{VerifyError, VerifyInput};

/// Bytes of artifacts copied into the verifier's container, at most.
const MAX_IMPORT_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// Harbor's collected-artifacts directory, always imported when the agent left it.
pub(crate) const LOGS_ARTIFACTS: &str = "/logs/artifacts";

/// What was copied into the separate verifier's container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Imported {
    /// Artifact paths copied in.
    pub paths: Vec<String>,
    /// Artifact paths the agent did not leave (or left unreadable, or over the budget).
    pub missing: Vec<String>,
}

/// The paths a separate verifier sees: the task's artifacts and `/logs/artifacts`.
pub(crate) fn artifact_paths(artifacts: &[String]) -> Vec<String> {
    let mut paths: Vec<String> = artifacts
        .iter()
        .filter(|p| p.starts_with('/'))
        .cloned()
        .collect();
    if !paths.iter().any(|p| p == LOGS_ARTIFACTS) {
        paths.push(LOGS_ARTIFACTS.to_string());
    }
    paths
}

/// A started container of the verifier's `image`, limited as `env` says, holding copies of
/// `paths` from the agent's `frozen` filesystem.
pub(crate) async fn prepare<S: Sandbox + ?Sized>(
    sb: &S,
    scope: &Scope,
    input: &VerifyInput<'_>,
    image: &ImageRef,
    env: &EnvironmentSpec,
    frozen: &FrozenId,
    paths: &[String],
) -> Result<(ContainerId, Imported), VerifyError> {
    let spec = ContainerSpec {
        base: Base::Image(image.clone()),
        limits: crate::trial::limits_of(env),
        workdir: env
            .workdir
            .clone()
            .or_else(|| input.task.environment.workdir.clone()),
        ..input.container(scope, frozen, Role::Verifier, input.network)
    };
    let id = scope.launch(sb, &spec).await?;
    // The source: a container of the agent's frozen filesystem, never started.
    let source_spec = input.container(scope, frozen, Role::Snapshot, input.network);
    let source = scope.create(sb, &source_spec).await?;
    let mut imported = Imported::default();
    let mut budget = MAX_IMPORT_BYTES;
    let scratch = input.path(".import.tar");
    for path in paths {
        let mkdir = sb.harness_argv("mkdir", &["-p", "--", parent(path)]);
        let made = sb
            .exec(
                &id,
                &input.exec(mkdir, Some("0".to_string()), Duration::from_secs(60), None),
            )
            .await?;
        if made.end != ExecEnd::Exited(0) {
            imported.missing.push(path.clone());
            continue;
        }
        // What the agent left under an artifact path is its doing: an engine error reading it
        // (a path made unreadable) leaves the artifact out, it is not the harness's failure.
        match copy_subtree(sb, &source, &id, path, &scratch, budget).await {
            Ok(Some(bytes)) => {
                budget = budget.saturating_sub(bytes);
                imported.paths.push(path.clone());
            }
            Ok(None) => imported.missing.push(path.clone()),
            Err(VerifyError::Sandbox(e @ (SandboxError::Cancelled | SandboxError::Io { .. }))) => {
                return Err(e.into());
            }
            Err(VerifyError::Sandbox(e)) => {
                tracing::debug!(
                    path,
                    "artifact not imported into the separate verifier: {e}"
                );
                imported.missing.push(path.clone());
            }
            Err(e) => return Err(e),
        }
    }
    let _ = std::fs::remove_file(&scratch);
    scope.remove(sb, Resource::Container(source)).await?;
    Ok((id, imported))
}

#[cfg(test)]
mod tests {
    use super::artifact_paths;

    #[test]
    fn logs_artifacts_are_always_imported_once() {
        assert_eq!(
            artifact_paths(&["/app/out.txt".to_string()]),
            vec!["/app/out.txt", "/logs/artifacts"]
        );
        assert_eq!(
            artifact_paths(&["/logs/artifacts".to_string(), "rel".to_string()]),
            vec!["/logs/artifacts"]
        );
    }
}
