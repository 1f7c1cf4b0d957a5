//! A pod's life: create (the namespace's deny-all policy for network `none` in place first),
//! start (a watch until Running, failing with the pod's events), the proofs before the agent
//! starts, stop (every process but PID 1 killed; the OOM verdict), status, remove, list.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerState, Event, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use tokio::sync::OnceCell;

use super::KubernetesSandbox;
use super::ended::{Ended, ended};
use super::error::{KubeError, api_status};
use super::names::{annotated_labels, label_selector, pod_name, random_suffix};
use super::pod::{ANNOTATION_USER, MAIN, PodPlan, no_network_policy, pod_for};
use super::proof::{self, Answer, Proofs, no_network_proof};
use crate::sandbox::handover::HANDOVER_WAIT;
use crate::sandbox::{
    Base, ContainerId, ContainerSpec, ContainerStatus, FrozenId, Listed, Mount, Network, Process,
    Resource, SandboxError, Selector,
};

/// How long a pod may take to run (scheduling, pulls, init containers).
pub(super) const START_DEADLINE: Duration = Duration::from_secs(300);

/// The pause before a pod watch that failed is polled again (the watcher then re-lists).
pub(super) const WATCH_RETRY_PAUSE: Duration = Duration::from_millis(500);

/// How long a pod's status may take to report that its container ended.
const SETTLE_WAIT: Duration = Duration::from_secs(30);

/// Waiting reasons that will not fix themselves (a pod's containers' and ephemeral ones').
pub(super) const FATAL_WAITING: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// What arbiter knows of one of its pods.
#[derive(Debug, Clone, Default)]
pub(super) struct PodState {
    /// The user an exec without one runs as.
    pub default_user: Option<String>,
    /// Started once (a second start is the snapshot verifier in the agent's own pod).
    pub started: bool,
    pub network: Option<Network>,
    /// The image's ENTRYPOINT runs first and must hand over to the keep-alive.
    pub handover: bool,
    /// Host directories of the spec (mounts.rs: the read-write ones are seeded and read back).
    pub mounts: Vec<Mount>,
    /// A pod of this frozen filesystem: replayed at the start, before PID 1 goes on.
    pub replay: Option<FrozenId>,
    /// Its node, image and owner, as the watch saw it running (the change set's facts).
    pub facts: Option<super::changes::PodFacts>,
    /// A claimed warm pod the claim's answer showed running (with its facts): its start
    /// needs no watch.
    pub running: bool,
    /// The proofs its start left to its first exec (`ensure_proven`): set once made.
    pub proof: Option<(Proofs, Arc<OnceCell<()>>)>,
    /// An upload held for its next command (`carry.rs`).
    pub held: Option<super::carried::HeldUpload>,
    /// The watch saw its init containers done and its main container being started, not
    /// yet running (`await_running`): its first exec confirms it (`exec.rs`: a claimed
    /// command, or the toolbox's `true` before any other).
    pub unconfirmed: Option<Unconfirmed>,
    /// An agent's pod not stopped yet: its stop sends the change set's walk along.
    pub walk_on_stop: bool,
    /// Set once a pod read before its start runs (and was replayed): `await_started` waits
    /// for it once however many reads ask at once.
    pub readable: Arc<OnceCell<()>>,
}

/// A pod handed over before its main container was seen running.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unconfirmed {
    /// When the watch saw its main container being started.
    pub since: tokio::time::Instant,
    /// How long after `since` the last exec that found it not running yet was answered.
    pub too_soon_after: Option<Duration>,
}

impl Unconfirmed {
    pub(super) fn since(since: tokio::time::Instant) -> Unconfirmed {
        Unconfirmed {
            since,
            too_soon_after: None,
        }
    }
}

/// The pod handed over before the API shows it running, as last seen: its image id is known
/// only once it runs, so an image by tag leaves the change set's facts to a later read
/// (`facts`); a digest is its own id.
fn handed_over(last: Option<Pod>) -> Pod {
    let mut p = last.unwrap_or_default();
    if !p.spec.as_ref().is_some_and(main_by_digest) {
        p.spec = None;
    }
    p
}

impl KubernetesSandbox {
    /// [`Sandbox::create`](crate::sandbox::Sandbox::create).
    pub(super) async fn create_pod(
        &self,
        spec: &ContainerSpec,
    ) -> Result<ContainerId, SandboxError> {
        self.create_pod_on(spec, None).await
    }

