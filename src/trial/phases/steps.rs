//! Harbor multi-step tasks (`[[steps]]`) at run time: each step's instruction and tests, in
//! order, in one agent container, as Harbor's `Trial._run_steps` runs them.
//!
//! Per step: the step's `workdir/` is copied into the working directory and its `setup.sh`
//! run (as the step's agent user), then its healthcheck; the agent runs with the step's
//! instruction and timeout; then the step's verifier runs. What persists from step to step
//! is the agent's container: its filesystem and whatever it left running.
//!
//! Verification of a step that is not the last one runs on a **snapshot**: the running agent
//! container's filesystem is frozen and the step's verifier runs in a fresh container of it
//! (SPEC §5: no agent process is in that container and nothing the agent does later can
//! change what it inspects), while the agent container carries on to the next step. The
//! verifier container and the snapshot are removed as soon as the step is judged. The last
//! step that runs goes through the trial's ordinary collect → validate → verify path
//! (`trial::run`), integrity and `clean` mode included. In `live` mode a step's verifier runs
//! inside the agent container, as Harbor's does.
//!
//! Harbor's rules kept: a step whose verifier gives no reward, or whose reward misses its
//! `min_reward` (a missing key counts as -inf), stops the remaining steps; a step whose setup
//! or healthcheck fails stops them too (on the first step that is the task's fault, so an
//! infrastructure error); an agent that fails or times out is still verified. The task's
//! reward is [`task_verdict`]: `mean` (per key over the steps that gave a reward, a missing
//! key counting 0; steps that did not run are not counted) or `final` (the last step that ran).
//!
//! Departures from Harbor, each because arbiter cannot keep the container alive: an agent
//! run that ended by the harness's deadline, a kill, OOM or the storage watchdog stops the
//! remaining steps (the engine killed the container), and the step is verified through the
//! ordinary path. Intermediate snapshots are taken without pausing the container (the
//! backend's freeze), so a background process the agent left running may be caught mid-write.
//! The container's network is the one of the first step (a container's network cannot change).
//!
//! Over 600 lines: each step's setup, healthcheck, agent, snapshot verifier and Harbor's stop rules run in one loop over one container; ~700 with its unit tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::agent::{AgentKind, resolve_env};
use crate::sandbox::{
    ContainerId, ExecEnd, ExecSpec, Resource, Role, Sandbox, TarEntry, dir_to_tar, files_to_tar,
};
use crate::task::{MinReward, MultiStepReward, Step, Task, VerifierMode};
use crate::trial::plan::{Phase, TrialPlan};
use crate::trial::record::{ArtifactEntry, StepRecord, Termination};
use crate::verifier::{self, Reward, VerifierOutcome, VerifierStatus, VerifyInput, judge};

use super::{AgentDone, Ctx, EnvReady, Infra, infra, round3};

/// Host directory (in the trial dir) holding each step's merged tests; removed by cleanup.
pub(crate) const STEP_TESTS_DIR: &str = ".step-tests";

/// The trial as each step sees it, in run order (empty for a single-step task): the task's
/// instruction, `[agent]`, `[verifier]`, tests, solution and artifacts replaced by the step's
/// (Harbor's fallbacks already applied by the loader), and no steps of its own, so every
/// phase runs it as a single-step task. A step with its own `tests/` gets the task's tests
/// with the step's over them (same-named files replaced), merged under [`STEP_TESTS_DIR`].
pub(crate) fn views(plan: &TrialPlan) -> Result<Vec<TrialPlan>, Infra> {
    let task = &plan.task;
    task.steps
        .iter()
        .map(|step| {
            let mut t: Task = (**task).clone();
            t.steps = Vec::new();
            t.instruction = step.instruction.clone();
            t.agent = step.agent.clone();
            t.verifier = step.verifier.clone();
            if let Some(dir) = &step.solution_dir {
                t.solution_dir = Some(dir.clone());
            }
            t.artifacts = task.artifacts.clone();
            for path in &step.artifacts {
                if !t.artifacts.contains(path) {
                    t.artifacts.push(path.clone());
                }
            }
            if let Some(own) = &step.tests_dir {
                let merged = plan.dir.join(STEP_TESTS_DIR).join(&step.name);
                merge_tests(&[&task.tests_dir, own], &merged).map_err(|e| Infra {
                    phase: Phase::Environment,
                    message: format!("{}: {e}", merged.display()),
                })?;
                t.tests_dir = merged;
            }
            let mut view = plan.clone();
            view.task = Arc::new(t);
            Ok(view)
        })
        .collect()
}

