use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::agent::{Agent, AgentPlan, INSTRUCTION_PATH, redact_env, resolve_env, shell_script};
use crate::outcome::{Claim, audit, collect_claim};
use crate::sandbox::{
    ContainerSpec, ExecOutcome, ExecSpec, ExtractLimits, Fetched, ImageSpec, LABEL_JOB,
    LABEL_MANAGED, LABEL_TRIAL, Network, Sandbox, SandboxError, TarEntry, dir_to_tar,
    extract_tar_file, files_to_tar,
};
use crate::task::{NetworkMode, Task, VerifierMode};
use crate::timefmt::now_rfc3339;
use crate::verifier::{parse_reward, primary_value};

use super::record::*;

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

/// Run one trial to its record (or to cancellation). Never fails: see the module invariants.
pub async fn run<S: Sandbox>(
    sandbox: Arc<S>,
    plan: &TrialPlan,
    mut cancel: tokio::sync::watch::Receiver<bool>,
    on_phase: &(dyn Fn(Phase) + Send + Sync),
) -> TrialRun {
    let mut trial = Trial::new(plan);
    let outcome = tokio::select! {
        result = trial.phases(&*sandbox, on_phase) => Some(result),
        _ = cancel.wait_for(|stop| *stop) => None,
    };
    on_phase(Phase::Cleanup);
    let cleanup_started = Instant::now();
    let swept = trial
        .cleanup(
            &*sandbox,
            outcome.is_none() || matches!(outcome, Some(Err(_))),
        )
        .await;
    trial.time(Phase::Cleanup, cleanup_started);
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
            },
            output: OutputStats::default(),
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
        self.collect(sb, &agent_id).await?;
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
        let mut env = agent_plan.env.clone();
        env.push((
            "ARBITER_INSTRUCTION_FILE".to_string(),
            INSTRUCTION_PATH.to_string(),
        ));
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
            rw_mounts: Vec::new(),
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
            let spec = self.exec_spec(
                install.argv.clone(),
                install.user.clone(),
                install.timeout,
                Some(("agent/install.stdout.log", "agent/install.stderr.log")),
            );
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
                let out = sb.exec(id, &spec).await.map_err(infra(Phase::Agent))?;
                self.rec.output = OutputStats {
                    stdout_bytes: out.stdout_bytes,
                    stderr_bytes: out.stderr_bytes,
                    truncated: out.truncated,
                };
                self.rec.termination = self.termination_of(&out, step.timeout);
            }
        }
        self.agent_plan = Some(agent_plan);
        Ok(())
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
        let artifacts = self.plan.task.artifacts.clone();
        for path in artifacts {
            let dest = self.path("artifacts").join(path.trim_start_matches('/'));
            let entry = match self.fetch(sb, id, &path, &dest, ARTIFACT_LIMIT).await? {
                FetchResult::Missing => ArtifactEntry {
                    path,
                    status: ArtifactStatus::Missing,
                    size: None,
                    sha256: None,
                    detail: None,
                },
                FetchResult::Failed(why) => ArtifactEntry {
                    path,
                    status: ArtifactStatus::Failed,
                    size: None,
                    sha256: None,
                    detail: Some(why),
                },
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
                    ArtifactEntry {
                        path,
                        status: ArtifactStatus::Ok,
                        size: Some(size),
                        sha256: single.map(|f| f.sha256.clone()),
                        detail: if notes.is_empty() {
                            None
                        } else {
                            Some(notes.join("; "))
                        },
                    }
                }
            };
            self.rec.artifacts.push(entry);
        }
        let manifest =
            serde_json::to_vec_pretty(&self.rec.artifacts).map_err(infra(Phase::Collect))?;
        std::fs::write(self.path("artifacts/manifest.json"), manifest)
            .map_err(infra(Phase::Collect))?;
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
            Some(audit(&self.rec.claim, passed))
        };
        self.rec.finished_at = now_rfc3339();
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

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
