//! The bare engine work of one arbiter oracle trial, issued directly through bollard.
//!
//! `scripts/bench` runs this beside `arbiter run benches/fixtures/trivial --agent oracle` to
//! measure arbiter's per-trial overhead. It does NOT use arbiter's code: every trial issues the
//! Docker API calls a snapshot-mode oracle trial of arbiter issued when issue 16 began, with
//! the same bodies and in the same order, minus the change set (no `changes` list, no archive
//! reads of the changed paths, no size inspection), and nothing else (no trial directory, no
//! log files, no fsync, no tar extraction, no record). It is kept as that fixed reference:
//! arbiter itself now needs fewer of these (one upload where this makes two, one inspection
//! after the kill, one archive read of `/logs` for the agent's logs and `/logs/artifacts`, no
//! inspection of the snapshot image), so a ratio below 1 is arbiter doing less engine work
//! than this sequence, change set included:
//!
//! ```text
//!  1 POST /containers/create       agent container (init, limits, network none, keep-alive)
//!  2 POST /containers/{id}/start
//!  3 PUT  /containers/{id}/archive base dirs (/arbiter/instruction.md, /logs/agent)
//!  4 PUT  /containers/{id}/archive solution/
//!  5 POST /containers/{id}/exec    solve.sh (attached)
//!  6 POST /exec/{id}/start         drain stdout/stderr
//!  7 GET  /exec/{id}/json          exit code
//!  8 POST /containers/{id}/kill    SIGKILL
//!  9 GET  /containers/{id}/json    until not running (arbiter's kill waits for the stop)
//! 10 GET  /containers/{id}/json    OOM check
//! 11 GET  /containers/{id}/archive /logs/agent
//! 12 POST /commit                  snapshot image
//! 13 DELETE /containers/{id}       agent container
//! 14 POST /containers/create       verifier container from the snapshot
//! 15 POST /containers/{id}/start
//! 16-18  exec prep (rm -rf /tests /logs/verifier && mkdir -p ...) create/start/inspect
//! 19 PUT  /containers/{id}/archive tests/
//! 20-22  exec test.sh create/start/inspect
//! 23 GET  /containers/{id}/archive /logs/verifier
//! 24 DELETE /containers/{id}       verifier container
//! 25 DELETE /images/{id}           snapshot image
//! ```
//!
//! Once per run, like once per arbiter job: version negotiation, ping, the job's leftover
//! sweep (container list + image list by label), image inspect.
//! Everything is labelled `arbiter.managed=true`, `arbiter.job=bench-bare`, and, like arbiter's
//! resources, `arbiter.owner=<host>/<pid>/<start>` (so `arbiter gc` can clean up after a crash).
//!
//! With `--floor` it issues the floor sequence instead (see `floor`), a machine's reference
//! point for the least engine work of any trial.
//!
//! Usage: `bare_trial [-n TRIALS] [-c CONCURRENCY] [--task DIR] [--floor]`; prints one JSON line:
//! `{"trials":N,"concurrency":C,"failed":0,"total_seconds":…,"per_trial_seconds":…,…}`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CommitContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    KillContainerOptionsBuilder, ListContainersOptionsBuilder, ListImagesOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder, UploadToContainerOptionsBuilder,
};
use clap::Parser;
use futures_util::StreamExt;
use tokio::task::JoinSet;

/// Same keep-alive as src/sandbox/docker.rs.
const KEEPALIVE: &str = "trap '' TERM INT HUP; while :; do sleep 3600; done";
const JOB: &str = "bench-bare";

#[derive(Debug, Parser)]
#[command(about = "Issue the Docker API calls of N arbiter oracle trials directly")]
struct Args {
    /// Trials.
    #[arg(short = 'n', long, default_value_t = 40)]
    trials: usize,
    /// Trials at the same time.
    #[arg(short = 'c', long, default_value_t = 1)]
    concurrency: usize,
    /// The task directory (its task.toml is not read: the fixture's values are below).
    #[arg(long, default_value = "benches/fixtures/trivial")]
    task: PathBuf,
    /// Image (the fixture's docker_image).
    #[arg(long, default_value = "arbiter/busybox:latest")]
    image: String,
    /// Limits (the fixture's [environment]).
    #[arg(long, default_value_t = 1.0)]
    cpus: f64,
    #[arg(long, default_value_t = 64)]
    memory_mb: i64,
    #[arg(long, default_value_t = 64)]
    pids_limit: i64,
    /// Issue the floor sequence instead (see `floor`): the least engine work of any trial.
    #[arg(long)]
    floor: bool,
}

