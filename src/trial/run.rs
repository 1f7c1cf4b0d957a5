use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::agent::{Agent, AgentPlan, INSTRUCTION_PATH, redact_env, resolve_env, shell_script};
use crate::outcome::{
    AuditInput, Claim, CompletionRecord, CompletionSummary, FileCheck, FileStatus, Receipt, audit,
    collect_claim,
};
use crate::sandbox::{
    Cancellable, ContainerSpec, ExecOutcome, ExecSpec, ExtractLimits, Fetched, ImageSpec,
    LABEL_JOB, LABEL_MANAGED, LABEL_TRIAL, Network, Sandbox, SandboxError, TarEntry, dir_to_tar,
    extract_tar_file, files_to_tar,
};
use crate::task::{NetworkMode, Task, VerifierMode};
use crate::timefmt::now_rfc3339;
use crate::verifier::{parse_reward, primary_value};

mod collect;
mod verify;

use super::control;
use super::record::*;
use super::safe_name;
use super::scrub;

/// Phases of a trial, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Environment,
    Agent,
    Collect,
    Verify,
    Cleanup,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Environment => "environment",
            Phase::Agent => "agent",
            Phase::Collect => "collect",
            Phase::Verify => "verify",
            Phase::Cleanup => "cleanup",
        }
    }
}

/// Knobs that are the same for every trial of a job.
#[derive(Debug, Clone)]
pub struct TrialSettings {
    pub pass_threshold: f64,
    /// Bytes of stdout / stderr kept per stream.
    pub log_cap_bytes: u64,
    /// Time between SIGTERM and SIGKILL when a deadline fires.
    pub kill_grace: Duration,
    /// Label value identifying the job's resources (unique per job dir).
    pub job_label: String,
    /// Extra labels on every container and image (e.g. the owning process, for `gc`).
    pub labels: BTreeMap<String, String>,
    pub agent_timeout_multiplier: f64,
    pub install_timeout_multiplier: f64,
    pub verifier_timeout_multiplier: f64,
}

/// Everything one trial needs, decided before it starts.
#[derive(Debug, Clone)]
pub struct TrialPlan {
    pub id: String,
    pub job: String,
    pub task: Arc<Task>,
    pub agent: Arc<Agent>,
    pub variant: String,
    /// Variant env overrides (values may hold `${NAME}` references; never recorded resolved).
    pub overrides: BTreeMap<String, String>,
    /// Variant arguments appended to a command agent's argv.
    pub args: Vec<String>,
    pub attempt: u32,
    pub image: ImageSpec,
    /// The trial's directory (created by the caller, empty).
    pub dir: PathBuf,
    pub settings: Arc<TrialSettings>,
}

/// How a trial run ended.
#[derive(Debug)]
pub enum TrialRun {
    Finished(Box<TrialRecord>),
    /// Stopped by the user before it finished; nothing is recorded, it will run again on resume.
    Cancelled,
}

/// A failure of the harness or engine during `phase`.
struct Infra {
    phase: Phase,
    message: String,
}

fn infra<E: std::fmt::Display>(phase: Phase) -> impl FnOnce(E) -> Infra {
    move |e| Infra {
        phase,
        message: e.to_string(),
    }
}

