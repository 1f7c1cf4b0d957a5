//! Goal continuation's attempt loop (SPEC §15, issue 29): attempts 1…N of one agent in the
//! trial's one container, whose filesystem and control root persist between them.
//!
//! After each attempt but the last possible one, arbiter reads the attempt's claim from what
//! it left (`/logs/agent`, its stderr, the preset's native end state), runs the task's declared
//! validation commands itself on a snapshot of the container (fresh receipts, under
//! `attempts/<k>/validation/`), and asks [`decide`]. Nothing of the verifier runs here: its
//! files never enter the container, and it runs once, after the loop, on the trial's ordinary
//! path. Before the next attempt every completion record and receipt the previous one left is
//! removed (its outcome record, `completion.json`, its trajectory — saved first under
//! `attempts/<k>/` — and any entry of `/logs/agent` or the control root named like a
//! receipt), so a stale "succeeded" is never read as the new attempt's; the new attempt gets
//! `ARBITER_ATTEMPT`, `ARBITER_MAX_ATTEMPTS`, `ARBITER_ATTEMPT_ID`, the remaining time, the work
//! ledger's path and, read-only, the previous attempt's claim and error
//! ([`crate::agent::continuation::PreviousAttempt`]).
//!
//! One deadline bounds every attempt: attempt k runs under what is left of the agent phase's
//! timeout. A user's stop during any attempt cancels the trial (the `Cancellable` backend
//! fails the next engine call), so a completion that arrives after it is never recorded.

use std::path::Path;
use std::time::Instant;

use crate::agent::AdapterReads;
use crate::agent::continuation::{self as contract, Continuation, PreviousAttempt};
use crate::outcome::{Claim, ClaimSource, ClaimStatus, Receipt, collect_claim};
use crate::sandbox::{ExecEnd, FetchResult, Resource, Role, Sandbox, TarEntry, files_to_tar};
use crate::timefmt::now_rfc3339;
use crate::trial::continuation::{
    AttemptRecord, AttemptUsage, ContinuationRecord, Decision, GoalStatus, claim_error, decide,
    run_ended,
};
use crate::trial::plan::Phase;
use crate::verifier::VerifyInput;

use super::artifacts::AGENT_LOGS_LIMIT;
use super::between_attempts::{clear_completion_state, continue_argv, named_completion_state};
use super::{AgentDone, Ctx, EnvReady, Infra, infra, read_capped, round3};

/// Largest outcome record read.
const OUTCOME_LIMIT: u64 = 1024 * 1024;

/// What the loop leaves for the rest of the trial.
pub(crate) struct AttemptsRun {
    /// The last attempt's run (its container still running; collect stops it).
    pub done: AgentDone,
    pub attempts: Vec<AttemptRecord>,
    /// Set when the loop stopped before the limit; `None`: the last attempt is judged after
    /// the trial's collect and validate phases ([`close`]).
    pub stopped: Option<(GoalStatus, Option<String>)>,
    pub max: u32,
}

