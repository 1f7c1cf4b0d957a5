//! arbiter's own validation commands (`[completion] validation`), run after the agent phase
//! in containers of the agent's frozen filesystem, with real exit codes, durations and the
//! sha256 of their output recorded as receipts.

use crate::agent::resolve_env;
use crate::outcome::Receipt;
use crate::sandbox::{ContainerId, ExecEnd, FrozenId, Network, Resource, Role, Sandbox, Scope};

use super::phase::{VerifyError, VerifyInput};

/// Run the task's validation commands one after the other; a command that times out takes its
/// container down with it (every process in it), and the next command gets a fresh one.
pub(crate) async fn validate<S: Sandbox + ?Sized>(
    sb: &S,
    scope: &Scope,
    input: &VerifyInput<'_>,
    frozen: &FrozenId,
) -> Result<Vec<Receipt>, VerifyError> {
    let task = input.task;
    let Some(completion) = &task.completion else {
        return Ok(Vec::new());
    };
    let dir = input.path("validation");
    std::fs::create_dir_all(&dir).map_err(|source| VerifyError::Io {
        path: dir.clone(),
        source,
    })?;
    let spec = input.container(scope, frozen, Role::Validation, Network::None);
    let mut receipts = Vec::new();
    let mut container: Option<ContainerId> = None;
    for (i, command) in completion.validation.iter().enumerate() {
        let id = match &container {
            Some(id) => id.clone(),
            None => {
                let id = scope.launch(sb, &spec).await?;
                container = Some(id.clone());
                id
            }
        };
        let stem = format!("{:02}-{}", i + 1, crate::trial::safe_name(&command.id));
        let out_rel = format!("validation/{stem}.stdout.log");
        let err_rel = format!("validation/{stem}.stderr.log");
        let argv = command.exec_argv();
        let mut exec = input.exec(
            argv.clone(),
            task.agent.user.clone(),
            command.timeout(),
            Some((&out_rel, &err_rel)),
        );
        if let Some(cwd) = &command.cwd {
            exec.workdir = Some(cwd.clone());
        }
        // The task container's env (`[environment] env`) applies to every command run in it.
        exec.env = resolve_env(&task.environment.env)?;
        let out = sb.exec(&id, &exec).await?;
        let digest = |rel: &str| {
            let bytes = std::fs::read(input.path(rel)).unwrap_or_default();
            crate::digest::sha256_hex(&bytes)
        };
        let timed_out = out.end == ExecEnd::TimedOut;
        receipts.push(Receipt {
            id: command.id.clone(),
            argv,
            exit_code: out.end.exit_code(),
            seconds: (out.seconds * 1000.0).round() / 1000.0,
            timed_out,
            stdout_sha256: digest(&out_rel),
            stderr_sha256: digest(&err_rel),
            stdout_bytes: out.stdout_bytes,
            stderr_bytes: out.stderr_bytes,
        });
        if timed_out {
            // The backend killed every process of the container at the deadline.
            scope.remove(sb, Resource::Container(id)).await?;
            container = None;
        }
    }
    if let Some(id) = container {
        scope.remove(sb, Resource::Container(id)).await?;
    }
    Ok(receipts)
}
