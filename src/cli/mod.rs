//! Command-line interface: clap definitions, turning flags into a job, printing, exit codes.
//! The only place that writes to stdout/stderr for the user.

mod agents;
mod analysis;
mod datasets;
mod gc;
mod interop;
pub(crate) mod packet;
mod report;
mod results;
mod serve;
mod tasks;
mod tasks_load;
mod verify;

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use crate::job::{self, ConfigError, RunArgs, RunError, StoreError};
use crate::sandbox::choose::{self, BackendConfig, BackendFlags, BackendKind};
use crate::sandbox::{Sandbox, SandboxError};

/// Exit codes (SPEC §9).
pub(crate) mod exit {
    pub(crate) const OK: u8 = 0;
    pub(crate) const FAILURE: u8 = 1;
    pub(crate) const USAGE: u8 = 2;
    pub(crate) const INFRA: u8 = 3;
    pub(crate) const GATE: u8 = 4;
    pub(crate) const INTERRUPTED: u8 = 130;
}

#[derive(Debug, Parser)]
#[command(
    name = "arbiter",
    version,
    about = "Container-based benchmark harness for AI agents",
    propagate_version = true
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run agents on tasks in Docker containers and verify the results.
    #[command(
        after_help = "Examples:\n  arbiter run tasks/*/ --agent oracle --agent nop -n 2\n  arbiter run -c job.yaml --job-dir jobs/nightly\n  arbiter run -c job.yaml --job-dir jobs/nightly -k 5   # same job, more attempts: runs only the new trials"
    )]
    Run(RunCmd),
    /// Continue a job: run only the trials without a finished record.
    #[command(after_help = "Example:\n  arbiter resume jobs/nightly -n 4")]
    Resume(ResumeCmd),
    /// Regrade: re-run verifiers on the saved agent work (optionally with new tests).
    #[command(
        after_help = "Examples:\n  arbiter verify jobs/nightly --tests fixed-tests/\n  arbiter verify jobs/nightly --trial hello__oracle__default__1 --repeat 5"
    )]
    Verify(verify::VerifyCmd),
    /// Remove containers and images left by arbiter processes that are gone.
    #[command(after_help = "Example:\n  arbiter gc --dry-run")]
    Gc(GcCmd),
    /// Statistics of a job: terminal table, and report.md/json/html + junit.xml in the job dir.
    #[command(
        after_help = "Examples:\n  arbiter report jobs/nightly\n  arbiter report jobs/nightly --format json > baseline.json\n  arbiter report jobs/nightly --format md >> \"$GITHUB_STEP_SUMMARY\""
    )]
    Report(analysis::ReportCmd),
    /// Paired comparison of arms on tasks: within one job (--by), or two jobs arm by arm.
    #[command(
        after_help = "Examples:\n  arbiter compare jobs/ablation --by variant --control default\n  arbiter compare jobs/before jobs/after --seed 7"
    )]
    Compare(analysis::CompareCmd),
    /// CI gate: exit 4 when the job regressed against a baseline report or job.
    #[command(
        after_help = "Examples:\n  arbiter check jobs/pr-123 --baseline baseline.json\n  arbiter check jobs/pr-123 --baseline jobs/main --max-drop 5 --pass-k 3"
    )]
    Check(analysis::CheckCmd),
    /// Fetch agent CLIs into the host cache; list it.
    #[command(
        after_help = "Examples:\n  arbiter agents install claude-code codex\n  arbiter agents install mini-swe-agent@2.4.6\n  arbiter agents list"
    )]
    Agents(agents::AgentsCmd),
    /// Fetch Harbor datasets (registry.json) at their pinned git commits into the local cache.
    #[command(
        after_help = "Example:\n  arbiter datasets pull terminal-bench@2.0 --registry registry.json"
    )]
    Datasets(datasets::DatasetsCmd),
    /// Index finished jobs into the results store (SQLite file or PostgreSQL); idempotent.
    #[command(
        after_help = "Examples:\n  arbiter index jobs/\n  arbiter index jobs/nightly --db postgres://ci:secret@db.internal/arbiter"
    )]
    Index(results::IndexCmd),
    /// Read-only SQL over the results store (docs/results.md has the schema).
    #[command(
        after_help = "Examples:\n  arbiter query 'SELECT agent, SUM(passed), SUM(scored) FROM trials GROUP BY agent'\n  arbiter query 'SELECT * FROM jobs ORDER BY started_at DESC LIMIT 5' --format json"
    )]
    Query(results::QueryCmd),
    /// HTTP JSON API over the job dirs under a root: submit, list, follow, cancel, query.
    #[command(
        after_help = "Examples:\n  arbiter serve --root jobs-root\n  ARBITER_SERVE_TOKEN=s3cret arbiter serve --bind 0.0.0.0 --port 8787 --root /srv/arbiter"
    )]
    Serve(serve::ServeCmd),
    /// Write a job in another harness's format: `export harbor` (a Harbor job folder), or
    /// send its trials as OpenTelemetry traces: `export otlp`.
    #[command(
        after_help = "Examples:\n  arbiter export harbor jobs/nightly --out harbor/nightly\n  arbiter export harbor jobs/tb2 --out sub/MyAgent__Model --leaderboard terminal-bench-2.0 ...\n  arbiter export otlp jobs/nightly --endpoint http://localhost:4318"
    )]
    Export(interop::ExportCmd),
    /// Read another harness's records as a read-only job: `import harbor` (a Harbor job folder).
    #[command(
        after_help = "Example:\n  arbiter import harbor harbor-jobs/2026-11-30__02-31-48 --out jobs/from-harbor"
    )]
    Import(interop::ImportCmd),
    /// Task QA: `tasks check` runs the oracle, nop, repeats and an exploit battery on tasks.
    #[command(after_help = "Example:\n  arbiter tasks check tasks/ -n 4")]
    Tasks(tasks::TasksCmd),
}

