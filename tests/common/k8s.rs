//! Helpers of the Kubernetes test binaries (the cluster `scripts/k8s up` starts).

use std::path::{Path, PathBuf};

use arbiter::sandbox::Sandbox;
use arbiter::sandbox::kubernetes::{KubeSettings, KubernetesSandbox};

pub fn kubectl(args: &[&str]) -> std::process::Output {
    let bin = std::env::var("ARBITER_K8S_KUBECTL").unwrap_or_else(|_| "kubectl".to_string());
    std::process::Command::new(bin)
        .args(args)
        .output()
        .expect("kubectl")
}

/// A copy of the task at `src` under `dir` whose image is built from `environment/Dockerfile`
/// (`FROM base`, with `/app`), so it lands in the registry the cluster pulls from: an image
/// only named in task.toml (`arbiter/…`) is not pullable by a node (the kubelet goes to
/// docker.io once its image GC pruned the local copy).
pub fn built_copy(src: &Path, dir: &Path, base: &str) -> PathBuf {
    let name = src.file_name().expect("task dir name").to_string_lossy();
    let task = dir.join(format!("{name}-k8s"));
    super::copy_dir(src, &task);
    let toml = std::fs::read_to_string(task.join("task.toml")).expect("task.toml");
    let toml: String = toml
        .lines()
        .filter(|l| !l.trim_start().starts_with("docker_image"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(task.join("task.toml"), toml).expect("task.toml");
    std::fs::create_dir_all(task.join("environment")).expect("mkdir");
    std::fs::write(
        task.join("environment/Dockerfile"),
        format!("FROM {base}\nRUN mkdir -p /app\n"),
    )
    .expect("Dockerfile");
    task
}

/// A copy of the `quick` fixture whose image is built (so it lands in the registry) rather
/// than named.
pub fn quick_built(dir: &Path) -> PathBuf {
    built_copy(&super::fixture("quick"), dir, "arbiter/busybox")
}

pub fn required() -> bool {
    std::env::var("ARBITER_REQUIRE_K8S").as_deref() == Ok("1")
}

/// Whether the test cluster is configured (`KUBECONFIG` set): otherwise a skip message, or a
/// panic when `ARBITER_REQUIRE_K8S=1`.
pub fn configured() -> bool {
    configured_by("up")
}

/// [`configured`], its skip message naming `scripts/k8s {up}` as the way to start it.
pub fn configured_by(up: &str) -> bool {
    if std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty()) {
        assert!(
            !required(),
            "ARBITER_REQUIRE_K8S=1 but KUBECONFIG is unset (eval \"$(scripts/k8s env)\")"
        );
        eprintln!("skipping: no KUBECONFIG (scripts/k8s {up}; eval \"$(scripts/k8s env)\")");
        return false;
    }
    true
}

/// The cluster's backend, or `None` (skip) when no cluster is configured.
pub async fn cluster() -> Option<KubernetesSandbox> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    if !configured() {
        return None;
    }
    let toolbox = arbiter::sandbox::toolbox::locate_toolbox().expect("toolbox (scripts/bootstrap)");
    let sb = KubernetesSandbox::connect(KubeSettings::default())
        .await
        .expect("kubeconfig")
        .with_toolbox(&toolbox);
    let problems = sb.preflight().await;
    assert!(problems.is_empty(), "preflight: {problems:?}");
    Some(sb)
}

/// `--backend kubernetes` for `arbiter run` when the test cluster is configured and the
/// engine (which builds and pushes images) answers; `None` (skip) otherwise, a panic when
/// `ARBITER_REQUIRE_K8S=1` and no `KUBECONFIG` is set.
pub fn kubernetes_flags() -> Option<[&'static str; 2]> {
    if !configured() {
        return None;
    }
    super::docker_available().then_some(["--backend", "kubernetes"])
}

/// Pods of a job dir's job still in the namespace (the job label is `<name>-<digest>`), as
/// `name job` lines.
pub fn pods_of(job_dir: &Path) -> Vec<String> {
    let name = job_dir
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let out = kubectl(&[
        "get",
        "pods",
        "-l",
        "arbiter.managed=true",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.arbiter\\.job}{\"\\n\"}{end}",
    ]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split(' ')
                .nth(1)
                .is_some_and(|label| super::is_job_label(label, &name))
        })
        .map(str::to_string)
        .collect()
}

/// The pods API of the test namespace (`$ARBITER_K8S_NAMESPACE`, else the context's).
pub async fn pods_api() -> kube::Api<k8s_openapi::api::core::v1::Pod> {
    namespaced_api().await
}

