//! Harbor's healthcheck (`[environment.healthcheck]`, `[steps.healthcheck]`): a shell command
//! run in the agent's container until it exits 0. Failures during `start_period_sec` do not
//! count (retried every `start_interval_sec`); after it, `retries` consecutive failures
//! (every `interval_sec`) fail the check. Each run is bounded by `timeout_sec`.

use std::time::Duration;

use crate::sandbox::{ContainerId, ExecEnd, Sandbox};
use crate::task::Healthcheck;
use crate::trial::plan::Phase;

use super::{Ctx, Infra, infra};

/// Runs `check` as `user` (`None`: the image's user) with `env`. The inner error says why the
/// check failed (the task's, not the harness's); `phase` names the phase an engine error
/// belongs to.
pub(crate) async fn run<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    id: &ContainerId,
    check: &Healthcheck,
    user: Option<String>,
    env: &[(String, String)],
    phase: Phase,
) -> Result<Result<(), String>, Infra> {
    let secs = |s: f64| Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX);
    let started = tokio::time::Instant::now();
    let mut failures = 0u32;
    loop {
        let mut spec = ctx.exec_spec(
            vec!["sh".to_string(), "-c".to_string(), check.command.clone()],
            user.clone(),
            secs(check.timeout_sec),
            None,
        );
        spec.env = env.to_vec();
        let end = ctx.sb.exec(id, &spec).await.map_err(infra(phase))?.end;
        if end == ExecEnd::Exited(0) {
            return Ok(Ok(()));
        }
        let starting = started.elapsed() < secs(check.start_period_sec);
        if !starting {
            failures += 1;
            if failures >= check.retries.max(1) {
                return Ok(Err(format!(
                    "`{}` failed {failures} time{} in a row",
                    check.command,
                    if failures == 1 { "" } else { "s" }
                )));
            }
        }
        let wait = if starting {
            check.start_interval_sec
        } else {
            check.interval_sec
        };
        tokio::time::sleep(secs(wait)).await;
    }
}
