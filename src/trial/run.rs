//! One trial as a straight line of phases; see the module note in `trial/mod.rs`.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use super::close::{finish, initial_record};

use crate::agent::{resolve_env, secret_values};
use crate::outcome::CompletionRecord;
use crate::sandbox::{Cancellable, Owner, Role, Sandbox, Scope};
use crate::task::{IntegrityMode, VerifierMode};
use crate::verifier::integrity::{Integrity, VerifiedOn};
use crate::verifier::{self, VerifierOutcome, VerifierStatus, VerifyInput};

use super::phases::{self, Ctx, Infra, infra, round3};
use super::plan::{Phase, TrialPlan};
use super::record::*;
use super::scrub;

/// How a trial run ended.
#[derive(Debug)]
pub(crate) enum TrialRun {
    Finished(Box<TrialRecord>),
    /// Stopped by the user before it finished; nothing is recorded, it will run again on resume.
    Cancelled,
}

/// Run one trial to its record (or to cancellation). Never fails: every harness or engine
/// failure ends up in the record as an `infra_error` with the phase it happened in.
pub(crate) async fn run<S: Sandbox + ?Sized>(
    sandbox: Arc<S>,
    plan: &TrialPlan,
    cancel: watch::Receiver<bool>,
    on_phase: &(dyn Fn(Phase) + Send + Sync),
) -> TrialRun {
    // Cancellation is cooperative (see `Cancellable`): a cancelled trial stops at its next
    // engine call or wait, with every resource it created registered in its scope.
    let sb = Cancellable::new(sandbox.clone(), cancel);
    let scope = Scope::new(Owner {
        job: plan.settings.job_label.clone(),
        trial: plan.id.clone(),
        role: Role::Agent,
        extra: plan.settings.labels.clone(),
    });
    let ctx = Ctx {
        sb: &sb,
        plan,
        scope: &scope,
    };
    let mut rec = initial_record(plan);
    let mut secrets = plan.settings.model_secrets.clone();
    let mut token = None;
    let mut egress = phases::egress::Proxies::default();
    let mut attempts = None;
    let result = match phases::environment::register_model(plan) {
        Ok(t) => {
            token = t;
            if let Some(t) = &token {
                secrets.push(t.as_str().to_string());
            }
            phases(
                &ctx,
                &mut rec,
                &mut secrets,
                &mut token,
                &mut egress,
                &mut attempts,
                on_phase,
            )
            .await
        }
        Err(failure) => Err(failure),
    };
    // Goal continuation: the last attempt's claim and receipts are the trial's (SPEC §15).
    if let Some(run) = attempts.take() {
        phases::attempts::close(&plan.dir, &mut rec, run);
    }
    // A trial that failed before its agent phase ended still holds its proxy: stop it.
    egress.finish(&mut rec).await;
    // A trial that ended before its agent phase did still holds its token: end it.
    if let (Some(t), Some(gateway)) = (token.take(), &plan.settings.gateway) {
        match gateway.finish_trial(&t).await {
            Ok(usage) => {
                rec.usage = Some(usage);
                crate::gateway::atif::export_trial(&plan.dir, &plan.id, &plan.agent);
            }
            Err(e) => tracing::warn!(trial = plan.id, "finishing the trial's model calls: {e}"),
        }
    }
    let cancelled = sb.is_cancelled();

    on_phase(Phase::Cleanup);
    let started = Instant::now();
    let swept = cleanup(&*sandbox, plan, &scope, cancelled || result.is_err()).await;
    time(&mut rec, Phase::Cleanup, started);
    if cancelled {
        // A trial that saw the cancel mid-way may hold a half-made record: it runs again on resume.
        return TrialRun::Cancelled;
    }
    let completion = match result {
        Ok(completion) => completion,
        Err(failure) => {
            fail(&mut rec, plan, failure);
            None
        }
    };
    if let Err(message) = swept {
        tracing::warn!(trial = plan.id, "cleanup: {message}");
    }
    TrialRun::Finished(Box::new(finish(rec, plan, completion.as_ref(), &secrets)))
}

