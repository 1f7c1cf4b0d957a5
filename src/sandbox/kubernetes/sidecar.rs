//! Compose sidecars as *ephemeral containers* of the agent's pod (SPEC §2.1 on Kubernetes).
//!
//! On Docker a sidecar is its own container that joins the agent container's network
//! namespace, created and started after the agent's container, in `depends_on` order. A pod's
//! regular containers are fixed when the pod is created and start together, so they cannot
//! follow that order (nor know the sidecars, which the trial creates one by one after the
//! agent's start). Ephemeral containers can: each is added to the running pod through the
//! `pods/ephemeralcontainers` subresource when the trial starts it, shares the pod's network
//! namespace (its loopback, its `/etc/hosts` with the service names from `hostAliases`), runs
//! its own image, command, env and working dir, and can be exec'd into. What they cannot do,
//! and how that is met:
//! - no `resources`: a sidecar runs inside the pod's cgroup, under the pod's limits (the sum
//!   of its regular containers'), not under limits of its own as on Docker;
//! - no probes: compose healthchecks run here, as execs, with Docker's state machine
//!   ([`HealthTracker`]), polled through `Sandbox::status` as `sidecars.rs` polls Docker;
//! - no restart and no removal (they end with their pod); a stop is the harness killing the
//!   service: PID 1 of the ephemeral container is a harness supervisor (the toolbox's shell)
//!   that runs the service (the image's ENTRYPOINT/CMD under the service's
//!   `entrypoint`/`command`, as the service's `user`, through the exec wrapper) as its child
//!   and exits with its status; `kill -KILL -1` from an exec in that container ends the
//!   service, so the container ends with 137 as a stopped Docker container does. (A service
//!   that were PID 1 itself could not be killed from inside its PID namespace, and sharing
//!   the agent's PID namespace would let the agent see and signal the sidecars — Docker does
//!   not share it.)
//!
//! A sidecar's id is `<pod>/<container>`: every exec path splits it ([`target`]).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ContainerState, EnvVar, EphemeralContainer, Pod, VolumeMount};
use kube::api::{Patch, PatchParams};

use super::KubernetesSandbox;
use super::error::{KubeError, api_status};
use super::exec::{RawEnd, Sink, wrapped};
use super::lifecycle::{FATAL_WAITING, PodState};
use super::names::TOOLBOX_VOLUME;
use super::names::root;
use super::names::{dns_chars, random_suffix};
use crate::sandbox::toolbox::{TOOLBOX_MOUNT, keepalive_argv, toolbox_argv};
use crate::sandbox::{
    Base, ContainerId, ContainerSpec, ContainerStatus, ExecSpec, Fault, Health, HealthCommand,
    HealthSpec, LABEL_SERVICE, Process, SandboxError, Stopped,
};

/// PID 1 of a sidecar: runs its argv (`"$@"`) as a child and ends with the child's status.
const SUPERVISE: &str = "\"$@\" & c=$!; wait $c";
/// How long a sidecar may take to run (a pull, the kubelet's start).
const START_DEADLINE: Duration = Duration::from_secs(300);
/// How long a stopped sidecar may take to be reported ended.
const STOP_WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(250);

pub(super) use super::names::{is_sidecar, target};

/// A sidecar created (its container described) and perhaps started.
#[derive(Debug, Clone)]
pub(super) struct SidecarState {
    pod: String,
    container: EphemeralContainer,
    health: Option<HealthSpec>,
    tracker: HealthTracker,
}

/// Docker's healthcheck state machine: a check every `interval` (the first one `interval`
/// after the start), `timeout` per check; failures during `start_period` do not count until
/// the first success; `retries` failures in a row make it unhealthy, a success healthy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct HealthTracker {
    started: Option<Instant>,
    last: Option<Instant>,
    failures: u32,
    health: Option<Health>,
}

/// Docker's defaults.
const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_RETRIES: u32 = 3;