#[derive(Debug, Args)]
struct RunCmd {
    /// Task directories, dataset directories (a directory of tasks), or globs.
    tasks: Vec<String>,
    /// Job configuration file (YAML); flags override it.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Agent to run (built-in: oracle, nop; or one defined in the config). Repeatable.
    #[arg(long = "agent", value_name = "NAME")]
    agents: Vec<String>,
    /// Model of every preset agent (claude-code, codex, mini-swe-agent, aider); the provider
    /// anthropic / openai is implied from ANTHROPIC_API_KEY / OPENAI_API_KEY when the config
    /// defines none of that name.
    #[arg(long = "model", value_name = "PROVIDER/NAME")]
    model: Option<String>,
    /// Variant to run (defined in the config). Repeatable; default: all.
    #[arg(long = "variant", value_name = "NAME")]
    variants: Vec<String>,
    /// Attempts per task, agent and variant.
    #[arg(short = 'k', long = "attempts", value_name = "ATTEMPTS")]
    attempts: Option<u32>,
    /// Trials run at the same time.
    #[arg(short = 'n', long = "concurrency", value_name = "N")]
    concurrency: Option<usize>,
    /// Job directory (default: jobs/<UTC timestamp>). An existing one is continued.
    #[arg(long = "job-dir", value_name = "DIR")]
    job_dir: Option<PathBuf>,
    /// Reward at or above which a trial passes (default 1.0).
    #[arg(long = "pass-threshold", value_name = "REWARD")]
    pass_threshold: Option<f64>,
    /// Network of every phase of every task, over what the tasks ask for (Harbor's default
    /// is public): none, public or host. Recorded in each trial as a harness override.
    #[arg(long = "network", value_name = "MODE", value_parser = parse_network)]
    network: Option<job::PhaseNetwork>,
    #[command(flatten)]
    backend: BackendArgs,
    /// Print only the final summary.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Exit 4 when any arm's pass rate is below RATE (a fraction like 0.8, or 80%).
    #[arg(long = "fail-under", value_name = "RATE", value_parser = analysis::parse_rate)]
    fail_under: Option<f64>,
    /// Print one JSON packet on stdout at the end (docs/json-packet.md); human output goes to stderr.
    #[arg(long)]
    json: bool,
    /// Send each trial as an OpenTelemetry trace to this OTLP/HTTP endpoint (a collector's
    /// base URL such as http://localhost:4318, or its /v1/traces URL; `otlp:` in the config;
    /// docs/traces.md). Headers from OTEL_EXPORTER_OTLP_HEADERS.
    #[arg(long = "otlp", value_name = "URL", value_parser = parse_otlp)]
    otlp: Option<String>,
}