const AGENT_LOGS_LIMIT: u64 = 64 * 1024 * 1024;
const VERIFIER_LOGS_LIMIT: u64 = 16 * 1024 * 1024;
const OUTCOME_LIMIT: u64 = 1024 * 1024;
const ARTIFACT_LIMIT: u64 = 256 * 1024 * 1024;
/// At most this many extra paths named by a completion record are checked.
const MAX_OBSERVED_PATHS: usize = 16;
/// What an agent may write to its container's filesystem when the task sets no `storage_mb`.
/// Without a ceiling a sparse file (`truncate -s 1T`) costs the agent nothing, but committing
/// it for the snapshot verifier writes every byte to the host's disk.
pub const DEFAULT_STORAGE_LIMIT_MB: u64 = 10 * 1024;
/// How often the disk watchdog measures the agent container's writable layer.
const DISK_POLL: Duration = Duration::from_secs(1);
/// Limit of the CLI pre-flight check.
const CLI_CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// Run one trial to its record (or to cancellation). Never fails: see the module invariants.
pub async fn run<S: Sandbox>(
    sandbox: Arc<S>,
    plan: &TrialPlan,
    cancel: tokio::sync::watch::Receiver<bool>,
    on_phase: &(dyn Fn(Phase) + Send + Sync),
) -> TrialRun {
    let mut trial = Trial::new(plan);
    // Cancellation is cooperative (see `Cancellable`): a cancelled trial stops at its next
    // engine call or wait, with every container it created registered for cleanup.
    let guarded = Cancellable::new(sandbox.clone(), cancel);
    let result = trial.phases(&guarded, on_phase).await;
    let cancelled = guarded.is_cancelled();
    on_phase(Phase::Cleanup);
    let cleanup_started = Instant::now();
    let swept = trial.cleanup(&*sandbox, cancelled || result.is_err()).await;
    trial.time(Phase::Cleanup, cleanup_started);
    // A trial that saw the cancel mid-way may hold a half-made record: it runs again on resume.
    let outcome = if cancelled { None } else { Some(result) };
    match outcome {
        None => TrialRun::Cancelled,
        Some(result) => {
            if let Err(failure) = result {
                trial.fail(failure);
            }
            if let Err(message) = swept {
                tracing::warn!(trial = plan.id, "cleanup: {message}");
            }
            TrialRun::Finished(Box::new(trial.finish()))
        }
    }
}

struct Trial<'a> {
    plan: &'a TrialPlan,
    rec: TrialRecord,
    containers: Vec<String>,
    images: Vec<String>,
    agent_plan: Option<AgentPlan>,
    agent_done: bool,
    /// Host directory mounted as the control root (removed when the trial ends).
    control_dir: Option<PathBuf>,
    /// The agent's typed completion record, when valid.
    completion: Option<CompletionRecord>,
    /// Resolved secret values to keep out of every file.
    secrets: Vec<String>,
    /// The agent wrote more than its storage limit (bytes measured): its filesystem is neither
    /// snapshotted nor verified.
    storage_exceeded: Option<u64>,
}

impl<'a> Trial<'a> {
    fn new(plan: &'a TrialPlan) -> Self {
        let task = &plan.task;
        let env = &task.environment;
        let rec = TrialRecord {
            schema: TRIAL_SCHEMA.to_string(),
            id: plan.id.clone(),
            job: plan.job.clone(),
            task: task.name.clone(),
            agent: plan.agent.name.clone(),
            variant: plan.variant.clone(),
            attempt: plan.attempt,
            task_checksum: task.checksum.clone(),
            image: None,
            termination: Termination {
                kind: TerminationKind::InfraError,
                exit_code: None,
                detail: Some("the agent phase did not run".to_string()),
            },
            claim: Claim::missing(),
            verifier: VerifierOutcome::skipped(
                mode_name(task.verifier.mode),
                "the verifier did not run",
            ),
            audit: None,
            phases: BTreeMap::new(),
            retries: 0,
            previous_errors: Vec::new(),
            artifacts: Vec::new(),
            overrides: redact_env(&plan.overrides),
            infra_error: None,
            limits: Limits {
                cpus: env.cpus,
                memory_mb: env.memory_mb,
                pids_limit: env.pids_limit,
                network: network_name(env.network).to_string(),
                storage_mb: env.storage_mb,
                storage_enforced: false,
                storage_limit_mb: env.storage_mb.unwrap_or(DEFAULT_STORAGE_LIMIT_MB),
                storage_used_mb: None,
            },
            output: OutputStats::default(),
            harness_overrides: Vec::new(),
            agent_deadline_epoch: None,
            control_root: None,
            trajectory: None,
            deliverables: Vec::new(),
            observed_files: Vec::new(),
            validation: Vec::new(),
            completion: None,
            started_at: now_rfc3339(),
            finished_at: String::new(),
        };
        Trial {
            plan,
            rec,
            containers: Vec::new(),
            images: Vec::new(),
            agent_plan: None,
            agent_done: false,
            control_dir: None,
            completion: None,
            secrets: Vec::new(),
            storage_exceeded: None,
        }
    }