    /// A pod of `spec`, on `node` when given (a probe of an image beside a trial's pod).
    pub(super) async fn create_pod_on(
        &self,
        spec: &ContainerSpec,
        node: Option<&str>,
    ) -> Result<ContainerId, SandboxError> {
        // The first pod starts the watch of Started events (started.rs).
        self.started.begin(Api::namespaced(
            self.client.clone(),
            &self.resolved.namespace,
        ));
        // A frozen filesystem: a pod of its base image, replayed at the start (frozen.rs).
        let (of_base, command, replay) = match &spec.base {
            Base::Frozen(frozen) => {
                let (base, command) = self.frozen_start(spec, frozen).await?;
                (Some(base), Some(command), Some(frozen.clone()))
            }
            Base::Image(_) => (None, None, None),
        };
        let spec = of_base.as_ref().unwrap_or(spec);
        let Base::Image(image) = &spec.base else {
            return Err(SandboxError::Unsupported {
                op: "a container of a frozen filesystem",
                backend: "kubernetes",
            });
        };
        let toolbox = self.toolbox_maps().await?;
        let default_user = self.image_user(image.as_str()).await;
        let name = pod_name(&spec.owner.trial, spec.owner.role, &random_suffix());
        let mounts = self.plan_mounts(&spec.mounts).await?;
        let mut pod = pod_for(&PodPlan {
            name: &name,
            image: image.as_str(),
            toolbox: &toolbox,
            spec,
            resolved: &self.resolved,
            default_user: default_user.as_deref(),
            mounts: &mounts,
        })?;
        if let Some(pod_spec) = pod.spec.as_mut() {
            if let Some(node) = node {
                // A probe beside a trial's pod: it must fit on that node even when the trial
                // pods fill it, so it asks for nothing (best effort; it only walks or hashes).
                pod_spec.affinity = Some(super::changes::pinned_to(node));
                for c in pod_spec
                    .containers
                    .iter_mut()
                    .chain(pod_spec.init_containers.iter_mut().flatten())
                {
                    c.resources = None;
                }
            }
            if let (Some(command), Some(main)) = (command, pod_spec.containers.first_mut()) {
                main.command = Some(command);
                main.args = None;
            }
        }
        if spec.network == Network::None && self.policies_allowed() {
            self.ensure_no_network_policy().await;
        }
        // A warm pod of the same spec, claimed (warm.rs): no slot, it was created already.
        if self.warm.enabled()
            && node.is_none()
            && replay.is_none()
            && spec.mounts.is_empty()
            && spec.owner.role == crate::sandbox::Role::Agent
            && let Some(got) = self.warm.claim(&pod).await
        {
            let (name, claimed, by_event) = (got.name, got.pod, got.by_event);
            // Offered at its Started event, or once its main container was being started
            // (warm.rs): the claim's answer may not show it running yet; in the second case
            // its first exec asks again while it does not run.
            let seen_running = start_verdict(&claimed) == Some(Ok(()));
            let starting = !seen_running && (by_event || main_starting(&claimed));
            let facts = (seen_running || claimed.spec.as_ref().is_some_and(main_by_digest))
                .then(|| super::changes::facts_of(&claimed))
                .flatten();
            let running = (seen_running || starting) && facts.is_some();
            let unconfirmed = starting && running && !by_event;
            if unconfirmed {
                self.early_wait.handed_over();
            }
            self.states.lock().await.insert(
                name.clone(),
                PodState {
                    default_user: spec.start.user.clone().or(default_user),
                    started: false,
                    network: Some(spec.network),
                    handover: spec.start.process == Process::ImageEntrypoint,
                    mounts: Vec::new(),
                    replay: None,
                    facts,
                    running,
                    proof: None,
                    held: None,
                    unconfirmed: unconfirmed
                        .then(|| Unconfirmed::since(tokio::time::Instant::now())),
                    walk_on_stop: true,
                    readable: Arc::default(),
                },
            );
            return Ok(ContainerId::new(name));
        }
        // A start slot first (the start-rate cap): held until the pod runs or is removed.
        let slot = self.slots.take().await;
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .map_err(KubeError::api("pod create"))?;
        self.slots.hold(&name, slot).await;
        let state = PodState {
            default_user: spec.start.user.clone().or(default_user),
            started: false,
            network: Some(spec.network),
            handover: spec.start.process == Process::ImageEntrypoint,
            mounts: spec.mounts.clone(),
            replay,
            facts: None,
            running: false,
            proof: None,
            held: None,
            unconfirmed: None,
            walk_on_stop: spec.owner.role == crate::sandbox::Role::Agent,
            readable: Arc::default(),
        };
        self.states.lock().await.insert(name.clone(), state);
        Ok(ContainerId::new(name))
    }

