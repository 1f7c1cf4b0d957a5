//! `clean` mode (SPEC §5): a fresh container of the **original** environment image, onto which
//! the agent's changes are replayed from its frozen filesystem — except the integrity
//! findings, which are left out. The verifier then sees the agent's work with the image's own
//! interpreters, tools and libraries.

use std::path::Path;

use crate::sandbox::{
    Base, ContainerId, ContainerSpec, Fetched, FrozenId, ImageRef, Resource, Role, Sandbox, Scope,
};

use super::phase::{VerifyError, VerifyInput};

/// Bytes of the agent's changes replayed, at most (the rest is left out and counted).
const MAX_REPLAY_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// Deleted paths removed per harness command.
const DELETE_BATCH: usize = 256;

/// What was replayed onto the clean container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Replayed {
    pub subtrees: usize,
    pub deleted: usize,
    /// Paths left out because they are, or hold, integrity findings.
    pub left_out: Vec<String>,
    /// Subtrees not replayed because the byte budget ran out or they could not be read.
    pub unreadable: Vec<String>,
}

/// Copy the subtree at `path` of container `from` to the same place in container `to`, through
/// the host file `scratch`, at most `budget` bytes. Gives the bytes copied, or `None` when the
/// path does not exist or is over the budget. The parent of `path` must exist in `to`.
pub(super) async fn copy_subtree<S: Sandbox + ?Sized>(
    sb: &S,
    from: &ContainerId,
    to: &ContainerId,
    path: &str,
    scratch: &Path,
    budget: u64,
) -> Result<Option<u64>, VerifyError> {
    match sb
        .download(from, crate::sandbox::Download::whole(path, scratch, budget))
        .await?
    {
        Fetched::Archive { bytes } => {
            let tar = std::fs::read(scratch).map_err(|source| VerifyError::Io {
                path: scratch.to_path_buf(),
                source,
            })?;
            sb.upload(to, parent(path), tar).await?;
            Ok(Some(bytes))
        }
        Fetched::NotFound | Fetched::TooLarge { .. } => Ok(None),
    }
}

/// The directory holding `path` (`/` for a top-level path).
pub(super) fn parent(path: &str) -> &str {
    match path.trim_end_matches('/').rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Whether `path` is `root` or lies beneath it.
pub(crate) fn at_or_under(path: &str, root: &str) -> bool {
    path == root || path.starts_with(&format!("{}/", root.trim_end_matches('/')))
}

/// A started container of `image` holding the agent's changes from `frozen` (`roots`, the
/// changed subtrees; `deleted`, the paths it removed), except everything at, under or above a
/// path in `findings`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn prepare<S: Sandbox + ?Sized>(
    sb: &S,
    scope: &Scope,
    input: &VerifyInput<'_>,
    image: &ImageRef,
    frozen: &FrozenId,
    roots: &[String],
    deleted: &[String],
    findings: &[String],
) -> Result<(ContainerId, Replayed), VerifyError> {
    let clean = ContainerSpec {
        base: Base::Image(image.clone()),
        ..input.container(scope, frozen, Role::Verifier, input.network)
    };
    let id = scope.launch(sb, &clean).await?;
    // The source: a container of the agent's frozen filesystem, never started.
    let source_spec = input.container(scope, frozen, Role::Snapshot, input.network);
    let source = scope.create(sb, &source_spec).await?;
    let mut replayed = Replayed::default();
    let mut budget = MAX_REPLAY_BYTES;
    let scratch = input.path(".replay.tar");
    for root in roots {
        if left_out(root, findings) {
            replayed.left_out.push(root.clone());
            continue;
        }
        match copy_subtree(sb, &source, &id, root, &scratch, budget).await? {
            Some(bytes) => {
                budget = budget.saturating_sub(bytes);
                replayed.subtrees += 1;
            }
            None => replayed.unreadable.push(root.clone()),
        }
    }
    let _ = std::fs::remove_file(&scratch);
    scope.remove(sb, Resource::Container(source)).await?;
    replayed.deleted = delete_paths(sb, input, &id, deleted, findings).await?;
    Ok((id, replayed))
}

/// Whether the changed subtree `root` is left out because a finding lies at, under or above it.
pub(crate) fn left_out(root: &str, findings: &[String]) -> bool {
    findings
        .iter()
        .any(|f| at_or_under(f, root) || at_or_under(root, f))
}

/// Remove the agent's `deleted` paths (except those at or under a finding) in the started
/// container `id`, with the harness's `rm`; gives how many. Also used when regrading from a
/// recorded change set (`crate::regrade`).
pub(crate) async fn delete_paths<S: Sandbox + ?Sized>(
    sb: &S,
    input: &VerifyInput<'_>,
    id: &ContainerId,
    deleted: &[String],
    findings: &[String],
) -> Result<usize, VerifyError> {
    let mut removed = 0;
    let gone: Vec<&str> = deleted
        .iter()
        .filter(|d| !findings.iter().any(|f| at_or_under(d, f)))
        .map(String::as_str)
        .collect();
    for batch in gone.chunks(DELETE_BATCH) {
        let mut args = vec!["-rf", "--"];
        args.extend(batch.iter().copied());
        let argv = sb.harness_argv("rm", &args);
        sb.exec(
            id,
            &input.exec(
                argv,
                Some("0".to_string()),
                std::time::Duration::from_secs(60),
                None,
            ),
        )
        .await?;
        removed += batch.len();
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::{at_or_under, parent};

    #[test]
    fn parents() {
        assert_eq!(parent("/app"), "/");
        assert_eq!(parent("/app/out/"), "/app");
        assert_eq!(parent("/logs/artifacts"), "/logs");
        assert_eq!(parent("app"), "/");
    }

    #[test]
    fn paths_at_or_under() {
        assert!(at_or_under("/usr/local/bin/python3", "/usr/local/bin"));
        assert!(at_or_under("/usr/local/bin", "/usr/local/bin"));
        assert!(!at_or_under("/usr/local/binx", "/usr/local/bin"));
        assert!(!at_or_under("/usr/local", "/usr/local/bin"));
    }
}