/// environment → agent → collect → validate → verify, each phase's outcome written into the
/// record as it arrives. Gives the agent's completion record (for the audit), when valid.
async fn phases<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    rec: &mut TrialRecord,
    secrets: &mut Vec<String>,
    token: &mut Option<crate::gateway::TrialToken>,
    egress: &mut phases::egress::Proxies,
    attempts: &mut Option<phases::attempts::AttemptsRun>,
    on_phase: &(dyn Fn(Phase) + Send + Sync),
) -> Result<Option<CompletionRecord>, Infra> {
    let trial = ctx.plan;
    phases::make_dirs(
        &trial.dir,
        &["agent", "artifacts", "verifier"],
        Phase::Environment,
    )?;
    // Harbor `[[steps]]`: each phase runs on the view of the step at hand (the first until the
    // agent phase, then the last step that ran); empty for a single-step task.
    let views = phases::steps::views(trial)?;
    let first = views.first().map(|view| ctx.with_plan(view));
    let ctx = first.as_ref().unwrap_or(ctx);
    let plan = ctx.plan;
    let task = &plan.task;
    let settings = &plan.settings;

    on_phase(Phase::Environment);
    let started = Instant::now();
    let mut env = phases::environment::run(ctx, token.as_ref()).await?;
    egress.agent = env.egress.take();
    rec.image = Some(env.image.to_string());
    rec.harness_overrides = settings.network_overrides.clone();
    rec.harness_overrides
        .extend(env.agent.harness_overrides.iter().cloned());
    secrets.extend(env.agent.secrets.iter().cloned());
    // The verifier's `${NAME}` values (its env over the task's) are secrets too (resolved
    // again, and checked, later); the agent plan's secrets already cover the task's env.
    for task in std::iter::once(task).chain(views.iter().map(|v| &v.task)) {
        let verifier_env = task.verifier_exec_env();
        if let Ok(resolved) = resolve_env(&verifier_env) {
            secrets.extend(secret_values(&verifier_env, &resolved));
        }
    }
    scrub::register(secrets);
    time(rec, Phase::Environment, started);

    on_phase(Phase::Agent);
    let started = Instant::now();
    let (done, steps) = if let (true, Some(c)) = (views.is_empty(), plan.continuation) {
        let run = phases::attempts::run(ctx, &env, c, token.as_ref()).await?;
        let done = run.done.clone();
        *attempts = Some(run);
        (done, None)
    } else if views.is_empty() {
        (phases::agent::run(ctx, &env).await?, None)
    } else {
        let run = phases::steps::run(ctx, trial, &views, &env, &egress.verifier).await?;
        rec.steps = run.records.clone();
        (run.done.clone(), Some(run))
    };
    let last = steps.as_ref().map(|run| ctx.with_plan(&views[run.last]));
    let ctx = last.as_ref().unwrap_or(ctx);
    let plan = ctx.plan;
    let task = &plan.task;
    let memory = task.environment.memory_mb;
    rec.termination = done.termination(None, settings.kill_grace, memory);
    rec.output = done.output.clone();
    rec.agent_deadline_epoch = done.deadline_epoch;
    time(rec, Phase::Agent, started);
    // The agent's way out ends with its run.
    if let Some(proxy) = egress.agent.take() {
        proxy.finish(rec, Phase::Agent).await;
    }
    // The agent's model calls end with its run: the token is refused from here on.
    if let (Some(t), Some(gateway)) = (token.take(), &settings.gateway) {
        let usage = gateway
            .finish_trial(&t)
            .await
            .map_err(infra(Phase::Agent))?;
        let unavailable = usage.unavailable.clone();
        rec.usage = Some(usage);
        crate::gateway::atif::export_trial(&trial.dir, &trial.id, &trial.agent);
        if let Some(why) = unavailable {
            // The model could not be reached: the harness's failure, never the agent's.
            return Err(Infra {
                phase: Phase::Agent,
                message: format!("model_unavailable: {why}"),
            });
        }
    }

    on_phase(Phase::Collect);
    let started = Instant::now();
    let collected = phases::collect::run(ctx, &env, &done, steps.is_some()).await;
    let collected = match collected {
        Ok(c) => c,
        Err(failure) => {
            time(rec, Phase::Collect, started);
            return Err(failure);
        }
    };
    phases::sidecars::before_verify(ctx, &env).await?;
    if let Some(stopped) = collected.stopped {
        rec.termination = done.termination(Some(stopped), settings.kill_grace, memory);
    }
    let storage = collected.storage;
    rec.limits.storage_enforced = storage.enforced;
    rec.limits.storage_used_mb = storage.used_mb;
    (rec.limits.files_used, rec.limits.files_counted) = storage.files_record();
    rec.claim = collected.claim;
    rec.artifacts = collected.artifacts;
    rec.trajectory = collected.trajectory;
    rec.completion = collected.completion;
    rec.deliverables = collected.deliverables;
    rec.observed_files = collected.observed_files;
    rec.control_root = collected.control_root;
    let changes = collected.changes;
    if let Some(set) = &changes {
        rec.changes = Some(set.summary.clone());
        rec.change_content = Some(set.content.clone());
        rec.integrity = Some(Integrity::judge(
            set.findings.clone(),
            VerifiedOn::AgentFilesystem,
        ));
    }
    let completion = collected.completion_record;
    time(rec, Phase::Collect, started);
    if let Some(run) = &steps
        && !run.verify_last
    {
        // The steps stopped after one judged on its snapshot: nothing is left to verify.
        close_steps(rec, trial, run);
        return Ok(completion);
    }
    let Some(target) = collected.target else {
        if let Some(why) = storage.over_limit() {
            rec.verifier = VerifierOutcome::error(
                task.verifier.mode,
                None,
                format!("not run: {why}, so its filesystem was not snapshotted"),
            );
        } else if let Some(why) = collected.unverifiable {
            rec.verifier = VerifierOutcome::error(task.verifier.mode, None, why);
        }
        if let Some(run) = &steps {
            close_steps(rec, trial, run);
        }
        return Ok(completion);
    };

    let input = VerifyInput::new(task, &plan.dir, ctx.limits(), settings, &egress.verifier);
    let has_validation = task
        .completion
        .as_ref()
        .is_some_and(|c| !c.validation.is_empty());
    if has_validation {
        on_phase(Phase::Validate);
        let started = Instant::now();
        let frozen = match &target {
            verifier::Target::Frozen(frozen) => frozen.clone(),
            // Live mode: validate in a snapshot of the running agent container, so the
            // verifier later sees the container exactly as the agent left it.
            verifier::Target::Live(id)
            | verifier::Target::Prepared(id)
            | verifier::Target::Stopped(id) => ctx
                .scope
                .freeze(ctx.sb, id, Role::ValidationSnapshot)
                .await
                .map_err(infra(Phase::Validate))?,
        };
        rec.validation = verifier::validate(ctx.sb, ctx.scope, &input, &frozen)
            .await
            .map_err(infra(Phase::Validate))?;
        time(rec, Phase::Validate, started);
    }

    on_phase(Phase::Verify);
    let started = Instant::now();
    // `clean` mode, or `integrity = "enforce"` with findings: the verifier runs on the
    // original image with the agent's changes replayed, the findings left out.
    let findings: Vec<String> = changes
        .as_ref()
        .map(|c| c.findings.iter().map(|f| f.path.clone()).collect())
        .unwrap_or_default();
    let clean = task.verifier.mode == VerifierMode::Clean
        || (task.verifier.integrity == IntegrityMode::Enforce && !findings.is_empty());
    let mut verified_in = task.verifier.mode;
    let target = match (target, &changes) {
        (verifier::Target::Frozen(frozen), _) if task.verifier.mode == VerifierMode::Separate => {
            let (image, env) = separate_image(ctx, task).await?;
            let paths = verifier::artifact_paths(&task.artifacts);
            let (id, imported) =
                verifier::prepare_separate(ctx.sb, ctx.scope, &input, &image, env, &frozen, &paths)
                    .await
                    .map_err(infra(Phase::Verify))?;
            tracing::debug!(trial = plan.id, ?imported, "separate verifier container");
            if let Some(set) = &changes {
                // Only a finding inside an imported artifact can act on this verifier.
                let reaches = set.findings.iter().any(|f| {
                    imported
                        .paths
                        .iter()
                        .any(|p| verifier::at_or_under(&f.path, p))
                });
                let on = if reaches {
                    VerifiedOn::AgentFilesystem
                } else {
                    VerifiedOn::PristineToolchain
                };
                rec.integrity = Some(Integrity::judge(set.findings.clone(), on));
            }
            verifier::Target::Prepared(id)
        }
        (verifier::Target::Frozen(frozen), Some(set)) if clean => {
            let (id, replayed) = verifier::prepare_clean(
                ctx.sb,
                ctx.scope,
                &input,
                &env.image,
                &frozen,
                &set.roots,
                &set.deleted,
                &findings,
            )
            .await
            .map_err(infra(Phase::Verify))?;
            tracing::debug!(trial = plan.id, ?replayed, "clean verifier container");
            rec.integrity = Some(Integrity::judge(
                set.findings.clone(),
                VerifiedOn::PristineToolchain,
            ));
            verified_in = VerifierMode::Clean;
            verifier::Target::Prepared(id)
        }
        (target, _) => target,
    };
    rec.verifier = match verifier::verify(ctx.sb, ctx.scope, &input, &target).await {
        Ok(outcome) => outcome,
        // Its downloads failed: `error` with the evidence, no reward, and an infrastructure
        // error of the verify phase (retried, reported apart).
        Err(verifier::VerifyError::Downloads { outcome, evidence }) => {
            rec.verifier = VerifierOutcome {
                mode: verified_in,
                ..outcome
            };
            return Err(Infra {
                phase: Phase::Verify,
                message: format!("the verifier could not fetch its tools: {evidence}"),
            });
        }
        Err(e) => return Err(infra(Phase::Verify)(e)),
    };
    rec.verifier.mode = verified_in;
    if let verifier::Target::Live(id) = &target {
        let stopped = ctx.sb.stop(id).await.map_err(infra(Phase::Verify))?;
        rec.termination = done.termination(Some(stopped), settings.kill_grace, memory);
    }
    time(rec, Phase::Verify, started);
    if let Some(run) = &steps {
        close_steps(rec, trial, run);
    }
    Ok(completion)
}