/// Copy each of `sources` (when it exists) into `dest`, later ones over earlier ones.
fn merge_tests(sources: &[&Path], dest: &Path) -> std::io::Result<()> {
    if dest.exists() {
        std::fs::remove_dir_all(dest)?;
    }
    std::fs::create_dir_all(dest)?;
    for src in sources {
        if src.is_dir() {
            copy_tree(src, dest)?;
        }
    }
    Ok(())
}

fn copy_tree(src: &Path, dest: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let to = dest.join(entry.file_name());
        if kind.is_dir() {
            std::fs::create_dir_all(&to)?;
            copy_tree(&entry.path(), &to)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(entry.path())?;
            let _ = std::fs::remove_file(&to);
            std::os::unix::fs::symlink(target, &to)?;
        } else {
            std::fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}

/// What the steps' agent runs left for the rest of the trial.
pub(crate) struct StepsRun {
    /// The agent run of the last step that ran (its container may still be running).
    pub done: AgentDone,
    /// Index (into the views) of the last step whose agent ran: the trial's collect and
    /// final verification use its view.
    pub last: usize,
    /// The steps already judged, in order.
    pub records: Vec<StepRecord>,
    /// The last step still needs its verifier (the trial's ordinary verify path); `false` when
    /// it was verified here and the remaining steps were stopped.
    pub verify_last: bool,
    /// Why the steps after `last` do not run, when the last step is still to be verified.
    pub stopped: Option<String>,
    /// When the last step started.
    pub last_started: Instant,
}

/// Run every step's setup and agent, verifying each step but the last on a snapshot, until
/// the last step or until Harbor's rules stop the remaining ones. `ctx` is the trial's
/// context for the first view (the container in `env` was made from it); `trial` the trial's
/// own plan (the task with its steps).
pub(crate) async fn run<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    trial: &TrialPlan,
    views: &[TrialPlan],
    env: &EnvReady,
    verifier_egress: &std::sync::Mutex<Vec<crate::gateway::EgressEvent>>,
) -> Result<StepsRun, Infra> {
    let mut records: Vec<StepRecord> = Vec::new();
    let mut previous: Option<(AgentDone, usize, Instant)> = None;
    for (k, (view, step)) in views.iter().zip(&trial.task.steps).enumerate() {
        let started = Instant::now();
        let sctx = Ctx {
            sb: ctx.sb,
            plan: view,
            scope: ctx.scope,
        };
        let step_dir = step_path(ctx.plan, step);
        super::make_dirs(&step_dir, &["agent", "verifier", "artifacts"], Phase::Agent)?;
        let own_env;
        let env_k = if k == 0 {
            env
        } else {
            own_env = next_env(&views[0], view, env)?;
            upload_step_files(&sctx, &own_env).await?;
            &own_env
        };
        tracing::info!(
            trial = ctx.plan.id,
            step = step.name,
            "step {}/{}",
            k + 1,
            views.len()
        );
        if let Err(why) = prepare(&sctx, env_k, step).await? {
            let Some((done, last, last_started)) = previous else {
                // Nothing of the agent's has run yet: the task's own setup is broken.
                return Err(Infra {
                    phase: Phase::Environment,
                    message: why,
                });
            };
            records.push(StepRecord {
                name: step.name.clone(),
                termination: None,
                verifier: VerifierOutcome::skipped(
                    view.task.verifier.mode,
                    &format!("not run: {why}"),
                ),
                reward: None,
                passed: false,
                stopped: Some(format!("{why}; the remaining steps were not run")),
                artifacts: Vec::new(),
                seconds: round3(started.elapsed().as_secs_f64()),
            });
            return Ok(StepsRun {
                done,
                last,
                records,
                verify_last: false,
                stopped: None,
                last_started,
            });
        }
        let done = super::agent::run(&sctx, env_k).await?;
        keep_agent_logs(ctx.plan, &step_dir);
        let is_last = k + 1 == views.len();
        let gone = container_gone(&done, step);
        if is_last || gone.is_some() {
            return Ok(StepsRun {
                done,
                last: k,
                records,
                verify_last: true,
                stopped: gone,
                last_started: started,
            });
        }
        let settings = &ctx.plan.settings;
        let termination =
            done.termination(None, settings.kill_grace, view.task.environment.memory_mb);
        let verifier = verify_step(&sctx, &env_k.container, &step_dir, verifier_egress).await?;
        let artifacts = step_artifacts(&sctx, &env_k.container, &step_dir).await?;
        let stopped = gate(step, &verifier);
        records.push(step_record(
            step,
            Some(termination),
            verifier,
            stopped.clone(),
            artifacts,
            started,
        ));
        if stopped.is_some() {
            return Ok(StepsRun {
                done,
                last: k,
                records,
                verify_last: false,
                stopped: None,
                last_started: started,
            });
        }
        previous = Some((done, k, started));
    }
    // `views` is never empty here (a multi-step task has steps) and the last step returns.
    Err(Infra {
        phase: Phase::Agent,
        message: "a multi-step task without steps".to_string(),
    })
}