    fn time(&mut self, phase: Phase, started: Instant) {
        self.rec.phases.insert(
            phase.as_str().to_string(),
            PhaseTime {
                seconds: round3(started.elapsed().as_secs_f64()),
            },
        );
    }

    fn labels(&self, role: &str) -> BTreeMap<String, String> {
        let mut labels = self.plan.settings.labels.clone();
        labels.extend([
            (LABEL_MANAGED.to_string(), "true".to_string()),
            (LABEL_JOB.to_string(), self.plan.settings.job_label.clone()),
            (LABEL_TRIAL.to_string(), self.plan.id.clone()),
            ("arbiter.role".to_string(), role.to_string()),
        ]);
        labels
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.plan.dir.join(rel)
    }

    async fn phases<S: Sandbox>(
        &mut self,
        sb: &S,
        on_phase: &(dyn Fn(Phase) + Send + Sync),
    ) -> Result<(), Infra> {
        for sub in ["agent", "artifacts", "verifier"] {
            let dir = self.path(sub);
            std::fs::create_dir_all(&dir).map_err(|e| Infra {
                phase: Phase::Environment,
                message: format!("{}: {e}", dir.display()),
            })?;
        }
        on_phase(Phase::Environment);
        let started = Instant::now();
        let agent_id = self.environment(sb).await?;
        self.time(Phase::Environment, started);

        on_phase(Phase::Agent);
        let started = Instant::now();
        self.agent(sb, &agent_id).await?;
        self.agent_done = true;
        self.time(Phase::Agent, started);

        on_phase(Phase::Collect);
        let started = Instant::now();
        let live = self.plan.task.verifier.mode == VerifierMode::Live;
        if !live {
            sb.kill(&agent_id).await.map_err(infra(Phase::Collect))?;
            self.check_oom(sb, &agent_id).await?;
        }
        // The last word on the agent's writes (in snapshot mode, after every process is gone).
        self.measure_storage(sb, &agent_id).await;
        self.collect(sb, &agent_id).await?;
        if let Some(used) = self.storage_exceeded {
            // Committing would copy every byte (sparse files in full) to the host's disk.
            self.rec.verifier = VerifierOutcome {
                status: VerifierStatus::Error,
                mode: mode_name(self.plan.task.verifier.mode).to_string(),
                reward: None,
                exit_code: None,
                detail: Some(format!(
                    "not run: the agent wrote {} to its container's filesystem, over the storage limit of {} MiB, so its filesystem was not snapshotted",
                    fmt_mib(used),
                    self.rec.limits.storage_limit_mb
                )),
            };
            sb.kill(&agent_id).await.map_err(infra(Phase::Collect))?;
            self.time(Phase::Collect, started);
            return Ok(());
        }
        let verifier_image = if live {
            None
        } else {
            let image = sb
                .commit(&agent_id, &self.labels("snapshot"))
                .await
                .map_err(infra(Phase::Collect))?;
            self.images.push(image.clone());
            sb.remove_container(&agent_id)
                .await
                .map_err(infra(Phase::Collect))?;
            self.containers.retain(|c| c != &agent_id);
            Some(image)
        };
        self.time(Phase::Collect, started);

        let has_validation = self
            .plan
            .task
            .completion
            .as_ref()
            .is_some_and(|c| !c.validation.is_empty());
        if has_validation {
            let started = Instant::now();
            let image = match &verifier_image {
                Some(image) => image.clone(),
                None => {
                    // Live mode: validate in a snapshot of the running agent container, so the
                    // verifier later sees the container exactly as the agent left it.
                    let image = sb
                        .commit(&agent_id, &self.labels("validation-snapshot"))
                        .await
                        .map_err(infra(Phase::Collect))?;
                    self.images.push(image.clone());
                    image
                }
            };
            self.validate(sb, &image).await?;
            self.rec.phases.insert(
                "validate".to_string(),
                PhaseTime {
                    seconds: round3(started.elapsed().as_secs_f64()),
                },
            );
        }

        on_phase(Phase::Verify);
        let started = Instant::now();
        self.verify(sb, &agent_id, verifier_image.as_deref())
            .await?;
        if live {
            sb.kill(&agent_id).await.map_err(infra(Phase::Verify))?;
            self.check_oom(sb, &agent_id).await?;
        }
        self.time(Phase::Verify, started);
        Ok(())
    }

