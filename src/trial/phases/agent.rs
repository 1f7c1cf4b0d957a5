//! The agent phase: the agent's install step, its pre-flight check, then its run under the
//! agent deadline while a watchdog bounds what it writes to its container's filesystem.

use std::time::Duration;

use crate::sandbox::{ContainerId, ExecEnd, ExecOutcome, ExecSpec, Sandbox, Stopped};
use crate::trial::plan::Phase;
use crate::trial::record::{OutputStats, Termination, TerminationKind};

use super::{Ctx, EnvReady, Infra, code_words, fmt_mib, fmt_secs, infra, read_capped};

/// How often the disk watchdog measures the agent container's writes.
const DISK_POLL: Duration = Duration::from_secs(1);
/// Limit of the CLI pre-flight check.
const CLI_CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// What the agent wrote to its container's filesystem, as the watchdog measured it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Storage {
    pub limit_mb: u64,
    /// The backend reports sizes, so the limit is enforced.
    pub enforced: bool,
    /// Largest size measured (MiB, rounded up).
    pub used_mb: Option<u64>,
    /// Bytes measured over the limit, when it was exceeded.
    pub exceeded: Option<u64>,
}

impl Storage {
    pub(crate) fn new(limit_mb: u64) -> Self {
        Storage {
            limit_mb,
            ..Storage::default()
        }
    }

    /// Measure the container's writes; note when they are over the limit.
    pub(crate) async fn measure<S: Sandbox>(&mut self, sb: &S, id: &ContainerId) {
        let used = match sb.disk_usage(id).await {
            Ok(Some(used)) => used,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(%id, "disk usage: {e}");
                return;
            }
        };
        self.enforced = true;
        self.used_mb = Some(self.used_mb.unwrap_or(0).max(used.div_ceil(1024 * 1024)));
        if used > self.limit_mb.saturating_mul(1024 * 1024) {
            self.exceeded = Some(self.exceeded.unwrap_or(0).max(used));
        }
    }

    /// Why the agent's filesystem is not verified, when it wrote too much.
    pub(crate) fn over_limit(&self) -> Option<String> {
        self.exceeded.map(|used| {
            format!(
                "the agent wrote {} to its container's filesystem, over the storage limit of {} MiB",
                fmt_mib(used),
                self.limit_mb
            )
        })
    }
}

/// The agent's run has ended (its container may still be running).
#[derive(Debug, Clone)]
pub(crate) struct AgentDone {
    /// How the run step ended; `None` when the agent runs nothing (nop).
    pub end: Option<ExecEnd>,
    pub output: OutputStats,
    /// The run step's deadline.
    pub timeout: Duration,
    /// The deadline as passed to the agent (Unix seconds), when it was passed.
    pub deadline_epoch: Option<u64>,
    pub storage: Storage,
    /// The first `log_cap_bytes` of the run step's stderr (where a claim may be).
    pub stderr: Vec<u8>,
    /// The CLI check's fallback ran (`CliFallback::note`): why no claim can be read.
    pub claim_note: Option<String>,
}

impl AgentDone {
    /// The termination fact; `stopped` is known once every process of the container is gone
    /// (it tells whether the kernel's OOM killer acted).
    pub(crate) fn termination(
        &self,
        stopped: Option<Stopped>,
        grace: Duration,
        memory_mb: u64,
    ) -> Termination {
        let Some(end) = self.end else {
            return Termination {
                kind: TerminationKind::Exited,
                exit_code: Some(0),
                detail: Some("nop: the agent ran nothing".to_string()),
            };
        };
        let stopped = stopped.unwrap_or_default();
        let mut t = match end.after_stop(stopped) {
            ExecEnd::TimedOut => Termination {
                kind: TerminationKind::Timeout,
                exit_code: None,
                detail: Some(format!(
                    "agent phase exceeded {}s; SIGTERM, then SIGKILL after {}s",
                    fmt_secs(self.timeout),
                    fmt_secs(grace)
                )),
            },
            ExecEnd::Exited(code) => Termination {
                kind: TerminationKind::Exited,
                exit_code: Some(code),
                detail: None,
            },
            ExecEnd::Killed { oom: true } => Termination {
                kind: TerminationKind::Oom,
                exit_code: None,
                detail: Some(format!(
                    "killed by the kernel OOM killer (memory limit {memory_mb} MiB)"
                )),
            },
            ExecEnd::Killed { oom: false } => Termination {
                kind: TerminationKind::Killed,
                exit_code: None,
                detail: Some("the agent's process vanished without an exit code".to_string()),
            },
        };
        if let Some(why) = self.storage.over_limit() {
            t = Termination {
                kind: TerminationKind::Killed,
                exit_code: None,
                detail: Some(format!("{why}; the container was killed")),
            };
        }
        if stopped.oom_killed && t.kind != TerminationKind::Oom {
            let note =
                format!("a process in the container was OOM-killed (memory limit {memory_mb} MiB)");
            t.detail = Some(match t.detail.take() {
                Some(d) => format!("{d}; {note}"),
                None => note,
            });
        }
        t
    }
}

