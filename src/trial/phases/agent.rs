//! The agent phase: the agent's install step, its pre-flight check, then its run under the
//! agent deadline while a watchdog bounds what it writes to its container's filesystem.

use std::time::Duration;

use tokio::time::Instant;

use crate::sandbox::{
    ContainerId, DiskUsage, ExecEnd, ExecOutcome, ExecSpec, Lost, Sandbox, Stopped,
};
use crate::trial::plan::Phase;
use crate::trial::record::{FilesCounted, OutputStats, Termination, TerminationKind};

use super::{Ctx, EnvReady, Infra, code_words, fmt_mib, fmt_secs, infra, read_capped};

/// What an agent may create, change or delete in its container's filesystem, in paths, when
/// the task sets no `[environment] max_files`. A million empty files cost the agent a second
/// and the harness minutes (the change list, the freeze), and record `storage_used_mb: 1`.
pub(crate) const DEFAULT_MAX_FILES: u64 = 1_000_000;
/// The watchdog's shortest interval: near a bound, or growing toward one.
const POLL_MIN: Duration = Duration::from_secs(1);
/// The watchdog's longest interval, while the agent's writes are far below both bounds.
const POLL_MAX: Duration = Duration::from_secs(10);
/// "Far below" a bound: under this fraction of it.
const FAR_BELOW: f64 = 0.25;
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
    /// Paths the agent may create, change or delete.
    pub max_files: u64,
    /// The most paths counted (the backend's count, or the change list's length).
    pub files: Option<u64>,
    /// Where `files` comes from.
    pub files_counted: Option<FilesCounted>,
    /// Paths counted over the bound, when it was exceeded.
    pub files_exceeded: Option<u64>,
}

impl Storage {
    pub(crate) fn new(limit_mb: u64, max_files: u64) -> Self {
        Storage {
            limit_mb,
            max_files,
            ..Storage::default()
        }
    }

    fn limit_bytes(&self) -> u64 {
        self.limit_mb.saturating_mul(1024 * 1024)
    }

    /// Measure the container's writes; note when they are over a bound. Returns what was
    /// measured (`None`: the backend cannot tell, or failed to).
    pub(crate) async fn measure<S: Sandbox + ?Sized>(
        &mut self,
        sb: &S,
        id: &ContainerId,
    ) -> Option<DiskUsage> {
        let used = match sb.disk_usage(id, self.max_files).await {
            Ok(Some(used)) => used,
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(%id, "disk usage: {e}");
                return None;
            }
        };
        self.note(used);
        Some(used)
    }

    fn note(&mut self, used: DiskUsage) {
        self.enforced = true;
        self.used_mb = Some(
            self.used_mb
                .unwrap_or(0)
                .max(used.bytes.div_ceil(1024 * 1024)),
        );
        if used.bytes > self.limit_bytes() {
            self.exceeded = Some(self.exceeded.unwrap_or(0).max(used.bytes));
        }
        if let Some(files) = used.files {
            self.files = Some(self.files.unwrap_or(0).max(files));
            self.files_counted = Some(FilesCounted::Watchdog);
            if files > self.max_files {
                self.files_exceeded = Some(self.files_exceeded.unwrap_or(0).max(files));
            }
        }
    }

    /// The change list, once the agent is done, named `listed` paths: recorded when the
    /// backend counted none while the agent ran.
    pub(crate) fn note_listed(&mut self, listed: u64) {
        if self.files_counted != Some(FilesCounted::Watchdog) {
            self.files = Some(listed);
            self.files_counted = Some(FilesCounted::ChangeSet);
        }
    }

    /// The record's `files_used` and `files_counted`.
    pub(crate) fn files_record(&self) -> (Option<u64>, Option<FilesCounted>) {
        (self.files, self.files_counted)
    }

    /// Whether the agent is over a bound (its filesystem is then never frozen or verified).
    pub(crate) fn is_over(&self) -> bool {
        self.exceeded.is_some() || self.files_exceeded.is_some()
    }

    /// Why the agent's filesystem is not verified, when it wrote too much.
    pub(crate) fn over_limit(&self) -> Option<String> {
        if let Some(used) = self.exceeded {
            return Some(format!(
                "the agent wrote {} to its container's filesystem, over the storage limit of {} MiB",
                fmt_mib(used),
                self.limit_mb
            ));
        }
        self.files_exceeded.map(|_| {
            format!(
                "the agent created, changed or deleted more than {max} paths in its container's filesystem, over the file limit of {max} (max_files)",
                max = self.max_files
            )
        })
    }
}

/// When the watchdog measures next: every second while the agent's writes are near a bound
/// (a quarter of it) or, at the rate they grew since the last measurement, would reach one
/// within two intervals; backing off (doubling) up to every 10 s while they are far below.
/// Between two measurements an agent far below its bounds has to write three quarters of one
/// to overshoot it; whatever it wrote, the measurement once the agent is done is final.
#[derive(Debug)]
pub(crate) struct PollSchedule {
    interval: Duration,
    last: Option<(Instant, DiskUsage)>,
}

