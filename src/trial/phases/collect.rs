//! The collect phase: every agent process is stopped (unless the verifier checks the running
//! container), then what the agent left — logs, outcome record, trajectory, artifacts,
//! deliverables, completion record, control root — is fetched without trusting it, and the
//! agent's filesystem is frozen for the verifier.

use std::path::Path;

use crate::agent::{Adapter, AdapterReads, AgentPlan};
use crate::outcome::{
    Claim, ClaimSource, ClaimStatus, CompletionRecord, CompletionStatus, CompletionSummary,
    FileCheck, FileStatus, collect_claim,
};
use crate::sandbox::{
    ContainerId, ExecEnd, FetchResult, Resource, Role, Sandbox, SandboxError, Stopped,
};
use crate::task::VerifierMode;
use crate::trial::plan::Phase;
use crate::trial::record::{ArtifactEntry, ArtifactStatus, ControlRootInfo};
use crate::verifier::Target;

use super::super::control;
use super::agent::Storage;
use super::artifacts::fetch_artifact;
use super::changes::bench_skips_change_set;
use super::changes::{self, ChangeSet};
use super::{AgentDone, Ctx, EnvReady, Infra, infra, read_capped};

const OUTCOME_LIMIT: u64 = 1024 * 1024;
/// At most this many extra paths named by a completion record are checked.
const MAX_OBSERVED_PATHS: usize = 16;

/// What the agent left, and what the verifier starts from.
#[derive(Debug)]
pub(crate) struct Collected {
    /// Known when the agent's container was stopped here (not in live mode).
    pub stopped: Option<Stopped>,
    pub storage: Storage,
    pub claim: Claim,
    pub artifacts: Vec<ArtifactEntry>,
    pub trajectory: Option<ArtifactEntry>,
    pub completion: Option<CompletionSummary>,
    /// The completion record, when valid (for the audit).
    pub completion_record: Option<CompletionRecord>,
    pub deliverables: Vec<FileCheck>,
    pub observed_files: Vec<FileCheck>,
    pub control_root: Option<ControlRootInfo>,
    /// `None` when the agent's filesystem cannot be verified (see `storage`, `unverifiable`).
    pub target: Option<Target>,
    /// What the agent changed, and the integrity findings among it.
    pub changes: Option<ChangeSet>,
    /// Why the agent's filesystem is not verified (its own doing, e.g. millions of files).
    pub unverifiable: Option<String>,
}