/// The `separate` verifier's image, prepared (built once per engine like the environment's).
async fn separate_image<'t, S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    task: &'t crate::task::Task,
) -> Result<(crate::sandbox::ImageRef, &'t crate::task::EnvironmentSpec), Infra> {
    let missing = || Infra {
        phase: Phase::Verify,
        message: "the separate verifier has no environment (a bug in job resolution)".to_string(),
    };
    let (Some(spec), Some(env)) = (&ctx.plan.verifier_image, &task.verifier.environment) else {
        return Err(missing());
    };
    let image = ctx
        .sb
        .prepare_image(spec)
        .await
        .map_err(|e| phases::environment::with_base_images(spec, e))
        .map_err(infra(Phase::Verify))?;
    Ok((image, env))
}

/// A multi-step trial's last step recorded from the trial's final verifier, and the task's
/// reward from its steps' (`multi_step_reward_strategy`).
fn close_steps(rec: &mut TrialRecord, trial: &TrialPlan, run: &phases::steps::StepsRun) {
    let task = &trial.task;
    if let Some(last) = phases::steps::last_record(task, run, &rec.termination, &rec.verifier) {
        rec.steps.push(last);
    }
    rec.verifier = phases::steps::task_verdict(
        &rec.steps,
        task.multi_step_reward,
        rec.verifier.mode,
        trial.settings.pass_threshold,
    );
}

