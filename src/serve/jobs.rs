//! The jobs this server runs, in-process: a job is resolved, checked and run by the same calls
//! as `arbiter run` / `arbiter resume` make; the server keeps only the switches to stop it (the
//! job, or one trial) and the feed of its events.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use tokio::sync::{mpsc, watch};

use crate::agent::AgentKind;
use crate::job::{self, CancelReason, JobEvent, JobSpec, JobStore, RunArgs};
use crate::results::Location;
use crate::sandbox::choose::{self, BackendFlags};

use super::dirs;
use super::error::ApiError;
use super::feed::{self, Event, Feed};

/// The server's state, shared by every request.
pub(crate) struct App {
    /// Canonical.
    pub root: PathBuf,
    pub token: Option<String>,
    pub store: Option<Location>,
    backend: BackendFlags,
    /// Jobs run by this process, by canonical job dir (kept after they end, for their events).
    runs: Mutex<HashMap<PathBuf, Arc<Run>>>,
}

/// One job run by this server.
pub(crate) struct Run {
    pub id: String,
    pub dir: PathBuf,
    cancel: watch::Sender<Option<CancelReason>>,
    trial_cancels: mpsc::UnboundedSender<String>,
    pub feed: Feed,
    /// Trials running now, with their phase.
    pub trials: Mutex<BTreeMap<String, &'static str>>,
    /// Set once the run returned.
    ended: Mutex<Option<&'static str>>,
    /// The job was cancelled through the API.
    pub cancelled: std::sync::atomic::AtomicBool,
}

impl Run {
    pub(crate) fn ended(&self) -> Option<&'static str> {
        *self.ended.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stop starting trials; running ones are stopped and cleaned up, as on Ctrl-C.
    pub(crate) fn cancel(&self) {
        self.cancelled
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.stop(CancelReason::Interrupt);
    }

    /// Ask the job to stop (a stronger reason upgrades a weaker one, as a second Ctrl-C).
    fn stop(&self, reason: CancelReason) {
        self.cancel.send_if_modified(|current| {
            let stronger = current.is_none_or(|c| c < reason);
            if stronger {
                *current = Some(reason);
            }
            stronger
        });
    }

    /// Stop one running trial; `false` when it is not running.
    pub(crate) fn cancel_trial(&self, trial: &str) -> bool {
        let running = self
            .trials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(trial);
        running && self.trial_cancels.send(trial.to_string()).is_ok()
    }

    fn observe(&self, event: &JobEvent) {
        let mut trials = self.trials.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            JobEvent::TrialStarted { id } => {
                trials.insert(id.clone(), "starting");
            }
            JobEvent::PhaseChanged { id, phase } => {
                if let Some(p) = trials.get_mut(id) {
                    *p = phase.as_str();
                }
            }
            JobEvent::TrialFinished { record } => {
                trials.remove(&record.id);
            }
            JobEvent::TrialCancelled { id } | JobEvent::TrialRetrying { id, .. } => {
                trials.remove(id);
            }
            JobEvent::Started { .. } | JobEvent::Interrupted | JobEvent::Finished => {}
        }
    }
}

/// What a job request asks: a new job, or its dir's own config again.
pub(crate) enum Start {
    /// A submitted job (its flags; `config` already staged as a file under the root).
    Submit(Box<RunArgs>),
    /// `arbiter resume DIR [--retry-infra]`.
    Resume { dir: PathBuf, retry_infra: bool },
}

impl App {
    pub(crate) fn new(
        root: PathBuf,
        token: Option<String>,
        store: Option<Location>,
        backend: BackendFlags,
    ) -> Arc<App> {
        Arc::new(App {
            root,
            token,
            store,
            backend,
            runs: Mutex::new(HashMap::new()),
        })
    }