/// `steps`: the container ran Harbor steps (this collects after the last one).
pub(crate) async fn run<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
    done: &AgentDone,
    steps: bool,
) -> Result<Collected, Infra> {
    let fail = || infra(Phase::Collect);
    let id = &env.container;
    let live = ctx.plan.task.verifier.mode == VerifierMode::Live;
    let mut out = Collected {
        stopped: None,
        storage: done.storage,
        claim: Claim::missing(),
        artifacts: Vec::new(),
        trajectory: None,
        completion: None,
        completion_record: None,
        deliverables: Vec::new(),
        observed_files: Vec::new(),
        control_root: None,
        target: None,
        changes: None,
        unverifiable: None,
    };
    if !live {
        let stopped = ctx.sb.stop(id).await.map_err(fail())?;
        out.stopped = Some(stopped);
        if let Some(lost) = stopped.lost {
            // Nothing of the agent's filesystem can be read any more, through the agent's
            // own doing: no claim, no artifacts, no verifier — and no infra error either.
            out.unverifiable = Some(format!(
                "not run: {lost} while the agent ran, so its filesystem could not be read"
            ));
            return Ok(out);
        }
    }
    // The last word on the agent's writes (in snapshot mode, after every process is gone).
    out.storage.measure(ctx.sb, id).await;

    let logs_dir = ctx.path("agent/logs");
    let (agent_logs, mut logs_artifacts) = super::logs::fetch_logs(ctx, id, &logs_dir).await?;
    if let FetchResult::Failed(why) = agent_logs {
        tracing::warn!(trial = ctx.plan.id, "agent logs not collected: {why}");
    }
    let plan = &env.agent;
    out.claim = match read_outcome(ctx, id, &plan.outcome_path).await? {
        Ok(bytes) => collect_claim(bytes.as_deref(), &done.stderr),
        Err(why) => Claim {
            status: ClaimStatus::Invalid,
            source: Some(ClaimSource::File),
            error: Some(why),
            ..collect_claim(None, &done.stderr)
        },
    };
    if out.claim.status == ClaimStatus::Missing
        && let Some(adapter) = plan.adapter
    {
        out.claim = adapter_claim(ctx, adapter, done);
    }
    out.trajectory = collect_trajectory(ctx, plan);
    (out.completion, out.completion_record) = collect_completion_record(ctx);
    for path in &ctx.plan.task.artifacts {
        let (entry, _) = fetch_artifact(ctx, id, path).await?;
        out.artifacts.push(entry);
    }
    // harbor-run (issue 13): Harbor's `/logs/artifacts`, recorded when it holds anything.
    if let Some(entry) =
        super::artifacts::collect_logs_artifacts(ctx, id, logs_artifacts.take()).await?
    {
        out.artifacts.push(entry);
    }
    check_deliverables(ctx, id, &mut out).await?;
    let manifest = serde_json::to_vec_pretty(&out.artifacts).map_err(infra(Phase::Collect))?;
    std::fs::write(ctx.path("artifacts/manifest.json"), manifest).map_err(infra(Phase::Collect))?;
    if env.control_dir.is_some() {
        // A backend that copied the control root in copies it back first (Kubernetes).
        ctx.sb.collect_mounts(id).await.map_err(fail())?;
    }
    out.control_root = save_control_root(ctx, env)?;

    if let Some(note) = &done.claim_note
        && out.claim.status == ClaimStatus::Missing
    {
        out.claim.error = Some(note.clone());
    }
    if let Some(message) = &plan.record_required
        && done.claim_note.is_none()
        && done.end == Some(ExecEnd::Exited(0))
        && out.claim.status == ClaimStatus::Missing
    {
        return Err(Infra {
            phase: Phase::Agent,
            message: message.clone(),
        });
    }
    if out.storage.is_over() {
        // Freezing would copy every byte (sparse files in full) to the backend's disk.
        ctx.sb.stop(id).await.map_err(fail())?;
        return Ok(out);
    }
    let recorded = if bench_skips_change_set(ctx.plan) {
        None
    } else {
        match changes::record(ctx, &ctx.plan.settings.image_indexes, &env.image, id).await {
            Ok(set) => Some(set),
            // A backend that cannot list the changes yet (Kubernetes): no change set and so
            // no integrity verdict, rather than no trial. Tasks that need one (`clean`,
            // `enforce`) are refused before the job starts.
            Err(SandboxError::Unsupported { op, backend }) => {
                tracing::debug!(
                    trial = ctx.plan.id,
                    "no change set: {op} not supported by {backend}"
                );
                None
            }
            Err(e) => return Err(fail()(e)),
        }
    };
    if let Some(mut set) = recorded {
        // The file bound on the change list: the bound itself when the backend could not
        // count while the agent ran, a second check when it could. More changed paths than
        // `max_files` and the agent's filesystem is not frozen or verified (the freeze alone
        // would take minutes): the agent's result, not the harness's failure.
        let listed = set.listed as u64;
        out.storage.note_listed(listed);
        if listed > out.storage.max_files {
            out.unverifiable = Some(format!(
                "not run: the agent changed {listed} paths in its container's filesystem, over the file limit of {} (max_files), so its filesystem was not snapshotted",
                out.storage.max_files
            ));
            crate::trial::content::discard_content(
                &ctx.plan.dir,
                &mut set.content,
                "its filesystem was not verified (too many changed paths)",
            );
            out.changes = Some(set);
            ctx.sb.stop(id).await.map_err(fail())?;
            return Ok(out);
        }
        out.changes = Some(set);
    }
    out.target = Some(if live {
        Target::Live(id.clone())
    } else if !steps && restartable(ctx, env, out.changes.as_ref()) {
        crate::taskcheck::keep_snapshot(ctx.sb, ctx.plan, ctx.scope, id)
            .await
            .map_err(fail())?;
        Target::Stopped(id.clone())
    } else {
        let frozen = ctx
            .scope
            .freeze(ctx.sb, id, Role::Snapshot)
            .await
            .map_err(fail())?;
        crate::taskcheck::keep_snapshot(ctx.sb, ctx.plan, ctx.scope, id)
            .await
            .map_err(fail())?;
        ctx.scope
            .remove(ctx.sb, Resource::Container(id.clone()))
            .await
            .map_err(fail())?;
        Target::Frozen(frozen)
    });
    Ok(out)
}