/// The API of kind `K` in the test namespace (`ARBITER_K8S_NAMESPACE`, else the context's).
pub async fn namespaced_api<K>() -> kube::Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    let client = kube::Client::try_default().await.expect("kube client");
    match std::env::var("ARBITER_K8S_NAMESPACE") {
        Ok(ns) if !ns.is_empty() => kube::Api::namespaced(client, &ns),
        _ => kube::Api::default_namespaced(client),
    }
}

/// What a test keeps of the pods of one job as a [`PodWatch`] sees them.
pub trait PodObserver: Default + Send + 'static {
    /// A pod of the job as it is now (created, changed, or listed when the watch began).
    fn apply(&mut self, pod: &k8s_openapi::api::core::v1::Pod);
    /// A pod of the job, deleted.
    fn delete(&mut self, _pod: &k8s_openapi::api::core::v1::Pod) {}
}

/// Watches the pods of one job (its exact job label, from the job dir's name) on a thread of
/// its own until dropped; `start` returns once the watch's initial list is in.
pub struct PodWatch<O: PodObserver> {
    seen: std::sync::Arc<std::sync::Mutex<O>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl<O: PodObserver> PodWatch<O> {
    pub fn start(job_dir: &Path) -> PodWatch<O> {
        use futures_util::StreamExt;
        use kube::runtime::watcher;
        use std::sync::atomic::{AtomicBool, Ordering};
        let name = job_dir.file_name().unwrap().to_string_lossy().into_owned();
        let of_job = move |pod: &k8s_openapi::api::core::v1::Pod| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("arbiter.job"))
                .is_some_and(|j| super::is_job_label(j, &name))
        };
        let seen = std::sync::Arc::new(std::sync::Mutex::new(O::default()));
        let synced = std::sync::Arc::new(AtomicBool::new(false));
        let (shared, in_sync) = (std::sync::Arc::clone(&seen), std::sync::Arc::clone(&synced));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let config = watcher::Config::default().labels("arbiter.managed=true");
                let mut stream = watcher(pods_api().await, config).boxed();
                loop {
                    let event = tokio::select! {
                        _ = &mut stopped => return,
                        e = stream.next() => e,
                    };
                    let Some(event) = event else { return };
                    let Ok(event) = event else { continue };
                    let mut o = shared.lock().unwrap();
                    match event {
                        watcher::Event::Apply(p) | watcher::Event::InitApply(p) if of_job(&p) => {
                            o.apply(&p)
                        }
                        watcher::Event::Delete(p) if of_job(&p) => o.delete(&p),
                        watcher::Event::InitDone => in_sync.store(true, Ordering::SeqCst),
                        _ => {}
                    }
                }
            });
        });
        let watch = PodWatch {
            seen,
            stop: Some(stop),
            thread: Some(thread),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !synced.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the pod watch never synced"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        watch
    }

    pub fn observed(&self) -> std::sync::MutexGuard<'_, O> {
        self.seen.lock().unwrap()
    }
}

impl<O: PodObserver> Drop for PodWatch<O> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A job config under `dir` of `tasks` and the command agents `(name, shell command)`, `rest`
/// (more top-level YAML) after them: its path.
pub fn command_job(dir: &Path, tasks: &[&Path], agents: &[(&str, &str)], rest: &str) -> PathBuf {
    let tasks: Vec<String> = tasks.iter().map(|t| t.display().to_string()).collect();
    let agents: String = agents
        .iter()
        .map(|(name, run)| {
            format!("  - name: {name}\n    kind: command\n    run: [sh, -c, '{run}']\n")
        })
        .collect();
    super::write_job(
        dir,
        &format!("tasks: [{}]\nagents:\n{agents}{rest}", tasks.join(", ")),
    )
}

/// [`command_job`] of the one task [`quick_built`] under `dir`.
pub fn quick_job(dir: &Path, agents: &[(&str, &str)], rest: &str) -> PathBuf {
    let task = quick_built(dir);
    command_job(dir, &[&task], agents, rest)
}

/// The job dir under `dir` of a job named for `label` and this process.
pub fn k8s_job_dir(dir: &Path, label: &str) -> PathBuf {
    dir.join(format!("job-k8s-{label}-{}", std::process::id()))
}

/// `arbiter run --quiet ARGS --job-dir JOB_DIR -c CONFIG`, its output piped, not waited for.
pub fn spawn_job(config: &Path, job_dir: &Path, args: &[&str]) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["run", "--quiet"])
        .args(args)
        .args([
            "--job-dir",
            &job_dir.display().to_string(),
            "-c",
            &config.display().to_string(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn")
}