/// Where a job's trials run (`run`, `serve`): the backend and its Kubernetes settings, as
/// one set of flags.
#[derive(Debug, Args)]
pub(super) struct BackendArgs {
    /// Where the trials run: docker (default) or kubernetes (SPEC §14; `backend:` in the config).
    #[arg(long = "backend", value_name = "KIND", value_parser = parse_backend)]
    backend: Option<BackendKind>,
    /// Kubernetes namespace of the trials' pods (default: the context's, or ARBITER_K8S_NAMESPACE).
    #[arg(long = "namespace", value_name = "NS")]
    namespace: Option<String>,
    /// Kubernetes context of $KUBECONFIG (default: the current one).
    #[arg(long = "context", value_name = "CONTEXT")]
    context: Option<String>,
    /// Registry that task images built from environment/ are pushed to (Kubernetes; default:
    /// ARBITER_K8S_REGISTRY).
    #[arg(long = "registry", value_name = "HOST[:PORT][/PATH]")]
    registry: Option<String>,
}

impl BackendArgs {
    pub(super) fn flags(self) -> BackendFlags {
        BackendFlags {
            kind: self.backend,
            namespace: self.namespace,
            context: self.context,
            registry: self.registry,
        }
    }
}

#[derive(Debug, Args)]
struct ResumeCmd {
    /// The job directory to continue.
    job_dir: PathBuf,
    /// Trials run at the same time (default: as saved).
    #[arg(short = 'n', long = "concurrency", value_name = "N")]
    concurrency: Option<usize>,
    /// Also run again every trial whose final record is an infra_error (after an outage); its
    /// new record keeps the earlier errors in previous_errors. Scored trials never run again.
    #[arg(long = "retry-infra")]
    retry_infra: bool,
    /// Print only the final summary.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Print one JSON packet on stdout at the end (docs/json-packet.md); human output goes to stderr.
    #[arg(long)]
    json: bool,
    /// Send each trial that finishes now as an OpenTelemetry trace to this OTLP/HTTP endpoint
    /// (over the job's saved `otlp:`; docs/traces.md).
    #[arg(long = "otlp", value_name = "URL", value_parser = parse_otlp)]
    otlp: Option<String>,
}

#[derive(Debug, Args)]
struct GcCmd {
    /// List what would be removed without removing it.
    #[arg(long)]
    dry_run: bool,
    /// Where to collect: docker (default) or kubernetes.
    #[arg(long = "backend", value_name = "KIND", value_parser = parse_backend)]
    backend: Option<BackendKind>,
    /// Kubernetes namespace (default: the context's, or ARBITER_K8S_NAMESPACE).
    #[arg(long = "namespace", value_name = "NS")]
    namespace: Option<String>,
    /// Kubernetes context of $KUBECONFIG (default: the current one).
    #[arg(long = "context", value_name = "CONTEXT")]
    context: Option<String>,
}

