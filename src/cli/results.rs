//! `arbiter index` and `arbiter query`: the results store across jobs (SPEC §16, the logic is
//! `crate::results`), and the index a job gets when it ends.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::results::{Format, Location, ResultsError, Store};

use super::exit;

#[derive(Debug, Args)]
pub(super) struct IndexCmd {
    /// Job directories, or folders holding job directories.
    #[arg(required = true, value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// The store: a SQLite file or postgres://user:pass@host/db (default: $ARBITER_DB, else
    /// ~/.local/share/arbiter/results.db).
    #[arg(long = "db", value_name = "PATH|URL")]
    db: Option<String>,
    /// Print only the final line.
    #[arg(short = 'q', long)]
    quiet: bool,
}

#[derive(Debug, Args)]
pub(super) struct QueryCmd {
    /// One SQL statement; the store is opened read-only (a write is refused).
    #[arg(value_name = "SQL")]
    sql: String,
    /// Output: table, csv or json.
    #[arg(long, value_name = "FORMAT", default_value = "table", value_parser = parse_format)]
    format: Format,
    /// The store: a SQLite file or postgres://… (default: $ARBITER_DB, else
    /// ~/.local/share/arbiter/results.db).
    #[arg(long = "db", value_name = "PATH|URL")]
    db: Option<String>,
}

fn parse_format(raw: &str) -> Result<Format, String> {
    Format::parse(raw).ok_or_else(|| format!("expected {} (got {raw:?})", Format::NAMES))
}

fn location(flag: Option<&str>) -> Result<Location, ResultsError> {
    Location::chosen(flag)?.ok_or_else(|| ResultsError::Location {
        what: crate::results::ENV.to_string(),
        message: "off: the results store is turned off (name one with --db PATH|URL)".into(),
    })
}

/// `arbiter index DIR...`: every job dir is read and checked first; then each job is written
/// in its own transaction.
pub(super) async fn index(cmd: IndexCmd) -> Result<u8, ResultsError> {
    let location = location(cmd.db.as_deref())?;
    let dirs = crate::results::find_jobs(&cmd.dirs)?;
    let mut jobs = Vec::with_capacity(dirs.len());
    for dir in &dirs {
        jobs.push(crate::results::read_job(dir)?);
    }
    let mut store = Store::open(&location).await?;
    let mut trials = 0;
    for job in &jobs {
        store.index(job).await?;
        trials += job.trials;
        if !cmd.quiet {
            println!(
                "indexed {} ({}, job id {}): {} trial(s)",
                job.dir.display(),
                job.name,
                job.job_id,
                job.trials
            );
        }
    }
    println!(
        "{} job(s), {trials} trial(s) indexed into {}",
        jobs.len(),
        location.shown()
    );
    Ok(exit::OK)
}

/// `arbiter query SQL`: read-only.
pub(super) async fn query(cmd: QueryCmd) -> Result<u8, ResultsError> {
    let location = location(cmd.db.as_deref())?;
    let mut store = Store::open_read_only(&location).await?;
    let answer = store.query(&cmd.sql).await?;
    print!("{}", crate::results::render(&answer, cmd.format));
    Ok(exit::OK)
}

/// Index the job at `dir` into the user's store as it ends (`run`, `resume`, `verify`). A
/// store that fails is a warning, never the job's failure; `ARBITER_DB=off` skips it.
pub(super) async fn after_job(dir: &Path) {
    if let Err(e) = try_after_job(dir).await {
        eprintln!(
            "warning: results store: {e} (the job dir is unaffected; `arbiter index` it later)"
        );
    }
}

async fn try_after_job(dir: &Path) -> Result<(), ResultsError> {
    let Some(location) = Location::from_env()? else {
        return Ok(());
    };
    let job = crate::results::read_job(dir)?;
    let mut store = Store::open(&location).await?;
    store.index(&job).await
}