/// Whether the verifier can run in the agent's own stopped container, restarted, instead of a
/// fresh container of its frozen filesystem (issue 16: no commit, no second container, no
/// image to remove). The two are the same to the verifier when the agent's container was
/// created as the verifier's would be: the same network (and no egress proxy), no mount (an
/// agent cache, a control root), no sidecar in its network namespace, no Harbor steps (the
/// caller's to say: their container keeps the first step's network); and
/// nothing else needs the frozen filesystem (validation commands, `clean` mode for findings
/// under `integrity = "enforce"`). Either way every agent process is gone (the container was
/// stopped) and the verifier sees the agent's final filesystem, which nothing of the agent's
/// can change any more (SPEC §5).
fn restartable<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
    changes: Option<&ChangeSet>,
) -> bool {
    use crate::task::{IntegrityMode, NetworkMode};
    let task = &ctx.plan.task;
    let agent_network = super::egress::agent_network(ctx.plan).0;
    let enforced = task.verifier.integrity == IntegrityMode::Enforce
        && changes.is_none_or(|c| !c.findings.is_empty());
    task.verifier.mode == VerifierMode::Snapshot
        && !enforced
        && task
            .completion
            .as_ref()
            .is_none_or(|c| c.validation.is_empty())
        && task.environment.compose.is_none()
        && env.agent.ro_mounts.is_empty()
        && env.agent.control.is_none()
        && agent_network != NetworkMode::Allowlist
        && task.verifier.network != NetworkMode::Allowlist
        && super::sandbox_network(agent_network) == super::sandbox_network(task.verifier.network)
}

/// Check the task's declared deliverables (saved as artifacts) and any absolute paths the
/// agent's completion record names.
async fn check_deliverables<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    out: &mut Collected,
) -> Result<(), Infra> {
    let declared = ctx
        .plan
        .task
        .completion
        .as_ref()
        .map(|c| c.deliverables.clone())
        .unwrap_or_default();
    for d in &declared {
        let check = check_file(
            ctx,
            id,
            out,
            &d.path,
            d.goal.clone(),
            d.non_empty,
            d.sha256.clone(),
        )
        .await?;
        out.deliverables.push(check);
    }
    let named = out
        .completion_record
        .as_ref()
        .map(CompletionRecord::named_paths)
        .unwrap_or_default();
    for path in named
        .into_iter()
        .filter(|p| !declared.iter().any(|d| &d.path == p))
        .take(MAX_OBSERVED_PATHS)
    {
        let check = check_file(ctx, id, out, &path, None, true, None).await?;
        out.observed_files.push(check);
    }
    Ok(())
}

async fn check_file<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    out: &mut Collected,
    path: &str,
    goal: Option<String>,
    non_empty: bool,
    expected: Option<String>,
) -> Result<FileCheck, Infra> {
    let (entry, report) = fetch_artifact(ctx, id, path).await?;
    let status = match (&entry.status, &report) {
        (ArtifactStatus::Missing, _) => FileStatus::Missing,
        (ArtifactStatus::Failed, _) | (_, None) => FileStatus::Unreadable,
        (ArtifactStatus::Ok, Some(report)) => {
            let single = report.files.iter().find(|f| f.relative.is_empty());
            match (single, &expected) {
                (None, Some(_)) => FileStatus::Unreadable,
                (None, None) if report.files.is_empty() && !report.skipped.is_empty() => {
                    FileStatus::Unreadable
                }
                (None, None) if non_empty && report.files.is_empty() => FileStatus::Empty,
                (Some(f), _) if non_empty && f.size == 0 => FileStatus::Empty,
                (Some(f), Some(want)) if &f.sha256 != want => FileStatus::HashMismatch,
                _ => FileStatus::Ok,
            }
        }
    };
    let detail = match status {
        FileStatus::Unreadable => entry.detail.clone().or_else(|| {
            Some(if expected.is_some() {
                "not a regular file, so it has no sha256".to_string()
            } else {
                "no regular file could be read back".to_string()
            })
        }),
        _ => entry.detail.clone(),
    };
    if !out.artifacts.iter().any(|a| a.path == path) {
        out.artifacts.push(entry.clone());
    }
    Ok(FileCheck {
        path: path.to_string(),
        goal,
        status,
        size: entry.size,
        sha256: entry.sha256,
        expected_sha256: expected,
        detail,
    })
}

/// Copy the agent's trajectory (already fetched with `/logs/agent`) to `agent/`.
/// A preset's claim read from its native end state (`claim.source = "adapter"`): its stdout
/// and stderr as logged, and the file it reads under `/logs/agent/` as collected.
fn adapter_claim<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    adapter: Adapter,
    done: &AgentDone,
) -> Claim {
    let cap = ctx.plan.settings.log_cap_bytes;
    let stdout = read_capped(&ctx.path("agent/stdout.log"), cap);
    let file = match adapter.reads() {
        AdapterReads::Output => None,
        AdapterReads::File(path) => path
            .strip_prefix("/logs/agent/")
            .filter(|rel| !rel.contains(".."))
            .and_then(|rel| std::fs::read(ctx.path("agent/logs").join(rel)).ok()),
    };
    adapter.claim(&done.end_for_adapter(&stdout, file.as_deref()))
}