impl HealthTracker {
    fn start(&mut self, now: Instant) {
        *self = HealthTracker {
            started: Some(now),
            health: Some(Health::Starting),
            ..HealthTracker::default()
        };
    }

    /// Whether a check is due at `now`.
    fn due(&self, spec: &HealthSpec, now: Instant) -> bool {
        let interval = spec.interval.unwrap_or(DEFAULT_INTERVAL);
        match self.last.or(self.started) {
            Some(since) => now.duration_since(since) >= interval,
            None => false,
        }
    }

    /// Count a check that ended at `now`.
    fn record(&mut self, spec: &HealthSpec, passed: bool, now: Instant) {
        self.last = Some(now);
        if passed {
            self.failures = 0;
            self.health = Some(Health::Healthy);
            return;
        }
        let in_start = self.health == Some(Health::Starting)
            && self.started.is_some_and(|s| {
                now.duration_since(s) < spec.start_period.unwrap_or(Duration::ZERO)
            });
        if in_start {
            return;
        }
        self.failures += 1;
        if self.failures >= spec.retries.unwrap_or(DEFAULT_RETRIES).max(1) {
            self.health = Some(Health::Unhealthy);
        }
    }
}

/// The exec wrapper's argv that runs `argv` as `user` (`None`: `default_user`), with no
/// environment or working dir of its own.
fn wrapped_argv(
    argv: Vec<String>,
    user: Option<String>,
    default_user: Option<&str>,
) -> Vec<String> {
    let spec = ExecSpec {
        argv,
        env: Vec::new(),
        user,
        workdir: None,
        stdout: None,
        stderr: None,
        cap_bytes: 0,
        timeout: None,
        grace: Duration::ZERO,
    };
    wrapped(
        &spec,
        default_user,
        (None, false, false),
        Default::default(),
    )
    .0
}

/// The ephemeral container's name: `svc-<service>-<random>`, a DNS label.
fn container_name(service: &str) -> String {
    let readable: String = dns_chars(service).take(40).collect();
    let readable = readable.trim_matches('-');
    if readable.is_empty() {
        format!("svc-{}", random_suffix())
    } else {
        format!("svc-{readable}-{}", random_suffix())
    }
}

/// The service's argv as Docker runs it: its `entrypoint` (which drops the image's CMD) or
/// the image's ENTRYPOINT, then its `command` or (without an `entrypoint` of its own) the
/// image's CMD.
pub(super) fn service_argv(
    process: &Process,
    image_entrypoint: &[String],
    image_cmd: &[String],
) -> Vec<String> {
    match process {
        Process::Keepalive => keepalive_argv(),
        Process::ImageEntrypoint => {
            let mut argv = image_entrypoint.to_vec();
            argv.extend(keepalive_argv());
            argv
        }
        Process::Service {
            entrypoint,
            command,
        } => {
            let (mut argv, cmd) = match entrypoint {
                Some(e) => (e.clone(), command.clone().unwrap_or_default()),
                None => (
                    image_entrypoint.to_vec(),
                    command.clone().unwrap_or_else(|| image_cmd.to_vec()),
                ),
            };
            argv.extend(cmd);
            argv
        }
    }
}

