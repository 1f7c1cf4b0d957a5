//! Running the task's verifier: in a fresh container of the agent's frozen filesystem
//! (`snapshot`), or inside the still-running agent container (`live`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agent::{EnvError, resolve_env};
use crate::sandbox::{
    Base, ContainerId, ContainerLimits, ContainerSpec, ExecEnd, ExecSpec, FetchResult, FrozenId,
    Network, Role, Sandbox, SandboxError, Scope, TarEntry, concat_archives, dir_to_tar, fetch,
    files_to_tar,
};
use crate::task::Task;

use super::outcome::{VerifierOutcome, judge};
use super::reward::parse_reward;

const VERIFIER_LOGS_LIMIT: u64 = 16 * 1024 * 1024;
const REWARD_LIMIT: u64 = 1024 * 1024;

/// Where the verifier runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A fresh container of the agent's frozen filesystem.
    Frozen(FrozenId),
    /// The agent's container, still running.
    Live(ContainerId),
    /// A container arbiter prepared for the verifier (`clean` mode), already started.
    Prepared(ContainerId),
    /// The agent's own container after every process in it was stopped: started again for
    /// the verifier (its filesystem is the agent's final one; see `trial::phases::collect`).
    Stopped(ContainerId),
}

/// What the verifier phase needs from its trial.
pub(crate) struct VerifyInput<'a> {
    pub task: &'a Task,
    /// The trial's directory (verifier logs and rewards go under `verifier/`).
    pub dir: &'a Path,
    pub limits: ContainerLimits,
    pub network: Network,
    pub pass_threshold: f64,
    pub timeout_multiplier: f64,
    pub log_cap_bytes: u64,
    pub grace: Duration,
    /// The egress proxy served on the verifier's container while its tests run: the
    /// allowlist's, the observer of a verifier with a network, or the one of a verifier with
    /// none, which admits nothing (`None`: no proxy).
    pub egress: Option<VerifierEgress<'a>>,
}

/// The verifier's proxy, and where the attempts through it are left.
pub(crate) struct VerifierEgress<'a> {
    pub policy: EgressPolicy<'a>,
    pub events: &'a std::sync::Mutex<Vec<crate::gateway::EgressEvent>>,
}

/// What the verifier's proxy admits.
pub(crate) enum EgressPolicy<'a> {
    /// `[verifier] network_mode = "allowlist"`: these hosts only.
    Allowlist(&'a [String]),
    /// A verifier with a network of the engine's (`public`, `host`): everything it could
    /// reach anyway, observed, so a download that failed is seen by the harness
    /// ([`super::downloads`]).
    Observe(crate::gateway::Observe),
    /// A verifier with no network (`none`, whatever set it): a proxy that admits nothing
    /// and records what was asked, so a download its tests attempt is seen by the harness
    /// as such, not read as the agent's failure ([`super::downloads`]). The container keeps
    /// network `none`.
    Offline,
}

impl EgressPolicy<'_> {
    /// Whether the proxy is only an observer: where none can be served, the verifier runs
    /// unobserved rather than not at all.
    fn observes(&self) -> bool {
        !matches!(self, EgressPolicy::Allowlist(_))
    }
}

impl<'a> VerifierEgress<'a> {
    /// The proxy a verifier run of `task` serves.
    pub(crate) fn for_task(
        task: &'a Task,
        events: &'a std::sync::Mutex<Vec<crate::gateway::EgressEvent>>,
    ) -> Option<Self> {
        use crate::gateway::Observe;
        use crate::task::NetworkMode;
        let sidecars = task
            .environment
            .compose
            .as_ref()
            .is_some_and(|c| c.services.len() > 1);
        let policy = match task.verifier.network {
            // A compose task's sidecars serve on the container's own loopback under their
            // service names; a client that ignores NO_PROXY (BusyBox's wget) would ask the
            // proxy for them, which admits nothing: such a verifier runs unobserved, as before.
            NetworkMode::NoNetwork if sidecars => return None,
            NetworkMode::NoNetwork => EgressPolicy::Offline,
            NetworkMode::Allowlist => EgressPolicy::Allowlist(&task.verifier.allowed_hosts),
            NetworkMode::Bridge => EgressPolicy::Observe(Observe::NotLoopback),
            NetworkMode::Host => EgressPolicy::Observe(Observe::Everything),
        };
        Some(VerifierEgress { policy, events })
    }
}