impl PollSchedule {
    pub(crate) fn new() -> Self {
        PollSchedule {
            interval: POLL_MIN,
            last: None,
        }
    }

    /// The first measurement, after the agent starts.
    pub(crate) fn first(&self) -> Duration {
        POLL_MIN
    }

    /// The interval until the next measurement, after one at `now` found `used` (`None`: the
    /// backend could not tell, so nothing argues for measuring sooner).
    pub(crate) fn after(
        &mut self,
        now: Instant,
        used: Option<DiskUsage>,
        storage: &Storage,
    ) -> Duration {
        let doubled = self.interval.saturating_mul(2).min(POLL_MAX);
        let Some(used) = used else {
            self.interval = doubled;
            return self.interval;
        };
        let bounds = [
            (
                used.bytes,
                self.last.map(|(_, u)| u.bytes),
                storage.limit_bytes(),
            ),
            (
                used.files.unwrap_or(0),
                self.last.and_then(|(_, u)| u.files),
                storage.max_files,
            ),
        ];
        let mut next = doubled;
        for (now_used, before, limit) in bounds {
            let limit = limit.max(1);
            if now_used as f64 >= limit as f64 * FAR_BELOW {
                next = POLL_MIN;
            }
            if let (Some(before), Some((then, _))) = (before, self.last) {
                let dt = now.saturating_duration_since(then).as_secs_f64();
                if now_used > before && dt > 0.0 {
                    let rate = (now_used - before) as f64 / dt;
                    let left = limit.saturating_sub(now_used) as f64 / rate;
                    next = next.min(Duration::from_secs_f64(
                        (left / 2.0).min(POLL_MAX.as_secs_f64()),
                    ));
                }
            }
        }
        self.interval = next.clamp(POLL_MIN, POLL_MAX);
        self.last = Some((now, used));
        self.interval
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
    /// What a preset's adapter reads of the run's end: its exit code, the stdout kept (and
    /// whether the cap cut it), the stderr kept, and the file it names when the agent wrote it.
    pub(crate) fn end_for_adapter<'a>(
        &'a self,
        stdout: &'a [u8],
        file: Option<&'a [u8]>,
    ) -> crate::agent::AgentEnd<'a> {
        crate::agent::AgentEnd {
            exit_code: match self.end {
                Some(ExecEnd::Exited(code)) => Some(code),
                _ => None,
            },
            stdout,
            stdout_truncated: self.output.truncated,
            stderr: &self.stderr,
            file,
        }
    }
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
        match stopped.lost {
            // What ran in the container ended it (a backend whose containers do not outlive
            // their first process): the agent's result, as an OOM kill is.
            Some(lost @ (Lost::Storage | Lost::Exited(_))) => {
                t = Termination {
                    kind: TerminationKind::Killed,
                    exit_code: None,
                    detail: Some(format!("{lost} while the agent ran")),
                };
            }
            Some(Lost::Oom) | None => {}
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

pub(crate) async fn run<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
) -> Result<AgentDone, Infra> {
    let id = &env.container;
    let plan = &env.agent;
    let task = &ctx.plan.task;
    let mut storage = Storage::new(
        task.environment
            .storage_mb
            .unwrap_or(crate::trial::DEFAULT_STORAGE_LIMIT_MB),
        task.environment.max_files.unwrap_or(DEFAULT_MAX_FILES),
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
/// filesystem (on [`PollSchedule`]); over the storage or file bound the container is stopped
/// (which ends the exec).
async fn exec_watched<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    spec: &ExecSpec,
    storage: &mut Storage,
) -> Result<ExecOutcome, Infra> {
    let exec = ctx.sb.exec(id, spec);
    tokio::pin!(exec);
    let mut schedule = PollSchedule::new();
    let next = tokio::time::sleep(schedule.first());
    tokio::pin!(next);
    loop {
        tokio::select! {
            out = &mut exec => return out.map_err(infra(Phase::Agent)),
            () = &mut next, if !storage.is_over() => {
                let used = storage.measure(ctx.sb, id).await;
                if storage.is_over() {
                    tracing::warn!(
                        trial = ctx.plan.id,
                        limit_mb = storage.limit_mb,
                        max_files = storage.max_files,
                        "agent over its storage or file limit: stopping its container"
                    );
                    ctx.sb.stop(id).await.map_err(infra(Phase::Agent))?;
                } else {
                    let now = Instant::now();
                    let wait = schedule.after(now, used, storage);
                    next.as_mut().reset(now + wait);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn used(mib: u64, files: u64) -> Option<DiskUsage> {
        Some(DiskUsage {
            bytes: mib * MIB,
            files: Some(files),
        })
    }

    fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    #[tokio::test(start_paused = true)]
    async fn far_below_both_bounds_the_watchdog_backs_off_to_ten_seconds() {
        let storage = Storage::new(1000, 1000);
        let mut s = PollSchedule::new();
        assert_eq!(s.first(), Duration::from_secs(1));
        let t0 = Instant::now();
        let waits: Vec<f64> = (0..6)
            .map(|i| secs(s.after(t0 + Duration::from_secs(i * 10), used(10, 10), &storage)))
            .collect();
        assert_eq!(waits, [2.0, 4.0, 8.0, 10.0, 10.0, 10.0]);
    }

    #[tokio::test(start_paused = true)]
    async fn near_a_bound_the_watchdog_measures_every_second() {
        let mut s = PollSchedule::new();
        let t0 = Instant::now();
        // A quarter of the storage limit.
        let storage = Storage::new(1000, 1_000_000);
        for i in 0..3 {
            s.after(t0 + Duration::from_secs(i), used(10, 1), &storage);
        }
        assert_eq!(
            s.after(t0 + Duration::from_secs(20), used(250, 1), &storage),
            POLL_MIN
        );
        // A quarter of the file bound, whatever the bytes.
        let mut s = PollSchedule::new();
        let storage = Storage::new(1000, 400);
        for i in 0..3 {
            s.after(t0 + Duration::from_secs(i), used(1, 10), &storage);
        }
        assert_eq!(
            s.after(t0 + Duration::from_secs(20), used(1, 100), &storage),
            POLL_MIN
        );
    }

    #[tokio::test(start_paused = true)]
    async fn growth_toward_a_bound_shortens_the_interval() {
        let storage = Storage::new(1000, 1_000_000);
        let t0 = Instant::now();
        let mut s = PollSchedule::new();
        assert_eq!(secs(s.after(t0, used(10, 1), &storage)), 2.0);
        assert_eq!(
            secs(s.after(t0 + Duration::from_secs(2), used(10, 1), &storage)),
            4.0
        );
        // 230 MiB in 4 s (57.5 MiB/s), 760 MiB left: the limit is 13.2 s away, so the next
        // measurement is in half that, not the 8 s the back-off would give.
        let wait = secs(s.after(t0 + Duration::from_secs(6), used(240, 1), &storage));
        assert!((6.5..6.7).contains(&wait), "{wait}");
        // Files growing just as fast toward their bound.
        let storage = Storage::new(1_000_000, 1000);
        let mut s = PollSchedule::new();
        s.after(t0, used(1, 10), &storage);
        s.after(t0 + Duration::from_secs(2), used(1, 10), &storage);
        let wait = secs(s.after(t0 + Duration::from_secs(6), used(1, 240), &storage));
        assert!((6.5..6.7).contains(&wait), "{wait}");
        // 240 MiB in a second, 760 MiB left: in 1.6 s, not the 2 s the back-off would give.
        let storage = Storage::new(1000, 1_000_000);
        let mut s = PollSchedule::new();
        s.after(t0, used(0, 1), &storage);
        let wait = secs(s.after(t0 + Duration::from_secs(1), used(240, 1), &storage));
        assert!((1.5..1.6).contains(&wait), "{wait}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_backend_that_cannot_tell_is_asked_less_and_less() {
        let storage = Storage::new(1000, 1000);
        let mut s = PollSchedule::new();
        let t0 = Instant::now();
        let waits: Vec<f64> = (0..5).map(|_| secs(s.after(t0, None, &storage))).collect();
        assert_eq!(waits, [2.0, 4.0, 8.0, 10.0, 10.0]);
    }

    #[test]
    fn over_either_bound_is_over_and_says_which() {
        let mut s = Storage::new(10, 100);
        s.note(DiskUsage {
            bytes: 5 * MIB,
            files: Some(100),
        });
        assert!(!s.is_over());
        assert_eq!(s.over_limit(), None);
        assert_eq!(s.files_record(), (Some(100), Some(FilesCounted::Watchdog)));
        s.note(DiskUsage {
            bytes: 5 * MIB,
            files: Some(101),
        });
        assert!(s.is_over());
        assert_eq!(
            s.over_limit().as_deref(),
            Some(
                "the agent created, changed or deleted more than 100 paths in its container's filesystem, over the file limit of 100 (max_files)"
            )
        );
        // The change list does not overwrite a count made while the agent ran.
        s.note_listed(7);
        assert_eq!(s.files_record(), (Some(101), Some(FilesCounted::Watchdog)));

        let mut s = Storage::new(10, 100);
        s.note(DiskUsage {
            bytes: 11 * MIB,
            files: None,
        });
        assert!(s.is_over());
        assert!(
            s.over_limit()
                .is_some_and(|m| m.contains("storage limit of 10 MiB"))
        );
        assert_eq!(s.files_record(), (None, None));
        s.note_listed(7);
        assert_eq!(s.files_record(), (Some(7), Some(FilesCounted::ChangeSet)));
    }
}