/// The ephemeral container of a sidecar: the supervisor running the wrapped service argv.
fn ephemeral(
    name: &str,
    image: &str,
    spec: &ContainerSpec,
    argv: Vec<String>,
) -> EphemeralContainer {
    let child_argv = wrapped_argv(argv, spec.start.user.clone(), None);
    let mut command = toolbox_argv("sh", &["-c", SUPERVISE, "arbiter-sidecar"]);
    command.extend(child_argv);
    EphemeralContainer {
        name: name.to_string(),
        image: Some(image.to_string()),
        command: Some(command),
        env: Some(
            spec.env
                .iter()
                .map(|(k, v)| EnvVar {
                    name: k.clone(),
                    value: Some(v.clone()),
                    value_from: None,
                })
                .collect(),
        ),
        working_dir: spec.workdir.clone(),
        security_context: Some(root()),
        volume_mounts: Some(vec![VolumeMount {
            name: TOOLBOX_VOLUME.to_string(),
            mount_path: TOOLBOX_MOUNT.to_string(),
            read_only: Some(true),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// The state of ephemeral container `name` in `pod` (`None`: not reported yet).
fn state_of(pod: &Pod, name: &str) -> Option<ContainerState> {
    pod.status
        .as_ref()?
        .ephemeral_container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == name)?
        .state
        .clone()
}

impl KubernetesSandbox {
    /// [`Sandbox::create`](crate::sandbox::Sandbox::create) of a container that joins
    /// another's network namespace: described now, added to the pod by its start.
    pub(super) async fn create_sidecar(
        &self,
        spec: &ContainerSpec,
        join: &ContainerId,
    ) -> Result<ContainerId, SandboxError> {
        let unsupported = |op| SandboxError::Unsupported {
            op,
            backend: "kubernetes",
        };
        let Base::Image(image) = &spec.base else {
            return Err(unsupported("a sidecar of a frozen filesystem"));
        };
        if !spec.mounts.is_empty() {
            return Err(unsupported("host directories mounted into a sidecar"));
        }
        let pod = target(join.as_str()).0.to_string();
        let service = spec
            .owner
            .extra
            .get(LABEL_SERVICE)
            .cloned()
            .unwrap_or_else(|| spec.owner.role.as_str().to_string());
        let needs_image_process = match &spec.start.process {
            Process::Keepalive => false,
            Process::ImageEntrypoint => true,
            Process::Service {
                entrypoint,
                command,
            } => entrypoint.is_none() || command.is_none(),
        };
        let (entrypoint, cmd) = if needs_image_process {
            self.image_process(image.as_str()).await.map_err(|why| {
                SandboxError::Refused {
                    op: "sidecar",
                    message: format!(
                        "compose service {service}: the ENTRYPOINT and CMD of {image} are unknown ({why}); give the service an entrypoint or a command"
                    ),
                }
            })?
        } else {
            (Vec::new(), Vec::new())
        };
        let argv = service_argv(&spec.start.process, &entrypoint, &cmd);
        if argv.is_empty() {
            return Err(SandboxError::Refused {
                op: "sidecar",
                message: format!(
                    "compose service {service}: no command to run (the image {image} has no ENTRYPOINT or CMD)"
                ),
            });
        }
        let default_user = match &spec.start.user {
            Some(user) => Some(user.clone()),
            None => self.image_user(image.as_str()).await,
        };
        let mut with_user = spec.clone();
        with_user.start.user = default_user.clone();
        let name = container_name(&service);
        let container = ephemeral(&name, image.as_str(), &with_user, argv);
        let id = format!("{pod}/{name}");
        self.states.lock().await.insert(
            id.clone(),
            PodState {
                default_user,
                started: false,
                network: None,
                handover: false,
                mounts: Vec::new(),
                replay: None,
                facts: None,
                running: false,
                proof: None,
                held: None,
                unconfirmed: None,
                walk_on_stop: false,
                readable: Default::default(),
            },
        );
        self.sidecars.lock().await.insert(
            id.clone(),
            SidecarState {
                pod,
                container,
                health: spec.start.healthcheck.clone().filter(|h| h.test.is_some()),
                tracker: HealthTracker::default(),
            },
        );
        Ok(ContainerId::new(id))
    }

    /// The image's ENTRYPOINT and CMD, from the local engine that built it (or has it).
    async fn image_process(&self, image: &str) -> Result<(Vec<String>, Vec<String>), String> {
        let engine = self.engine().await.map_err(|e| e.to_string())?;
        let inspected = engine
            .client()
            .inspect_image(image)
            .await
            .map_err(|e| format!("the local engine does not have it: {e}"))?;
        let config = inspected.config.unwrap_or_default();
        Ok((
            config.entrypoint.unwrap_or_default(),
            config.cmd.unwrap_or_default(),
        ))
    }

    /// [`Sandbox::start`](crate::sandbox::Sandbox::start) of a sidecar: added to its pod,
    /// then watched until it runs (or has already ended: a one-shot service).
    pub(super) async fn start_sidecar(&self, id: &ContainerId) -> Result<(), SandboxError> {
        let Some(state) = self.sidecars.lock().await.get(id.as_str()).cloned() else {
            return Err(KubeError::PodGone {
                pod: id.to_string(),
                why: "no such sidecar".to_string(),
            }
            .into());
        };
        let name = state.container.name.clone();
        let patch = serde_json::json!({
            "spec": { "ephemeralContainers": [state.container] }
        });
        self.pods()
            .patch_ephemeral_containers(
                &state.pod,
                &PatchParams::default(),
                &Patch::Strategic(patch),
            )
            .await
            .map_err(|e| match api_status(&e) {
                Some(404) => SandboxError::from(KubeError::PodGone {
                    pod: state.pod.clone(),
                    why: "not found".to_string(),
                }),
                _ => KubeError::api("ephemeral container patch")(e).into(),
            })?;
        let started = Instant::now();
        loop {
            let pod = self
                .pods()
                .get(&state.pod)
                .await
                .map_err(KubeError::api("pod get"))?;
            match state_of(&pod, &name) {
                Some(ContainerState {
                    running: Some(_), ..
                })
                | Some(ContainerState {
                    terminated: Some(_),
                    ..
                }) => break,
                Some(ContainerState {
                    waiting: Some(w), ..
                }) if FATAL_WAITING.contains(&w.reason.as_deref().unwrap_or("")) => {
                    let why = format!(
                        "{}: {}",
                        w.reason.unwrap_or_default(),
                        w.message.unwrap_or_default()
                    );
                    let events = self.events_of(&state.pod).await;
                    return Err(if why.contains("Image") {
                        KubeError::Pull {
                            image: state.container.image.clone().unwrap_or_default(),
                            why,
                            events,
                        }
                    } else {
                        KubeError::NotStarted {
                            pod: id.to_string(),
                            why,
                            events,
                        }
                    }
                    .into());
                }
                _ => {}
            }
            if started.elapsed() >= START_DEADLINE {
                return Err(KubeError::NotStarted {
                    pod: id.to_string(),
                    why: format!("not running after {}s", START_DEADLINE.as_secs()),
                    events: self.events_of(&state.pod).await,
                }
                .into());
            }
            tokio::time::sleep(POLL).await;
        }
        let now = Instant::now();
        if let Some(s) = self.sidecars.lock().await.get_mut(id.as_str()) {
            s.tracker.start(now);
        }
        if let Some(s) = self.states.lock().await.get_mut(id.as_str()) {
            s.started = true;
        }
        Ok(())
    }

    /// The ephemeral container's state; a pod that is gone is [`KubeError::PodGone`].
    async fn sidecar_state(&self, id: &str) -> Result<Option<ContainerState>, SandboxError> {
        let (pod, name) = target(id);
        Ok(state_of(&self.get_pod(pod).await?, name))
    }

    /// [`Sandbox::status`](crate::sandbox::Sandbox::status) of a sidecar: how it ended, or
    /// that it runs and (with a healthcheck) its health, running a check when one is due.
    pub(super) async fn sidecar_status(
        &self,
        id: &ContainerId,
    ) -> Result<ContainerStatus, SandboxError> {
        match self.sidecar_state(id.as_str()).await? {
            Some(ContainerState {
                terminated: Some(t),
                ..
            }) => return Ok(ContainerStatus::Exited(i64::from(t.exit_code))),
            Some(ContainerState {
                running: Some(_), ..
            }) => {}
            _ => return Ok(ContainerStatus::Exited(-1)),
        }
        let Some(state) = self.sidecars.lock().await.get(id.as_str()).cloned() else {
            return Ok(ContainerStatus::Running { health: None });
        };
        let Some(spec) = state.health.clone() else {
            return Ok(ContainerStatus::Running { health: None });
        };
        if state.tracker.due(&spec, Instant::now()) {
            let passed = self.health_check(id.as_str(), &spec).await?;
            if let Some(s) = self.sidecars.lock().await.get_mut(id.as_str()) {
                s.tracker.record(&spec, passed, Instant::now());
            }
        }
        let health = self
            .sidecars
            .lock()
            .await
            .get(id.as_str())
            .and_then(|s| s.tracker.health);
        Ok(ContainerStatus::Running { health })
    }

    /// One run of the healthcheck in the sidecar, as its user, killed at its timeout by the
    /// toolbox's `timeout` (the exec deadline rule would kill the service too).
    async fn health_check(&self, id: &str, spec: &HealthSpec) -> Result<bool, SandboxError> {
        let argv = match &spec.test {
            Some(HealthCommand::Exec(argv)) => argv.clone(),
            Some(HealthCommand::Shell(cmd)) => {
                vec!["/bin/sh".to_string(), "-c".to_string(), cmd.clone()]
            }
            None => return Ok(true),
        };
        let timeout = spec
            .timeout
            .unwrap_or(DEFAULT_TIMEOUT)
            .max(Duration::from_secs(1));
        let user = self.default_user(id).await;
        let inner = wrapped_argv(argv, None, user.as_deref());
        let secs = timeout.as_secs_f64().ceil().to_string();
        let mut argv = toolbox_argv("timeout", &["-s", "KILL", &secs]);
        argv.extend(inner);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let end = self
            .run(
                id,
                &argv,
                None,
                &mut Sink::Memory {
                    buf: &mut out,
                    cap: 4096,
                },
                &mut Sink::Memory {
                    buf: &mut err,
                    cap: 4096,
                },
                (
                    Some(timeout + Duration::from_secs(30)),
                    Duration::from_secs(1),
                ),
            )
            .await?;
        tracing::debug!(sidecar = id, ?end, "healthcheck");
        Ok(end == RawEnd::Exited(0))
    }

    /// [`Sandbox::stop`](crate::sandbox::Sandbox::stop) of a sidecar: its service killed (the
    /// supervisor then ends with 137), reported once the kubelet sees it ended.
    pub(super) async fn stop_sidecar(&self, id: &ContainerId) -> Result<Stopped, SandboxError> {
        let running = |s: &Option<ContainerState>| {
            matches!(
                s,
                Some(ContainerState {
                    running: Some(_),
                    ..
                })
            )
        };
        let mut state = self.sidecar_state(id.as_str()).await?;
        if !running(&state) {
            return Ok(Stopped::default());
        }
        let started = Instant::now();
        while running(&state) && started.elapsed() < STOP_WAIT {
            self.signal_all(id.as_str(), "-KILL").await;
            tokio::time::sleep(POLL).await;
            state = self.sidecar_state(id.as_str()).await?;
        }
        if running(&state) {
            tracing::warn!(sidecar = %id, "still reported running {}s after its service was killed", STOP_WAIT.as_secs());
        }
        Ok(Stopped::default())
    }

    /// [`Sandbox::remove`](crate::sandbox::Sandbox::remove) of a sidecar: an ephemeral
    /// container cannot be removed from its pod, so its service is killed (it goes with the
    /// pod); a pod already gone is fine.
    pub(super) async fn remove_sidecar(&self, id: &ContainerId) -> Result<(), SandboxError> {
        self.sidecars.lock().await.remove(id.as_str());
        self.states.lock().await.remove(id.as_str());
        match self.sidecar_state(id.as_str()).await {
            Ok(Some(ContainerState {
                running: Some(_), ..
            })) => {
                self.signal_all(id.as_str(), "-KILL").await;
                Ok(())
            }
            Ok(_) => Ok(()),
            // The pod is gone (PodGone, a 404): so is the sidecar.
            Err(SandboxError::Backend {
                fault: Fault::Gone, ..
            }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::kubernetes::names::MAIN;
    use crate::sandbox::kubernetes::pod::host_aliases;

    fn spec(interval: u64, start_period: u64, retries: u32) -> HealthSpec {
        HealthSpec {
            test: Some(HealthCommand::Shell("true".into())),
            interval: Some(Duration::from_secs(interval)),
            timeout: None,
            start_period: Some(Duration::from_secs(start_period)),
            retries: Some(retries),
        }
    }

    #[test]
    fn health_follows_dockers_state_machine() {
        let t0 = Instant::now();
        let s = spec(1, 5, 2);
        let mut h = HealthTracker::default();
        assert!(!h.due(&s, t0), "nothing is due before the start");
        h.start(t0);
        assert_eq!(h.health, Some(Health::Starting));
        assert!(
            !h.due(&s, t0),
            "the first check comes an interval after the start"
        );
        assert!(h.due(&s, t0 + Duration::from_secs(1)));
        // Failures inside the start period do not count.
        for i in 1..=4 {
            h.record(&s, false, t0 + Duration::from_secs(i));
        }
        assert_eq!(h.health, Some(Health::Starting));
        assert_eq!(h.failures, 0);
        h.record(&s, true, t0 + Duration::from_secs(5));
        assert_eq!(h.health, Some(Health::Healthy));
        h.record(&s, false, t0 + Duration::from_secs(6));
        assert_eq!(h.health, Some(Health::Healthy), "one failure of two");
        h.record(&s, false, t0 + Duration::from_secs(7));
        assert_eq!(h.health, Some(Health::Unhealthy));
        h.record(&s, true, t0 + Duration::from_secs(8));
        assert_eq!(h.health, Some(Health::Healthy));
        assert!(!h.due(&s, t0 + Duration::from_millis(8500)));
    }

    #[test]
    fn after_the_start_period_failures_count() {
        let t0 = Instant::now();
        let s = spec(1, 0, 3);
        let mut h = HealthTracker::default();
        h.start(t0);
        for i in 1..=3 {
            h.record(&s, false, t0 + Duration::from_secs(i));
        }
        assert_eq!(h.health, Some(Health::Unhealthy));
    }

    #[test]
    fn the_service_argv_is_what_docker_runs() {
        let ep = vec!["/entry".to_string()];
        let cmd = vec!["serve".to_string()];
        let svc = |e: Option<&[&str]>, c: Option<&[&str]>| Process::Service {
            entrypoint: e.map(|w| w.iter().map(|s| s.to_string()).collect()),
            command: c.map(|w| w.iter().map(|s| s.to_string()).collect()),
        };
        assert_eq!(
            service_argv(&svc(None, None), &ep, &cmd),
            ["/entry", "serve"]
        );
        assert_eq!(
            service_argv(&svc(None, Some(&["x"])), &ep, &cmd),
            ["/entry", "x"]
        );
        assert_eq!(
            service_argv(&svc(Some(&["sh"]), None), &ep, &cmd),
            ["sh"],
            "an entrypoint of its own drops the image's CMD"
        );
        assert_eq!(
            service_argv(&svc(Some(&["sh"]), Some(&["-c", "y"])), &ep, &cmd),
            ["sh", "-c", "y"]
        );
    }

    #[test]
    fn ids_split_into_pod_and_container_and_names_are_labels() {
        assert_eq!(target("p/svc-web-1"), ("p", "svc-web-1"));
        assert_eq!(target("p"), ("p", MAIN));
        let name = container_name("My_DB");
        assert!(name.starts_with("svc-my-db-"), "{name}");
        assert!(name.len() <= 63);
        let aliases = host_aliases(&[
            ("web".into(), "127.0.0.1".into()),
            ("db".into(), "127.0.0.1".into()),
        ])
        .unwrap();
        assert_eq!(aliases.len(), 1);
        assert_eq!(aliases[0].hostnames.as_deref().unwrap(), ["web", "db"]);
        assert!(host_aliases(&[]).is_none());
    }
}