/// What every trial uploads, built once.
struct Payload {
    image: String,
    cpus: f64,
    memory_mb: i64,
    pids_limit: i64,
    base_tar: Vec<u8>,
    solution_tar: Vec<u8>,
    tests_tar: Vec<u8>,
    /// `--floor`'s single upload: base dirs (with `/logs/verifier`), solution and tests.
    floor_tar: Vec<u8>,
}

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn labels(trial: &str, role: &str) -> HashMap<String, String> {
    HashMap::from([
        ("arbiter.owner".to_string(), owner().to_string()),
        ("arbiter.managed".to_string(), "true".to_string()),
        ("arbiter.job".to_string(), JOB.to_string()),
        ("arbiter.trial".to_string(), trial.to_string()),
        ("arbiter.role".to_string(), role.to_string()),
    ])
}

/// `<host>/<pid>/<process start time>`, the format of arbiter's `arbiter.owner` label.
fn owner() -> &'static str {
    static OWNER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OWNER.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown-host".to_string());
        let start = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| {
                let rest = &stat[stat.rfind(')')? + 1..];
                rest.split_whitespace().nth(19)?.parse::<u64>().ok()
            })
            .unwrap_or(0);
        format!("{host}/{}/{start}", std::process::id())
    })
}

/// Arbiter's `shell_script` (src/agent/mod.rs).
fn shell_script(path: &str) -> Vec<String> {
    vec![
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "if command -v bash >/dev/null 2>&1; then exec bash {path}; else exec sh {path}; fi"
        ),
    ]
}

fn dir_tar(dir: &std::path::Path, prefix: &str) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Deterministic);
    builder.append_dir_all(prefix, dir)?;
    builder.into_inner()
}

fn base_tar(instruction: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    base_entries(&mut builder, instruction, false)?;
    builder.into_inner()
}

/// The base dirs, the solution and the tests in one archive (and `/logs/verifier`).
fn floor_tar(instruction: &[u8], task: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    base_entries(&mut builder, instruction, true)?;
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Deterministic);
    builder.append_dir_all("solution", task.join("solution"))?;
    builder.append_dir_all("tests", task.join("tests"))?;
    builder.into_inner()
}

fn base_entries(
    builder: &mut tar::Builder<Vec<u8>>,
    instruction: &[u8],
    verifier_logs: bool,
) -> std::io::Result<()> {
    let mut entries: Vec<(&str, Option<&[u8]>, u32)> = vec![
        ("arbiter/", None, 0o755),
        ("arbiter/instruction.md", Some(instruction), 0o644),
        ("logs/", None, 0o755),
        ("logs/agent/", None, 0o777),
    ];
    if verifier_logs {
        entries.push(("logs/verifier/", None, 0o777));
    }
    for (path, content, mode) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        match content {
            Some(bytes) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(bytes.len() as u64);
                builder.append_data(&mut header, path, bytes)?;
            }
            None => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, path, std::io::empty())?;
            }
        }
    }
    Ok(())
}

async fn create(
    docker: &Docker,
    p: &Payload,
    image: &str,
    env: Vec<String>,
    labels: HashMap<String, String>,
) -> Res<String> {
    let memory = p.memory_mb.saturating_mul(1024 * 1024);
    let host_config = HostConfig {
        init: Some(true),
        nano_cpus: Some((p.cpus * 1e9) as i64),
        memory: Some(memory),
        memory_swap: Some(memory),
        pids_limit: Some(p.pids_limit),
        network_mode: Some("none".to_string()),
        ..Default::default()
    };
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        entrypoint: Some(vec![
            "sh".to_string(),
            "-c".to_string(),
            KEEPALIVE.to_string(),
        ]),
        cmd: Some(vec!["arbiter-keepalive".to_string()]),
        env: Some(env),
        labels: Some(labels),
        network_disabled: Some(true),
        host_config: Some(host_config),
        ..Default::default()
    };
    Ok(docker.create_container(None, body).await?.id)
}

async fn put(docker: &Docker, id: &str, tar: &[u8]) -> Res<()> {
    let options = UploadToContainerOptionsBuilder::new().path("/").build();
    docker
        .upload_to_container(id, Some(options), bollard::body_full(tar.to_vec().into()))
        .await?;
    Ok(())
}

/// create exec → start attached → drain → inspect; returns the exit code.
async fn exec(docker: &Docker, id: &str, argv: Vec<String>, user: Option<&str>) -> Res<i64> {
    let options = CreateExecOptions {
        cmd: Some(argv),
        env: None,
        user: user.map(str::to_string),
        working_dir: None,
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        attach_stdin: Some(false),
        tty: Some(false),
        ..Default::default()
    };
    let created = docker.create_exec(id, options).await?;
    let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&created.id, None).await?
    else {
        return Err("engine detached the exec".into());
    };
    while let Some(chunk) = output.next().await {
        chunk?;
    }
    let inspect = docker.inspect_exec(&created.id).await?;
    Ok(inspect.exit_code.unwrap_or(-1))
}