/// The record of the last step that ran, from the trial's final verifier and termination.
pub(crate) fn last_record(
    task: &Task,
    run: &StepsRun,
    termination: &Termination,
    verifier: &VerifierOutcome,
) -> Option<StepRecord> {
    if !run.verify_last {
        return None;
    }
    let step = task.steps.get(run.last)?;
    let stopped = run.stopped.clone().or_else(|| {
        (run.last + 1 < task.steps.len())
            .then(|| gate(step, verifier))
            .flatten()
    });
    Some(step_record(
        step,
        Some(termination.clone()),
        verifier.clone(),
        stopped,
        Vec::new(),
        run.last_started,
    ))
}

fn step_record(
    step: &Step,
    termination: Option<Termination>,
    verifier: VerifierOutcome,
    stopped: Option<String>,
    artifacts: Vec<ArtifactEntry>,
    started: Instant,
) -> StepRecord {
    StepRecord {
        name: step.name.clone(),
        termination,
        reward: verifier.reward.as_ref().map(verifier::primary_value),
        passed: verifier.status == VerifierStatus::Passed,
        verifier,
        stopped,
        artifacts,
        seconds: round3(started.elapsed().as_secs_f64()),
    }
}

/// The task's verifier result from its steps' (Harbor's `multi_step_reward_strategy`):
/// `mean` is the per-key mean over the steps that gave a reward (a key a step lacks counts 0;
/// steps without a reward, or not run, are not counted); `final` is the last step's result as
/// it is. No step with a reward: an error naming the last step's.
pub(crate) fn task_verdict(
    steps: &[StepRecord],
    strategy: MultiStepReward,
    mode: VerifierMode,
    threshold: f64,
) -> VerifierOutcome {
    let Some(last) = steps.last() else {
        return VerifierOutcome::skipped(mode, "no step ran");
    };
    if strategy == MultiStepReward::Final {
        return last.verifier.clone();
    }
    let rewards: Vec<&Reward> = steps
        .iter()
        .filter_map(|s| s.verifier.reward.as_ref())
        .collect();
    if rewards.is_empty() {
        let why = last.verifier.detail.as_deref().unwrap_or("no reward");
        return VerifierOutcome::error(
            mode,
            None,
            format!("no step gave a reward (step {}: {why})", last.name),
        );
    }
    let mut mean = Reward::new();
    for reward in &rewards {
        for key in reward.keys() {
            mean.entry(key.clone()).or_insert(0.0);
        }
    }
    let n = rewards.len() as f64;
    for (key, value) in mean.iter_mut() {
        *value = rewards
            .iter()
            .map(|r| r.get(key).copied().unwrap_or(0.0))
            .sum::<f64>()
            / n;
    }
    let mut out = judge(mode, Ok(mean), None, threshold);
    out.detail = Some(format!(
        "mean over {} of {} step{} with a reward",
        rewards.len(),
        steps.len(),
        if steps.len() == 1 { "" } else { "s" }
    ));
    out
}