fn collect_trajectory<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    plan: &AgentPlan,
) -> Option<ArtifactEntry> {
    let path = plan.trajectory_path.clone()?;
    let rel = path
        .strip_prefix("/logs/agent/")
        .filter(|r| !r.contains(".."))?;
    let src = ctx.path("agent/logs").join(rel);
    let name = Path::new(rel)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "trajectory.json".to_string());
    Some(match std::fs::symlink_metadata(&src) {
        Ok(meta) if meta.is_file() => {
            let copied = std::fs::copy(&src, ctx.path("agent").join(&name));
            ArtifactEntry {
                path,
                status: if copied.is_ok() {
                    ArtifactStatus::Ok
                } else {
                    ArtifactStatus::Failed
                },
                size: Some(meta.len()),
                sha256: None,
                detail: copied.err().map(|e| e.to_string()),
            }
        }
        _ => ArtifactEntry {
            path,
            status: ArtifactStatus::Missing,
            size: None,
            sha256: None,
            detail: None,
        },
    })
}

/// Read `/logs/agent/completion.json` (fetched with `/logs/agent`), if the agent wrote one.
fn collect_completion_record<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
) -> (Option<CompletionSummary>, Option<CompletionRecord>) {
    let src = ctx.path("agent/logs/completion.json");
    match std::fs::symlink_metadata(&src) {
        Ok(meta) if meta.is_file() => {}
        _ => return (None, None),
    }
    let bytes = read_capped(&src, OUTCOME_LIMIT);
    let _ = std::fs::write(ctx.path("agent/completion.json"), &bytes);
    match CompletionRecord::parse(&bytes) {
        Ok(record) => (
            Some(CompletionSummary {
                status: CompletionStatus::Present,
                error: None,
                record: serde_json::from_slice(&bytes).ok(),
            }),
            Some(record),
        ),
        Err(error) => (
            Some(CompletionSummary {
                status: CompletionStatus::Invalid,
                error: Some(error),
                record: None,
            }),
            None,
        ),
    }
}

/// Save the control root to `agent/control/` and empty it, so that a live verifier finds
/// nothing there.
fn save_control_root<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
) -> Result<Option<ControlRootInfo>, Infra> {
    let (Some(dir), Some(control)) = (&env.control_dir, &env.agent.control) else {
        return Ok(None);
    };
    let report = control::save(dir, &ctx.path("agent/control")).map_err(infra(Phase::Collect))?;
    control::empty(dir).map_err(infra(Phase::Collect))?;
    Ok(Some(ControlRootInfo {
        container_path: control.container_path.clone(),
        template: control.template.as_ref().map(|t| t.display().to_string()),
        saved_to: "agent/control".to_string(),
        files: report.files,
        bytes: report.bytes,
        skipped: report.skipped,
    }))
}

/// The agent's outcome file: `Ok(None)` if absent, `Err` if present but unreadable.
async fn read_outcome<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    path: &str,
) -> Result<Result<Option<Vec<u8>>, String>, Infra> {
    let dest = ctx.path("agent/outcome.json");
    let local = match path.strip_prefix("/logs/agent/") {
        Some(rel) if !rel.contains("..") => {
            let src = ctx.path("agent/logs").join(rel);
            return Ok(match std::fs::symlink_metadata(&src) {
                Ok(meta) if meta.is_file() => {
                    if meta.len() > OUTCOME_LIMIT {
                        Err(format!("outcome record larger than {OUTCOME_LIMIT} bytes"))
                    } else {
                        let _ = std::fs::copy(&src, &dest);
                        Ok(Some(read_capped(&src, OUTCOME_LIMIT)))
                    }
                }
                _ => Ok(None),
            });
        }
        _ => ctx
            .fetch(id, path, &dest, OUTCOME_LIMIT)
            .await
            .map_err(infra(Phase::Collect))?,
    };
    Ok(match local {
        FetchResult::Missing => Ok(None),
        FetchResult::Failed(why) => Err(format!("outcome record not readable: {why}")),
        FetchResult::Ok(report) if report.files.iter().any(|f| f.relative.is_empty()) => {
            Ok(Some(read_capped(&dest, OUTCOME_LIMIT)))
        }
        FetchResult::Ok(_) => Err("outcome record is not a regular file".to_string()),
    })
}