    /// The namespace's deny-all policy of network-`none` pods ([`no_network_policy`]), made
    /// or set right once per process, before its first such pod. The pods' interfaces are
    /// down either way: a policy that cannot be made is warned about, not fatal.
    async fn ensure_no_network_policy(&self) {
        self.no_network_policy
            .get_or_init(|| async {
                let api: Api<NetworkPolicy> =
                    Api::namespaced(self.client.clone(), &self.resolved.namespace);
                let want = no_network_policy();
                let name = super::names::NO_NETWORK_POLICY;
                let done = match api.create(&PostParams::default(), &want).await {
                    Ok(_) => Ok(()),
                    Err(e) if api_status(&e) == Some(409) => match api.get(name).await {
                        Ok(have) if have.spec == want.spec => Ok(()),
                        // Someone changed what it allows: arbiter's own again.
                        Ok(mut have) => {
                            have.spec = want.spec;
                            api.replace(name, &PostParams::default(), &have)
                                .await
                                .map(|_| ())
                        }
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                };
                if let Err(e) = done {
                    tracing::warn!(policy = name, "deny-all NetworkPolicy not in place: {e}");
                }
            })
            .await;
    }

    /// [`Sandbox::start`](crate::sandbox::Sandbox::start).
    pub(super) async fn start_pod(&self, id: &ContainerId) -> Result<(), SandboxError> {
        let pod = id.as_str();
        // What runs from here on may change its files (a second start sends no request).
        self.stopped_logs.drop_pod(pod);
        let state = self
            .states
            .lock()
            .await
            .get(pod)
            .cloned()
            .unwrap_or_default();
        if state.started {
            // The snapshot verifier in the agent's own pod: `stop` left PID 1 (it found it
            // running) and the filesystem; nothing of the agent runs. No request: a pod the
            // cluster ended since is found by the verifier's first exec, whose failure asks
            // the pod how it ended (`exec_error`).
            return Ok(());
        }
        let begun = tokio::time::Instant::now();
        let facts = if state.running {
            // A claimed warm pod: the claim's answer showed it running (a pod that ended since
            // is found by the first exec, whose failure asks the pod how it ended).
            state.facts.clone()
        } else {
            // Early only where nothing is replayed first (a frozen filesystem's pod), and
            // without a start cap (its slots follow what the API shows).
            let early = state.replay.is_none() && !self.slots.capped();
            super::changes::facts_of(&self.await_running(pod, early).await?)
        };
        // Handed over early: its first exec confirms it running (`exec.rs`: a claimed
        // command, or the toolbox's `true` before any other).
        // Running: its start slot goes to the next pod. (A pod that never ran keeps it until
        // it is removed, so pending pods never outnumber the slots.)
        self.slots.release(pod).await;
        if let Some(s) = self.states.lock().await.get_mut(pod) {
            s.started = true;
            s.facts = facts;
        }
        if let Some(frozen) = &state.replay {
            self.replay(pod, frozen).await?;
            if let Some(s) = self.states.lock().await.get_mut(pod) {
                s.replay = None;
            }
        }
        let running_at = tokio::time::Instant::now();
        self.seed_mounts(pod, &state.mounts).await?;
        let proofs = Proofs {
            handover: state.handover,
            no_network: state.network == Some(Network::None),
        };
        // The proofs ride on the pod's first exec (`ensure_proven`): its first upload
        // carries them, or the first command waits for them. Nothing of the trial runs first.
        if proofs.argv().is_some()
            && let Some(s) = self.states.lock().await.get_mut(pod)
        {
            s.proof = Some((proofs, Arc::new(OnceCell::new())));
        }
        // Where a start's time goes (scripts/bench-k8s-scale reads these).
        tracing::debug!(
            pod,
            warm = state.running,
            running_s = (running_at - begun).as_secs_f64(),
            rest_s = running_at.elapsed().as_secs_f64(),
            "pod started"
        );
        Ok(())
    }

    /// Wait until a pod this process created and has not started yet runs (nothing for one
    /// started, or of another process).
    pub(super) async fn await_started(&self, pod: &str) -> Result<(), SandboxError> {
        let readable = match self.states.lock().await.get(pod) {
            Some(s) if !s.started => Arc::clone(&s.readable),
            _ => return Ok(()),
        };
        // Once, however many reads ask at once (`download_many`'s fallback reads each path
        // on its own): one watch, one replay.
        readable
            .get_or_try_init(|| async {
                // Not early: a replay may follow.
                self.await_running(pod, false).await?;
                // A pod of a frozen filesystem read without being started (the source
                // `clean` mode copies the agent's changes from): its files are those of the
                // frozen filesystem only once they are replayed.
                let replay = match self.states.lock().await.get(pod) {
                    Some(s) => s.replay.clone(),
                    None => None,
                };
                if let Some(frozen) = replay {
                    self.replay(pod, &frozen).await?;
                    if let Some(s) = self.states.lock().await.get_mut(pod) {
                        s.replay = None;
                    }
                }
                Ok::<_, SandboxError>(())
            })
            .await?;
        Ok(())
    }

    /// Watch the pod until its main container runs; fail on a state that will not fix
    /// itself, or at the start deadline, quoting the pod's events. One watch sees it placed
    /// and running: a pod no node takes within the (shorter) schedule timeout fails early,
    /// naming the scheduler's reason from the last state the watch saw.
    ///
    /// `early`: also return once the init containers are done and the main container is
    /// being started ([`main_starting`]) and no later state came within the early wait
    /// (`starting::EarlyWait`, learnt from the pods before). The kubelet learns that a
    /// container runs only at its next relist of the runtime (once a second: its generic
    /// PLEG), so "running" reaches the API up to a second after the container started. The
    /// pod is then marked `unconfirmed`, and `start_pod` confirms it with the toolbox's `true`
    /// (`confirm_running`), asked again while the container does not run yet, falling back
    /// to this watch.
    pub(super) async fn await_running(&self, pod: &str, early: bool) -> Result<Pod, SandboxError> {
        use futures_util::TryStreamExt;
        let begun = tokio::time::Instant::now();
        let placed_by = begun + self.schedule_timeout().min(START_DEADLINE);
        let running_by = begun + START_DEADLINE;
        let stream = super::starting::watch_pod(self.pods(), pod);
        let mut stream = std::pin::pin!(stream);
        let mut last: Option<Pod> = None;
        // A watch error (a dropped connection, a resource version too old under a burst) is
        // the apiserver's, not the pod's: the watcher re-lists on the next poll. Only the
        // deadline ends the wait; its message quotes the last such error.
        let mut watch_error: Option<String> = None;
        // When the watch first saw the main container being started (`early` only).
        let mut starting: Option<tokio::time::Instant> = None;
        let why = loop {
            let placed = last.as_ref().is_some_and(super::starting::scheduled);
            let until = if placed { running_by } else { placed_by };
            // Where the kubelet's Started events are watched (started.rs), the pod is handed
            // over at its event, never after a learnt wait.
            let by_event = early && self.started.live();
            let early_by = starting
                .filter(|_| !by_event)
                .map(|at| at + self.early_wait.get());
            let until = early_by.map_or(until, |at| until.min(at));
            let got = tokio::select! {
                got = tokio::time::timeout_at(until, stream.try_next()) => got,
                true = self.started.started(pod), if by_event => {
                    self.early_wait.handed_over();
                    tracing::debug!(pod, "main container started (its event): handed over");
                    return Ok(handed_over(last));
                }
            };
            match got {
                Ok(Ok(Some(Some(p)))) => {
                    match start_verdict(&p) {
                        Some(Ok(())) => {
                            self.early_wait.pulled(&p);
                            return Ok(p);
                        }
                        Some(Err(why)) => break why,
                        None => {}
                    }
                    // Waiting for room: warm pods would take it (warm.rs).
                    if super::starting::unschedulable_reason(&p).is_some() {
                        self.warm.no_room();
                    }
                    // Only where its image ran before: the kubelet pulls a main container's
                    // image after the init containers, and a pull that fails is the start's.
                    if early
                        && starting.is_none()
                        && main_starting(&p)
                        && self.early_wait.was_pulled(&p)
                    {
                        starting = Some(tokio::time::Instant::now());
                    }
                    last = Some(p);
                }
                Err(_) if early_by.is_some_and(|at| at <= until) => {
                    if let (Some(s), Some(since)) =
                        (self.states.lock().await.get_mut(pod), starting)
                    {
                        s.unconfirmed = Some(Unconfirmed::since(since));
                    }
                    self.early_wait.handed_over();
                    tracing::debug!(pod, "main container being started: handed over early");
                    return Ok(handed_over(last));
                }
                Ok(Ok(Some(None))) => {
                    return Err(KubeError::PodGone {
                        pod: pod.to_string(),
                        why: "deleted while starting".to_string(),
                    }
                    .into());
                }
                Ok(Ok(None)) => break "the watch ended".to_string(),
                Ok(Err(e)) => {
                    tracing::debug!(pod, error = %e, "pod watch error; watching again");
                    watch_error = Some(e.to_string());
                    let pause = tokio::time::Instant::now() + WATCH_RETRY_PAUSE;
                    tokio::time::sleep_until(pause.min(until)).await;
                }
                Err(_) if !placed => {
                    break super::starting::unplaced(last.as_ref(), (placed_by - begun).as_secs());
                }
                Err(_) => break format!("not running after {}s", START_DEADLINE.as_secs()),
            }
        };
        let why = match watch_error {
            Some(e) => format!("{why} (last watch error: {e})"),
            None => why,
        };
        let events = self.events_of(pod).await;
        if let Some(image) = why.strip_prefix("pull:") {
            let (image, why) = image.split_once('|').unwrap_or((image, ""));
            return Err(KubeError::Pull {
                image: image.to_string(),
                why: why.to_string(),
                events,
            }
            .into());
        }
        Err(KubeError::NotStarted {
            pod: pod.to_string(),
            why,
            events,
        }
        .into())
    }

    /// `pod` was handed over before its main container was seen running (`await_running`).
    pub(super) async fn is_unconfirmed(&self, pod: &str) -> bool {
        self.states
            .lock()
            .await
            .get(pod)
            .is_some_and(|s| s.unconfirmed.is_some())
    }

    /// An exec found `pod`'s main container not running yet.
    pub(super) async fn too_soon_now(&self, pod: &str) {
        if let Some(u) = self
            .states
            .lock()
            .await
            .get_mut(pod)
            .and_then(|s| s.unconfirmed.as_mut())
        {
            u.too_soon_after = Some(u.since.elapsed());
        }
    }

    /// An exec connected to `pod`'s main container (or the watch has the last word): how
    /// long after the start was seen the last exec that came too soon was answered.
    pub(super) async fn confirm(&self, pod: &str) -> Option<Duration> {
        self.states
            .lock()
            .await
            .get_mut(pod)
            .and_then(|s| s.unconfirmed.take())
            .and_then(|u| u.too_soon_after)
    }

    /// The proofs `pod`'s start left to its first exec, when not made yet: the caller makes
    /// them in the cell (once, however many ask at once).
    pub(super) async fn pending_proof(&self, pod: &str) -> Option<(Proofs, Arc<OnceCell<()>>)> {
        let states = self.states.lock().await;
        let (proofs, cell) = states.get(pod)?.proof.as_ref()?;
        (!cell.initialized()).then(|| (*proofs, Arc::clone(cell)))
    }

    /// Make the proofs `pod`'s start left to its first exec, unless made: before any
    /// command of the trial runs in it.
    pub(super) async fn ensure_proven(&self, pod: &str) -> Result<(), SandboxError> {
        if let Some((proofs, cell)) = self.pending_proof(pod).await {
            cell.get_or_try_init(|| self.prove_start(pod, proofs))
                .await?;
        }
        Ok(())
    }

    /// Prove what the start of `pod` must (proof.rs): wait until the keep-alive runs (the
    /// image's ENTRYPOINT handed over), as on Docker, and prove network `none`, in one exec.
    /// Called right after the watch saw the main container running, or by its first exec.
    pub(super) async fn prove_start(&self, pod: &str, proofs: Proofs) -> Result<(), SandboxError> {
        let Some(argv) = proofs.argv() else {
            return Ok(());
        };
        let started = tokio::time::Instant::now();
        let mut first = true;
        let mut unclear = 0;
        loop {
            // The watch has just seen it running: no need to ask again the first time.
            let state = if first || !proofs.handover {
                Some(ContainerState {
                    running: Some(Default::default()),
                    ..Default::default()
                })
            } else {
                self.main_state(pod).await?
            };
            first = false;
            match state {
                Some(ContainerState {
                    running: Some(_), ..
                }) => {}
                other => {
                    let code = other
                        .and_then(|s| s.terminated)
                        .map_or(-1, |t| i64::from(t.exit_code));
                    return Err(SandboxError::Entrypoint {
                        entrypoint: "of the image".to_string(),
                        why: format!("exited with code {code} before running its arguments"),
                        logs: self.last_output(pod).await,
                    });
                }
            }
            let (end, out, err) = self.harness_streamed(pod, &argv).await?;
            match proof::answer(end, &out, &err) {
                Answer::Proven => {
                    tracing::debug!(pod, carried = false, "start proved");
                    return Ok(());
                }
                Answer::NotYet => {}
                Answer::Refused(why) if proofs.no_network => {
                    return Err(no_network_proof(pod, &why));
                }
                // Only the handover to prove: a failed probe is one that did not see it yet.
                Answer::Refused(why) => tracing::debug!(pod, why, "handover probe failed"),
                Answer::Unclear(why) => {
                    unclear += 1;
                    tracing::debug!(pod, why, unclear, "start proof unclear; asking again");
                    if unclear >= proof::UNCLEAR_TRIES {
                        return Err(KubeError::NotStarted {
                            pod: pod.to_string(),
                            why: format!("the start's proof gave no answer to trust: {why}"),
                            events: String::new(),
                        }
                        .into());
                    }
                    continue;
                }
            }
            if started.elapsed() >= HANDOVER_WAIT {
                return Err(SandboxError::Entrypoint {
                    entrypoint: "of the image".to_string(),
                    why: format!(
                        "still had not run its arguments after {}s",
                        HANDOVER_WAIT.as_secs()
                    ),
                    logs: self.last_output(pod).await,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// ` (last output: …)` from the main container's log, or empty.
    async fn last_output(&self, pod: &str) -> String {
        let params = kube::api::LogParams {
            container: Some(MAIN.to_string()),
            tail_lines: Some(5),
            ..Default::default()
        };
        match self.pods().logs(pod, &params).await {
            Ok(text) if !text.trim().is_empty() => {
                let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
                format!(
                    " (last output: {})",
                    line.chars().take(400).collect::<String>()
                )
            }
            _ => String::new(),
        }
    }

    /// The main container's state (`None`: not reported yet). A pod that is gone is
    /// [`KubeError::PodGone`].
    pub(super) async fn main_state(
        &self,
        pod: &str,
    ) -> Result<Option<ContainerState>, SandboxError> {
        let got = self.get_pod(pod).await?;
        Ok(main_status(&got).and_then(|s| s.state.clone()))
    }

    /// The pod `pod` as the API has it now; one that is gone is [`KubeError::PodGone`].
    pub(super) async fn get_pod(&self, pod: &str) -> Result<Pod, SandboxError> {
        match self.pods().get(pod).await {
            Ok(p) => Ok(p),
            Err(e) if api_status(&e) == Some(404) => Err(KubeError::PodGone {
                pod: pod.to_string(),
                why: "not found".to_string(),
            }
            .into()),
            Err(e) => Err(KubeError::api("pod get")(e).into()),
        }
    }

    /// How the pod ended, if it did (deleted, evicted, or its container ended): `None`
    /// while it runs or when the API cannot say. `pod` may name a sidecar (`pod/container`).
    pub(super) async fn pod_ended(&self, pod: &str) -> Option<Ended> {
        let pod = super::names::target(pod).0;
        match self.pods().get(pod).await {
            Err(e) if api_status(&e) == Some(404) => {
                Some(Ended::ByCluster("not found".to_string()))
            }
            Err(_) => None,
            Ok(p) => ended(&p),
        }
    }

    /// How the pod ended, once its status says so: an exec that failed because the pod's
    /// container is gone may come before the kubelet reports why. `None` when the status
    /// still shows the container running after [`SETTLE_WAIT`].
    pub(super) async fn pod_settled(&self, pod: &str) -> Option<Ended> {
        let until = tokio::time::Instant::now() + SETTLE_WAIT;
        loop {
            if let Some(how) = self.pod_ended(pod).await {
                return Some(how);
            }
            if tokio::time::Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// The pod's last events, as `; events: reason: message | …` (empty when none).
    pub(super) async fn events_of(&self, pod: &str) -> String {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.resolved.namespace);
        let params = ListParams::default().fields(&format!("involvedObject.name={pod}"));
        let Ok(list) = api.list(&params).await else {
            return String::new();
        };
        let mut items = list.items;
        items.sort_by_key(|e| e.last_timestamp.clone().map(|t| t.0));
        let lines: Vec<String> = items
            .iter()
            .rev()
            .take(6)
            .rev()
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.clone().unwrap_or_default(),
                    e.message.clone().unwrap_or_default().trim()
                )
            })
            .collect();
        if lines.is_empty() {
            String::new()
        } else {
            format!("; events: {}", lines.join(" | "))
        }
    }

    /// [`Sandbox::status`](crate::sandbox::Sandbox::status).
    pub(super) async fn pod_status(
        &self,
        id: &ContainerId,
    ) -> Result<ContainerStatus, SandboxError> {
        match self.main_state(id.as_str()).await? {
            Some(ContainerState {
                running: Some(_), ..
            }) => Ok(ContainerStatus::Running { health: None }),
            Some(ContainerState {
                terminated: Some(t),
                ..
            }) => Ok(ContainerStatus::Exited(i64::from(t.exit_code))),
            _ => Ok(ContainerStatus::Exited(-1)),
        }
    }

    /// [`Sandbox::remove`](crate::sandbox::Sandbox::remove): the pod, at once (its policy
    /// goes with it: owner reference). Frozen filesystems and images do not exist here.
    pub(super) async fn remove_resource(&self, resource: &Resource) -> Result<(), SandboxError> {
        let id = match resource {
            Resource::Container(id) => id,
            Resource::Frozen(frozen) => {
                self.remove_frozen(frozen).await;
                return Ok(());
            }
            Resource::Image(_) => return Ok(()),
        };
        self.states.lock().await.remove(id.as_str());
        self.started.forget(id.as_str());
        if let Some(hot) = self.warm.take_hot(id.as_str()) {
            hot.abort();
        }
        self.stopped_logs.drop_pod(id.as_str());
        self.integrity.replayed.lock().await.remove(id.as_str());
        self.kept.forget(id.as_str());
        self.forget_carrier(id.as_str());
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::background()
        };
        let deleted = self.pods().delete(id.as_str(), &params).await;
        // Given back even when the delete failed: a slot lost for good would stall the job.
        self.slots.release(id.as_str()).await;
        match deleted {
            Ok(_) => Ok(()),
            Err(e) if matches!(api_status(&e), Some(404)) => Ok(()),
            Err(e) => Err(KubeError::api("pod delete")(e).into()),
        }
    }

    /// [`Sandbox::list`](crate::sandbox::Sandbox::list): pods by label selector, each with
    /// its exact owner labels.
    pub(super) async fn list_pods(&self, selector: &Selector) -> Result<Vec<Listed>, SandboxError> {
        let params = ListParams::default().labels(&label_selector(selector));
        let list = self
            .pods()
            .list(&params)
            .await
            .map_err(KubeError::api("pod list"))?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|p| {
                let name = p.metadata.name.clone()?;
                let labels = annotated_labels(&p.metadata)
                    .unwrap_or_else(|| p.metadata.labels.clone().unwrap_or_default());
                selector.matches(&labels).then_some(Listed {
                    resource: Resource::Container(ContainerId::new(name)),
                    labels,
                })
            })
            .collect())
    }

    /// The user execs without one run as in `pod`: known since its create, else from the
    /// pod's annotation (a pod of an earlier process of this job).
    pub(super) async fn default_user(&self, pod: &str) -> Option<String> {
        if let Some(state) = self.states.lock().await.get(pod) {
            return state.default_user.clone();
        }
        let got = self.pods().get(pod).await.ok()?;
        got.metadata.annotations?.get(ANNOTATION_USER).cloned()
    }
}

/// The main container's status in the pod.
fn main_status(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == MAIN)
}