/// Whether the remaining steps stop after `step` (Harbor): its verifier gave no reward, or
/// the reward misses the step's `min_reward` (a missing key counts as -inf).
pub(crate) fn gate(step: &Step, verifier: &VerifierOutcome) -> Option<String> {
    let Some(reward) = &verifier.reward else {
        return Some(format!(
            "step {} gave no reward, so the remaining steps were not run",
            step.name
        ));
    };
    let thresholds: Vec<(String, f64)> = match &step.min_reward {
        None => return None,
        Some(MinReward::Reward(t)) => vec![("reward".to_string(), *t)],
        Some(MinReward::PerKey(map)) => map.iter().map(|(k, v)| (k.clone(), *v)).collect(),
    };
    thresholds.into_iter().find_map(|(key, threshold)| {
        let got = reward.get(&key).copied();
        (got.unwrap_or(f64::NEG_INFINITY) < threshold).then(|| {
            let got = got.map_or_else(|| "missing".to_string(), |v| v.to_string());
            format!(
                "{key} = {got} is below the step's min_reward {threshold}, so the remaining steps were not run"
            )
        })
    })
}

/// `<trial>/steps/<name>`.
pub(crate) fn step_path(plan: &TrialPlan, step: &Step) -> PathBuf {
    plan.dir.join("steps").join(&step.name)
}

/// The agent's plan for a later step, from the one the environment phase made for the first:
/// installed already (no install step or pre-flight check again), the step's timeout and
/// user, the step's instruction in place of the first's, and for the oracle the step's
/// solution to upload.
fn next_env(first: &TrialPlan, view: &TrialPlan, env: &EnvReady) -> Result<EnvReady, Infra> {
    let mut agent = env.agent.clone();
    agent.install = None;
    agent.cli_check = None;
    agent.uploads = Vec::new();
    let (from, to) = (&first.task.instruction, &view.task.instruction);
    if let Some(run) = agent.run.as_mut() {
        run.timeout = Duration::try_from_secs_f64(view.task.agent.timeout_sec)
            .unwrap_or(Duration::MAX)
            .mul_f64(view.settings.agent_timeout_multiplier);
        for arg in run.argv.iter_mut() {
            if arg == from {
                *arg = to.clone();
            } else if arg.strip_prefix('\n') == Some(from.as_str()) {
                *arg = format!("\n{to}");
            }
        }
        if run.user == first.task.agent.user {
            run.user = view.task.agent.user.clone();
        }
    }
    if matches!(view.agent.kind, AgentKind::Oracle) {
        let fresh = view
            .agent
            .plan(&view.task, &view.overrides)
            .map_err(infra(Phase::Agent))?;
        agent.uploads = fresh.uploads;
    }
    // The first step's proxy serves every step: the trial holds it.
    Ok(env.with_agent(agent))
}

/// A later step's instruction and the agent's uploads (the oracle's solution).
async fn upload_step_files<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
) -> Result<(), Infra> {
    let fail = infra(Phase::Agent);
    let tar = files_to_tar(&[TarEntry {
        path: "arbiter/instruction.md",
        content: Some(ctx.plan.task.instruction.as_bytes()),
        mode: 0o644,
    }])
    .map_err(infra(Phase::Agent))?;
    ctx.sb
        .upload(&env.container, "/", tar)
        .await
        .map_err(fail)?;
    for upload in &env.agent.uploads {
        ctx.sb
            .upload(&env.container, &upload.dest, upload.tar.clone())
            .await
            .map_err(infra(Phase::Agent))?;
    }
    Ok(())
}

/// The step's `workdir/` into the working directory, its `setup.sh`, its healthcheck. The
/// inner error says why the step cannot start (the step's result, not the harness's).
async fn prepare<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
    step: &Step,
) -> Result<Result<(), String>, Infra> {
    let id = &env.container;
    let task = &ctx.plan.task;
    let user = task.agent.user.clone();
    let task_env = resolve_env(&task.environment.env).map_err(infra(Phase::Agent))?;
    if let Some(workdir_dir) = &step.workdir_dir {
        let workdir = container_workdir(ctx, id, step).await?;
        let trimmed = workdir.trim_end_matches('/');
        let (parent, base) = match trimmed.rsplit_once('/') {
            Some((parent, base)) if !base.is_empty() => {
                (if parent.is_empty() { "/" } else { parent }, base)
            }
            _ => ("/", "."),
        };
        let tar = dir_to_tar(workdir_dir, base).map_err(|e| Infra {
            phase: Phase::Agent,
            message: format!("{}: {e}", workdir_dir.display()),
        })?;
        ctx.sb
            .upload(id, parent, tar)
            .await
            .map_err(infra(Phase::Agent))?;
        if step.setup_script.is_some() {
            let script = format!("{trimmed}/setup.sh");
            let rel = format!("steps/{}/setup", step.name);
            let (out, err) = (format!("{rel}.stdout.log"), format!("{rel}.stderr.log"));
            let spec = ctx.exec_spec(
                vec!["bash".to_string(), script],
                user.clone(),
                Duration::try_from_secs_f64(task.agent.timeout_sec).unwrap_or(Duration::MAX),
                Some((&out, &err)),
            );
            let end = exec_with(ctx, id, spec, &task_env).await?;
            if end != ExecEnd::Exited(0) {
                return Ok(Err(format!(
                    "step {}'s setup.sh {} (see {err})",
                    step.name,
                    match end {
                        ExecEnd::Exited(code) => format!("exited with {code}"),
                        ExecEnd::TimedOut => "timed out".to_string(),
                        ExecEnd::Killed { .. } => "was killed".to_string(),
                    }
                )));
            }
        }
    }
    if let Some(check) = &step.healthcheck
        && let Err(why) =
            super::healthcheck::run(ctx, id, check, user, &task_env, Phase::Agent).await?
    {
        return Ok(Err(format!(
            "step {}'s healthcheck failed: {why}",
            step.name
        )));
    }
    Ok(Ok(()))
}