pub(crate) async fn run<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
    continuation: Continuation,
    token: Option<&crate::gateway::TrialToken>,
) -> Result<AttemptsRun, Infra> {
    let max = continuation.max_attempts.max(1);
    let Some(step) = &env.agent.run else {
        // An agent that runs nothing (nop) has nothing to continue.
        let done = super::agent::run(ctx, env).await?;
        return Ok(AttemptsRun {
            done,
            attempts: Vec::new(),
            stopped: Some((
                GoalStatus::Stopped,
                Some("the agent runs nothing".to_string()),
            )),
            max,
        });
    };
    let total = step.timeout;
    let started = Instant::now();
    let deadline_epoch = epoch_now().saturating_add(total.as_secs());
    let control = env.agent.control.as_ref().map(|c| c.container_path.clone());
    let ledger = control
        .clone()
        .unwrap_or_else(|| contract::LEDGER_PATH.to_string());
    if control.is_none() {
        let tar = files_to_tar(&[TarEntry {
            path: "arbiter/ledger",
            content: None,
            mode: 0o777,
        }])
        .map_err(infra(Phase::Agent))?;
        ctx.sb
            .upload(&env.container, "/", tar)
            .await
            .map_err(infra(Phase::Agent))?;
    }
    let mut attempts: Vec<AttemptRecord> = Vec::new();
    let mut previous: Option<PreviousAttempt> = None;
    let mut fallback: Option<Vec<String>> = None;
    let mut usage_before = gateway_usage(ctx, token);
    for k in 1..=max {
        let remaining = total.saturating_sub(started.elapsed());
        let mut agent = env.agent.clone();
        if k > 1 {
            // Installed and checked by attempt 1; a CLI that needed the check's fallback
            // keeps it.
            agent.install = None;
            agent.cli_check = None;
        }
        let run = agent.run.as_mut().ok_or_else(|| Infra {
            phase: Phase::Agent,
            message: "the agent's run step vanished between attempts".to_string(),
        })?;
        run.timeout = remaining;
        if let Some(argv) = &fallback {
            run.argv = argv.clone();
        }
        if let Some(prev) = &previous {
            continue_argv(ctx, &mut run.argv, prev, k, max);
        }
        let attempt_id = format!("{}/attempt-{k}", ctx.plan.id);
        let mut vars = vec![
            (contract::ATTEMPT_ENV, k.to_string()),
            (contract::MAX_ATTEMPTS_ENV, max.to_string()),
            (contract::ATTEMPT_ID_ENV, attempt_id.clone()),
            (contract::REMAINING_ENV, remaining.as_secs().to_string()),
            (contract::DEADLINE_ENV, deadline_epoch.to_string()),
            (contract::LEDGER_ENV, ledger.clone()),
        ];
        if previous.is_some() {
            vars.push((contract::PREVIOUS_ENV, contract::PREVIOUS_PATH.to_string()));
        }
        agent.env.retain(|(key, _)| {
            !vars.iter().any(|(v, _)| v == key) && key != contract::PREVIOUS_ENV
        });
        agent
            .env
            .extend(vars.into_iter().map(|(k, v)| (k.to_string(), v)));
        let attempt_env = env.with_agent(agent);
        tracing::info!(trial = ctx.plan.id, "attempt {k}/{max}");
        let attempt_started = (now_rfc3339(), Instant::now());
        let mut done = super::agent::run(ctx, &attempt_env).await?;
        // The termination's words name the trial's deadline, not what was left of it.
        done.timeout = total;
        if k == 1 && done.claim_note.is_some() {
            fallback = env
                .agent
                .cli_check
                .as_ref()
                .and_then(|c| c.fallback.as_ref())
                .map(|f| f.argv.clone());
        }
        let dir_rel = format!("attempts/{k}");
        let dir = ctx.path(&dir_rel);
        std::fs::create_dir_all(&dir).map_err(|e| Infra {
            phase: Phase::Agent,
            message: format!("{}: {e}", dir.display()),
        })?;
        let usage_now = gateway_usage(ctx, token);
        let usage = usage_now
            .as_ref()
            .map(|now| AttemptUsage::between(usage_before.as_ref(), now));
        usage_before = usage_now;
        let termination = done.termination(
            None,
            ctx.plan.settings.kill_grace,
            ctx.plan.task.environment.memory_mb,
        );
        let mut record = AttemptRecord {
            attempt: k,
            id: attempt_id,
            started_at: attempt_started.0,
            finished_at: now_rfc3339(),
            seconds: round3(attempt_started.1.elapsed().as_secs_f64()),
            remaining_seconds: round3(remaining.as_secs_f64()),
            termination: termination.clone(),
            claim: Claim::missing(),
            validation: Vec::new(),
            usage,
            trajectory: None,
            saved_to: dir_rel.clone(),
            continued_because: None,
            cleared: Vec::new(),
        };
        let ended = run_ended(&termination, true).and_then(|()| {
            if done.storage.is_over() {
                Err("the storage or file bound was exceeded".to_string())
            } else {
                Ok(())
            }
        });
        if k == max || ended.is_err() {
            // The trial's collect and validate phases read this attempt's claim and receipts.
            let stopped = ended
                .err()
                .map(|why| (GoalStatus::Stopped, Some(format!("attempt {k}: {why}"))));
            attempts.push(record);
            return Ok(AttemptsRun {
                done,
                attempts,
                stopped,
                max,
            });
        }
        let left = read_attempt(ctx, env, &done, &dir).await?;
        record.claim = left.claim.clone();
        record.trajectory = left.trajectory.clone();
        record.validation = validate(ctx, env, &dir).await?;
        match decide(k, max, Ok(()), &record.claim, &record.validation) {
            Decision::Stop(status, detail) => {
                attempts.push(record);
                return Ok(AttemptsRun {
                    done,
                    attempts,
                    stopped: Some((status, detail)),
                    max,
                });
            }
            Decision::Continue(why) => {
                let prev = PreviousAttempt {
                    schema: contract::PREVIOUS_SCHEMA.to_string(),
                    attempt: k,
                    max_attempts: max,
                    claim_status: claim_status_word(record.claim.status).to_string(),
                    semantic_status: record.claim.semantic_status.clone(),
                    record: record.claim.record.clone(),
                    error: claim_error(&record.claim),
                    ended: ended_words(&termination),
                    continued_because: why.clone(),
                };
                record.cleared =
                    clear_completion_state(ctx, env, &dir, &left.completion_paths, &prev).await?;
                record.continued_because = Some(why);
                attempts.push(record);
                previous = Some(prev);
            }
        }
    }
    Err(Infra {
        phase: Phase::Agent,
        message: "the attempt loop ended without an attempt".to_string(),
    })
}