/// A failure of the harness or engine while verifying (never the agent's doing).
#[derive(Debug, thiserror::Error)]
pub(crate) enum VerifyError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("{0}")]
    Egress(String),
    /// The verifier's own downloads failed (the harness saw it): not a verdict on the agent.
    #[error("the verifier could not fetch its tools: {evidence}")]
    Downloads {
        /// The verifier's outcome as recorded: `error`, no reward, the evidence.
        outcome: VerifierOutcome,
        evidence: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl<'a> VerifyInput<'a> {
    /// The verifier of `task` with the job's `settings`, its files under `dir`, on the
    /// task's verifier network; with `[verifier] network_mode = "allowlist"`, its proxy's
    /// attempts go to `events`.
    pub(crate) fn new(
        task: &'a Task,
        dir: &'a Path,
        limits: ContainerLimits,
        settings: &crate::trial::TrialSettings,
        events: &'a std::sync::Mutex<Vec<crate::gateway::EgressEvent>>,
    ) -> Self {
        VerifyInput {
            task,
            dir,
            limits,
            network: crate::trial::sandbox_network(task.verifier.network),
            pass_threshold: settings.pass_threshold,
            timeout_multiplier: settings.verifier_timeout_multiplier,
            log_cap_bytes: settings.log_cap_bytes,
            grace: settings.kill_grace,
            egress: VerifierEgress::for_task(task, events),
        }
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    pub(crate) fn exec(
        &self,
        argv: Vec<String>,
        user: Option<String>,
        timeout: Duration,
        logs: Option<(&str, &str)>,
    ) -> ExecSpec {
        ExecSpec::logged(
            argv,
            user,
            self.task.environment.workdir.clone(),
            timeout,
            logs.map(|(out, err)| (self.path(out), self.path(err))),
            self.log_cap_bytes,
            self.grace,
        )
    }

    /// A container of `frozen` for `role`, with the task's limits and no mounts.
    pub(crate) fn container(
        &self,
        scope: &Scope,
        frozen: &FrozenId,
        role: Role,
        network: Network,
    ) -> ContainerSpec {
        ContainerSpec {
            base: Base::Frozen(frozen.clone()),
            owner: scope.owner(role),
            env: Vec::new(),
            limits: self.limits,
            network,
            workdir: self.task.environment.workdir.clone(),
            mounts: Vec::new(),
            // Harbor's tests run in a container its ENTRYPOINT prepared (issue 13).
            start: crate::sandbox::StartSpec::for_role(role),
        }
    }
}

/// Run the task's verifier on `target` and judge its reward.
pub(crate) async fn verify<S: Sandbox + ?Sized>(
    sb: &S,
    scope: &Scope,
    input: &VerifyInput<'_>,
    target: &Target,
) -> Result<VerifierOutcome, VerifyError> {
    let task = input.task;
    let mode = task.verifier.mode;
    let started = match target {
        Target::Frozen(frozen) => {
            let spec = input.container(scope, frozen, Role::Verifier, input.network);
            scope.launch(sb, &spec).await
        }
        Target::Stopped(id) => sb.start(id).await.map(|()| id.clone()),
        Target::Live(id) | Target::Prepared(id) => Ok(id.clone()),
    };
    let id = match started {
        Ok(id) => id,
        // Found by `tasks check`'s `abstain` exploit: the agent replaced the working dir by a
        // file, so the engine cannot start the container there. That is the agent's doing
        // (SPEC §5, abstention), not an infrastructure failure.
        Err(e @ SandboxError::WorkdirUnusable { .. }) => {
            return Ok(VerifierOutcome::error(
                mode,
                None,
                format!("could not start the verifier in the agent's final filesystem: {e}"),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    // `/tests` and `/logs/verifier` as the task gives them, whatever the agent left there
    // (replaced, never merged; the backend removes nothing through the agent's commands).
    let tests = files_to_tar(&[
        TarEntry {
            path: "logs/",
            content: None,
            mode: 0o755,
        },
        TarEntry {
            path: "logs/verifier/",
            content: None,
            mode: 0o777,
        },
    ])
    .and_then(|head| {
        let tests = dir_to_tar(&task.tests_dir, "tests")?;
        concat_archives(&[&head, &tests])
    })
    .map_err(|source| VerifyError::Io {
        path: task.tests_dir.clone(),
        source,
    })?;
    // A backend may hold the upload for the verifier's own command (Kubernetes: one exec),
    // so its refusal can come from either call.
    let unprepared = |message: String| {
        VerifierOutcome::error(
            mode,
            None,
            format!(
                "could not prepare /tests and /logs/verifier in the agent's final filesystem: {message}"
            ),
        )
    };
    match sb
        .upload_replacing(&id, &["/tests", "/logs/verifier"], tests)
        .await
    {
        Ok(()) => {}
        Err(SandboxError::Refused {
            op: "replace",
            message,
        }) => return Ok(unprepared(message)),
        Err(e) => return Err(e.into()),
    }
    let timeout =
        Duration::from_secs_f64(task.verifier.timeout_sec).mul_f64(input.timeout_multiplier);
    let mut spec = input.exec(
        launcher(sb),
        task.verifier.user.clone(),
        timeout,
        Some(("verifier/stdout.log", "verifier/stderr.log")),
    );
    // Harbor's `[environment] env` under `[verifier] env` (harbor-run, issue 13).
    spec.env = resolve_env(&task.verifier_exec_env())?;
    let proxy = match &input.egress {
        Some(egress) => {
            // In the agent's own container (`live`) the agent's proxy may still hold the port;
            // on the host's network any fixed port could be taken.
            let shares_host = matches!(
                egress.policy,
                EgressPolicy::Observe(crate::gateway::Observe::Everything)
            );
            let port = match target {
                _ if shares_host => 0,
                Target::Live(_) => 0,
                _ => crate::gateway::PROXY_PORT,
            };
            let handle = match serve_egress(sb, &id, &egress.policy, port).await {
                Ok(handle) => Some(handle),
                // An observer is not a wall: where none can be served (a remote engine), the
                // verifier runs on its network (or none) unobserved, as before.
                Err(VerifyError::Egress(e)) if egress.policy.observes() => {
                    tracing::warn!(task = task.name, "verifier egress not observed: {e}");
                    None
                }
                Err(e) => return Err(e),
            };
            match handle {
                None => None,
                Some(handle) => {
                    // A compose task's services are on the container's own loopback: reached
                    // directly, never through the observer (which serves from outside).
                    let mut proxy_env = crate::gateway::proxy_env_bypassing(
                        handle.addr.port(),
                        &task.loopback_hosts(),
                    );
                    if shares_host {
                        // The host's loopback is the verifier's own: a server there is reached through
                        // the observer too (it reaches the same loopback).
                        proxy_env.retain(|(k, _)| !k.eq_ignore_ascii_case("no_proxy"));
                    }
                    spec.env
                        .retain(|(k, _)| !proxy_env.iter().any(|(p, _)| p == k));
                    spec.env.extend(proxy_env);
                    Some((handle, egress.events))
                }
            }
        }
        None => None,
    };
    // A verifier container ends with its tests: nothing of it runs while its logs are read
    // (from its layer, where the backend can), and the backend may send them along with the
    // halt. The agent's own live container is stopped by the trial, which judges how it ended.
    let out = if matches!(target, Target::Live(_)) {
        sb.exec(&id, &spec).await
    } else {
        sb.exec_then_halt(&id, &spec, "/logs/verifier").await
    };
    let mut seen = Vec::new();
    let offline = matches!(
        input.egress.as_ref().map(|e| &e.policy),
        Some(EgressPolicy::Offline)
    );
    if let Some((handle, events)) = proxy {
        seen = handle.shutdown().await;
        events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(seen.iter().cloned());
    }
    let out = match out {
        Err(SandboxError::Refused {
            op: "replace",
            message,
        }) => return Ok(unprepared(message)),
        out => out?,
    };
    if out.end == ExecEnd::TimedOut {
        return Ok(VerifierOutcome::error(
            mode,
            None,
            format!(
                "verifier timed out after {}s",
                crate::timefmt::fmt_secs(timeout)
            ),
        ));
    }
    let logs = input.path("verifier/logs");
    let scratch = input.path(".fetch.tar");
    // What the verifier left is in a filesystem the agent shaped: an engine error reading it
    // (a path replaced by something unreadable) means no reward, not an infrastructure failure.
    // A read whose bytes were lost on the way (the connection's failure, not the path's) is
    // the harness's: an infrastructure error, retried.
    match fetch(
        sb,
        &id,
        "/logs/verifier",
        &logs,
        VERIFIER_LOGS_LIMIT,
        &scratch,
    )
    .await
    {
        Ok(FetchResult::Failed(why)) => {
            tracing::warn!(task = task.name, "verifier logs not collected: {why}")
        }
        Ok(_) => {}
        // Cancellation, and the job dir failing on the host, are the harness's.
        Err(e @ (SandboxError::Cancelled | SandboxError::Io { .. })) => return Err(e.into()),
        Err(e) if e.is_transport() => return Err(e.into()),
        Err(e) => tracing::warn!(task = task.name, "verifier logs not collected: {e}"),
    }
    let read = |name: &str| -> Option<Vec<u8>> {
        let path = logs.join(name);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        meta.is_file()
            .then(|| crate::sandbox::read_capped(&path, REWARD_LIMIT))
    };
    let (json, txt) = (read("reward.json"), read("reward.txt"));
    for (name, bytes) in [("reward.json", &json), ("reward.txt", &txt)] {
        if let Some(bytes) = bytes {
            let _ = std::fs::write(input.path("verifier").join(name), bytes);
        }
    }
    let outcome = judge(
        mode,
        parse_reward(json.as_deref(), txt.as_deref()),
        out.end.exit_code(),
        input.pass_threshold,
    );
    // A verifier that did not pass and whose own downloads failed (as its proxy saw them;
    // with no network, every attempt its proxy refused) measured nothing about the agent: no
    // reward, whatever `reward.txt` says; an infrastructure error, retried (issues 23, 37).
    if outcome.status != super::outcome::VerifierStatus::Passed
        && let Some(evidence) = super::downloads::bootstrap_failure(&seen, &task.tests_dir, offline)
    {
        return Err(VerifyError::Downloads {
            outcome: VerifierOutcome::error(
                mode,
                out.end.exit_code(),
                format!("the verifier could not fetch its tools: {evidence}"),
            ),
            evidence,
        });
    }
    Ok(outcome)
}

/// The verifier's egress proxy (its allowlist, or the observer) on its container's own
/// loopback.
async fn serve_egress<S: Sandbox + ?Sized>(
    sb: &S,
    id: &ContainerId,
    policy: &EgressPolicy<'_>,
    port: u16,
) -> Result<crate::gateway::ProxyHandle, VerifyError> {
    let allowlist = match policy {
        EgressPolicy::Allowlist(hosts) => crate::gateway::Allowlist::parse(hosts)
            .map_err(|e| VerifyError::Egress(e.to_string()))?,
        EgressPolicy::Observe(observe) => crate::gateway::Allowlist::observer(*observe),
        // An empty list: every request is answered 403 before any lookup or connection.
        EgressPolicy::Offline => crate::gateway::Allowlist::default(),
    };
    let listener = sb.loopback_listener(id, port).await.map_err(|e| match e {
        SandboxError::Cancelled => VerifyError::Sandbox(e),
        e => VerifyError::Egress(format!(
            "cannot serve the egress proxy in the verifier's container: {e}"
        )),
    })?;
    crate::gateway::serve_allowlist(listener, allowlist)
        .map_err(|e| VerifyError::Egress(format!("egress allowlist proxy: {e}")))
}

/// The test launcher: `test.sh` under the image's bash at its usual paths (never one found
/// through `PATH`, where the agent could have put its own), else the image's `/bin/sh`, else
/// the toolbox shell, so an image without any shell can still be verified.
fn launcher<S: Sandbox + ?Sized>(sb: &S) -> Vec<String> {
    let fallback = sb.harness_argv("sh", &[]).join(" ");
    let script = format!(
        "for b in /bin/bash /usr/bin/bash /bin/sh; do if [ -x \"$b\" ]; then exec \"$b\" /tests/test.sh; fi; done; exec {fallback} /tests/test.sh"
    );
    sb.harness_argv("sh", &["-c", &script])
}
