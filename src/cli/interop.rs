//! `arbiter export harbor` and `arbiter import harbor` (SPEC §17): argument types and
//! printing; the work is in `crate::interop::harbor`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::interop::harbor::{
    self, ExportOptions, HarborError, Leaderboard, MetadataFlags, Submission,
};

use super::exit;

#[derive(Debug, Args)]
pub(super) struct ExportCmd {
    #[command(subcommand)]
    what: ExportWhat,
}

#[derive(Debug, Subcommand)]
enum ExportWhat {
    /// Write a job as a Harbor 0.26 job folder (docs/harbor.md).
    #[command(
        after_help = "Examples:\n  arbiter export harbor jobs/nightly --out harbor/nightly\n  arbiter export harbor jobs/tb2 --out submission/MyAgent__Sonnet --leaderboard terminal-bench-2.0 \\\n    --agent-url https://example.org/my-agent --agent-display-name 'My Agent' --agent-org 'My Org' \\\n    --model 'anthropic/claude-sonnet-4-5:Claude Sonnet 4.5:Anthropic'"
    )]
    Harbor(ExportHarborCmd),
    /// Send a job's trials as OpenTelemetry traces over OTLP/HTTP (docs/traces.md).
    #[command(
        after_help = "Examples:\n  arbiter export otlp jobs/nightly --endpoint http://localhost:4318\n  OTEL_EXPORTER_OTLP_HEADERS='Authorization=Bearer t0k3n' arbiter export otlp jobs/nightly --endpoint https://otlp.example.com --trial hello__oracle__default__1"
    )]
    Otlp(ExportOtlpCmd),
}

#[derive(Debug, Args)]
struct ExportOtlpCmd {
    /// The arbiter job directory.
    job_dir: PathBuf,
    /// The OTLP/HTTP endpoint: a collector's base URL (http://localhost:4318) or its
    /// /v1/traces URL. Headers from OTEL_EXPORTER_OTLP_HEADERS.
    #[arg(long, value_name = "URL", value_parser = super::parse_otlp)]
    endpoint: String,
    /// Only this trial (by id). Repeatable; default: every finished trial.
    #[arg(long = "trial", value_name = "ID")]
    trials: Vec<String>,
}

#[derive(Debug, Args)]
struct ExportHarborCmd {
    /// The arbiter job directory.
    job_dir: PathBuf,
    /// The folder to write (must not exist). With --leaderboard: the submission's
    /// `<Agent>__<Model>` folder (metadata.yaml and the job folder in it).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Also write the leaderboard's metadata.yaml, and refuse what its submission bot would.
    #[arg(long, value_name = "NAME", value_parser = parse_leaderboard)]
    leaderboard: Option<Leaderboard>,
    /// The dataset directory the job must cover (default: the one holding the job's tasks).
    #[arg(long, value_name = "DIR", requires = "leaderboard")]
    dataset: Option<PathBuf>,
    /// metadata.yaml `agent_url`: the agent's repository or docs.
    #[arg(long = "agent-url", value_name = "URL", requires = "leaderboard")]
    agent_url: Option<String>,
    /// metadata.yaml `agent_display_name`.
    #[arg(
        long = "agent-display-name",
        value_name = "NAME",
        requires = "leaderboard"
    )]
    agent_display_name: Option<String>,
    /// metadata.yaml `agent_org_display_name`.
    #[arg(long = "agent-org", value_name = "ORG", requires = "leaderboard")]
    agent_org: Option<String>,
    /// A model the agent used, as PROVIDER/NAME:DISPLAY NAME:ORG. Repeatable.
    #[arg(
        long = "model",
        value_name = "PROVIDER/NAME:DISPLAY:ORG",
        requires = "leaderboard"
    )]
    models: Vec<String>,
}

#[derive(Debug, Args)]
pub(super) struct ImportCmd {
    #[command(subcommand)]
    what: ImportWhat,
}

#[derive(Debug, Subcommand)]
enum ImportWhat {
    /// Read a Harbor job folder into a new, read-only arbiter job directory.
    #[command(
        after_help = "Example:\n  arbiter import harbor harbor-jobs/2026-11-30__02-31-48 --out jobs/from-harbor\n  arbiter report jobs/from-harbor"
    )]
    Harbor(ImportHarborCmd),
}

#[derive(Debug, Args)]
struct ImportHarborCmd {
    /// The Harbor job folder (its config.json, result.json and trial dirs).
    dir: PathBuf,
    /// The job directory to write (must not exist).
    #[arg(long, value_name = "JOB_DIR")]
    out: PathBuf,
}

fn parse_leaderboard(raw: &str) -> Result<Leaderboard, String> {
    Leaderboard::parse(raw).ok_or_else(|| format!("expected {} (got {raw:?})", Leaderboard::NAMES))
}

/// `arbiter export harbor …`, `arbiter export otlp …`.
pub(super) async fn export(cmd: ExportCmd) -> Result<u8, super::CliError> {
    match cmd.what {
        ExportWhat::Harbor(cmd) => Ok(export_harbor(cmd)?),
        ExportWhat::Otlp(cmd) => export_otlp(cmd).await,
    }
}

/// `arbiter export otlp JOB_DIR --endpoint URL`: exit 1 when a trace was not taken.
async fn export_otlp(cmd: ExportOtlpCmd) -> Result<u8, super::CliError> {
    let report = crate::interop::otlp::export_job(&cmd.job_dir, &cmd.endpoint, &cmd.trials).await?;
    if report.sent + report.failed == 0 {
        println!(
            "traces: no finished trial in {}, nothing sent",
            cmd.job_dir.display()
        );
        return Ok(exit::OK);
    }
    println!("{}", report.line(&cmd.job_dir));
    Ok(if report.failed == 0 {
        exit::OK
    } else {
        exit::FAILURE
    })
}

fn export_harbor(cmd: ExportHarborCmd) -> Result<u8, HarborError> {
    let submission = match cmd.leaderboard {
        None => None,
        Some(board) => Some(Submission {
            board,
            flags: MetadataFlags {
                agent_url: cmd.agent_url,
                agent_display_name: cmd.agent_display_name,
                agent_org: cmd.agent_org,
                models: cmd.models,
            },
            dataset: cmd.dataset,
        }),
    };
    let done = harbor::export(
        &cmd.job_dir,
        &ExportOptions {
            out: cmd.out.clone(),
            submission,
        },
    )?;
    for w in &done.warnings {
        eprintln!("warning: {w}");
    }
    println!(
        "exported {} trial(s) to the Harbor job folder {}",
        done.trials,
        done.job_folder.display()
    );
    if cmd.leaderboard.is_some() {
        println!("metadata.yaml: {}", cmd.out.join("metadata.yaml").display());
    }
    Ok(exit::OK)
}

/// `arbiter import harbor …`.
pub(super) fn import(cmd: ImportCmd) -> Result<u8, HarborError> {
    let ImportWhat::Harbor(cmd) = cmd.what;
    let done = harbor::import(&cmd.dir, &cmd.out)?;
    println!(
        "imported {} trial(s) into {} (read-only); arbiter report {}",
        done.trials,
        done.job_dir.display(),
        done.job_dir.display()
    );
    Ok(exit::OK)
}