    /// Stop every job this server runs with `reason` and wait until each has ended (its
    /// running trials stopped and cleaned up; unrecorded, so a resume runs them).
    pub(crate) async fn stop_all(&self, reason: CancelReason) -> usize {
        let runs: Vec<Arc<Run>> = self
            .runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|r| r.ended().is_none())
            .cloned()
            .collect();
        for run in &runs {
            run.stop(reason);
        }
        while runs.iter().any(|r| r.ended().is_none()) {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        runs.len()
    }

    /// The run of this server for `dir`, if any (ended or not).
    pub(crate) fn run_of(&self, dir: &Path) -> Option<Arc<Run>> {
        self.runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(dir)
            .cloned()
    }

    /// The job dir named `id`: one of this server's runs, or one under the root.
    pub(crate) fn find(&self, id: &str) -> Result<dirs::JobDir, ApiError> {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(run) = runs.values().find(|r| r.id == id) {
            return Ok(dirs::JobDir {
                id: run.id.clone(),
                dir: run.dir.clone(),
            });
        }
        drop(runs);
        dirs::scan(&self.root)
            .into_iter()
            .find(|j| j.id == id)
            .ok_or_else(|| ApiError::not_found(format!("{id}: no such job under the root")))
    }

    /// Every job dir under the root, with this server's runs whose dir has no `job.yaml` yet.
    pub(crate) fn list(&self) -> Vec<dirs::JobDir> {
        let mut found = dirs::scan(&self.root);
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        for run in runs.values() {
            if !found.iter().any(|j| j.dir == run.dir) {
                found.push(dirs::JobDir {
                    id: run.id.clone(),
                    dir: run.dir.clone(),
                });
            }
        }
        found
    }

    /// `running`, `finished` or `interrupted`.
    pub(crate) fn status(&self, dir: &Path, counts: &dirs::Counts) -> &'static str {
        if let Some(run) = self.run_of(dir)
            && run.ended().is_none()
        {
            return "running";
        }
        if dirs::busy(dir) {
            return "running";
        }
        match counts.planned {
            Some(planned) if counts.trials < planned => "interrupted",
            _ => "finished",
        }
    }

    /// Resolve, check and start a job; nothing starts unless every check passed.
    pub(crate) async fn start(self: &Arc<Self>, start: Start) -> Result<Arc<Run>, ApiError> {
        let args = match start {
            Start::Submit(args) => RunArgs {
                backend: self.backend.clone(),
                ..*args
            },
            Start::Resume { dir, retry_infra } => RunArgs {
                config: Some(dir.join("job.yaml")),
                job_dir: Some(dir),
                retry_infra,
                backend: self.backend.clone(),
                ..RunArgs::default()
            },
        };
        let resolving = args.clone();
        let spec = tokio::task::spawn_blocking(move || job::resolve(&resolving))
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::bad)?;
        let dir = dirs::under_root(&self.root, "job_dir", &spec.dir)?;
        for task in &spec.tasks {
            let task_dir = task.dir.canonicalize().unwrap_or_else(|_| task.dir.clone());
            if !task_dir.starts_with(&self.root) {
                return Err(ApiError::bad(format!(
                    "tasks: {}: not under the served root",
                    task.dir.display()
                )));
            }
        }
        // What an agent reads from the host (mounts, a control template) lies under the root
        // too: a submission reaches no other file of this machine.
        for agent in &spec.agents {
            let (mounts, template) = match &agent.kind {
                AgentKind::Command(c) => (c.mounts.as_slice(), None),
                AgentKind::Aworld(a) => (a.mounts.as_slice(), a.control_template.as_ref()),
                _ => (&[][..], None),
            };
            let hosts = mounts.iter().map(|m| &m.host).chain(template);
            for host in hosts {
                let canonical = host.canonicalize().unwrap_or_else(|_| host.clone());
                if !canonical.starts_with(&self.root) {
                    return Err(ApiError::bad(format!(
                        "agents.{}.mounts: {}: not under the served root",
                        agent.name,
                        host.display()
                    )));
                }
            }
        }
        if self.run_of(&dir).is_some_and(|r| r.ended().is_none()) || dirs::busy(&dir) {
            return Err(ApiError::conflict(format!(
                "{}: job directory is in use",
                dir.display()
            )));
        }
        let toolbox = crate::sandbox::toolbox::locate_toolbox().map_err(ApiError::internal)?;
        let sandbox = choose::connect(&spec.backend, Some(&toolbox))
            .await
            .map_err(|e| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e))?;
        job::preflight(&spec, &*sandbox)
            .await
            .map_err(|e| match e {
                job::PreflightError::Sandbox(e) => {
                    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e)
                }
                refused => ApiError::bad(refused),
            })?;
        std::fs::create_dir_all(&dir).map_err(ApiError::internal)?;
        let id = JobStore::open(&dir)
            .and_then(|s| s.ensure_job_id())
            .map_err(ApiError::internal)?;

        let (cancel, cancel_rx) = watch::channel(None);
        let (trial_cancels, trial_cancels_rx) = mpsc::unbounded_channel();
        let run = Arc::new(Run {
            id,
            dir: dir.clone(),
            cancel,
            trial_cancels,
            feed: Feed::new(),
            trials: Mutex::new(BTreeMap::new()),
            ended: Mutex::new(None),
            cancelled: std::sync::atomic::AtomicBool::new(false),
        });
        {
            // Checked again where it is decided: two submissions of one dir, one run.
            let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
            if runs.get(&dir).is_some_and(|r| r.ended().is_none()) {
                return Err(ApiError::conflict(format!(
                    "{}: job directory is in use",
                    dir.display()
                )));
            }
            runs.insert(dir.clone(), run.clone());
        }
        let mut spec = spec;
        spec.dir = dir;
        tokio::spawn(drive(
            self.clone(),
            run.clone(),
            spec,
            sandbox,
            cancel_rx,
            trial_cancels_rx,
        ));
        Ok(run)
    }
}