/// Once the trial's collect and validate phases ran: the last attempt's claim and receipts
/// are the trial's, its files are copied under `attempts/<k>/`, and the goal's status is set.
pub(crate) fn close(dir: &Path, rec: &mut crate::trial::record::TrialRecord, run: AttemptsRun) {
    let AttemptsRun {
        mut attempts,
        stopped,
        max,
        ..
    } = run;
    let used = attempts.len() as u32;
    if let Some(last) = attempts.last_mut() {
        last.claim = rec.claim.clone();
        last.termination = rec.termination.clone();
        if last.validation.is_empty() {
            last.validation = rec.validation.clone();
        }
        let saved = dir.join(&last.saved_to);
        let _ = std::fs::create_dir_all(&saved);
        for name in [
            "stdout.log",
            "stderr.log",
            "outcome.json",
            "completion.json",
        ] {
            let from = dir.join("agent").join(name);
            if from.is_file() {
                let _ = std::fs::copy(&from, saved.join(name));
            }
        }
        if let Some(t) = rec
            .trajectory
            .as_ref()
            .filter(|t| t.status == crate::trial::record::ArtifactStatus::Ok)
            && let Some(name) = Path::new(&t.path).file_name()
            && std::fs::copy(dir.join("agent").join(name), saved.join(name)).is_ok()
        {
            last.trajectory = Some(format!("{}/{}", last.saved_to, name.to_string_lossy()));
        }
    }
    let (status, detail) = match stopped {
        Some(s) => s,
        None => {
            let ended = run_ended(&rec.termination, true);
            match decide(used, max, ended, &rec.claim, &rec.validation) {
                Decision::Stop(status, detail) => (status, detail),
                // The limit: `decide` never continues past it.
                Decision::Continue(why) => (GoalStatus::BudgetLimited, Some(why)),
            }
        }
    };
    rec.continuation = Some(ContinuationRecord {
        max_attempts: max,
        attempts_used: used.max(1),
        status,
        detail,
    });
    rec.attempts = attempts;
}

/// What an attempt left, read while its container runs.
struct Left {
    claim: Claim,
    /// Its trajectory (relative to the trial dir), when it wrote one.
    trajectory: Option<String>,
    /// Container paths of completion state it left in `/logs/agent` (and its outcome path).
    completion_paths: Vec<String>,
}