    async fn environment<S: Sandbox>(&mut self, sb: &S) -> Result<String, Infra> {
        let task = &self.plan.task;
        let image = sb
            .ensure_image(&self.plan.image)
            .await
            .map_err(infra(Phase::Environment))?;
        self.rec.image = Some(image.clone());
        let mut agent_plan = self
            .plan
            .agent
            .plan(task, &self.plan.overrides)
            .map_err(infra(Phase::Environment))?;
        let settings = &self.plan.settings;
        if let Some(run) = agent_plan.run.as_mut() {
            run.argv.extend(self.plan.args.iter().cloned());
            run.timeout = run.timeout.mul_f64(settings.agent_timeout_multiplier);
        }
        if let Some(install) = agent_plan.install.as_mut() {
            install.timeout = install.timeout.mul_f64(settings.install_timeout_multiplier);
        }
        self.rec.harness_overrides = agent_plan.harness_overrides.clone();
        self.secrets = agent_plan.secrets.clone();
        // The verifier's `${NAME}` values are secrets too (resolved again, and checked, later).
        if let Ok(resolved) = resolve_env(&task.verifier.env) {
            self.secrets
                .extend(crate::agent::secret_values(&task.verifier.env, &resolved));
        }
        scrub::register(&self.secrets);
        // The agent's env (which may hold secrets) goes to its exec calls only: an env in the
        // container's config would be committed into the snapshot the verifier starts from.
        let env = vec![(
            "ARBITER_INSTRUCTION_FILE".to_string(),
            INSTRUCTION_PATH.to_string(),
        )];
        let mut rw_mounts = Vec::new();
        if let Some(control) = &agent_plan.control {
            let dir = control::prepare(&self.path(".control"), control.template.as_deref())
                .map_err(infra(Phase::Environment))?;
            self.control_dir = Some(dir.clone());
            rw_mounts.push((dir, control.container_path.clone()));
        }
        let spec = ContainerSpec {
            image,
            name: None,
            env,
            labels: self.labels("agent"),
            cpus: task.environment.cpus,
            memory_mb: task.environment.memory_mb,
            pids_limit: task.environment.pids_limit,
            network: sandbox_network(task.environment.network),
            workdir: task.environment.workdir.clone(),
            ro_mounts: agent_plan.ro_mounts.clone(),
            rw_mounts,
        };
        let id = sb.create(&spec).await.map_err(infra(Phase::Environment))?;
        self.containers.push(id.clone());
        sb.start(&id).await.map_err(infra(Phase::Environment))?;
        let base = files_to_tar(&[
            TarEntry {
                path: "arbiter/",
                content: None,
                mode: 0o755,
            },
            TarEntry {
                path: "arbiter/instruction.md",
                content: Some(task.instruction.as_bytes()),
                mode: 0o644,
            },
            TarEntry {
                path: "logs/",
                content: None,
                mode: 0o755,
            },
            TarEntry {
                path: "logs/agent/",
                content: None,
                mode: 0o777,
            },
        ])
        .map_err(infra(Phase::Environment))?;
        sb.put_archive(&id, "/", base)
            .await
            .map_err(infra(Phase::Environment))?;
        for upload in &agent_plan.uploads {
            sb.put_archive(&id, &upload.dest, upload.tar.clone())
                .await
                .map_err(infra(Phase::Environment))?;
        }
        self.agent_plan = Some(agent_plan);
        Ok(id)
    }

