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

/// `arbiter index DIR...`: every job dir is read and checked first, so a bad one refuses the
/// command before anything is written; then each job is read again and written in its own
/// transaction. No job's rows are kept past its write: memory stays one job's (two, with the
/// read-ahead) however many jobs a year of nightlies holds. The check reads on every core; the
/// write pass reads the next job while the store writes the current one.
pub(super) async fn index(cmd: IndexCmd) -> Result<u8, ResultsError> {
    let location = location(cmd.db.as_deref())?;
    let dirs = crate::results::find_jobs(&cmd.dirs)?;
    let checked = dirs.clone();
    tokio::task::spawn_blocking(move || check_all(&checked))
        .await
        .map_err(|e| ResultsError::Internal(format!("the check of the job dirs: {e}")))??;
    let mut store = Store::open(&location).await?;
    let read = |dir: PathBuf| tokio::task::spawn_blocking(move || crate::results::read_job(&dir));
    let mut next = dirs.first().cloned().map(read);
    let mut trials = 0;
    for i in 0..dirs.len() {
        let Some(reading) = next.take() else { break };
        let job = reading
            .await
            .map_err(|e| ResultsError::Internal(format!("reading a job dir: {e}")))??;
        next = dirs.get(i + 1).cloned().map(read);
        store.index(&job).await?;
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
        dirs.len(),
        location.shown()
    );
    Ok(exit::OK)
}

/// Read every job dir, on every core, keeping nothing: the first error in `dirs`' order.
fn check_all(dirs: &[PathBuf]) -> Result<(), ResultsError> {
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(dirs.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut errors: Vec<(usize, ResultsError)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                scope.spawn(|| {
                    let mut errors = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(dir) = dirs.get(i) else { break };
                        if let Err(e) = crate::results::read_job(dir) {
                            errors.push((i, e));
                        }
                    }
                    errors
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![(
                        0,
                        ResultsError::Internal("a reading thread panicked".into()),
                    )]
                })
            })
            .collect()
    });
    errors.sort_by_key(|(i, _)| *i);
    match errors.into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
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