/// Run the job to its end, feeding its events; then index it into the results store.
async fn drive(
    app: Arc<App>,
    run: Arc<Run>,
    spec: JobSpec,
    sandbox: Arc<dyn crate::sandbox::Sandbox>,
    cancel: watch::Receiver<Option<CancelReason>>,
    trial_cancels: mpsc::UnboundedReceiver<String>,
) {
    let (events_tx, mut events_rx) = mpsc::unbounded_channel::<JobEvent>();
    let feeding = {
        let run = run.clone();
        tokio::spawn(async move {
            while let Some(event) = events_rx.recv().await {
                run.observe(&event);
                run.feed.push(feed::of_job_event(&event));
            }
        })
    };
    let outcome = job::run_controlled(
        &spec,
        sandbox.clone(),
        events_tx,
        cancel,
        Some(trial_cancels),
    )
    .await;
    let _ = feeding.await;
    let (status, error) = match &outcome {
        Ok(o) => {
            sandbox.finish(o.records.len()).await;
            if let Some(traces) = &o.traces {
                let line = traces.line(&spec.dir);
                if traces.failed > 0 {
                    tracing::warn!(job = %spec.dir.display(), "{line}");
                } else {
                    tracing::info!(job = %spec.dir.display(), "{line}");
                }
            }
            (
                if o.interrupted {
                    "interrupted"
                } else {
                    "finished"
                },
                None,
            )
        }
        Err(e) => {
            tracing::warn!(job = %spec.dir.display(), "job failed: {e}");
            ("interrupted", Some(e.to_string()))
        }
    };
    if let Some(location) = &app.store
        && let Err(e) = index(location, &spec.dir).await
    {
        tracing::warn!("results store: {e} (the job dir is unaffected; `arbiter index` it later)");
    }
    *run.ended.lock().unwrap_or_else(|e| e.into_inner()) = Some(status);
    run.trials.lock().unwrap_or_else(|e| e.into_inner()).clear();
    run.feed.push(Event::ended(status, error));
}

async fn index(location: &Location, dir: &Path) -> Result<(), crate::results::ResultsError> {
    let job = crate::results::read_job(dir)?;
    let mut store = crate::results::Store::open(location).await?;
    store.index(&job).await
}
