//! The floor of a Kubernetes trial: the least API work any harness does to run one oracle
//! trial in a pod, issued directly with kube (no arbiter code).
//!
//! `scripts/bench-k8s` runs it beside `arbiter run benches/fixtures/trivial-k8s --agent oracle
//! --backend kubernetes` in the same invocation, on the image arbiter built and pushed for that
//! task (`--image`, read from arbiter's trial record), so every figure of arbiter's is a ratio
//! against this one measured minutes apart on the same cluster. Per trial, exactly:
//!
//! ```text
//! 1 POST   pods                       the pod (the task's image, its limits, node 0)
//! 2 GET    pods?watch&fieldSelector   from the create's resourceVersion until Ready
//! 3 GET    pods/{name}/exec           the solution (solve.sh's text as `sh -c`)
//! 4 GET    pods/{name}/exec           the tests (test.sh's text as `sh -c`)
//! 5 GET    pods/{name}/exec           `cat /logs/verifier/reward.txt`
//! 6 DELETE pods/{name}                (no grace period, as arbiter deletes its pods)
//! 7 GET    pods?watch&fieldSelector   from the delete's resourceVersion until DELETED
//! ```
//!
//! Sized as arbiter sizes its trial pods (src/sandbox/kubernetes/pod.rs): requests = limits
//! (the task's CPUs and memory; CPU times `$ARBITER_K8S_CPU_REQUEST` when below 1, as arbiter
//! does), `restartPolicy: Never`, no service-account token or service links, `dnsPolicy:
//! Default`, a 1 s grace period, no toleration (so, like arbiter's pods on the project's test
//! cluster, it lands on node 0: the other nodes are tainted). What it leaves out is what arbiter
//! adds for its guarantees: the harness init container (toolbox, network `none`), uploads, the
//! change set, logs, records.
//!
//! Every HTTP request its client sends is counted by a layer under kube's client (as
//! arbiter's own client counts its requests), so a watch that restarts or a retry shows.
//!
//! Usage: `k8s_floor --image REF [-n CONCURRENCY] [-k TRIALS] [--task DIR] [--cpus C]
//! [--memory-mb M]`, with `KUBECONFIG` and `ARBITER_K8S_NAMESPACE` (`scripts/k8s env`). Prints
//! a line of figures and then one JSON line:
//! `{"trials":N,"concurrency":C,"failed":0,"seconds":…,"s_per_trial":…,"trials_per_min":…,"requests_per_trial":…}`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::{StreamExt, TryStreamExt};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, AttachParams, DeleteParams, PostParams, WatchEvent, WatchParams};
use kube::client::{Body, ConfigExt};
use tokio::io::AsyncReadExt;
use tokio::task::JoinSet;
use tower::ServiceBuilder;

/// The label of every pod this makes (and the leftovers it deletes before it starts).
const LABEL: &str = "arbiter.bench";
const LABEL_VALUE: &str = "floor";
/// PID 1 of the pod: sleeps, and ends at once on SIGTERM.
const KEEPALIVE: &str = "trap 'exit 0' TERM; sleep 2147483647 & wait";
/// No step may take longer than this.
const DEADLINE: Duration = Duration::from_secs(120);

#[derive(Debug, Parser)]
#[command(
    about = "The bare Kubernetes work of N oracle trials: the floor arbiter is measured against"
)]
struct Args {
    /// The image (by digest: arbiter's image of the task, from its trial record).
    #[arg(long)]
    image: String,
    /// Trials at the same time.
    #[arg(short = 'n', long, default_value_t = 1)]
    concurrency: usize,
    /// Trials.
    #[arg(short = 'k', long, default_value_t = 8)]
    trials: usize,
    /// The task directory: its solution/solve.sh and tests/test.sh are run.
    #[arg(long, default_value = "benches/fixtures/trivial-k8s")]
    task: PathBuf,
    /// Limits (the task's [environment]).
    #[arg(long, default_value_t = 1.0)]
    cpus: f64,
    #[arg(long, default_value_t = 64)]
    memory_mb: u64,
    /// The namespace (default `$ARBITER_K8S_NAMESPACE`, else the kubeconfig's).
    #[arg(long)]
    namespace: Option<String>,
    /// Print each trial's step times on stderr.
    #[arg(long)]
    steps: bool,
}

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Plan {
    pods: Api<Pod>,
    image: String,
    solve: String,
    test: String,
    resources: ResourceRequirements,
    run: String,
    steps: bool,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => {}
        Err(e) => {
            eprintln!("k8s_floor: {e}");
            std::process::exit(1);
        }
    }
}