/// The working directory's absolute path: `[environment] workdir`, else what `pwd` says in
/// the container (the image's `WORKDIR`), else `/`.
async fn container_workdir<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    step: &Step,
) -> Result<String, Infra> {
    if let Some(dir) = &ctx.plan.task.environment.workdir {
        return Ok(dir.clone());
    }
    let rel = format!("steps/{}/pwd", step.name);
    let (out, err) = (format!("{rel}.stdout.log"), format!("{rel}.stderr.log"));
    let spec = ctx.exec_spec(
        ctx.sb.harness_argv("sh", &["-c", "pwd"]),
        None,
        Duration::from_secs(30),
        Some((&out, &err)),
    );
    ctx.sb.exec(id, &spec).await.map_err(infra(Phase::Agent))?;
    let said = std::fs::read_to_string(ctx.path(&out)).unwrap_or_default();
    let _ = std::fs::remove_file(ctx.path(&out));
    let _ = std::fs::remove_file(ctx.path(&err));
    let dir = said.trim();
    Ok(if dir.starts_with('/') { dir } else { "/" }.to_string())
}

/// The agent's container cannot carry on to the next step: the harness's deadline, a kill,
/// OOM or the storage watchdog ended the run (the engine stopped the container).
fn container_gone(done: &AgentDone, step: &Step) -> Option<String> {
    let why = if let Some(over) = done.storage.over_limit() {
        over
    } else {
        match done.end {
            Some(ExecEnd::TimedOut) => "the agent's run reached the step's deadline".to_string(),
            Some(ExecEnd::Killed { .. }) => "the agent's run was killed".to_string(),
            _ => return None,
        }
    };
    Some(format!(
        "{why} in step {}, which ends its container, so the remaining steps were not run",
        step.name
    ))
}

/// Copy the step's agent logs (`agent/stdout.log`, `agent/stderr.log`) to `steps/<name>/agent/`.
fn keep_agent_logs(plan: &TrialPlan, step_dir: &Path) {
    for name in ["stdout.log", "stderr.log"] {
        let from = plan.dir.join("agent").join(name);
        if from.is_file()
            && let Err(e) = std::fs::copy(&from, step_dir.join("agent").join(name))
        {
            tracing::warn!(trial = plan.id, "keeping the step's {name}: {e}");
        }
    }
}

/// The step's verifier on a snapshot of the running agent container (or inside it, `live`),
/// its logs and reward under `steps/<name>/verifier/`. The verifier's container and the
/// snapshot are removed once it is judged.
async fn verify_step<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    step_dir: &Path,
    egress: &std::sync::Mutex<Vec<crate::gateway::EgressEvent>>,
) -> Result<VerifierOutcome, Infra> {
    let task = &ctx.plan.task;
    let settings = &ctx.plan.settings;
    let input = VerifyInput::new(task, step_dir, ctx.limits(), settings, egress);
    let before = ctx.scope.held();
    let target = if task.verifier.mode == VerifierMode::Live {
        verifier::Target::Live(id.clone())
    } else {
        let frozen = ctx
            .scope
            .freeze(ctx.sb, id, Role::Snapshot)
            .await
            .map_err(infra(Phase::Verify))?;
        verifier::Target::Frozen(frozen)
    };
    let mut outcome = verifier::verify(ctx.sb, ctx.scope, &input, &target)
        .await
        .map_err(infra(Phase::Verify))?;
    if task.verifier.mode == VerifierMode::Clean {
        // `clean` needs the change set, which is taken once, after the last step.
        outcome.mode = VerifierMode::Snapshot;
    }
    let mut made: Vec<Resource> = ctx
        .scope
        .held()
        .into_iter()
        .filter(|r| !before.contains(r))
        .collect();
    made.sort();
    for resource in made {
        ctx.scope
            .remove(ctx.sb, resource)
            .await
            .map_err(infra(Phase::Verify))?;
    }
    Ok(outcome)
}