    fn exec_spec(
        &self,
        argv: Vec<String>,
        user: Option<String>,
        timeout: Duration,
        logs: Option<(&str, &str)>,
    ) -> ExecSpec {
        ExecSpec {
            argv,
            env: Vec::new(),
            user,
            workdir: self.plan.task.environment.workdir.clone(),
            stdout: logs.map(|(out, _)| self.path(out)),
            stderr: logs.map(|(_, err)| self.path(err)),
            cap_bytes: self.plan.settings.log_cap_bytes,
            timeout: Some(timeout),
            grace: self.plan.settings.kill_grace,
        }
    }

    async fn agent<S: Sandbox>(&mut self, sb: &S, id: &str) -> Result<(), Infra> {
        let Some(agent_plan) = self.agent_plan.take() else {
            return Err(Infra {
                phase: Phase::Agent,
                message: "agent plan missing".to_string(),
            });
        };
        if let Some(install) = &agent_plan.install {
            let mut spec = self.exec_spec(
                install.argv.clone(),
                install.user.clone(),
                install.timeout,
                Some(("agent/install.stdout.log", "agent/install.stderr.log")),
            );
            spec.env = agent_plan.env.clone();
            let out = sb.exec(id, &spec).await.map_err(infra(Phase::Agent))?;
            if out.timed_out {
                return Err(Infra {
                    phase: Phase::Agent,
                    message: format!(
                        "agent install timed out after {}s",
                        install.timeout.as_secs()
                    ),
                });
            }
            if out.exit_code != Some(0) {
                return Err(Infra {
                    phase: Phase::Agent,
                    message: format!(
                        "agent install exited with {} (see agent/install.stderr.log)",
                        code_words(out.exit_code)
                    ),
                });
            }
        }
        if let Some(check) = &agent_plan.cli_check {
            let user = agent_plan.run.as_ref().and_then(|r| r.user.clone());
            let mut spec = self.exec_spec(
                check.argv.clone(),
                user,
                CLI_CHECK_TIMEOUT,
                Some(("agent/cli-check.stdout.log", "agent/cli-check.stderr.log")),
            );
            spec.env = agent_plan.env.clone();
            let out = sb.exec(id, &spec).await.map_err(infra(Phase::Agent))?;
            let mut said = read_capped(&self.path("agent/cli-check.stdout.log"), 1024 * 1024);
            said.extend(read_capped(
                &self.path("agent/cli-check.stderr.log"),
                1024 * 1024,
            ));
            let said = String::from_utf8_lossy(&said);
            let shown = check.argv.join(" ");
            if out.timed_out || out.exit_code != Some(0) && !said.contains(&check.required) {
                return Err(Infra {
                    phase: Phase::Agent,
                    message: format!(
                        "pre-flight `{shown}` {} — is aworld-cli installed in the task container (agent `install:` or a read-only `mounts:` entry, see docker/agents/aworld/README.md)? Output in agent/cli-check.stderr.log",
                        if out.timed_out {
                            format!("timed out after {}s", CLI_CHECK_TIMEOUT.as_secs())
                        } else {
                            format!("exited with {}", code_words(out.exit_code))
                        }
                    ),
                });
            }
            if !said.contains(&check.required) {
                return Err(Infra {
                    phase: Phase::Agent,
                    message: format!(
                        "the installed aworld-cli does not support {flag} (`{shown}` does not mention it); arbiter needs {flag} to read the aworld.run.outcome.v1 record — upgrade aworld-cli to a release that has it (pip install -U aworld-cli, or rebuild docker/agents/aworld with a newer AWORLD_PIP_SPEC)",
                        flag = check.required
                    ),
                });
            }
        }
        match &agent_plan.run {
            None => {
                self.rec.termination = Termination {
                    kind: TerminationKind::Exited,
                    exit_code: Some(0),
                    detail: Some("nop: the agent ran nothing".to_string()),
                };
            }
            Some(step) => {
                let mut spec = self.exec_spec(
                    step.argv.clone(),
                    step.user.clone(),
                    step.timeout,
                    Some(("agent/stdout.log", "agent/stderr.log")),
                );
                spec.env = agent_plan.env.clone();
                if let Some(name) = &agent_plan.deadline_env {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_secs())
                        .unwrap_or(0);
                    // Floor: the agent's bound is never later than the harness's.
                    let deadline = now.saturating_add(step.timeout.as_secs());
                    spec.env.retain(|(k, _)| k != name);
                    spec.env.push((name.clone(), deadline.to_string()));
                    self.rec.agent_deadline_epoch = Some(deadline);
                }
                let out = self.exec_watched(sb, id, &spec).await?;
                self.rec.output = OutputStats {
                    stdout_bytes: out.stdout_bytes,
                    stderr_bytes: out.stderr_bytes,
                    truncated: out.truncated,
                };
                self.rec.termination = self.termination_of(&out, step.timeout);
                if let Some(used) = self.storage_exceeded {
                    self.rec.termination = Termination {
                        kind: TerminationKind::Killed,
                        exit_code: None,
                        detail: Some(format!(
                            "the agent wrote {} to its container's filesystem, over the storage limit of {} MiB; the container was killed",
                            fmt_mib(used),
                            self.rec.limits.storage_limit_mb
                        )),
                    };
                }
            }
        }
        self.agent_plan = Some(agent_plan);
        Ok(())
    }

    /// Run the agent's exec while a watchdog measures what it writes to the container's
    /// filesystem; over the storage limit the container is killed (which ends the exec).
    async fn exec_watched<S: Sandbox>(
        &mut self,
        sb: &S,
        id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutcome, Infra> {
        let exec = sb.exec(id, spec);
        tokio::pin!(exec);
        let mut tick = tokio::time::interval(DISK_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tokio::select! {
                out = &mut exec => return out.map_err(infra(Phase::Agent)),
                _ = tick.tick(), if self.storage_exceeded.is_none() => {
                    self.measure_storage(sb, id).await;
                    if self.storage_exceeded.is_some() {
                        tracing::warn!(
                            trial = self.plan.id,
                            limit_mb = self.rec.limits.storage_limit_mb,
                            "agent over its storage limit: killing its container"
                        );
                        sb.kill(id).await.map_err(infra(Phase::Agent))?;
                    }
                }
            }
        }
    }

    /// Measure the agent container's writable layer; note when it is over the limit.
    async fn measure_storage<S: Sandbox>(&mut self, sb: &S, id: &str) {
        let used = match sb.disk_usage(id).await {
            Ok(Some(used)) => used,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(trial = self.plan.id, "disk usage: {e}");
                return;
            }
        };
        let mib = used.div_ceil(1024 * 1024);
        let limits = &mut self.rec.limits;
        // The engine reports the size: the limit is enforced.
        limits.storage_enforced = true;
        limits.storage_used_mb = Some(limits.storage_used_mb.unwrap_or(0).max(mib));
        if used > limits.storage_limit_mb.saturating_mul(1024 * 1024) {
            self.storage_exceeded = Some(self.storage_exceeded.unwrap_or(0).max(used));
        }
    }

    fn termination_of(&self, out: &ExecOutcome, timeout: Duration) -> Termination {
        if out.timed_out {
            return Termination {
                kind: TerminationKind::Timeout,
                exit_code: out.exit_code,
                detail: Some(format!(
                    "agent phase exceeded {}s; SIGTERM, then SIGKILL after {}s",
                    fmt_secs(timeout),
                    fmt_secs(self.plan.settings.kill_grace)
                )),
            };
        }
        match out.exit_code {
            Some(code) => Termination {
                kind: TerminationKind::Exited,
                exit_code: Some(code),
                detail: None,
            },
            None => Termination {
                kind: TerminationKind::Killed,
                exit_code: None,
                detail: Some("the agent's process vanished without an exit code".to_string()),
            },
        }
    }

    /// After the container has stopped: was the agent killed by the OOM killer?
    async fn check_oom<S: Sandbox>(&mut self, sb: &S, id: &str) -> Result<(), Infra> {
        let state = sb.inspect(id).await.map_err(infra(Phase::Collect))?;
        if !state.oom_killed {
            return Ok(());
        }
        let memory = self.plan.task.environment.memory_mb;
        let t = &mut self.rec.termination;
        if t.kind == TerminationKind::Killed
            || (t.kind == TerminationKind::Exited && t.exit_code == Some(137))
        {
            t.kind = TerminationKind::Oom;
            t.detail = Some(format!(
                "killed by the kernel OOM killer (memory limit {memory} MiB)"
            ));
        } else {
            let note =
                format!("a process in the container was OOM-killed (memory limit {memory} MiB)");
            t.detail = Some(match t.detail.take() {
                Some(d) => format!("{d}; {note}"),
                None => note,
            });
        }
        Ok(())
    }

    fn fail(&mut self, failure: Infra) {
        tracing::warn!(
            trial = self.plan.id,
            phase = failure.phase.as_str(),
            "infrastructure error: {}",
            failure.message
        );
        if !self.agent_done {
            self.rec.termination = Termination {
                kind: TerminationKind::InfraError,
                exit_code: None,
                detail: Some(format!("{}: {}", failure.phase.as_str(), failure.message)),
            };
        }
        if matches!(self.rec.verifier.status, VerifierStatus::Skipped) {
            self.rec.verifier.detail = Some(format!(
                "not run: infrastructure error in the {} phase",
                failure.phase.as_str()
            ));
        }
        self.rec.infra_error = Some(InfraError {
            phase: failure.phase.as_str().to_string(),
            message: failure.message,
        });
    }

    /// Remove what the trial created. With `sweep`, also anything labelled with this trial
    /// (a create that was in flight when the trial was cancelled).
    async fn cleanup<S: Sandbox>(&mut self, sb: &S, sweep: bool) -> Result<(), String> {
        if std::env::var_os("ARBITER_KEEP_CONTAINERS").is_some() {
            tracing::warn!(trial = self.plan.id, containers = ?self.containers, "ARBITER_KEEP_CONTAINERS set: leaving resources");
            return Ok(());
        }
        let mut errors = Vec::new();
        let mut containers = std::mem::take(&mut self.containers);
        let mut images = std::mem::take(&mut self.images);
        if sweep {
            let filter = [
                format!("{LABEL_JOB}={}", self.plan.settings.job_label),
                format!("{LABEL_TRIAL}={}", self.plan.id),
            ];
            match sb.list_containers(&filter).await {
                Ok(found) => containers.extend(found.into_iter().map(|c| c.id)),
                Err(e) => errors.push(e.to_string()),
            }
            match sb.list_images(&filter).await {
                Ok(found) => images.extend(found.into_iter().map(|i| i.id)),
                Err(e) => errors.push(e.to_string()),
            }
            containers.sort();
            containers.dedup();
            images.sort();
            images.dedup();
        }
        for id in &containers {
            if let Err(e) = sb.remove_container(id).await {
                errors.push(e.to_string());
            }
        }
        for id in &images {
            if let Err(e) = sb.remove_image(id).await {
                errors.push(e.to_string());
            }
        }
        if let Some(dir) = self.control_dir.take()
            && let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            errors.push(format!("{}: {e}", dir.display()));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }

    fn finish(mut self) -> TrialRecord {
        let passed = match self.rec.verifier.status {
            VerifierStatus::Passed => Some(true),
            VerifierStatus::Failed => Some(false),
            VerifierStatus::Error | VerifierStatus::Skipped => None,
        };
        self.rec.audit = if self.rec.is_infra() {
            None
        } else {
            let answer = self.rec.claim.record.as_ref().and_then(|r| {
                r.get("final_answer")
                    .or_else(|| r.get("answer"))
                    .and_then(|a| a.as_str())
            });
            Some(audit(&AuditInput {
                claim: &self.rec.claim,
                passed,
                deliverables: &self.rec.deliverables,
                observed: &self.rec.observed_files,
                receipts: &self.rec.validation,
                completion: self.completion.as_ref(),
                final_answer: answer,
            }))
        };
        self.rec.finished_at = now_rfc3339();
        if !self.secrets.is_empty() {
            let scrubbed = scrub::scrub_dir(&self.plan.dir, &self.secrets);
            if !scrubbed.is_empty() {
                tracing::warn!(
                    trial = self.plan.id,
                    files = ?scrubbed,
                    "a secret value was found in the trial's files and replaced by ***"
                );
            }
            if let Ok(mut bytes) = serde_json::to_vec(&self.rec)
                && scrub::scrub_bytes(&mut bytes, &self.secrets)
            {
                match serde_json::from_slice(&bytes) {
                    Ok(clean) => self.rec = clean,
                    Err(e) => tracing::warn!(trial = self.plan.id, "scrubbing the record: {e}"),
                }
            }
        }
        self.rec
    }
}