async fn run(args: Args) -> Res<()> {
    if args.concurrency == 0 || args.trials == 0 {
        return Err("-n and -k must be at least 1".into());
    }
    let config = kube::Config::infer().await?;
    let namespace = args
        .namespace
        .clone()
        .or_else(|| std::env::var("ARBITER_K8S_NAMESPACE").ok())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| config.default_namespace.clone());
    let requests = Arc::new(AtomicU64::new(0));
    let client = counting_client(&config, Arc::clone(&requests))?;
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let read = |name: &str| -> Res<String> {
        let path = args.task.join(name);
        std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()).into())
    };
    let cpu_request = std::env::var("ARBITER_K8S_CPU_REQUEST")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|f| *f > 0.0 && *f <= 1.0)
        .unwrap_or(1.0);
    let plan = Arc::new(Plan {
        pods,
        image: args.image.clone(),
        solve: read("solution/solve.sh")?,
        test: read("tests/test.sh")?,
        resources: resources(args.cpus, args.memory_mb, cpu_request),
        run: format!("{}-{}", std::process::id(), unique()),
        steps: args.steps,
    });
    // Leftovers of an earlier run that died: not timed, not counted.
    plan.pods
        .delete_collection(
            &DeleteParams::default(),
            &kube::api::ListParams::default().labels(&format!("{LABEL}={LABEL_VALUE}")),
        )
        .await?;
    let before = requests.load(Ordering::SeqCst);
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..args.concurrency {
        let (plan, next) = (Arc::clone(&plan), Arc::clone(&next));
        let total = args.trials as u64;
        workers.spawn(async move {
            let mut failed = 0u64;
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= total {
                    return failed;
                }
                if let Err(e) = tokio::time::timeout(DEADLINE * 6, trial(&plan, i))
                    .await
                    .unwrap_or_else(|_| Err("trial timed out".into()))
                {
                    eprintln!("k8s_floor: trial {i}: {e}");
                    failed += 1;
                }
            }
        });
    }
    let mut failed = 0;
    while let Some(done) = workers.join_next().await {
        failed += done?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let sent = requests.load(Ordering::SeqCst) - before;
    let trials = args.trials as f64;
    println!(
        "floor: {} trials at -n {}: {:.2} s/trial, {:.1} trials/min, {:.1} requests/trial, {failed} failed",
        args.trials,
        args.concurrency,
        seconds / trials,
        trials / seconds * 60.0,
        sent as f64 / trials
    );
    println!(
        "{{\"trials\":{},\"concurrency\":{},\"failed\":{failed},\"seconds\":{seconds:.3},\"s_per_trial\":{:.4},\"trials_per_min\":{:.3},\"requests_per_trial\":{:.3}}}",
        args.trials,
        args.concurrency,
        seconds / trials,
        trials / seconds * 60.0,
        sent as f64 / trials
    );
    if failed > 0 {
        return Err(format!("{failed} of {} trials failed", args.trials).into());
    }
    Ok(())
}

/// One trial: create, watch until Ready, three execs, delete, watch until gone.
async fn trial(plan: &Plan, i: u64) -> Res<()> {
    let name = format!("floor-{}-{i}", plan.run);
    let started = Instant::now();
    let mut marks: Vec<(&str, f64)> = Vec::new();
    let mut mark = |step: &'static str| marks.push((step, started.elapsed().as_secs_f64()));
    let created = plan
        .pods
        .create(&PostParams::default(), &pod(plan, &name))
        .await?;
    let mut seen = created
        .metadata
        .resource_version
        .clone()
        .ok_or("created pod without a resourceVersion")?;
    let result = async {
        watch_until(plan, &name, &mut seen, |event| match event {
            WatchEvent::Added(p) | WatchEvent::Modified(p) => Ok(is_ready(p)),
            WatchEvent::Deleted(_) => Err("pod deleted while starting".into()),
            WatchEvent::Error(e) => Err(format!("watch: {e:?}").into()),
            WatchEvent::Bookmark(_) => Ok(false),
        })
        .await?;
        mark("ready");
        let solved = exec(plan, &name, &plan.solve).await?;
        if solved.0 != 0 {
            return Err(format!("solve.sh exited {}: {}", solved.0, solved.2).into());
        }
        let tested = exec(plan, &name, &plan.test).await?;
        if tested.0 != 0 {
            return Err(format!("test.sh exited {}: {}", tested.0, tested.2).into());
        }
        let reward = exec(plan, &name, "cat /logs/verifier/reward.txt").await?;
        if reward.0 != 0 || reward.1.trim() != "1" {
            return Err(format!("reward {:?} (exit {})", reward.1.trim(), reward.0).into());
        }
        mark("execs");
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    }
    .await;
    // As arbiter deletes its pods (lifecycle.rs): at once, no grace period.
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::background()
    };
    plan.pods.delete(&name, &params).await?;
    // Watched from the last version seen before the delete: the delete's own answer may
    // already carry the version of the DELETED event (a pod removed at once), and a watch
    // from there would never see it.
    watch_until(plan, &name, &mut seen, |event| match event {
        WatchEvent::Deleted(_) => Ok(true),
        WatchEvent::Error(e) => Err(format!("watch: {e:?}").into()),
        _ => Ok(false),
    })
    .await?;
    mark("gone");
    if plan.steps {
        eprintln!("trial {i}: {marks:?}");
    }
    result
}

