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

    async fn fetch<S: Sandbox>(
        &self,
        sb: &S,
        id: &str,
        path: &str,
        dest: &Path,
        limit: u64,
    ) -> Result<FetchResult, Infra> {
        let tmp = self.plan.dir.join(".fetch.tar");
        let fetched = sb
            .get_archive(id, path, &tmp, limit.saturating_add(1024 * 1024))
            .await
            .map_err(infra(Phase::Collect))?;
        let result = match fetched {
            Fetched::NotFound => FetchResult::Missing,
            Fetched::TooLarge { limit } => {
                FetchResult::Failed(format!("larger than {limit} bytes"))
            }
            Fetched::Archive { .. } => {
                let limits = ExtractLimits {
                    max_bytes: limit,
                    max_entries: 10_000,
                };
                match extract_tar_file(&tmp, dest, limits) {
                    Ok(report) => FetchResult::Ok(report),
                    Err(e) => FetchResult::Failed(format!("unpacking: {e}")),
                }
            }
        };
        let _ = std::fs::remove_file(&tmp);
        Ok(result)
    }

    async fn collect<S: Sandbox>(&mut self, sb: &S, id: &str) -> Result<(), Infra> {
        let logs_dir = self.path("agent/logs");
        if let FetchResult::Failed(why) = self
            .fetch(sb, id, "/logs/agent", &logs_dir, AGENT_LOGS_LIMIT)
            .await?
        {
            tracing::warn!(trial = self.plan.id, "agent logs not collected: {why}");
        }
        let outcome_path = self
            .agent_plan
            .as_ref()
            .map(|p| p.outcome_path.clone())
            .unwrap_or_default();
        let outcome_bytes = self.read_outcome(sb, id, &outcome_path).await?;
        let stderr = read_capped(
            &self.path("agent/stderr.log"),
            self.plan.settings.log_cap_bytes,
        );
        self.rec.claim = match outcome_bytes {
            Ok(bytes) => collect_claim(bytes.as_deref(), &stderr),
            Err(why) => Claim {
                status: crate::outcome::ClaimStatus::Invalid,
                source: Some(crate::outcome::ClaimSource::File),
                error: Some(why),
                ..collect_claim(None, &stderr)
            },
        };
        self.collect_trajectory();
        self.collect_completion_record();
        let artifacts = self.plan.task.artifacts.clone();
        for path in artifacts {
            let (entry, _) = self.fetch_artifact(sb, id, &path).await?;
            self.rec.artifacts.push(entry);
        }
        self.check_deliverables(sb, id).await?;
        let manifest =
            serde_json::to_vec_pretty(&self.rec.artifacts).map_err(infra(Phase::Collect))?;
        std::fs::write(self.path("artifacts/manifest.json"), manifest)
            .map_err(infra(Phase::Collect))?;
        self.save_control_root()?;
        let record_required = self.agent_plan.as_ref().is_some_and(|p| p.record_required);
        if record_required
            && self.rec.termination.kind == TerminationKind::Exited
            && self.rec.termination.exit_code == Some(0)
            && self.rec.claim.status == crate::outcome::ClaimStatus::Missing
        {
            return Err(Infra {
                phase: Phase::Agent,
                message: format!(
                    "the agent exited 0 without an outcome record (no {} and no AWORLD_RUN_OUTCOME= line on stderr); aworld-cli does this when it rejects an argument — see agent/stderr.log",
                    self.agent_plan
                        .as_ref()
                        .map(|p| p.outcome_path.as_str())
                        .unwrap_or("outcome file")
                ),
            });
        }
        Ok(())
    }

    /// Fetch `path` into `artifacts/`, describing what was found.
    async fn fetch_artifact<S: Sandbox>(
        &self,
        sb: &S,
        id: &str,
        path: &str,
    ) -> Result<(ArtifactEntry, Option<crate::sandbox::ExtractReport>), Infra> {
        let entry = |status, detail: Option<String>| ArtifactEntry {
            path: path.to_string(),
            status,
            size: None,
            sha256: None,
            detail,
        };
        let Some(relative) = safe_relative(path) else {
            return Ok((
                entry(
                    ArtifactStatus::Failed,
                    Some("not a plain absolute path (no `..`)".to_string()),
                ),
                None,
            ));
        };
        let dest = self.path("artifacts").join(relative);
        Ok(
            match self.fetch(sb, id, path, &dest, ARTIFACT_LIMIT).await? {
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
                        detail: if notes.is_empty() {
                            None
                        } else {
                            Some(notes.join("; "))
                        },
                    };
                    (found, Some(report))
                }
            },
        )
    }

    /// Check the task's declared deliverables (saved as artifacts) and any absolute paths the
    /// agent's completion record names.
    async fn check_deliverables<S: Sandbox>(&mut self, sb: &S, id: &str) -> Result<(), Infra> {
        let declared = self
            .plan
            .task
            .completion
            .as_ref()
            .map(|c| c.deliverables.clone())
            .unwrap_or_default();
        for d in &declared {
            let check = self
                .check_file(
                    sb,
                    id,
                    &d.path,
                    d.goal.clone(),
                    d.non_empty,
                    d.sha256.clone(),
                )
                .await?;
            self.rec.deliverables.push(check);
        }
        let named = self
            .completion
            .as_ref()
            .map(CompletionRecord::named_paths)
            .unwrap_or_default();
        for path in named
            .into_iter()
            .filter(|p| !declared.iter().any(|d| &d.path == p))
            .take(MAX_OBSERVED_PATHS)
        {
            let check = self.check_file(sb, id, &path, None, true, None).await?;
            self.rec.observed_files.push(check);
        }
        Ok(())
    }

    async fn check_file<S: Sandbox>(
        &mut self,
        sb: &S,
        id: &str,
        path: &str,
        goal: Option<String>,
        non_empty: bool,
        expected: Option<String>,
    ) -> Result<FileCheck, Infra> {
        let (entry, report) = self.fetch_artifact(sb, id, path).await?;
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
        if !self.rec.artifacts.iter().any(|a| a.path == path) {
            self.rec.artifacts.push(entry.clone());
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
    fn collect_trajectory(&mut self) {
        let Some(path) = self
            .agent_plan
            .as_ref()
            .and_then(|p| p.trajectory_path.clone())
        else {
            return;
        };
        let Some(rel) = path
            .strip_prefix("/logs/agent/")
            .filter(|r| !r.contains(".."))
        else {
            return;
        };
        let src = self.path("agent/logs").join(rel);
        let name = Path::new(rel)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "trajectory.json".to_string());
        let entry = match std::fs::symlink_metadata(&src) {
            Ok(meta) if meta.is_file() => {
                let copied = std::fs::copy(&src, self.path("agent").join(&name));
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
        };
        self.rec.trajectory = Some(entry);
    }

    /// Read `/logs/agent/completion.json` (fetched with `/logs/agent`), if the agent wrote one.
    fn collect_completion_record(&mut self) {
        let src = self.path("agent/logs/completion.json");
        match std::fs::symlink_metadata(&src) {
            Ok(meta) if meta.is_file() => {}
            _ => return,
        }
        let bytes = read_capped(&src, OUTCOME_LIMIT);
        let _ = std::fs::write(self.path("agent/completion.json"), &bytes);
        self.rec.completion = Some(match CompletionRecord::parse(&bytes) {
            Ok(record) => {
                self.completion = Some(record);
                CompletionSummary {
                    status: "present".to_string(),
                    error: None,
                    record: serde_json::from_slice(&bytes).ok(),
                }
            }
            Err(error) => CompletionSummary {
                status: "invalid".to_string(),
                error: Some(error),
                record: None,
            },
        });
    }

    /// Save the control root to `agent/control/` and empty it, so that a live verifier finds
    /// nothing there.
    fn save_control_root(&mut self) -> Result<(), Infra> {
        let Some(dir) = self.control_dir.clone() else {
            return Ok(());
        };
        let report =
            control::save(&dir, &self.path("agent/control")).map_err(infra(Phase::Collect))?;
        control::empty(&dir).map_err(infra(Phase::Collect))?;
        let plan_control = self.agent_plan.as_ref().and_then(|p| p.control.clone());
        self.rec.control_root = Some(ControlRootInfo {
            container_path: plan_control
                .as_ref()
                .map(|c| c.container_path.clone())
                .unwrap_or_default(),
            template: plan_control
                .and_then(|c| c.template)
                .map(|t| t.display().to_string()),
            saved_to: "agent/control".to_string(),
            files: report.files,
            bytes: report.bytes,
            skipped: report.skipped,
        });
        Ok(())
    }

    /// Run the task's validation commands in containers from `image` (the agent's final
    /// filesystem), one after the other; a command that times out takes its container down with
    /// it (every process in it), and the next command gets a fresh one.
    async fn validate<S: Sandbox>(&mut self, sb: &S, image: &str) -> Result<(), Infra> {
        let task = self.plan.task.clone();
        let Some(completion) = &task.completion else {
            return Ok(());
        };
        let dir = self.path("validation");
        std::fs::create_dir_all(&dir).map_err(infra(Phase::Collect))?;
        let spec = ContainerSpec {
            image: image.to_string(),
            name: None,
            env: Vec::new(),
            labels: self.labels("validation"),
            cpus: task.environment.cpus,
            memory_mb: task.environment.memory_mb,
            pids_limit: task.environment.pids_limit,
            network: Network::None,
            workdir: task.environment.workdir.clone(),
            ro_mounts: Vec::new(),
            rw_mounts: Vec::new(),
        };
        let mut container: Option<String> = None;
        for (i, command) in completion.validation.iter().enumerate() {
            let id = match &container {
                Some(id) => id.clone(),
                None => {
                    let id = sb.create(&spec).await.map_err(infra(Phase::Collect))?;
                    self.containers.push(id.clone());
                    sb.start(&id).await.map_err(infra(Phase::Collect))?;
                    container = Some(id.clone());
                    id
                }
            };
            let stem = format!("{:02}-{}", i + 1, safe_name(&command.id));
            let out_rel = format!("validation/{stem}.stdout.log");
            let err_rel = format!("validation/{stem}.stderr.log");
            let argv = command.exec_argv();
            let mut exec = self.exec_spec(
                argv.clone(),
                task.agent.user.clone(),
                command.timeout(),
                Some((&out_rel, &err_rel)),
            );
            if let Some(cwd) = &command.cwd {
                exec.workdir = Some(cwd.clone());
            }
            let out = sb.exec(&id, &exec).await.map_err(infra(Phase::Collect))?;
            let digest = |rel: &str| {
                let bytes = std::fs::read(self.path(rel)).unwrap_or_default();
                crate::sandbox::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes))
            };
            self.rec.validation.push(Receipt {
                id: command.id.clone(),
                argv,
                exit_code: if out.timed_out { None } else { out.exit_code },
                seconds: round3(out.seconds),
                timed_out: out.timed_out,
                stdout_sha256: digest(&out_rel),
                stderr_sha256: digest(&err_rel),
                stdout_bytes: out.stdout_bytes,
                stderr_bytes: out.stderr_bytes,
            });
            if out.timed_out {
                // The sandbox killed the whole container at the deadline.
                sb.remove_container(&id)
                    .await
                    .map_err(infra(Phase::Collect))?;
                self.containers.retain(|c| c != &id);
                container = None;
            }
        }
        if let Some(id) = container {
            sb.remove_container(&id)
                .await
                .map_err(infra(Phase::Collect))?;
            self.containers.retain(|c| c != &id);
        }
        Ok(())
    }

    /// The agent's outcome file: `Ok(None)` if absent, `Err` if present but unreadable.
    async fn read_outcome<S: Sandbox>(
        &self,
        sb: &S,
        id: &str,
        path: &str,
    ) -> Result<Result<Option<Vec<u8>>, String>, Infra> {
        let dest = self.path("agent/outcome.json");
        let local = match path.strip_prefix("/logs/agent/") {
            Some(rel) if !rel.contains("..") => {
                let src = self.path("agent/logs").join(rel);
                match std::fs::symlink_metadata(&src) {
                    Ok(meta) if meta.is_file() => {
                        if meta.len() > OUTCOME_LIMIT {
                            return Ok(Err(format!(
                                "outcome record larger than {OUTCOME_LIMIT} bytes"
                            )));
                        }
                        let _ = std::fs::copy(&src, &dest);
                        return Ok(Ok(Some(read_capped(&src, OUTCOME_LIMIT))));
                    }
                    _ => return Ok(Ok(None)),
                }
            }
            _ => self.fetch(sb, id, path, &dest, OUTCOME_LIMIT).await?,
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

    async fn verify<S: Sandbox>(
        &mut self,
        sb: &S,
        agent_id: &str,
        snapshot: Option<&str>,
    ) -> Result<(), Infra> {
        let task = self.plan.task.clone();
        let mode = mode_name(task.verifier.mode);
        let id = match snapshot {
            Some(image) => {
                let spec = ContainerSpec {
                    image: image.to_string(),
                    name: None,
                    env: Vec::new(),
                    labels: self.labels("verifier"),
                    cpus: task.environment.cpus,
                    memory_mb: task.environment.memory_mb,
                    pids_limit: task.environment.pids_limit,
                    network: sandbox_network(task.verifier.network),
                    workdir: task.environment.workdir.clone(),
                    ro_mounts: Vec::new(),
                    rw_mounts: Vec::new(),
                };
                let id = sb.create(&spec).await.map_err(infra(Phase::Verify))?;
                self.containers.push(id.clone());
                sb.start(&id).await.map_err(infra(Phase::Verify))?;
                id
            }
            None => agent_id.to_string(),
        };
        let prep = vec![
            "sh".to_string(),
            "-c".to_string(),
            "rm -rf /tests /logs/verifier && mkdir -p /tests /logs/verifier && chmod 0777 /logs/verifier".to_string(),
        ];
        let prep_spec = self.exec_spec(prep, Some("0".to_string()), Duration::from_secs(60), None);
        let prepared = sb
            .exec(&id, &prep_spec)
            .await
            .map_err(infra(Phase::Verify))?;
        if prepared.exit_code != Some(0) {
            self.rec.verifier = VerifierOutcome {
                status: VerifierStatus::Error,
                mode: mode.to_string(),
                reward: None,
                exit_code: prepared.exit_code,
                detail: Some(
                    "could not prepare /tests and /logs/verifier in the agent's final filesystem"
                        .to_string(),
                ),
            };
            return Ok(());
        }
        let tests = dir_to_tar(&task.tests_dir, "tests").map_err(infra(Phase::Verify))?;
        sb.put_archive(&id, "/", tests)
            .await
            .map_err(infra(Phase::Verify))?;
        let timeout = Duration::from_secs_f64(task.verifier.timeout_sec)
            .mul_f64(self.plan.settings.verifier_timeout_multiplier);
        let mut spec = self.exec_spec(
            shell_script("/tests/test.sh"),
            None,
            timeout,
            Some(("verifier/stdout.log", "verifier/stderr.log")),
        );
        spec.env = resolve_env(&task.verifier.env).map_err(infra(Phase::Verify))?;
        let out = sb.exec(&id, &spec).await.map_err(infra(Phase::Verify))?;
        if out.timed_out {
            self.rec.verifier = VerifierOutcome {
                status: VerifierStatus::Error,
                mode: mode.to_string(),
                reward: None,
                exit_code: None,
                detail: Some(format!("verifier timed out after {}s", fmt_secs(timeout))),
            };
            return Ok(());
        }
        let logs = self.path("verifier/logs");
        if let FetchResult::Failed(why) = self
            .fetch(sb, &id, "/logs/verifier", &logs, VERIFIER_LOGS_LIMIT)
            .await?
        {
            tracing::warn!(trial = self.plan.id, "verifier logs not collected: {why}");
        }
        let read = |name: &str| -> Option<Vec<u8>> {
            let path = logs.join(name);
            let meta = std::fs::symlink_metadata(&path).ok()?;
            meta.is_file().then(|| read_capped(&path, OUTCOME_LIMIT))
        };
        let (json, txt) = (read("reward.json"), read("reward.txt"));
        for (name, bytes) in [("reward.json", &json), ("reward.txt", &txt)] {
            if let Some(bytes) = bytes {
                let _ = std::fs::write(self.path("verifier").join(name), bytes);
            }
        }
        self.rec.verifier = match parse_reward(json.as_deref(), txt.as_deref()) {
            Ok(reward) => {
                let passed = primary_value(&reward) >= self.plan.settings.pass_threshold;
                VerifierOutcome {
                    status: if passed {
                        VerifierStatus::Passed
                    } else {
                        VerifierStatus::Failed
                    },
                    mode: mode.to_string(),
                    reward: Some(reward),
                    exit_code: out.exit_code,
                    detail: None,
                }
            }
            Err(e) => VerifierOutcome {
                status: VerifierStatus::Error,
                mode: mode.to_string(),
                reward: None,
                exit_code: out.exit_code,
                detail: Some(format!(
                    "{e} (test.sh exited with {})",
                    code_words(out.exit_code)
                )),
            },
        };
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
    }
}

fn network_name(mode: NetworkMode) -> &'static str {
    match mode {
        NetworkMode::NoNetwork => "no-network",
        NetworkMode::Host => "host",
        NetworkMode::Bridge => "bridge",
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