enum FetchResult {
    Ok(crate::sandbox::ExtractReport),
    Missing,
    Failed(String),
}

impl From<SandboxError> for Infra {
    fn from(e: SandboxError) -> Self {
        Infra {
            phase: Phase::Collect,
            message: e.to_string(),
        }
    }
}

/// `path` without its leading `/`, when it is absolute and made of plain components only.
fn safe_relative(path: &str) -> Option<PathBuf> {
    use std::path::Component;
    let p = Path::new(path);
    if !p.is_absolute() {
        return None;
    }
    let mut out = PathBuf::new();
    for component in p.components() {
        match component {
            Component::RootDir => {}
            Component::Normal(part) => out.push(part),
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

fn read_capped(path: &Path, cap: u64) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.take(cap).read_to_end(&mut out);
    }
    out
}

fn sandbox_network(mode: NetworkMode) -> Network {
    match mode {
        NetworkMode::NoNetwork => Network::None,
        NetworkMode::Host => Network::Host,
        NetworkMode::Bridge => Network::Bridge,
        // Until the egress proxy of SPEC §11 exists, an allowlist phase gets no
        // network: never more than the task asked for (the loader warns).
        NetworkMode::Allowlist => Network::None,
    }
}

fn network_name(mode: NetworkMode) -> &'static str {
    match mode {
        NetworkMode::NoNetwork => "no-network",
        NetworkMode::Host => "host",
        NetworkMode::Bridge => "bridge",
        NetworkMode::Allowlist => "allowlist",
    }
}

fn mode_name(mode: VerifierMode) -> &'static str {
    match mode {
        VerifierMode::Snapshot => "snapshot",
        VerifierMode::Live => "live",
        VerifierMode::Separate => "separate",
    }
}

fn code_words(code: Option<i64>) -> String {
    code.map(|c| c.to_string())
        .unwrap_or_else(|| "no exit code".to_string())
}

fn fmt_secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s:.1}")
    }
}

fn fmt_mib(bytes: u64) -> String {
    format!("{} MiB", bytes.div_ceil(1024 * 1024))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
