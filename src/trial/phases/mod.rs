//! The phases of one trial, each an async function over a [`Ctx`] that takes what it needs
//! as values and returns a typed outcome:
//! [`environment::run`] → [`EnvReady`], [`agent::run`] → [`AgentDone`],
//! [`collect::run`] → [`Collected`]; validation and verification are the verifier's
//! (`crate::verifier`). No phase reads another phase's files by convention.

pub(crate) mod agent;
pub(crate) mod artifacts;
pub(crate) mod attempts;
mod between_attempts;
pub(crate) mod changes;
pub(crate) mod collect;
pub(crate) mod egress;
pub(crate) mod environment;
pub(crate) mod healthcheck;
pub(crate) mod image_index;
pub(crate) mod logs;
pub(crate) mod sidecars;
pub(crate) mod steps;

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::sandbox::{
    ContainerId, ContainerLimits, ExecSpec, FetchResult, Network, Sandbox, SandboxError, Scope,
};
use crate::task::NetworkMode;

use super::plan::{Phase, TrialPlan};

pub(crate) use agent::AgentDone;
pub(crate) use environment::EnvReady;

/// What every phase works with.
pub(crate) struct Ctx<'a, S: ?Sized> {
    pub sb: &'a S,
    pub plan: &'a TrialPlan,
    pub scope: &'a Scope,
}

/// A failure of the harness or engine during `phase` (never the agent's doing).
#[derive(Debug)]
pub(crate) struct Infra {
    pub phase: Phase,
    pub message: String,
}

pub(crate) fn infra<E: std::fmt::Display>(phase: Phase) -> impl FnOnce(E) -> Infra {
    move |e| Infra {
        phase,
        message: e.to_string(),
    }
}

impl<'a, S: ?Sized> Ctx<'a, S> {
    /// The same backend and scope for another view of the trial (a Harbor step's).
    pub(crate) fn with_plan<'b>(&self, plan: &'b TrialPlan) -> Ctx<'b, S>
    where
        'a: 'b,
    {
        Ctx {
            sb: self.sb,
            plan,
            scope: self.scope,
        }
    }
}

impl<S: Sandbox + ?Sized> Ctx<'_, S> {
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.plan.dir.join(rel)
    }

    pub(crate) fn limits(&self) -> ContainerLimits {
        limits_of(&self.plan.task.environment)
    }

    /// An exec in the task's working directory with the job's log cap and kill grace;
    /// `logs` are the trial-relative files for stdout and stderr.
    pub(crate) fn exec_spec(
        &self,
        argv: Vec<String>,
        user: Option<String>,
        timeout: Duration,
        logs: Option<(&str, &str)>,
    ) -> ExecSpec {
        ExecSpec::logged(
            argv,
            user,
            self.plan.task.environment.workdir.clone(),
            timeout,
            logs.map(|(out, err)| (self.path(out), self.path(err))),
            self.plan.settings.log_cap_bytes,
            self.plan.settings.kill_grace,
        )
    }

    /// Fetch a path of the agent's filesystem. The agent shaped that filesystem, so an engine
    /// error reading a path (replaced by a file, made unreadable) is its doing — `Failed`, not
    /// an infrastructure error (SPEC §5, abstention); an engine that is really gone fails the
    /// next call (the freeze, or the verifier's container) instead. Bytes lost on the way
    /// ([`SandboxError::is_transport`]) are the connection's, not the path's: the error is
    /// returned (an infrastructure error of the caller's phase).
    pub(crate) async fn fetch(
        &self,
        id: &ContainerId,
        path: &str,
        dest: &Path,
        limit: u64,
    ) -> Result<FetchResult, SandboxError> {
        match crate::sandbox::fetch(self.sb, id, path, dest, limit, &self.path(".fetch.tar")).await
        {
            Err(SandboxError::Cancelled) => Err(SandboxError::Cancelled),
            Err(SandboxError::Io { path, source }) => Err(SandboxError::Io { path, source }),
            Err(e) if e.is_transport() => Err(e),
            Err(e) => {
                tracing::debug!(trial = self.plan.id, path, "fetch: {e}");
                Ok(FetchResult::Failed(format!("not readable: {e}")))
            }
            Ok(found) => Ok(found),
        }
    }
}

/// The container limits of a task's environment.
pub(crate) fn limits_of(env: &crate::task::EnvironmentSpec) -> ContainerLimits {
    ContainerLimits {
        cpus: env.cpus,
        memory_mb: env.memory_mb,
        pids_limit: env.pids_limit,
        gpus: env.gpus,
        storage_mb: Some(
            env.storage_mb
                .unwrap_or(crate::trial::DEFAULT_STORAGE_LIMIT_MB),
        ),
    }
}

/// Create `subs` under `base` on the host (a trial's or a step's own directories).
pub(crate) fn make_dirs(base: &Path, subs: &[&str], phase: Phase) -> Result<(), Infra> {
    for sub in subs {
        let dir = base.join(sub);
        std::fs::create_dir_all(&dir).map_err(|e| Infra {
            phase,
            message: format!("{}: {e}", dir.display()),
        })?;
    }
    Ok(())
}

pub(crate) fn sandbox_network(mode: NetworkMode) -> Network {
    match mode {
        NetworkMode::NoNetwork => Network::None,
        NetworkMode::Host => Network::Host,
        NetworkMode::Bridge => Network::Bridge,
        // No network but the egress allowlist proxy on the container's loopback (`egress`).
        NetworkMode::Allowlist => Network::None,
    }
}

/// `path` without its leading `/`, when it is absolute and made of plain components only.
pub(crate) fn safe_relative(path: &str) -> Option<PathBuf> {
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

pub(crate) use crate::sandbox::read_capped;
pub(crate) use crate::timefmt::fmt_secs;

pub(crate) fn code_words(code: Option<i64>) -> String {
    code.map(|c| c.to_string())
        .unwrap_or_else(|| "no exit code".to_string())
}

pub(crate) fn fmt_mib(bytes: u64) -> String {
    format!("{} MiB", bytes.div_ceil(1024 * 1024))
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