/// The attempt's claim, read as the collect phase reads the trial's: its outcome record (in
/// `/logs/agent`, fetched to `attempts/<k>/logs`, or at its own path), else stderr's last
/// `AWORLD_RUN_OUTCOME=` line, else the preset's native end state.
async fn read_attempt<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
    done: &AgentDone,
    dir: &Path,
) -> Result<Left, Infra> {
    let fail = || infra(Phase::Agent);
    let id = &env.container;
    let plan = &env.agent;
    let logs = dir.join("logs");
    let fetched = ctx
        .fetch(id, "/logs/agent", &logs, AGENT_LOGS_LIMIT)
        .await
        .map_err(fail())?;
    if let FetchResult::Failed(why) = &fetched {
        tracing::warn!(trial = ctx.plan.id, "attempt logs not collected: {why}");
    }
    for name in ["stdout.log", "stderr.log"] {
        let _ = std::fs::copy(ctx.path(&format!("agent/{name}")), dir.join(name));
    }
    let mut completion_paths = Vec::new();
    let in_logs = |path: &str| {
        path.strip_prefix("/logs/agent/")
            .filter(|rel| !rel.contains(".."))
            .map(|rel| logs.join(rel))
    };
    let outcome: Result<Option<Vec<u8>>, String> = match in_logs(&plan.outcome_path) {
        Some(local) => match std::fs::symlink_metadata(&local) {
            Ok(meta) if meta.is_file() && meta.len() > OUTCOME_LIMIT => {
                Err(format!("outcome record larger than {OUTCOME_LIMIT} bytes"))
            }
            Ok(meta) if meta.is_file() => Ok(Some(read_capped(&local, OUTCOME_LIMIT))),
            _ => Ok(None),
        },
        None => {
            let dest = dir.join("outcome.json");
            match ctx
                .fetch(id, &plan.outcome_path, &dest, OUTCOME_LIMIT)
                .await
                .map_err(fail())?
            {
                FetchResult::Missing => Ok(None),
                FetchResult::Failed(why) => Err(format!("outcome record not readable: {why}")),
                FetchResult::Ok(_) if dest.is_file() => Ok(Some(read_capped(&dest, OUTCOME_LIMIT))),
                FetchResult::Ok(_) => Err("outcome record is not a regular file".to_string()),
            }
        }
    };
    let mut claim = match outcome {
        Ok(bytes) => {
            if bytes.is_some() {
                completion_paths.push(plan.outcome_path.clone());
                if let Some(b) = &bytes {
                    let _ = std::fs::write(dir.join("outcome.json"), b);
                }
            }
            collect_claim(bytes.as_deref(), &done.stderr)
        }
        Err(why) => {
            completion_paths.push(plan.outcome_path.clone());
            Claim {
                status: ClaimStatus::Invalid,
                source: Some(ClaimSource::File),
                error: Some(why),
                ..collect_claim(None, &done.stderr)
            }
        }
    };
    if claim.status == ClaimStatus::Missing
        && let Some(adapter) = plan.adapter
    {
        let stdout = read_capped(&dir.join("stdout.log"), ctx.plan.settings.log_cap_bytes);
        let file = match adapter.reads() {
            AdapterReads::Output => None,
            AdapterReads::File(path) => in_logs(&path).and_then(|p| std::fs::read(p).ok()),
        };
        claim = adapter.claim(&done.end_for_adapter(&stdout, file.as_deref()));
    }
    if let Some(note) = &done.claim_note
        && claim.status == ClaimStatus::Missing
    {
        claim.error = Some(note.clone());
    }
    if let Some(message) = &plan.record_required
        && done.claim_note.is_none()
        && done.end == Some(ExecEnd::Exited(0))
        && claim.status == ClaimStatus::Missing
    {
        return Err(Infra {
            phase: Phase::Agent,
            message: message.clone(),
        });
    }
    let mut trajectory = None;
    if let Some(path) = &plan.trajectory_path
        && let Some(local) = in_logs(path)
        && local.is_file()
    {
        completion_paths.push(path.clone());
        if let Ok(rel) = local.strip_prefix(ctx.path("")) {
            trajectory = Some(rel.to_string_lossy().into_owned());
        }
    }
    for found in named_completion_state(&logs) {
        if let Ok(rel) = found.strip_prefix(&logs) {
            let path = format!("/logs/agent/{}", rel.to_string_lossy());
            if !completion_paths.contains(&path) {
                completion_paths.push(path);
            }
        }
    }
    Ok(Left {
        claim,
        trajectory,
        completion_paths,
    })
}

/// arbiter's own receipts of the task's declared validation commands on a snapshot of the
/// container as the attempt left it (no network, no agent env), logs under `<dir>/validation/`.
async fn validate<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
    dir: &Path,
) -> Result<Vec<Receipt>, Infra> {
    let task = &ctx.plan.task;
    if task
        .completion
        .as_ref()
        .is_none_or(|c| c.validation.is_empty())
    {
        return Ok(Vec::new());
    }
    let fail = || infra(Phase::Validate);
    let frozen = ctx
        .scope
        .freeze(ctx.sb, &env.container, Role::ValidationSnapshot)
        .await
        .map_err(fail())?;
    let events = std::sync::Mutex::new(Vec::new());
    let input = VerifyInput::new(task, dir, ctx.limits(), &ctx.plan.settings, &events);
    let receipts = crate::verifier::validate(ctx.sb, ctx.scope, &input, &frozen).await;
    ctx.scope
        .remove(ctx.sb, Resource::Frozen(frozen))
        .await
        .map_err(fail())?;
    receipts.map_err(infra(Phase::Validate))
}

fn gateway_usage<S: ?Sized>(
    ctx: &Ctx<'_, S>,
    token: Option<&crate::gateway::TrialToken>,
) -> Option<crate::gateway::Usage> {
    let gateway = ctx.plan.settings.gateway.as_ref()?;
    gateway.usage(token?)
}

fn claim_status_word(status: ClaimStatus) -> &'static str {
    match status {
        ClaimStatus::Present => "present",
        ClaimStatus::Missing => "missing",
        ClaimStatus::Invalid => "invalid",
        ClaimStatus::Unknown => "unknown",
    }
}

fn ended_words(t: &crate::trial::record::Termination) -> String {
    match (t.kind, t.exit_code) {
        (crate::trial::record::TerminationKind::Exited, Some(code)) => format!("exited {code}"),
        (kind, _) => serde_json::to_value(kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "ended".to_string()),
    }
}

fn epoch_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
