//! The Docker wing: [`Sandbox`] on a Docker engine through bollard.
//!
//! Over 600 lines: the whole Docker backend (every trait operation and the exec stream's deadline handling) is one implementation against one client.

mod engine_socket;
mod error;
mod gpus;
mod layer;
mod layer_changes;
mod layer_write;
mod upper;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    BuildImageOptionsBuilder, CommitContainerOptionsBuilder, CreateImageOptionsBuilder,
    DownloadFromContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    ListImagesOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::{Mutex, OnceCell};

use crate::sandbox::handover::{HANDOVER_WAIT, KEEPALIVE_MARKER, handover_probe};
use crate::sandbox::sink::CappedSink;
use crate::sandbox::tarball::dir_to_tar;
use crate::sandbox::{
    Availability, Base, Change, ChangeKind, ContainerId, ContainerSpec, ContainerStatus, Download,
    ExecEnd, ExecOutcome, ExecSpec, Extent, Fetched, FrozenId, Health, HealthCommand, HealthSpec,
    ImageConfig, ImageRecipe, ImageRef, ImageSpec, LABEL_MANAGED, Listed, Network, Owner, Process,
    Resource, Sandbox, SandboxError, Selector, Stopped,
};
pub use engine_socket::engine_requests;
pub use error::DockerError;
use error::status_of;

/// PID 1's child in every container: sleeps forever and ignores SIGTERM, so that a deadline's
/// `kill -TERM -1` reaches the agent's processes but not the container's keep-alive. The
/// container itself always ends with SIGKILL, which nothing survives.
const KEEPALIVE: &str = "trap '' TERM INT HUP; while :; do sleep 3600; done";

/// A Docker engine reached through bollard.
pub struct DockerSandbox {
    docker: Docker,
    builds: Mutex<HashMap<String, Arc<OnceCell<String>>>>,
    /// Host directory of the harness toolbox, mounted read-only into every container.
    toolbox: Option<std::path::PathBuf>,
    /// Containers created with the image's ENTRYPOINT in front of the keep-alive, until
    /// started: id → the ENTRYPOINT (for messages).
    handovers: Mutex<HashMap<String, String>>,
    /// Each named image's config, inspected once: it does not change under a reference during
    /// a run (built environments are named by their content).
    image_facts: Mutex<HashMap<String, ImageFacts>>,
    /// Each measured container's writable layer on this host (issue 16: storage is measured
    /// without an engine request each time; see sandbox/upper.rs).
    upper: upper::UpperDirs,
    /// The ENTRYPOINT each container of this process was created with, as `ImageFacts`
    /// reports it (`None`: none, or arbiter's keep-alive), until it is frozen or removed: a
    /// commit carries its container's config, so this is its frozen filesystem's ENTRYPOINT
    /// too, and the verifier's create needs no inspection of the frozen image.
    entrypoints: Mutex<HashMap<String, Option<String>>>,
    /// Frozen filesystem id → its ENTRYPOINT (from `entrypoints`), until it is removed.
    frozen_entrypoints: Mutex<HashMap<String, Option<String>>>,
}

/// The parts of an image's config arbiter uses.
#[derive(Debug, Clone)]
struct ImageFacts {
    /// `["PATH=…", …]`.
    env: Vec<String>,
    /// Its ENTRYPOINT as one line, unless it has none (or only arbiter's keep-alive).
    entrypoint: Option<String>,
    /// The engine's image id (`sha256:…` of its config, which names its layers).
    id: Option<String>,
    /// `WorkingDir` (the Dockerfile's last `WORKDIR`), when set.
    workdir: Option<String>,
    /// `User`, when set.
    user: Option<String>,
}

impl DockerSandbox {
    /// Connect using `DOCKER_HOST` or the platform default socket, negotiate the API version
    /// (engines as old as API 1.41 are fine) and check the engine answers.
    pub async fn connect() -> Result<Self, SandboxError> {
        let hint = std::env::var("DOCKER_HOST")
            .unwrap_or_else(|_| "unix:///var/run/docker.sock".to_string());
        let connect = |source| {
            SandboxError::from(DockerError::Connect {
                hint: hint.clone(),
                source,
            })
        };
        let docker = match engine_socket::local_socket() {
            Some(socket) => engine_socket::pooled_unix(socket).map_err(connect)?,
            None => Docker::connect_with_defaults().map_err(connect)?,
        }
        .with_timeout(Duration::from_secs(120));
        let docker =
            match tokio::time::timeout(Duration::from_secs(15), docker.negotiate_version()).await {
                Ok(result) => result.map_err(connect)?,
                Err(_) => {
                    return Err(SandboxError::Timeout {
                        op: "docker version negotiation",
                        seconds: 15,
                    });
                }
            };
        match tokio::time::timeout(Duration::from_secs(15), docker.ping()).await {
            Ok(result) => result.map_err(connect)?,
            Err(_) => {
                return Err(SandboxError::Timeout {
                    op: "docker ping",
                    seconds: 15,
                });
            }
        };
        tracing::debug!(api = %docker.client_version(), "connected to docker");
        Ok(DockerSandbox {
            docker,
            builds: Mutex::new(HashMap::new()),
            image_facts: Mutex::new(HashMap::new()),
            entrypoints: Mutex::new(HashMap::new()),
            frozen_entrypoints: Mutex::new(HashMap::new()),
            toolbox: None,
            handovers: Mutex::new(HashMap::new()),
            upper: Default::default(),
        })
    }

    /// Mount this (validated) toolbox read-only into every container and run every harness
    /// command from it: the keep-alive, the deadline's SIGTERM broadcast, the verifier's
    /// preparation and launcher.
    pub fn with_toolbox(mut self, toolbox: &crate::sandbox::toolbox::Toolbox) -> Self {
        self.toolbox = Some(toolbox.dir.clone());
        self
    }