fn time(rec: &mut TrialRecord, phase: Phase, started: Instant) {
    let elapsed = started.elapsed();
    rec.phases.insert(
        phase,
        PhaseTime {
            seconds: round3(elapsed.as_secs_f64()),
            started_at: Some(crate::timefmt::rfc3339_micros(
                crate::timefmt::now_secs() - elapsed.as_secs_f64(),
            )),
        },
    );
}

/// Record a harness failure: the termination fact only when the agent never ended.
fn fail(rec: &mut TrialRecord, plan: &TrialPlan, failure: Infra) {
    tracing::warn!(
        trial = plan.id,
        phase = failure.phase.as_str(),
        "infrastructure error: {}",
        failure.message
    );
    if rec.termination.kind == TerminationKind::InfraError {
        rec.termination.detail = Some(format!("{}: {}", failure.phase, failure.message));
    }
    if rec.verifier.status == VerifierStatus::Skipped {
        rec.verifier.detail = Some(format!(
            "not run: infrastructure error in the {} phase",
            failure.phase
        ));
    }
    rec.infra_error = Some(InfraError {
        phase: failure.phase,
        message: failure.message,
    });
}

/// Remove what the trial created. With `sweep`, also anything listed for this trial (a create
/// that was in flight when the trial was cancelled). The control root goes too.
async fn cleanup<S: Sandbox + ?Sized>(
    sb: &S,
    plan: &TrialPlan,
    scope: &Scope,
    sweep: bool,
) -> Result<(), String> {
    if std::env::var_os("ARBITER_KEEP_CONTAINERS").is_some() {
        tracing::warn!(trial = plan.id, resources = ?scope.held(), "ARBITER_KEEP_CONTAINERS set: leaving resources");
        return Ok(());
    }
    let mut result = scope.cleanup(sb, sweep).await;
    let _ = std::fs::remove_dir_all(plan.dir.join(phases::steps::STEP_TESTS_DIR));
    let dir = plan.dir.join(phases::environment::CONTROL_DIR);
    if let Err(e) = std::fs::remove_dir_all(&dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        let message = format!("{}: {e}", dir.display());
        result = Err(match result {
            Ok(()) => message,
            Err(earlier) => format!("{earlier}; {message}"),
        });
    }
    result
}
