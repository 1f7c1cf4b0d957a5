//! Command-line interface: clap definitions, turning flags into a job, printing, exit codes.
//! The only place that writes to stdout/stderr for the user.

mod report;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use crate::job::{self, ConfigError, JobEvent, RunArgs, StoreError};
use crate::sandbox::{DockerSandbox, SandboxError};

/// Exit codes (SPEC §9).
pub mod exit {
    pub const OK: u8 = 0;
    pub const FAILURE: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const INFRA: u8 = 3;
    pub const INTERRUPTED: u8 = 130;
}

#[derive(Debug, Parser)]
#[command(
    name = "arbiter",
    version,
    about = "Container-based benchmark harness for AI agents",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run agents on tasks in Docker containers and verify the results.
    #[command(
        after_help = "Examples:\n  arbiter run tasks/*/ --agent oracle --agent nop -n 2\n  arbiter run -c job.yaml --job-dir jobs/nightly"
    )]
    Run(RunCmd),
}

#[derive(Debug, Args)]
struct RunCmd {
    /// Task directories (or globs).
    tasks: Vec<String>,
    /// Job configuration file (YAML); flags override it.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Agent to run (built-in: oracle, nop; or one defined in the config). Repeatable.
    #[arg(long = "agent", value_name = "NAME")]
    agents: Vec<String>,
    /// Attempts per task and agent.
    #[arg(short = 'k', long = "attempts", value_name = "ATTEMPTS")]
    attempts: Option<u32>,
    /// Trials run at the same time.
    #[arg(short = 'n', long = "concurrency", value_name = "N")]
    concurrency: Option<usize>,
    /// Job directory (default: jobs/<UTC timestamp>).
    #[arg(long = "job-dir", value_name = "DIR")]
    job_dir: Option<PathBuf>,
    /// Reward at or above which a trial passes (default 1.0).
    #[arg(long = "pass-threshold", value_name = "REWARD")]
    pass_threshold: Option<f64>,
    /// Print only the final summary.
    #[arg(short = 'q', long)]
    quiet: bool,
}

/// Errors that end a command, each with its exit code.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error(
        "{0}\nhint: start a Docker engine (scripts/bootstrap does it on Debian) or set DOCKER_HOST"
    )]
    Engine(#[source] SandboxError),
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl CliError {
    fn code(&self) -> u8 {
        match self {
            CliError::Config(_) | CliError::Engine(_) => exit::USAGE,
            CliError::Store(_) => exit::FAILURE,
        }
    }
}

/// Parse arguments, run, and map the result to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
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
            Command::Run(cmd) => run(cmd).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.code())
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

async fn run(cmd: RunCmd) -> Result<u8, CliError> {
    let args = RunArgs {
        tasks: cmd.tasks,
        config: cmd.config,
        agents: cmd.agents,
        attempts: cmd.attempts,
        concurrency: cmd.concurrency,
        job_dir: cmd.job_dir,
        pass_threshold: cmd.pass_threshold,
    };
    let spec = job::resolve(&args)?;
    let sandbox = Arc::new(DockerSandbox::connect().await.map_err(CliError::Engine)?);

    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(watch_signals(cancel_tx));
    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    let reporter = tokio::spawn(report::plain(
        events_rx,
        cmd.quiet,
        std::io::stderr().is_terminal(),
    ));

    let outcome = job::run(&spec, sandbox, events_tx, cancel_rx).await?;
    let _ = reporter.await;

    let summary = job::summarize(&outcome.records);
    println!("{}", report::summary_table(&summary));
    let infra: usize = summary.iter().map(|a| a.infra).sum();
    if outcome.interrupted {
        println!(
            "interrupted: {} of {} trials finished; resume with: arbiter run ... --job-dir {}",
            outcome.records.len(),
            outcome.planned,
            spec.dir.display()
        );
    }
    println!("job dir: {}", spec.dir.display());
    Ok(if outcome.interrupted {
        exit::INTERRUPTED
    } else if infra > 0 {
        exit::INFRA
    } else {
        exit::OK
    })
}

/// First Ctrl-C / SIGTERM: stop starting trials and let running ones clean up.
async fn watch_signals(cancel: tokio::sync::watch::Sender<bool>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            let _ = cancel.send(true);
        }
    }
    #[cfg(not(unix))]
    {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = cancel.send(true);
        }
    }
}

/// Keep the type used so the event enum stays exhaustive in reporters.
#[allow(dead_code)]
fn _assert_event(_: JobEvent) {}