/// The init containers all ended with 0 and the main container waits for nothing that will
/// not come (no fatal reason): the kubelet is creating and starting it.
pub(super) fn main_starting(pod: &Pod) -> bool {
    let (Some(spec), Some(status)) = (pod.spec.as_ref(), pod.status.as_ref()) else {
        return false;
    };
    let inits = status
        .init_container_statuses
        .as_deref()
        .unwrap_or_default();
    let wanted = spec.init_containers.as_ref().map_or(0, Vec::len);
    let done = inits.len() == wanted
        && inits.iter().all(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0)
        });
    let waiting = main_status(pod).is_some_and(|m| {
        m.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .is_some_and(|w| !FATAL_WAITING.contains(&w.reason.as_deref().unwrap_or("")))
    });
    status.phase.as_deref() == Some("Pending") && done && waiting
}

/// The main container's image is named by digest.
fn main_by_digest(spec: &k8s_openapi::api::core::v1::PodSpec) -> bool {
    spec.containers
        .iter()
        .find(|c| c.name == MAIN)
        .and_then(|c| c.image.as_deref())
        .is_some_and(|i| i.contains("@sha256:"))
}

/// `Some(Ok)` once the main container runs; `Some(Err(why))` when it never will (a failed
/// init container, a pull that failed: `pull:<image>|<why>`, the pod ended); `None`: wait.
pub(super) fn start_verdict(pod: &Pod) -> Option<Result<(), String>> {
    let status = pod.status.as_ref()?;
    if let Some(phase @ ("Failed" | "Succeeded")) = status.phase.as_deref() {
        return Some(Err(format!(
            "pod {phase}{}",
            status
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        )));
    }
    let all = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in all {
        let Some(state) = &c.state else { continue };
        if let Some(waiting) = &state.waiting {
            let reason = waiting.reason.as_deref().unwrap_or("");
            if FATAL_WAITING.contains(&reason) {
                let message = waiting.message.clone().unwrap_or_default();
                if reason.contains("Image") {
                    return Some(Err(format!("pull:{}|{reason}: {message}", c.image)));
                }
                return Some(Err(format!("container {}: {reason}: {message}", c.name)));
            }
        }
        if let Some(t) = &state.terminated
            && c.name != MAIN
            && t.exit_code != 0
        {
            return Some(Err(format!(
                "init container {} failed (exit {}{})",
                c.name,
                t.exit_code,
                t.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )));
        }
    }
    let main = main_status(pod)?;
    match &main.state {
        Some(ContainerState {
            running: Some(_), ..
        }) => Some(Ok(())),
        Some(ContainerState {
            terminated: Some(t),
            ..
        }) => Some(Err(format!(
            "its container ended at once (exit {}, {})",
            t.exit_code,
            t.reason.clone().unwrap_or_default()
        ))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerStateRunning, ContainerStateWaiting, ContainerStatus as Cs, PodStatus,
    };

    fn pod(init: Vec<Cs>, main: Vec<Cs>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                init_container_statuses: Some(init),
                container_statuses: Some(main),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn cs(name: &str, state: ContainerState) -> Cs {
        Cs {
            name: name.into(),
            image: "reg/img:1".into(),
            state: Some(state),
            ..Default::default()
        }
    }

    #[test]
    fn the_start_verdict_names_a_failed_pull_and_waits_otherwise() {
        let waiting = |reason: &str| ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: Some("not found".into()),
            }),
            ..Default::default()
        };
        assert_eq!(
            start_verdict(&pod(vec![], vec![cs(MAIN, waiting("ContainerCreating"))])),
            None
        );
        let pull = start_verdict(&pod(vec![], vec![cs(MAIN, waiting("ImagePullBackOff"))]));
        assert_eq!(
            pull,
            Some(Err("pull:reg/img:1|ImagePullBackOff: not found".into()))
        );
        let running = ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        };
        assert_eq!(
            start_verdict(&pod(vec![], vec![cs(MAIN, running)])),
            Some(Ok(()))
        );
    }

    #[test]
    fn the_main_container_is_being_started_once_every_init_container_ended_with_0() {
        use k8s_openapi::api::core::v1::{Container, ContainerStateTerminated, PodSpec};
        let waiting = |reason: &str| ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: None,
            }),
            ..Default::default()
        };
        let ended = |code: i32| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        };
        let with_inits = |mut p: Pod, n: usize, image: &str| {
            let init = Container {
                name: "harness".into(),
                ..Default::default()
            };
            p.spec = Some(PodSpec {
                init_containers: Some(vec![init; n]),
                containers: vec![Container {
                    name: MAIN.into(),
                    image: Some(image.into()),
                    ..Default::default()
                }],
                ..Default::default()
            });
            p
        };
        let main = || vec![cs(MAIN, waiting("PodInitializing"))];
        let done = with_inits(
            pod(vec![cs("harness", ended(0))], main()),
            1,
            "reg/img@sha256:ab",
        );
        assert!(main_starting(&done));
        assert!(done.spec.as_ref().is_some_and(main_by_digest));
        // One of two init containers still to run, or one that failed, or none reported.
        let half = with_inits(pod(vec![cs("harness", ended(0))], main()), 2, "reg/img:1");
        assert!(!main_starting(&half));
        assert!(!half.spec.as_ref().is_some_and(main_by_digest));
        let failed = with_inits(pod(vec![cs("harness", ended(1))], main()), 1, "i");
        assert!(!main_starting(&failed));
        let running_init = with_inits(
            pod(vec![cs("harness", waiting("PodInitializing"))], main()),
            1,
            "i",
        );
        assert!(!main_starting(&running_init));
        // A main container that waits for what will not come, or a pod that ended.
        let pull = with_inits(
            pod(
                vec![cs("harness", ended(0))],
                vec![cs(MAIN, waiting("ErrImagePull"))],
            ),
            1,
            "i",
        );
        assert!(!main_starting(&pull));
        let mut gone = done.clone();
        if let Some(s) = gone.status.as_mut() {
            s.phase = Some("Failed".into());
        }
        assert!(!main_starting(&gone));
        assert!(!main_starting(&Pod::default()));
    }
}