async fn get(docker: &Docker, id: &str, path: &str) -> Res<u64> {
    let options = DownloadFromContainerOptionsBuilder::new()
        .path(path)
        .build();
    let mut stream = docker.download_from_container(id, Some(options));
    let mut bytes = 0u64;
    while let Some(chunk) = stream.next().await {
        bytes += chunk?.len() as u64;
    }
    Ok(bytes)
}

async fn running(docker: &Docker, id: &str) -> Res<bool> {
    let info = docker.inspect_container(id, None).await?;
    Ok(info.state.and_then(|s| s.running).unwrap_or(false))
}

async fn remove_container(docker: &Docker, id: &str) -> Res<()> {
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    docker.remove_container(id, Some(options)).await?;
    Ok(())
}

async fn remove_image(docker: &Docker, id: &str) -> Res<()> {
    let options = RemoveImageOptionsBuilder::new().force(true).build();
    docker.remove_image(id, Some(options), None).await?;
    Ok(())
}

/// One trial's engine calls. Resources created are pushed to `made` so a failure can clean up.
async fn trial(docker: &Docker, p: &Payload, n: usize, made: &mut Made) -> Res<()> {
    let name = format!("bare-{n}");
    // Environment.
    let env = vec!["ARBITER_INSTRUCTION_FILE=/arbiter/instruction.md".to_string()];
    let agent = create(docker, p, &p.image, env, labels(&name, "agent")).await?;
    made.containers.push(agent.clone());
    docker.start_container(&agent, None).await?;
    put(docker, &agent, &p.base_tar).await?;
    put(docker, &agent, &p.solution_tar).await?;
    // Agent.
    let code = exec(docker, &agent, shell_script("/solution/solve.sh"), None).await?;
    if code != 0 {
        return Err(format!("solve.sh exited with {code}").into());
    }
    // Collect: kill and wait for the stop, OOM check, agent logs, snapshot.
    let options = KillContainerOptionsBuilder::new().signal("KILL").build();
    docker.kill_container(&agent, Some(options)).await?;
    let mut stopped = false;
    for _ in 0..100 {
        if !running(docker, &agent).await? {
            stopped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if !stopped {
        return Err("container still running 2s after SIGKILL".into());
    }
    let _oom = docker.inspect_container(&agent, None).await?;
    get(docker, &agent, "/logs/agent").await?;
    let options = CommitContainerOptionsBuilder::new()
        .container(&agent)
        .pause(false)
        .build();
    let config = ContainerConfig {
        labels: Some(labels(&name, "snapshot")),
        ..Default::default()
    };
    let snapshot = docker.commit_container(options, config).await?.id;
    made.images.push(snapshot.clone());
    remove_container(docker, &agent).await?;
    made.containers.retain(|c| c != &agent);
    // Verify.
    let verifier = create(docker, p, &snapshot, Vec::new(), labels(&name, "verifier")).await?;
    made.containers.push(verifier.clone());
    docker.start_container(&verifier, None).await?;
    let prep = vec![
        "sh".to_string(),
        "-c".to_string(),
        "rm -rf /tests /logs/verifier && mkdir -p /tests /logs/verifier && chmod 0777 /logs/verifier"
            .to_string(),
    ];
    let code = exec(docker, &verifier, prep, Some("0")).await?;
    if code != 0 {
        return Err(format!("verifier prep exited with {code}").into());
    }
    put(docker, &verifier, &p.tests_tar).await?;
    let code = exec(docker, &verifier, shell_script("/tests/test.sh"), None).await?;
    if code != 0 {
        return Err(format!("test.sh exited with {code}").into());
    }
    if get(docker, &verifier, "/logs/verifier").await? == 0 {
        return Err("no /logs/verifier".into());
    }
    // Cleanup.
    remove_container(docker, &verifier).await?;
    made.containers.retain(|c| c != &verifier);
    remove_image(docker, &snapshot).await?;
    made.images.retain(|i| i != &snapshot);
    Ok(())
}

/// The floor: the least engine work any container trial of this fixture can do, with no
/// isolation at all: one container, one upload (instruction, solution and tests together),
/// `solve.sh` and `test.sh` as two execs in it, one read of `/logs/verifier`, one forced
/// removal — 10 requests, one container start, two runc execs. Not a safe harness (the
/// verifier shares the agent's container and processes): a machine's reference point for
/// engine CPU per trial, which no harness that runs both scripts in a container goes below.
async fn floor(docker: &Docker, p: &Payload, n: usize, made: &mut Made) -> Res<()> {
    let name = format!("bare-floor-{n}");
    let env = vec!["ARBITER_INSTRUCTION_FILE=/arbiter/instruction.md".to_string()];
    let id = create(docker, p, &p.image, env, labels(&name, "agent")).await?;
    made.containers.push(id.clone());
    docker.start_container(&id, None).await?;
    put(docker, &id, &p.floor_tar).await?;
    let code = exec(docker, &id, shell_script("/solution/solve.sh"), None).await?;
    if code != 0 {
        return Err(format!("solve.sh exited with {code}").into());
    }
    let code = exec(docker, &id, shell_script("/tests/test.sh"), None).await?;
    if code != 0 {
        return Err(format!("test.sh exited with {code}").into());
    }
    if get(docker, &id, "/logs/verifier").await? == 0 {
        return Err("no /logs/verifier".into());
    }
    remove_container(docker, &id).await?;
    made.containers.retain(|c| c != &id);
    Ok(())
}

#[derive(Default)]
struct Made {
    containers: Vec<String>,
    images: Vec<String>,
}

/// Remove everything this process labelled (`arbiter.job=bench-bare` and its own owner label,
/// so a concurrent run is left alone). Called once at the start, as arbiter's per-job sweep of
/// leftovers is (it finds nothing), and again after a failure.
async fn sweep(docker: &Docker) {
    let filters = HashMap::from([(
        "label".to_string(),
        vec![
            format!("arbiter.job={JOB}"),
            format!("arbiter.owner={}", owner()),
        ],
    )]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    if let Ok(list) = docker.list_containers(Some(options)).await {
        for c in list {
            if let Some(id) = c.id {
                let _ = remove_container(docker, &id).await;
            }
        }
    }
    let options = ListImagesOptionsBuilder::new().filters(&filters).build();
    if let Ok(list) = docker.list_images(Some(options)).await {
        for i in list {
            let _ = remove_image(docker, &i.id).await;
        }
    }
}

#[tokio::main]
async fn main() -> Res<()> {
    let args = Args::parse();
    let started = Instant::now();
    // Once per run, like arbiter's connect + ensure_image once per job.
    let docker = Docker::connect_with_defaults()?
        .with_timeout(Duration::from_secs(120))
        .negotiate_version()
        .await?;
    docker.ping().await?;
    sweep(&docker).await;
    docker.inspect_image(&args.image).await?;
    let instruction = std::fs::read(args.task.join("instruction.md"))?;
    let base = base_tar(&instruction)?;
    let solution_tar = dir_tar(&args.task.join("solution"), "solution")?;
    let tests_tar = dir_tar(&args.task.join("tests"), "tests")?;
    let floor_tar = floor_tar(&instruction, &args.task)?;
    let payload = Arc::new(Payload {
        image: args.image.clone(),
        cpus: args.cpus,
        memory_mb: args.memory_mb,
        pids_limit: args.pids_limit,
        base_tar: base,
        solution_tar,
        tests_tar,
        floor_tar,
    });
    let floor_only = args.floor;
    let setup_seconds = started.elapsed().as_secs_f64();

    let loop_started = Instant::now();
    let mut next = 0usize;
    let mut failed = 0usize;
    let mut first_error: Option<String> = None;
    let mut running: JoinSet<Res<()>> = JoinSet::new();
    let concurrency = args.concurrency.max(1);
    loop {
        while next < args.trials && running.len() < concurrency {
            let docker = docker.clone();
            let payload = payload.clone();
            let n = next;
            running.spawn(async move {
                let mut made = Made::default();
                let result = if floor_only {
                    floor(&docker, &payload, n, &mut made).await
                } else {
                    trial(&docker, &payload, n, &mut made).await
                };
                if result.is_err() {
                    for id in &made.containers {
                        let _ = remove_container(&docker, id).await;
                    }
                    for id in &made.images {
                        let _ = remove_image(&docker, id).await;
                    }
                }
                result
            });
            next += 1;
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        let outcome = match joined {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = outcome {
            failed += 1;
            first_error.get_or_insert(e);
        }
    }
    let loop_seconds = loop_started.elapsed().as_secs_f64();
    if failed > 0 {
        sweep(&docker).await;
    }
    let total_seconds = started.elapsed().as_secs_f64();
    let line = serde_json::json!({
        "trials": args.trials,
        "concurrency": concurrency,
        "sequence": if args.floor { "floor" } else { "trial" },
        "failed": failed,
        "total_seconds": round4(total_seconds),
        "setup_seconds": round4(setup_seconds),
        "loop_seconds": round4(loop_seconds),
        "per_trial_seconds": round4(total_seconds / args.trials.max(1) as f64),
        "first_error": first_error,
    });
    println!("{line}");
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}