/// One watch of the pod from `version` until `done` says so (a watch the server ends early
/// is an error: the floor does not pay for a second one silently); `version` is left at the
/// last version the watch saw.
async fn watch_until(
    plan: &Plan,
    name: &str,
    version: &mut String,
    mut done: impl FnMut(&WatchEvent<Pod>) -> Res<bool>,
) -> Res<()> {
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(DEADLINE.as_secs() as u32);
    let mut events = plan.pods.watch(&params, version).await?.boxed();
    while let Some(event) = events.try_next().await? {
        if let WatchEvent::Added(p) | WatchEvent::Modified(p) = &event
            && let Some(v) = &p.metadata.resource_version
        {
            v.clone_into(version);
        }
        if done(&event)? {
            return Ok(());
        }
    }
    Err(format!("the watch of {name} ended first").into())
}

/// `sh -c script` in the pod: exit code, stdout, stderr.
async fn exec(plan: &Plan, name: &str, script: &str) -> Res<(i32, String, String)> {
    let params = AttachParams::default()
        .container("main")
        .stdin(false)
        .stdout(true)
        .stderr(true);
    let mut process = plan.pods.exec(name, ["sh", "-c", script], &params).await?;
    let status = process
        .take_status()
        .ok_or("exec without a status channel")?;
    let (mut out, mut err) = (
        process.stdout().ok_or("exec without stdout")?,
        process.stderr().ok_or("exec without stderr")?,
    );
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let (a, b) = tokio::join!(
        out.read_to_string(&mut stdout),
        err.read_to_string(&mut stderr)
    );
    a?;
    b?;
    let status = status.await.ok_or("exec ended without a status")?;
    process.join().await?;
    let code = match status.status.as_deref() {
        Some("Success") => 0,
        _ => status
            .details
            .and_then(|d| d.causes)
            .and_then(|causes| {
                causes
                    .into_iter()
                    .find(|c| c.reason.as_deref() == Some("ExitCode"))
            })
            .and_then(|c| c.message)
            .and_then(|m| m.parse::<i32>().ok())
            .ok_or_else(|| format!("exec failed: {:?}", status.message))?,
    };
    Ok((code, stdout, stderr))
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// As arbiter's pod.rs: limits the task's, requests the same but CPU times `cpu_request`.
fn resources(cpus: f64, memory_mb: u64, cpu_request: f64) -> ResourceRequirements {
    let millis = (cpus * 1000.0).round().max(1.0) as u64;
    let limits = BTreeMap::from([
        ("cpu".to_string(), Quantity(format!("{millis}m"))),
        (
            "memory".to_string(),
            Quantity(format!("{}Mi", memory_mb.max(4))),
        ),
    ]);
    let mut requests = limits.clone();
    if cpu_request < 1.0 {
        let asked = ((cpus * cpu_request * 1000.0).round() as u64).max(1);
        requests.insert("cpu".to_string(), Quantity(format!("{asked}m")));
    }
    ResourceRequirements {
        limits: Some(limits),
        requests: Some(requests),
        ..Default::default()
    }
}

fn pod(plan: &Plan, name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                LABEL.to_string(),
                LABEL_VALUE.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_string()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            dns_policy: Some("Default".to_string()),
            termination_grace_period_seconds: Some(1),
            containers: vec![Container {
                name: "main".to_string(),
                image: Some(plan.image.clone()),
                command: Some(vec![
                    "sh".to_string(),
                    "-c".to_string(),
                    KEEPALIVE.to_string(),
                ]),
                resources: Some(plan.resources.clone()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

/// A client whose every HTTP request adds one to `requests` (kube's own stack, as
/// arbiter's client builds it, with TCP_NODELAY).
fn counting_client(config: &kube::Config, requests: Arc<AtomicU64>) -> Res<kube::Client> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let hyper: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_request(move |request: http::Request<Body>| {
            requests.fetch_add(1, Ordering::Relaxed);
            request
        })
        .map_err(tower::BoxError::from)
        .service(hyper);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// A few hex digits that differ between runs (pod names of two runs never meet).
fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{nanos:08x}")
}