/// The task's and the step's artifacts, from the running container, into
/// `steps/<name>/artifacts/`.
async fn step_artifacts<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    step_dir: &Path,
) -> Result<Vec<ArtifactEntry>, Infra> {
    let mut plan = ctx.plan.clone();
    plan.dir = step_dir.to_path_buf();
    let actx = Ctx {
        sb: ctx.sb,
        plan: &plan,
        scope: ctx.scope,
    };
    let mut out = Vec::new();
    for path in &ctx.plan.task.artifacts {
        let (entry, _) = super::artifacts::fetch_artifact(&actx, id, path).await?;
        out.push(entry);
    }
    Ok(out)
}

/// `spec` run in the agent's container with `env`: how it ended.
async fn exec_with<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    mut spec: ExecSpec,
    env: &[(String, String)],
) -> Result<ExecEnd, Infra> {
    spec.env = env.to_vec();
    Ok(ctx
        .sb
        .exec(id, &spec)
        .await
        .map_err(infra(Phase::Agent))?
        .end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::VerifierMode::Snapshot;

    fn rec(name: &str, reward: Option<&[(&str, f64)]>) -> StepRecord {
        let verifier = match reward {
            Some(pairs) => judge(
                Snapshot,
                Ok(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()),
                Some(0),
                1.0,
            ),
            None => VerifierOutcome::error(Snapshot, Some(1), "no reward file".to_string()),
        };
        StepRecord {
            name: name.to_string(),
            termination: None,
            reward: verifier.reward.as_ref().map(verifier::primary_value),
            passed: verifier.status == VerifierStatus::Passed,
            verifier,
            stopped: None,
            artifacts: Vec::new(),
            seconds: 0.0,
        }
    }

    #[test]
    fn mean_is_per_key_over_the_steps_with_a_reward_missing_keys_counting_zero() {
        let steps = [
            rec("a", Some(&[("reward", 1.0), ("style", 1.0)])),
            rec("b", Some(&[("reward", 0.0)])),
        ];
        let v = task_verdict(&steps, MultiStepReward::Mean, Snapshot, 1.0);
        let r = v.reward.expect("a reward");
        assert_eq!(r.get("reward"), Some(&0.5));
        assert_eq!(r.get("style"), Some(&0.5));
        assert_eq!(v.status, VerifierStatus::Failed);
        assert_eq!(
            task_verdict(&steps, MultiStepReward::Mean, Snapshot, 0.5).status,
            VerifierStatus::Passed
        );
        // A step without a reward is not in the denominator (Harbor).
        let steps = [rec("a", Some(&[("reward", 1.0)])), rec("b", None)];
        let v = task_verdict(&steps, MultiStepReward::Mean, Snapshot, 1.0);
        assert_eq!(v.reward.and_then(|r| r.get("reward").copied()), Some(1.0));
    }

    #[test]
    fn final_is_the_last_step_that_ran_and_no_reward_at_all_is_an_error() {
        let steps = [
            rec("a", Some(&[("reward", 1.0)])),
            rec("b", Some(&[("reward", 0.25)])),
        ];
        let v = task_verdict(&steps, MultiStepReward::Final, Snapshot, 1.0);
        assert_eq!(v.reward.and_then(|r| r.get("reward").copied()), Some(0.25));
        let v = task_verdict(&[rec("a", None)], MultiStepReward::Mean, Snapshot, 1.0);
        assert_eq!(v.status, VerifierStatus::Error);
        assert!(v.reward.is_none(), "no reward is not a zero");
        assert_eq!(
            v.detail.as_deref(),
            Some("no step gave a reward (step a: no reward file)")
        );
    }
}