pub(crate) async fn run<S: Sandbox>(ctx: &Ctx<'_, S>, env: &EnvReady) -> Result<AgentDone, Infra> {
    let id = &env.container;
    let plan = &env.agent;
    let task = &ctx.plan.task;
    let mut storage = Storage::new(
        task.environment
            .storage_mb
            .unwrap_or(crate::trial::DEFAULT_STORAGE_LIMIT_MB),
    );
    if let Some(install) = &plan.install {
        let mut spec = ctx.exec_spec(
            install.argv.clone(),
            install.user.clone(),
            install.timeout,
            Some(("agent/install.stdout.log", "agent/install.stderr.log")),
        );
        spec.env = plan.env.clone();
        let out = ctx.sb.exec(id, &spec).await.map_err(infra(Phase::Agent))?;
        let failed = match out.end {
            ExecEnd::Exited(0) => None,
            ExecEnd::TimedOut => Some(format!(
                "agent install timed out after {}s",
                install.timeout.as_secs()
            )),
            end => Some(format!(
                "agent install exited with {} (see agent/install.stderr.log)",
                code_words(end.exit_code())
            )),
        };
        if let Some(message) = failed {
            return Err(Infra {
                phase: Phase::Agent,
                message,
            });
        }
    }
    let mut fallback = None;
    if let Some(check) = &plan.cli_check {
        let user = plan.run.as_ref().and_then(|r| r.user.clone());
        let mut spec = ctx.exec_spec(
            check.argv.clone(),
            user,
            CLI_CHECK_TIMEOUT,
            Some(("agent/cli-check.stdout.log", "agent/cli-check.stderr.log")),
        );
        spec.env = plan.env.clone();
        let out = ctx.sb.exec(id, &spec).await.map_err(infra(Phase::Agent))?;
        let mut said = read_capped(&ctx.path("agent/cli-check.stdout.log"), 1024 * 1024);
        said.extend(read_capped(
            &ctx.path("agent/cli-check.stderr.log"),
            1024 * 1024,
        ));
        fallback = check
            .judge(out.end, CLI_CHECK_TIMEOUT, &String::from_utf8_lossy(&said))
            .map_err(|message| Infra {
                phase: Phase::Agent,
                message,
            })?;
    }
    let Some(step) = &plan.run else {
        return Ok(AgentDone {
            end: None,
            output: OutputStats::default(),
            timeout: Duration::ZERO,
            deadline_epoch: None,
            storage,
            stderr: Vec::new(),
            claim_note: None,
        });
    };
    let mut spec = ctx.exec_spec(
        fallback.as_ref().map_or(&step.argv, |f| &f.argv).clone(),
        step.user.clone(),
        step.timeout,
        Some(("agent/stdout.log", "agent/stderr.log")),
    );
    spec.env = plan.env.clone();
    let mut deadline_epoch = None;
    if let Some(name) = &plan.deadline_env {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        // Floor: the agent's bound is never later than the harness's.
        let deadline = now.saturating_add(step.timeout.as_secs());
        spec.env.retain(|(k, _)| k != name);
        spec.env.push((name.clone(), deadline.to_string()));
        deadline_epoch = Some(deadline);
    }
    let out = exec_watched(ctx, id, &spec, &mut storage).await?;
    let stderr = read_capped(
        &ctx.path("agent/stderr.log"),
        ctx.plan.settings.log_cap_bytes,
    );
    Ok(AgentDone {
        stderr,
        end: Some(out.end),
        output: OutputStats {
            stdout_bytes: out.stdout_bytes,
            stderr_bytes: out.stderr_bytes,
            truncated: out.truncated,
        },
        timeout: step.timeout,
        deadline_epoch,
        storage,
        claim_note: fallback.map(|f| f.note),
    })
}

/// Run the agent's exec while a watchdog measures what it writes to the container's
/// filesystem; over the storage limit the container is stopped (which ends the exec).
async fn exec_watched<S: Sandbox>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    spec: &ExecSpec,
    storage: &mut Storage,
) -> Result<ExecOutcome, Infra> {
    let exec = ctx.sb.exec(id, spec);
    tokio::pin!(exec);
    let mut tick = tokio::time::interval(DISK_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            out = &mut exec => return out.map_err(infra(Phase::Agent)),
            _ = tick.tick(), if storage.exceeded.is_none() => {
                storage.measure(ctx.sb, id).await;
                if storage.exceeded.is_some() {
                    tracing::warn!(
                        trial = ctx.plan.id,
                        limit_mb = storage.limit_mb,
                        "agent over its storage limit: stopping its container"
                    );
                    ctx.sb.stop(id).await.map_err(infra(Phase::Agent))?;
                }
            }
        }
    }
}