    /// The engine's client (the Kubernetes backend tags and pushes what this engine built).
    pub(crate) fn client(&self) -> &Docker {
        &self.docker
    }

    /// Whether the engine has an image of this name.
    pub(crate) async fn has_image(&self, name: &str) -> Result<bool, SandboxError> {
        self.image_exists(name).await
    }

    async fn image_exists(&self, name: &str) -> Result<bool, SandboxError> {
        match self.docker.inspect_image(name).await {
            Ok(_) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(SandboxError::from(DockerError::Engine {
                op: "image inspect",
                source: e,
            })),
        }
    }

    async fn build(
        &self,
        context: &Path,
        dockerfile: &str,
        tag: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), SandboxError> {
        let context = context.to_path_buf();
        let tar = tokio::task::spawn_blocking({
            let context = context.clone();
            move || dir_to_tar(&context, ".")
        })
        .await
        .map_err(|e| SandboxError::Build {
            tag: tag.to_string(),
            message: format!("packing context: {e}"),
        })?
        .map_err(SandboxError::io(&context))?;
        let labels: HashMap<String, String> =
            labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let options = BuildImageOptionsBuilder::new()
            .dockerfile(dockerfile)
            .t(tag)
            .rm(true)
            .forcerm(true)
            .labels(&labels)
            .build();
        let mut stream =
            self.docker
                .build_image(options, None, Some(bollard::body_full(tar.into())));
        let mut tail: Vec<String> = Vec::new();
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| SandboxError::Build {
                tag: tag.to_string(),
                message: e.to_string(),
            })?;
            if let Some(detail) = info.error_detail {
                let message = detail
                    .message
                    .unwrap_or_else(|| "unknown build error".to_string());
                return Err(SandboxError::Build {
                    tag: tag.to_string(),
                    message: one_line(&message),
                });
            }
            if let Some(line) = info.stream {
                let line = line.trim_end().to_string();
                if !line.is_empty() {
                    tracing::trace!(tag, "{line}");
                    tail.push(line);
                    if tail.len() > 20 {
                        tail.remove(0);
                    }
                }
            }
        }
        if !self.image_exists(tag).await? {
            return Err(SandboxError::Build {
                tag: tag.to_string(),
                message: format!(
                    "engine reported no image; last output: {}",
                    tail.join(" | ")
                ),
            });
        }
        Ok(())
    }

    async fn pull(&self, name: &str) -> Result<(), SandboxError> {
        let options = CreateImageOptionsBuilder::new().from_image(name).build();
        let mut stream = self.docker.create_image(Some(options), None, None);
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| SandboxError::Image {
                image: name.to_string(),
                message: e.to_string(),
            })?;
            if let Some(detail) = info.error_detail {
                return Err(SandboxError::Image {
                    image: name.to_string(),
                    message: detail.message.unwrap_or_else(|| "pull failed".to_string()),
                });
            }
        }
        Ok(())
    }

    /// Send SIGTERM to every process in the container except PID 1 and the keep-alive.
    async fn terminate_all(&self, id: &str) {
        let cmd = if self.toolbox.is_some() {
            self.harness_argv("kill", &["-TERM", "-1"])
        } else {
            vec![
                "sh".to_string(),
                "-c".to_string(),
                "kill -TERM -1 2>/dev/null; true".to_string(),
            ]
        };
        let options = CreateExecOptions {
            cmd: Some(cmd),
            user: Some("0".to_string()),
            ..Default::default()
        };
        let detached = bollard::exec::StartExecOptions {
            detach: true,
            ..Default::default()
        };
        let sent = async {
            let created = self.docker.create_exec(id, options).await?;
            self.docker
                .start_exec(&created.id, Some(detached))
                .await
                .map(|_| ())
        };
        match tokio::time::timeout(Duration::from_secs(5), sent).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(id, "SIGTERM broadcast failed: {e}"),
            Err(_) => tracing::debug!(id, "SIGTERM broadcast did not finish"),
        }
    }

    async fn exec_inner(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, SandboxError> {
        let started = Instant::now();
        let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let options = CreateExecOptions {
            cmd: Some(spec.argv.clone()),
            env: if env.is_empty() { None } else { Some(env) },
            user: spec.user.clone(),
            working_dir: spec.workdir.clone(),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            attach_stdin: Some(false),
            tty: Some(false),
            ..Default::default()
        };
        let created = self
            .docker
            .create_exec(id, options)
            .await
            .map_err(error::engine("exec create"))?;
        let StartExecResults::Attached { mut output, .. } = self
            .docker
            .start_exec(&created.id, None)
            .await
            .map_err(error::engine("exec start"))?
        else {
            return Err(SandboxError::Refused {
                op: "docker exec start",
                message: "engine detached the exec".into(),
            });
        };
        let mut stdout = CappedSink::open(spec.stdout.as_deref(), spec.cap_bytes).await?;
        let mut stderr = CappedSink::open(spec.stderr.as_deref(), spec.cap_bytes).await?;

        let mut deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut timed_out = false;
        let mut killed = false;
        loop {
            let next = match deadline {
                Some(at) => match tokio::time::timeout_at(at, output.next()).await {
                    Ok(next) => next,
                    Err(_) if !timed_out => {
                        timed_out = true;
                        tracing::debug!(
                            id,
                            "exec deadline reached: SIGTERM, then kill after grace"
                        );
                        self.terminate_all(id).await;
                        deadline = Some(tokio::time::Instant::now() + spec.grace);
                        continue;
                    }
                    Err(_) if !killed => {
                        killed = true;
                        self.kill(id).await?;
                        deadline = Some(tokio::time::Instant::now() + Duration::from_secs(10));
                        continue;
                    }
                    Err(_) => break,
                },
                None => output.next().await,
            };
            match next {
                None => break,
                Some(Ok(bollard::container::LogOutput::StdOut { message })) => {
                    stdout.write(&message).await?
                }
                Some(Ok(bollard::container::LogOutput::StdErr { message })) => {
                    stderr.write(&message).await?
                }
                Some(Ok(_)) => {}
                Some(Err(e)) if timed_out => {
                    tracing::debug!(id, "exec stream ended after kill: {e}");
                    break;
                }
                Some(Err(e)) => {
                    return Err(SandboxError::from(DockerError::Engine {
                        op: "exec stream",
                        source: e,
                    }));
                }
            }
        }
        stdout.finish().await?;
        stderr.finish().await?;
        let exit_code = match self.docker.inspect_exec(&created.id).await {
            Ok(inspect) if inspect.running == Some(false) => inspect.exit_code,
            Ok(_) => None,
            Err(e) if timed_out => {
                tracing::debug!(id, "exec inspect after kill: {e}");
                None
            }
            Err(e) => {
                return Err(SandboxError::from(DockerError::Engine {
                    op: "exec inspect",
                    source: e,
                }));
            }
        };
        let end = match (timed_out, exit_code) {
            (true, _) => ExecEnd::TimedOut,
            (false, Some(code)) => ExecEnd::Exited(code),
            (false, None) => ExecEnd::Killed { oom: false },
        };
        Ok(crate::sandbox::sink::exec_outcome(
            end,
            &stdout,
            &stderr,
            started.elapsed(),
        ))
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The engine's label filter for a selector.
fn selector_filter(selector: &Selector) -> HashMap<String, Vec<String>> {
    use crate::sandbox::{LABEL_JOB, LABEL_TRIAL};
    let labels = match selector {
        Selector::Managed => vec![format!("{LABEL_MANAGED}=true")],
        Selector::Job(job) => vec![format!("{LABEL_JOB}={job}")],
        Selector::Trial { job, trial } => {
            vec![
                format!("{LABEL_JOB}={job}"),
                format!("{LABEL_TRIAL}={trial}"),
            ]
        }
    };
    HashMap::from([("label".to_string(), labels)])
}

fn network_mode(network: Network) -> &'static str {
    match network {
        Network::None => "none",
        Network::Host => "host",
        Network::Bridge => "bridge",
    }
}

/// The engine's healthcheck for a compose `healthcheck`.
fn health_config(spec: &HealthSpec) -> bollard::models::HealthConfig {
    let nanos = |d: Option<Duration>| d.map(|d| d.as_nanos().min(i64::MAX as u128) as i64);
    let test = match &spec.test {
        None => vec!["NONE".to_string()],
        Some(HealthCommand::Exec(argv)) => {
            let mut test = vec!["CMD".to_string()];
            test.extend(argv.iter().cloned());
            test
        }
        Some(HealthCommand::Shell(cmd)) => vec!["CMD-SHELL".to_string(), cmd.clone()],
    };
    bollard::models::HealthConfig {
        test: Some(test),
        interval: nanos(spec.interval),
        timeout: nanos(spec.timeout),
        retries: spec.retries.map(i64::from),
        start_period: nanos(spec.start_period),
        ..Default::default()
    }
}

impl DockerSandbox {
    /// The image's ENTRYPOINT, as one line, when it has one. A frozen filesystem of this
    /// process's own container has its container's, known without asking the engine.
    async fn image_entrypoint(&self, image: &str) -> Result<Option<String>, SandboxError> {
        if let Some(known) = self.frozen_entrypoints.lock().await.get(image) {
            return Ok(known.clone());
        }
        Ok(self.image_facts_of(image).await?.entrypoint)
    }

    /// What the container creation and the integrity classifier need of an image's config,
    /// inspected once per named image (frozen filesystems, one per trial, are not kept).
    async fn image_facts_of(&self, image: &str) -> Result<ImageFacts, SandboxError> {
        if let Some(known) = self.image_facts.lock().await.get(image) {
            return Ok(known.clone());
        }
        let inspected = self
            .docker
            .inspect_image(image)
            .await
            .map_err(error::engine("image inspect"))?;
        let config = inspected.config;
        let facts = ImageFacts {
            id: inspected.id.filter(|id| id.starts_with("sha256:")),
            env: config
                .as_ref()
                .and_then(|c| c.env.clone())
                .unwrap_or_default(),
            workdir: config
                .as_ref()
                .and_then(|c| c.working_dir.clone())
                .filter(|d| d.starts_with('/')),
            user: config
                .as_ref()
                .and_then(|c| c.user.clone())
                .filter(|u| !u.is_empty()),
            entrypoint: config
                .and_then(|c| c.entrypoint)
                .filter(|e| !e.iter().all(String::is_empty))
                // A frozen filesystem of a keep-alive container carries the keep-alive itself.
                .filter(|e| {
                    *e != crate::sandbox::toolbox::keepalive_argv()
                        && e[..] != ["sh".to_string(), "-c".to_string(), KEEPALIVE.to_string()]
                })
                .map(|e| format!("{e:?}")),
        };
        if !image.starts_with("sha256:") {
            self.image_facts
                .lock()
                .await
                .insert(image.to_string(), facts.clone());
        }
        Ok(facts)
    }

    /// Wait until the image's ENTRYPOINT has run the keep-alive it was given as arguments:
    /// an ENTRYPOINT that exits, or still has not after [`HANDOVER_WAIT`], is the task's
    /// problem, said in one line with the container's last output.
    async fn await_handover(&self, id: &str, entrypoint: &str) -> Result<(), SandboxError> {
        let keepalive = match &self.toolbox {
            Some(_) => crate::sandbox::toolbox::keepalive_argv(),
            None => vec!["sh".to_string(), "-c".to_string(), KEEPALIVE.to_string()],
        };
        let tool = |applet: &str| self.harness_argv(applet, &[]).join(" ");
        let probe = self.harness_argv("sh", &["-c", &handover_probe(&keepalive, tool)]);
        let started = tokio::time::Instant::now();
        loop {
            let state = self.state(id).await?;
            if !state.running.unwrap_or(false) {
                return Err(SandboxError::Entrypoint {
                    entrypoint: entrypoint.to_string(),
                    why: format!(
                        "exited with code {} before running its arguments",
                        state.exit_code.unwrap_or(-1)
                    ),
                    logs: self.last_output(id).await,
                });
            }
            let spec = crate::sandbox::ExecSpec {
                argv: probe.clone(),
                env: Vec::new(),
                user: Some("0".to_string()),
                workdir: None,
                stdout: None,
                stderr: None,
                cap_bytes: 0,
                timeout: Some(Duration::from_secs(10)),
                grace: Duration::from_secs(1),
            };
            match self.exec_inner(id, &spec).await {
                Ok(outcome) if outcome.end == ExecEnd::Exited(0) => return Ok(()),
                Ok(_) => {}
                // The container may have stopped between the inspect and the exec.
                Err(e) => tracing::debug!(id, "entrypoint handover probe: {e}"),
            }
            if started.elapsed() >= HANDOVER_WAIT {
                return Err(SandboxError::Entrypoint {
                    entrypoint: entrypoint.to_string(),
                    why: format!(
                        "still had not run its arguments after {}s",
                        HANDOVER_WAIT.as_secs()
                    ),
                    logs: self.last_output(id).await,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// ` (last output: …)` from the container's log, or empty.
    async fn last_output(&self, id: &str) -> String {
        let options = bollard::query_parameters::LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .tail("5")
            .build();
        let mut stream = self.docker.logs(id, Some(options));
        let mut text = String::new();
        let read = async {
            while let Some(Ok(chunk)) = stream.next().await {
                text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
                if text.len() > 2000 {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
        let line = one_line(&text);
        if line.is_empty() {
            String::new()
        } else {
            format!(
                " (last output: {})",
                line.chars().take(400).collect::<String>()
            )
        }
    }

    /// SIGKILL every process of the container and wait until the engine reports it stopped,
    /// so that a freeze sees a quiescent filesystem; returns the stopped container's state
    /// (Docker's kill with SIGKILL answers once the container has stopped, so one inspection
    /// usually suffices). A container that is not running is fine.
    /// Kill and wait until stopped: the container's last state, and the inspection that saw it.
    async fn kill(
        &self,
        id: &str,
    ) -> Result<
        (
            bollard::models::ContainerState,
            bollard::models::ContainerInspectResponse,
        ),
        SandboxError,
    > {
        self.send_kill(id).await?;
        for _ in 0..100 {
            let mut info = self.inspect(id).await?;
            let state = info.state.take().unwrap_or_default();
            if !state.running.unwrap_or(false) {
                return Ok((state, info));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(SandboxError::Refused {
            op: "docker container kill",
            message: "container still running 2s after SIGKILL".into(),
        })
    }

    /// Unpack `tar` into the container as `options` say (the engine's archive upload).
    async fn put_archive(
        &self,
        id: &ContainerId,
        options: bollard::query_parameters::UploadToContainerOptions,
        tar: Vec<u8>,
    ) -> Result<(), SandboxError> {
        self.docker
            .upload_to_container(id.as_str(), Some(options), bollard::body_full(tar.into()))
            .await
            .map_err(error::engine("copy into container"))
    }

    /// SIGKILL every process of the container. Docker answers a SIGKILL once the container
    /// is seen stopped (its daemon's `Kill` waits for the exit), or with 409 when it was not
    /// running: either way no process of it is left.
    async fn send_kill(&self, id: &str) -> Result<(), SandboxError> {
        let options = KillContainerOptionsBuilder::new().signal("KILL").build();
        match self.docker.kill_container(id, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if status_of(&e) == Some(409) => Ok(()),
            Err(e) => Err(SandboxError::from(DockerError::Engine {
                op: "container kill",
                source: e,
            })),
        }
    }

    /// `build`'s archive of `path` (to `to`, at most `limit` bytes) over a stopped
    /// container's layers on this host (off the async threads), when this backend has them
    /// and they answer; `None`: ask the engine (a failure to read them is logged, never the
    /// result).
    /// The engine's archive of the path (its whole subtree).
    async fn engine_archive(
        &self,
        id: &ContainerId,
        want: Download<'_>,
    ) -> Result<Fetched, SandboxError> {
        let Download {
            path, to, limit, ..
        } = want;
        let options = DownloadFromContainerOptionsBuilder::new()
            .path(path)
            .build();
        let mut stream = self
            .docker
            .download_from_container(id.as_str(), Some(options));
        let mut file = tokio::fs::File::create(to)
            .await
            .map_err(SandboxError::io(to))?;
        let mut bytes = 0u64;
        loop {
            // The request's deadline ends with the reply's headers: a copy that stalls
            // afterwards is bounded here, chunk by chunk.
            let Ok(next) = tokio::time::timeout(COPY_IDLE_DEADLINE, stream.next()).await else {
                drop(file);
                let _ = tokio::fs::remove_file(to).await;
                return Err(SandboxError::Timeout {
                    op: "docker copy from container",
                    seconds: COPY_IDLE_DEADLINE.as_secs(),
                });
            };
            let Some(chunk) = next else { break };
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) if status_of(&e) == Some(404) => {
                    drop(file);
                    let _ = tokio::fs::remove_file(to).await;
                    return Ok(Fetched::NotFound);
                }
                Err(e) => {
                    return Err(SandboxError::from(DockerError::Engine {
                        op: "copy from container",
                        source: e,
                    }));
                }
            };
            bytes += chunk.len() as u64;
            if bytes > limit {
                drop(file);
                let _ = tokio::fs::remove_file(to).await;
                return Ok(Fetched::TooLarge { limit });
            }
            file.write_all(&chunk).await.map_err(SandboxError::io(to))?;
        }
        // No fsync: the archive is a scratch file, unpacked and deleted right away.
        file.flush().await.map_err(SandboxError::io(to))?;
        Ok(Fetched::Archive { bytes })
    }

    async fn archive_from_layer(
        &self,
        id: &ContainerId,
        build: fn(&layer::Layer, &str, &Path, u64) -> std::io::Result<Option<Fetched>>,
        path: &str,
        to: &Path,
        limit: u64,
    ) -> Option<Fetched> {
        let layer = self.upper.layer_of_stopped(id.as_str())?;
        let (path, to) = (path.to_string(), to.to_path_buf());
        match tokio::task::spawn_blocking(move || build(&layer, &path, &to, limit)).await {
            Ok(Ok(fetched)) => fetched,
            Ok(Err(e)) => {
                tracing::debug!(%id, "archive from the writable layer: {e}");
                None
            }
            Err(e) => {
                tracing::debug!(%id, "archive from the writable layer: {e}");
                None
            }
        }
    }

    async fn state(&self, id: &str) -> Result<bollard::models::ContainerState, SandboxError> {
        Ok(self.inspect(id).await?.state.unwrap_or_default())
    }

    async fn inspect(
        &self,
        id: &str,
    ) -> Result<bollard::models::ContainerInspectResponse, SandboxError> {
        let info = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(error::engine("container inspect"))?;
        // The same reply names the writable layer: the storage watchdog needs no inspect of its own.
        self.upper.prime(id, info.graph_driver.as_ref());
        Ok(info)
    }
}

#[async_trait::async_trait]
impl Sandbox for DockerSandbox {
    fn name(&self) -> &'static str {
        "docker"
    }

    /// The engine requests of the job (scripts/bench reads them).
    async fn finish(&self, trials: usize) {
        tracing::info!(
            requests = engine_socket::engine_requests(),
            trials,
            "engine requests"
        );
    }

    async fn prepare_image(&self, spec: &ImageSpec) -> Result<ImageRef, SandboxError> {
        let reference = spec.reference().to_string();
        let cell = {
            let mut builds = self.builds.lock().await;
            builds
                .entry(reference.clone())
                .or_insert_with(|| Arc::new(OnceCell::new()))
                .clone()
        };
        let timeout = spec.timeout;
        let ready = cell
            .get_or_try_init(|| async {
                if self.image_exists(&reference).await? {
                    return Ok::<_, SandboxError>(reference.clone());
                }
                match &spec.recipe {
                    ImageRecipe::Build { context, file } => {
                        tracing::info!(tag = reference, "building image");
                        let built = self.build(context, file, &reference, &spec.labels);
                        match tokio::time::timeout(timeout, built).await {
                            Ok(result) => result?,
                            Err(_) => {
                                return Err(SandboxError::Build {
                                    tag: reference.clone(),
                                    message: format!(
                                        "build timed out after {}s",
                                        timeout.as_secs()
                                    ),
                                });
                            }
                        }
                    }
                    ImageRecipe::Named(name) => {
                        tracing::info!(image = name, "pulling image");
                        match tokio::time::timeout(timeout, self.pull(name)).await {
                            Ok(result) => result?,
                            Err(_) => {
                                return Err(SandboxError::Image {
                                    image: name.clone(),
                                    message: format!("pull timed out after {}s", timeout.as_secs()),
                                });
                            }
                        }
                    }
                }
                Ok(reference.clone())
            })
            .await?;
        Ok(ImageRef::new(ready.clone()))
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<ContainerId, SandboxError> {
        let mut binds: Vec<String> = spec
            .mounts
            .iter()
            .map(|m| {
                let mode = if m.read_only { "ro" } else { "rw" };
                format!("{}:{}:{mode}", m.host.display(), m.container)
            })
            .collect();
        let image = match &spec.base {
            Base::Image(image) => image.as_str().to_string(),
            Base::Frozen(frozen) => frozen.as_str().to_string(),
        };
        let keepalive = match &self.toolbox {
            Some(dir) => {
                binds.push(format!(
                    "{}:{}:ro",
                    dir.display(),
                    crate::sandbox::toolbox::TOOLBOX_MOUNT
                ));
                crate::sandbox::toolbox::keepalive_argv()
            }
            None => vec!["sh".to_string(), "-c".to_string(), KEEPALIVE.to_string()],
        };
        let marker = vec![KEEPALIVE_MARKER.to_string()];
        // (entrypoint, cmd, the image's ENTRYPOINT arbiter must wait on at start)
        // The container's own ENTRYPOINT as `ImageFacts` describes one, when known here
        // (`Some(None)`: arbiter's keep-alive, or none): what a freeze of it carries.
        let mut carried: Option<Option<String>> = Some(None);
        let (entrypoint, cmd, handover) = match &spec.start.process {
            Process::Keepalive => (Some(keepalive), Some(marker), None),
            Process::ImageEntrypoint => match self.image_entrypoint(&image).await? {
                // Harbor: the image's ENTRYPOINT stays, the command is the keep-alive.
                Some(image_entrypoint) => {
                    let mut cmd = keepalive;
                    cmd.extend(marker);
                    carried = Some(Some(image_entrypoint.clone()));
                    (None, Some(cmd), Some(image_entrypoint))
                }
                None => (Some(keepalive), Some(marker), None),
            },
            Process::Service {
                entrypoint,
                command,
            } => {
                // A service's own ENTRYPOINT, or the image's (not looked up for this).
                carried = None;
                (entrypoint.clone(), command.clone(), None)
            }
        };
        let memory = (spec.limits.memory_mb as i64).saturating_mul(1024 * 1024);
        let network_mode = match &spec.start.join {
            Some(id) => format!("container:{id}"),
            None => network_mode(spec.network).to_string(),
        };
        let extra_hosts: Vec<String> = spec
            .start
            .hosts
            .iter()
            .map(|(name, address)| format!("{name}:{address}"))
            .collect();
        let host_config = HostConfig {
            init: Some(true),
            nano_cpus: Some((spec.limits.cpus * 1e9) as i64),
            memory: Some(memory),
            memory_swap: Some(memory),
            pids_limit: Some(spec.limits.pids_limit),
            network_mode: Some(network_mode),
            binds: if binds.is_empty() { None } else { Some(binds) },
            extra_hosts: (!extra_hosts.is_empty()).then_some(extra_hosts),
            device_requests: device_requests(spec.limits.gpus),
            ..Default::default()
        };
        let body = ContainerCreateBody {
            image: Some(image),
            entrypoint,
            cmd,
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(spec.owner.labels().into_iter().collect()),
            working_dir: spec.workdir.clone(),
            user: spec.start.user.clone(),
            healthcheck: spec.start.healthcheck.as_ref().map(health_config),
            // A disabled network has no /etc/hosts; network mode `none` alone has no network
            // either, and keeps the hosts file the extra hosts go into.
            network_disabled: Some(
                spec.network == Network::None
                    && spec.start.join.is_none()
                    && spec.start.hosts.is_empty(),
            ),
            host_config: Some(host_config),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(
                None::<bollard::query_parameters::CreateContainerOptions>,
                body,
            )
            .await
            .map_err(error::container_engine("container create"))?;
        if let Some(image_entrypoint) = handover {
            self.handovers
                .lock()
                .await
                .insert(created.id.clone(), image_entrypoint);
        }
        if let Some(carried) = carried {
            self.entrypoints
                .lock()
                .await
                .insert(created.id.clone(), carried);
        }
        Ok(ContainerId::new(created.id))
    }

    async fn start(&self, id: &ContainerId) -> Result<(), SandboxError> {
        self.upper.started(id.as_str());
        self.docker
            .start_container(id.as_str(), None)
            .await
            .map_err(error::container_engine("container start"))?;
        // A container started again (the verifier in the agent's stopped container) runs its
        // image's ENTRYPOINT again, and is waited on again as at its first start.
        let first = self.handovers.lock().await.remove(id.as_str());
        let handover = match first {
            Some(entrypoint) => Some(entrypoint),
            None => self
                .entrypoints
                .lock()
                .await
                .get(id.as_str())
                .cloned()
                .flatten(),
        };
        match handover {
            Some(entrypoint) => self.await_handover(id.as_str(), &entrypoint).await,
            None => Ok(()),
        }
    }

    async fn status(&self, id: &ContainerId) -> Result<ContainerStatus, SandboxError> {
        use bollard::models::HealthStatusEnum;
        let state = self.state(id.as_str()).await?;
        if !state.running.unwrap_or(false) {
            return Ok(ContainerStatus::Exited(state.exit_code.unwrap_or(-1)));
        }
        let health = state
            .health
            .and_then(|h| h.status)
            .and_then(|status| match status {
                HealthStatusEnum::STARTING => Some(Health::Starting),
                HealthStatusEnum::HEALTHY => Some(Health::Healthy),
                HealthStatusEnum::UNHEALTHY => Some(Health::Unhealthy),
                HealthStatusEnum::EMPTY | HealthStatusEnum::NONE => None,
            });
        Ok(ContainerStatus::Running { health })
    }

    async fn exec(&self, id: &ContainerId, spec: &ExecSpec) -> Result<ExecOutcome, SandboxError> {
        self.exec_inner(id.as_str(), spec).await
    }

    async fn upload(&self, id: &ContainerId, dest: &str, tar: Vec<u8>) -> Result<(), SandboxError> {
        let options = UploadToContainerOptionsBuilder::new().path(dest).build();
        self.put_archive(id, options, tar).await
    }

    /// Into the writable layer on this host (`sandbox/layer_write.rs`) of a container that
    /// will start with the keep-alive alone (its recorded ENTRYPOINT is arbiter's) and has
    /// never started (as the inspection says), when that layer is readable here and the
    /// archive only adds to it; one inspection (for the state, layers and mounts) instead
    /// of the engine's upload and its helper process.
    async fn upload_before_start(
        &self,
        id: &ContainerId,
        tar: &[u8],
    ) -> Result<bool, SandboxError> {
        let keepalive_only = matches!(self.entrypoints.lock().await.get(id.as_str()), Some(None));
        if !keepalive_only || !upper::engine_is_local() {
            return Ok(false);
        }
        let info = self.inspect(id.as_str()).await?;
        let created = matches!(
            info.state.as_ref().and_then(|s| s.status),
            Some(bollard::models::ContainerStateStatusEnum::CREATED)
        );
        let Some(layer) = upper::layer_of(&info).filter(|_| created) else {
            return Ok(false);
        };
        let tar = tar.to_vec();
        match tokio::task::spawn_blocking(move || layer.unpack_before_start(&tar)).await {
            Ok(Ok(written)) => Ok(written),
            // What was written is a part of the archive, which the engine's upload after the
            // start writes again whole (it replaces files and sets directories' attributes).
            Ok(Err(e)) => {
                tracing::warn!(%id, "writing the first upload into the writable layer: {e}; the engine uploads it");
                Ok(false)
            }
            Err(e) => {
                tracing::warn!(%id, "writing the first upload into the writable layer: {e}; the engine uploads it");
                Ok(false)
            }
        }
    }

    async fn upload_replacing(
        &self,
        id: &ContainerId,
        paths: &[&str],
        tar: Vec<u8>,
    ) -> Result<(), SandboxError> {
        // The engine's unpacking removes whatever is in the way of an entry (recursively)
        // unless both are directories, which it merges (`noOverwriteDirNonDir` off, as
        // here). So an empty regular file at each path first removes what the container has
        // there, whole, without running anything in it; the caller's entries then take its
        // place. The parents come first as directories (a parent the agent replaced by a
        // file or a symlink is replaced too).
        let refused = |message: String| SandboxError::Refused {
            op: "replace",
            message,
        };
        let head = crate::sandbox::tarball::replacement_stubs(paths).map_err(refused)?;
        let body = crate::sandbox::concat_archives(&[&head, &tar])
            .map_err(|e| refused(format!("building the archive: {e}")))?;
        let options = UploadToContainerOptionsBuilder::new()
            .path("/")
            .no_overwrite_dir_non_dir("false")
            .build();
        self.put_archive(id, options, body).await
    }

    async fn download(
        &self,
        id: &ContainerId,
        want: Download<'_>,
    ) -> Result<Fetched, SandboxError> {
        let Download {
            path,
            to,
            limit,
            extent,
        } = want;
        let build = match extent {
            Extent::Whole => layer::Layer::archive,
            Extent::Entry => layer::Layer::entry_archive,
        };
        if let Some(fetched) = self.archive_from_layer(id, build, path, to, limit).await {
            return Ok(fetched);
        }
        let got = self.engine_archive(id, want).await?;
        match extent {
            Extent::Whole => Ok(got),
            Extent::Entry => crate::sandbox::first_entry_of(got, to),
        }
    }

    async fn stop(&self, id: &ContainerId) -> Result<Stopped, SandboxError> {
        // An exec'd process killed by the OOM killer leaves the container running with
        // `OOMKilled` false; once the container has stopped the engine reports it, in the
        // same inspection that saw it stopped.
        let (state, info) = self.kill(id.as_str()).await?;
        self.upper.stopped(id.as_str(), &info);
        // A Docker container's filesystem outlives its processes: never lost.
        Ok(Stopped {
            oom_killed: state.oom_killed.unwrap_or(false),
            lost: None,
        })
    }

    /// A container restarted since [`Sandbox::stop`] saw it stopped (the snapshot verifier
    /// in the agent's container) needs the kill alone: its layers and mounts are known, and
    /// no OOM verdict is asked for. Any other is stopped as by `stop`.
    async fn halt(&self, id: &ContainerId) -> Result<(), SandboxError> {
        if self.upper.is_restarted(id.as_str()) {
            self.send_kill(id.as_str()).await?;
            self.upper.stopped_again(id.as_str());
            return Ok(());
        }
        self.stop(id).await.map(drop)
    }

    async fn disk_usage(
        &self,
        id: &ContainerId,
        count_files_to: u64,
    ) -> Result<Option<crate::sandbox::DiskUsage>, SandboxError> {
        upper::layer_usage(&self.docker, &self.upper, id.as_str(), count_files_to).await
    }

    async fn freeze(&self, id: &ContainerId, owner: &Owner) -> Result<FrozenId, SandboxError> {
        let options = CommitContainerOptionsBuilder::new()
            .container(id.as_str())
            .pause(false)
            .build();
        let config = ContainerConfig {
            labels: Some(owner.labels().into_iter().collect()),
            ..Default::default()
        };
        // A commit answers only once every byte is written: it gets its own deadline, not
        // the 120 s other requests have (a 10 GiB filesystem takes minutes on a slow disk).
        let response = self
            .docker
            .clone()
            .with_timeout(FREEZE_DEADLINE)
            .commit_container(options, config)
            .await
            .map_err(|e| match e {
                bollard::errors::Error::RequestTimeoutError => SandboxError::Timeout {
                    op: "docker commit",
                    seconds: FREEZE_DEADLINE.as_secs(),
                },
                e => SandboxError::from(DockerError::Engine {
                    op: "commit",
                    source: e,
                }),
            })?;
        // A commit carries the container's config: its ENTRYPOINT is the snapshot's.
        if let Some(carried) = self.entrypoints.lock().await.get(id.as_str()).cloned() {
            self.frozen_entrypoints
                .lock()
                .await
                .insert(response.id.clone(), carried);
        }
        Ok(FrozenId::new(response.id))
    }

    async fn changes(&self, id: &ContainerId) -> Result<Vec<Change>, SandboxError> {
        use bollard::models::ChangeType;
        // A stopped container's list from its layers on this host (see layer_changes.rs).
        if let Some(layer) = self.upper.layer_of_stopped(id.as_str()) {
            match tokio::task::spawn_blocking(move || layer.changes()).await {
                Ok(Ok(Some(list))) => return Ok(list),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => tracing::debug!(%id, "change list from the layers: {e}"),
                Err(e) => tracing::debug!(%id, "change list from the layers: {e}"),
            }
        }
        let list = self
            .docker
            .container_changes(id.as_str())
            .await
            .map_err(error::engine("container changes"))?;
        Ok(list
            .unwrap_or_default()
            .into_iter()
            .map(|c| Change {
                path: c.path,
                kind: match c.kind {
                    ChangeType::_0 => ChangeKind::Modified,
                    ChangeType::_1 => ChangeKind::Added,
                    ChangeType::_2 => ChangeKind::Deleted,
                },
            })
            .collect())
    }

    async fn remove(&self, resource: &Resource) -> Result<(), SandboxError> {
        match resource {
            Resource::Container(id) => {
                self.upper.forget(id.as_str());
                self.entrypoints.lock().await.remove(id.as_str());
                let options = RemoveContainerOptionsBuilder::new()
                    .force(true)
                    .v(true)
                    .build();
                match self
                    .docker
                    .remove_container(id.as_str(), Some(options))
                    .await
                {
                    Ok(()) => Ok(()),
                    Err(e) if matches!(status_of(&e), Some(404) | Some(409)) => Ok(()),
                    Err(e) => Err(SandboxError::from(DockerError::Engine {
                        op: "container remove",
                        source: e,
                    })),
                }
            }
            Resource::Frozen(FrozenId(id)) | Resource::Image(ImageRef(id)) => {
                self.frozen_entrypoints.lock().await.remove(id);
                let options = RemoveImageOptionsBuilder::new().force(true).build();
                match self.docker.remove_image(id, Some(options), None).await {
                    Ok(_) => Ok(()),
                    Err(e) if status_of(&e) == Some(404) => Ok(()),
                    Err(e) => Err(SandboxError::from(DockerError::Engine {
                        op: "image remove",
                        source: e,
                    })),
                }
            }
        }
    }

    // harbor-run (issue 13): GPU detection lives in sandbox/gpus.rs.
    async fn gpus(&self) -> Result<u32, SandboxError> {
        gpus::docker_gpus(&self.docker).await
    }

    async fn network_available(&self, network: Network) -> Result<Availability, SandboxError> {
        match network {
            Network::None | Network::Host => Ok(Availability::Available),
            Network::Bridge => match self.docker.inspect_network("bridge", None).await {
                Ok(_) => Ok(Availability::Available),
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => Ok(Availability::Unavailable(
                    "this Docker engine has no default bridge network; run offline with --network none (job config: network: none) or on an engine that has one".to_string(),
                )),
                Err(e) => Err(error::engine("network inspect")(e)),
            },
        }
    }

    async fn image_config(&self, image: &ImageRef) -> Result<ImageConfig, SandboxError> {
        let facts = self.image_facts_of(image.as_str()).await?;
        Ok(ImageConfig {
            env: facts.env,
            workdir: facts.workdir,
            user: facts.user,
        })
    }

    async fn image_id(&self, image: &ImageRef) -> Result<Option<String>, SandboxError> {
        Ok(self.image_facts_of(image.as_str()).await?.id)
    }

    /// Inside the container's network namespace (its `State.Pid`), which needs root and the
    /// engine on this host: a remote `DOCKER_HOST` is refused with the reason.
    async fn loopback_listener(
        &self,
        id: &ContainerId,
        port: u16,
    ) -> Result<std::net::TcpListener, SandboxError> {
        let refused = |message: String| SandboxError::Refused {
            op: "docker loopback listener",
            message,
        };
        if let Ok(host) = std::env::var("DOCKER_HOST")
            && !host.is_empty()
            && !host.starts_with("unix://")
        {
            return Err(refused(format!(
                "DOCKER_HOST={host} is not a local socket: the model gateway listens inside the container's network namespace, which needs the engine on this host"
            )));
        }
        let state = self.state(id.as_str()).await?;
        let pid = state
            .pid
            .filter(|p| *p > 0)
            .and_then(|p| u32::try_from(p).ok())
            .ok_or_else(|| refused("the container has no running process".to_string()))?;
        tokio::task::spawn_blocking(move || crate::gateway::listen_in_netns(pid, port))
            .await
            .map_err(|e| refused(e.to_string()))?
            .map_err(|e| refused(e.to_string()))
    }

    fn harness_argv(&self, applet: &str, args: &[&str]) -> Vec<String> {
        match self.toolbox {
            Some(_) => crate::sandbox::toolbox::toolbox_argv(applet, args),
            None => {
                let mut argv = vec![applet.to_string()];
                argv.extend(args.iter().map(|a| a.to_string()));
                argv
            }
        }
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Listed>, SandboxError> {
        let filters = selector_filter(selector);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let containers = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(error::engine("container list"))?;
        let options = ListImagesOptionsBuilder::new()
            .all(false)
            .filters(&filters)
            .build();
        let images = self
            .docker
            .list_images(Some(options))
            .await
            .map_err(error::engine("image list"))?;
        let mut found: Vec<Listed> = containers
            .into_iter()
            .map(|c| Listed {
                resource: Resource::Container(ContainerId::new(c.id.unwrap_or_default())),
                labels: c.labels.unwrap_or_default().into_iter().collect(),
            })
            .collect();
        found.extend(images.into_iter().map(|i| {
            let labels: BTreeMap<String, String> = i.labels.into_iter().collect();
            // Frozen filesystems carry their trial's owner; cached environments do not. A commit
            // inherits its image's labels, so a snapshot of a built environment also carries
            // `arbiter.cache`: the trial label decides.
            let resource = if labels.contains_key(crate::sandbox::LABEL_CACHE)
                && !labels.contains_key(crate::sandbox::LABEL_TRIAL)
            {
                Resource::Image(ImageRef::new(i.id))
            } else {
                Resource::Frozen(FrozenId::new(i.id))
            };
            Listed { resource, labels }
        }));
        Ok(found)
    }
}

/// The engine's request for `gpus` GPUs (`docker run --gpus N`): any driver that has them.
fn device_requests(gpus: u32) -> Option<Vec<bollard::models::DeviceRequest>> {
    (gpus > 0).then(|| {
        vec![bollard::models::DeviceRequest {
            driver: Some(String::new()),
            count: Some(i64::from(gpus)),
            capabilities: Some(vec![vec!["gpu".to_string()]]),
            ..Default::default()
        }]
    })
}

/// How long a freeze (commit) may take before it is a typed timeout (an infra error).
const FREEZE_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// How long a copy out of a container may go without a byte.
const COPY_IDLE_DEADLINE: Duration = Duration::from_secs(120);

#[cfg(test)]
mod tests {
    use super::device_requests;

    /// What the engine receives for a task's `gpus`: `--gpus N`'s request, and none for 0.
    #[test]
    fn gpus_become_the_engines_device_request() {
        assert_eq!(device_requests(0), None);
        let requests = device_requests(2).expect("a request");
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].count, Some(2));
        assert_eq!(
            requests[0].capabilities,
            Some(vec![vec!["gpu".to_string()]])
        );
    }
}