/// Errors that end a command, each with its exit code.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The chosen backend could not be connected (with a hint what to do).
    #[error("{0}")]
    Connect(#[from] choose::ConnectError),
    /// The backend failed while the command asked it something.
    #[error("{0}")]
    Sandbox(#[source] SandboxError),
    #[error("{0}")]
    Run(#[from] RunError),
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Report(#[from] crate::report::ReportError),
    #[error("{0}")]
    Toolbox(#[from] crate::sandbox::toolbox::ToolboxError),
    #[error("{0}")]
    Regrade(#[from] crate::regrade::RegradeError),
    /// The job cannot start on its backend: one line per problem.
    #[error("{0}")]
    Preflight(#[from] job::PreflightError),
    #[error("{0}")]
    Results(#[from] crate::results::ResultsError),
    #[error("{0}")]
    Harbor(#[from] crate::interop::harbor::HarborError),
    #[error("{0}")]
    Serve(#[from] crate::serve::ServeError),
    #[error("{0}")]
    Otlp(#[from] crate::interop::otlp::OtlpError),
}

impl CliError {
    fn code(&self) -> u8 {
        match self {
            CliError::Config(_)
            | CliError::Connect(_)
            | CliError::Sandbox(_)
            | CliError::Preflight(_)
            | CliError::Run(RunError::Busy { .. }) => exit::USAGE,
            CliError::Run(RunError::Store(_) | RunError::Gateway(_)) | CliError::Store(_) => {
                exit::FAILURE
            }
            CliError::Report(crate::report::ReportError::Io { .. }) => exit::FAILURE,
            CliError::Report(_) | CliError::Toolbox(_) => exit::USAGE,
            CliError::Regrade(crate::regrade::RegradeError::Store(_)) => exit::FAILURE,
            CliError::Regrade(_) => exit::USAGE,
            CliError::Results(e) if e.is_usage() => exit::USAGE,
            CliError::Results(_) => exit::FAILURE,
            CliError::Harbor(e) if e.is_usage() => exit::USAGE,
            CliError::Harbor(_) => exit::FAILURE,
            CliError::Serve(e) if e.is_usage() => exit::USAGE,
            CliError::Serve(_) => exit::FAILURE,
            CliError::Otlp(e) if e.is_usage() => exit::USAGE,
            CliError::Otlp(_) => exit::FAILURE,
        }
    }
}

/// Parse arguments, run, and map the result to an exit code.
pub fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => match packet::wants_json(&argv)
            .then(|| packet::Packet::of_clap(&e, &argv))
            .flatten()
        {
            Some(p) => {
                let _ = e.print();
                p.print();
                return ExitCode::from(p.exit_code);
            }
            None => e.exit(),
        },
    };
    // `--json`: the command whose end is one packet on stdout.
    let json = match &cli.command {
        Command::Run(c) if c.json => Some("run"),
        Command::Resume(c) if c.json => Some("resume"),
        Command::Verify(c) if c.json => Some("verify"),
        _ => None,
    };
    init_tracing();
    // Worker stacks of 32 MiB (virtual; only what is touched is used): a trial's future on
    // the Kubernetes backend nests pod creation inside the change set inside the collect
    // phase, and a debug build's poll frames overflowed tokio's 2 MiB default there.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(32 * 1024 * 1024)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(cmd) => {
                let quiet = cmd.quiet;
                let args = RunArgs {
                    tasks: cmd.tasks,
                    config: cmd.config,
                    agents: cmd.agents,
                    attempts: cmd.attempts,
                    concurrency: cmd.concurrency,
                    job_dir: cmd.job_dir,
                    pass_threshold: cmd.pass_threshold,
                    variants: cmd.variants,
                    model: cmd.model,
                    network: cmd.network,
                    retry_infra: false,
                    backend: cmd.backend.flags(),
                    otlp: cmd.otlp,
                };
                run(args, quiet, cmd.fail_under, json).await
            }
            Command::Resume(cmd) => {
                let config = cmd.job_dir.join("job.yaml");
                if !config.is_file() {
                    let dir = cmd.job_dir.display();
                    return Err(CliError::Config(ConfigError::Field {
                        source_name: dir.to_string(),
                        field: "job.yaml".to_string(),
                        message: "missing: not a job directory".to_string(),
                    }));
                }
                let args = RunArgs {
                    config: Some(config),
                    job_dir: Some(cmd.job_dir),
                    concurrency: cmd.concurrency,
                    retry_infra: cmd.retry_infra,
                    otlp: cmd.otlp,
                    ..RunArgs::default()
                };
                run(args, cmd.quiet, None, json).await
            }
            Command::Gc(cmd) => {
                let config = BackendConfig::default().with_flags(&BackendFlags {
                    kind: cmd.backend,
                    namespace: cmd.namespace,
                    context: cmd.context,
                    registry: None,
                });
                let sandbox = choose::connect(&config, None).await?;
                let report = gc::collect(&*sandbox, cmd.dry_run)
                    .await
                    .map_err(CliError::Sandbox)?;
                println!("{report}");
                Ok(exit::OK)
            }
            Command::Verify(cmd) => verify::main(cmd).await,
            Command::Report(cmd) => Ok(analysis::report(cmd)?),
            Command::Compare(cmd) => Ok(analysis::compare(cmd)?),
            Command::Check(cmd) => Ok(analysis::check(cmd)?),
            Command::Agents(cmd) => Ok(agents::main(cmd).await),
            Command::Datasets(cmd) => Ok(datasets::main(cmd).await),
            Command::Tasks(cmd) => Ok(tasks::main(cmd).await),
            Command::Index(cmd) => Ok(results::index(cmd).await?),
            Command::Query(cmd) => Ok(results::query(cmd).await?),
            Command::Serve(cmd) => Ok(serve::main(cmd).await?),
            Command::Export(cmd) => interop::export(cmd).await,
            Command::Import(cmd) => Ok(interop::import(cmd)?),
        }
    });
    // Trials still cleaning up after a second interrupt are abandoned here on purpose.
    runtime.shutdown_background();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            if let Some(command) = json {
                packet::Packet::of_error(command, &e).print();
            }
            ExitCode::from(e.code())
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Masks every secret a trial resolved, whatever the level (the engine client logs request
        // bodies, exec env included, at debug).
        .with_writer(|| crate::trial::scrub::ScrubbingWriter(std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// `arbiter run` / `arbiter resume`. With `json` (the command's name), every human line goes
/// to stderr and one packet ([`packet::Packet`]) ends stdout.
async fn run(
    args: RunArgs,
    quiet: bool,
    fail_under: Option<f64>,
    json: Option<&str>,
) -> Result<u8, CliError> {
    // Human output: stdout, or stderr when stdout is the packet's.
    let say = |line: &str| {
        if json.is_some() {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    };
    let spec = job::resolve(&args)?;
    // The backend the job chose, connected once; what it cannot give the job (a network, GPUs)
    // is refused before any trial starts, one line each (exit 2), nothing started.
    let toolbox = crate::sandbox::toolbox::locate_toolbox()?;
    let sandbox = choose::connect(&spec.backend, Some(&toolbox)).await?;
    job::preflight(&spec, &*sandbox)
        .await
        .map_err(|e| match e {
            job::PreflightError::Config(e) => CliError::Config(e),
            job::PreflightError::Sandbox(e) => CliError::Sandbox(e),
            not_ready => CliError::Preflight(not_ready),
        })?;

    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(None);
    tokio::spawn(watch_signals(cancel_tx));
    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    let tty = std::io::stderr().is_terminal();
    let reporter = tokio::spawn(report::consume(events_rx, quiet, tty));

    let outcome = job::run(&spec, sandbox.clone(), events_tx, cancel_rx).await?;
    let summary = job::summarize(&outcome.records);
    sandbox.finish(outcome.records.len()).await;
    let end = |code: u8| {
        if let Some(command) = json {
            let counts = packet::Counts::of_job(&summary, outcome.planned);
            let dir = Some(spec.dir.display().to_string());
            packet::Packet::finished(command, code, counts, dir).print();
        }
        code
    };
    if let Some(removed) = outcome.reaped {
        eprintln!(
            "second interrupt: killed and removed {removed} container(s)/image(s) of this job"
        );
        say(&format!(
            "interrupted; resume with: arbiter resume {}",
            spec.dir.display()
        ));
        return Ok(end(exit::INTERRUPTED));
    }
    let _ = reporter.await;
    // The job's records into the results store (a warning when it fails; never the exit code).
    results::after_job(&spec.dir).await;

    say(&report::summary_table(&summary));
    let infra: usize = summary.iter().map(|a| a.infra).sum();
    if outcome.interrupted {
        say(&format!(
            "interrupted: {} of {} trials finished; resume with: arbiter resume {}",
            outcome.records.len(),
            outcome.planned,
            spec.dir.display()
        ));
    }
    if let Some(traces) = &outcome.traces {
        say(&traces.line(&spec.dir));
    }
    say(&format!("job dir: {}", spec.dir.display()));
    let gate_failed = match fail_under {
        Some(threshold) if !outcome.interrupted => {
            let (lines, failed) = analysis::fail_under_lines(&summary, threshold);
            for line in lines {
                say(&line);
            }
            failed
        }
        _ => false,
    };
    Ok(end(if outcome.interrupted {
        exit::INTERRUPTED
    } else if gate_failed {
        exit::GATE
    } else if infra > 0 {
        exit::INFRA
    } else {
        exit::OK
    }))
}

/// `--network MODE`.
fn parse_network(raw: &str) -> Result<job::PhaseNetwork, String> {
    job::PhaseNetwork::parse(raw)
        .ok_or_else(|| format!("expected {} (got {raw:?})", job::PhaseNetwork::NAMES))
}

/// `--otlp URL`, `export otlp --endpoint URL`: the URL traces are POSTed to.
fn parse_otlp(raw: &str) -> Result<String, String> {
    crate::interop::otlp::traces_url(raw)
}

/// `--backend kubernetes [--namespace NS --context C --registry R]`, `backend:` in the config.
fn parse_backend(raw: &str) -> Result<BackendKind, String> {
    BackendKind::parse(raw).ok_or_else(|| format!("expected {} (got {raw:?})", BackendKind::NAMES))
}

/// The local engine (the default backend) with the harness toolbox: every command arbiter
/// runs in a container comes from it (SPEC §5).
async fn engine_with_toolbox() -> Result<Arc<dyn Sandbox>, CliError> {
    let toolbox = crate::sandbox::toolbox::locate_toolbox()?;
    Ok(choose::connect(&BackendConfig::default(), Some(&toolbox)).await?)
}

/// Ctrl-C and SIGTERM, as one stream of interrupts.
struct Interrupts {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Interrupts {
    /// `None` (with a warning) when the handlers cannot be installed.
    fn install() -> Option<Interrupts> {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(int), Ok(term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            tracing::warn!("cannot install signal handlers");
            return None;
        };
        Some(Interrupts { int, term })
    }

    /// The next interrupt, of either kind.
    async fn next(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

/// First Ctrl-C / SIGTERM: stop starting trials and let running ones clean up.
/// Second: stop waiting and remove everything at once.
async fn watch_signals(cancel: tokio::sync::watch::Sender<Option<job::CancelReason>>) {
    let Some(mut interrupts) = Interrupts::install() else {
        return;
    };
    let mut count = 0;
    loop {
        interrupts.next().await;
        count += 1;
        let reason = if count == 1 {
            job::CancelReason::Interrupt
        } else {
            job::CancelReason::HardInterrupt
        };
        let _ = cancel.send(Some(reason));
    }
}
