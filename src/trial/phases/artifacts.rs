//! What the agent left at fixed paths, fetched into the trial's `artifacts/`: the task's
//! `[artifacts]`, Harbor's `/logs/artifacts`, and the byte limits of each. Shared by the
//! environment, collect, logs and steps phases, below all of them.

use crate::sandbox::{ContainerId, ExtractReport, FetchResult, Sandbox};
use crate::trial::plan::Phase;
use crate::trial::record::{ArtifactEntry, ArtifactStatus};

use super::{Ctx, Infra, infra, safe_relative};

/// Bytes of the agent's `/logs/agent` fetched, at most.
pub(crate) const AGENT_LOGS_LIMIT: u64 = 64 * 1024 * 1024;
/// Bytes of one artifact path fetched, at most.
pub(crate) const ARTIFACT_LIMIT: u64 = 256 * 1024 * 1024;
/// Harbor's collected-artifacts directory: anyone in the agent's container may write there,
/// and what it holds is collected like an `[artifacts]` path.
pub(crate) const LOGS_ARTIFACTS: &str = "/logs/artifacts";

/// Fetch `path` into `artifacts/`, describing what was found.
pub(crate) async fn fetch_artifact<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    path: &str,
) -> Result<(ArtifactEntry, Option<ExtractReport>), Infra> {
    let fetched = match safe_relative(path) {
        Some(relative) => {
            let dest = ctx.path("artifacts").join(relative);
            Some(
                ctx.fetch(id, path, &dest, ARTIFACT_LIMIT)
                    .await
                    .map_err(infra(Phase::Collect))?,
            )
        }
        None => None,
    };
    Ok(artifact_entry(path, fetched))
}

/// What was found at `path` (`None`: not a path arbiter fetches).
pub(crate) fn artifact_entry(
    path: &str,
    fetched: Option<FetchResult>,
) -> (ArtifactEntry, Option<ExtractReport>) {
    let entry = |status, detail: Option<String>| ArtifactEntry {
        path: path.to_string(),
        status,
        size: None,
        sha256: None,
        detail,
    };
    let Some(fetched) = fetched else {
        return (
            entry(
                ArtifactStatus::Failed,
                Some("not a plain absolute path (no `..`)".to_string()),
            ),
            None,
        );
    };
    match fetched {
        FetchResult::Missing => (entry(ArtifactStatus::Missing, None), None),
        FetchResult::Failed(why) => (entry(ArtifactStatus::Failed, Some(why)), None),
        FetchResult::Ok(report) => {
            let size = report.files.iter().map(|f| f.size).sum();
            let single = report.files.iter().find(|f| f.relative.is_empty());
            let mut notes: Vec<String> = report
                .skipped
                .iter()
                .map(|s| format!("{}: {}", s.path, s.reason))
                .collect();
            if report.truncated {
                notes.push("truncated".to_string());
            }
            let found = ArtifactEntry {
                path: path.to_string(),
                status: ArtifactStatus::Ok,
                size: Some(size),
                sha256: single.map(|f| f.sha256.clone()),
                detail: (!notes.is_empty()).then(|| notes.join("; ")),
            };
            (found, Some(report))
        }
    }
}

/// Collect `/logs/artifacts` into the trial's `artifacts/logs/artifacts/` after the agent
/// phase, like an `[artifacts]` path: the entry for the record when the directory held
/// anything (or could not be read), `None` when it is empty, gone, or already listed in the
/// task's `artifacts`. Called by the collect phase after the task's own artifacts.
/// `prefetched`: what the collect phase already fetched of it (with `/logs/agent`).
pub(crate) async fn collect_logs_artifacts<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    prefetched: Option<FetchResult>,
) -> Result<Option<ArtifactEntry>, Infra> {
    if ctx
        .plan
        .task
        .artifacts
        .iter()
        .any(|p| p.trim_end_matches('/') == LOGS_ARTIFACTS)
    {
        return Ok(None);
    }
    let (entry, report) = match prefetched {
        Some(fetched) => artifact_entry(LOGS_ARTIFACTS, Some(fetched)),
        None => fetch_artifact(ctx, id, LOGS_ARTIFACTS).await?,
    };
    Ok(match (&entry.status, report) {
        (ArtifactStatus::Missing, _) => None,
        (ArtifactStatus::Ok, Some(r)) if r.files.is_empty() && r.skipped.is_empty() => None,
        _ => Some(entry),
    })
}
