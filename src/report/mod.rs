//! Reports: statistics over a finished (or running) job, paired comparisons, CI gates, and the
//! renderings (terminal table, `report.md`, `report.json`, `report.html`, `junit.xml`).
//!
//! Owns: reading `trials.jsonl` into compact per-trial facts ([`load`]), the statistics
//! ([`stats`]), the report model that `report.json` holds and baselines are read from
//! ([`model`], types only), computing it (`build`), comparisons ([`compare`]) and gates
//! ([`gate`]). Dependencies run one way: `build → compare → model`.
//!
//! Invariants:
//! - infra errors are never scored: excluded from every rate and counted apart;
//! - a scored trial without a reward (verifier error or skipped) counts as not passed;
//! - nothing here runs a container or prints: the CLI prints, this module returns values and
//!   writes report files.

mod attempts;
mod build;
pub(crate) mod compare;
mod error;
pub(crate) mod gate;
pub(crate) mod html;
pub(crate) mod junit;
pub(crate) mod load;
pub(crate) mod markup;
pub(crate) mod model;
mod readable;
pub(crate) mod stats;
pub(crate) mod text;
pub(crate) mod trial_page;

use std::path::Path;

pub(crate) use build::build;
pub(crate) use compare::{CompareOptions, Grouping};
pub(crate) use error::ReportError;
pub(crate) use load::{JobData, load_job};
pub(crate) use model::{REPORT_SCHEMA, Report};
pub(crate) use trial_page::{PageMode, PagesWritten};

pub(crate) const FILES: [&str; 4] = ["report.md", "report.json", "report.html", "junit.xml"];

pub(crate) fn to_json(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(report).unwrap_or_else(|e| {
        // serialising plain structs of strings and numbers does not fail; keep the file valid
        tracing::error!(error = %e, "cannot serialise the report");
        "{}".to_string()
    });
    s.push('\n');
    s
}

/// Write one report file: a temp file in the same directory renamed over the target, so a
/// reader sees the old or the new file, never half of one. (No fsync: a report can be made
/// again from `trials.jsonl`.)
fn write_file(
    path: &Path,
    fill: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<(), ReportError> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(ReportError::io(path))?;
    // reports are for sharing (CI artifacts), unlike the temp file's default 0600
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = tmp
            .as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    let mut w = std::io::BufWriter::with_capacity(1 << 20, tmp);
    fill(&mut w).map_err(ReportError::io(path))?;
    let tmp = w
        .into_inner()
        .map_err(|e| ReportError::io(path)(e.into_error()))?;
    tmp.persist(path)
        .map_err(|e| ReportError::io(path)(e.error))?;
    Ok(())
}

/// Build the report with its comparisons and write `report.md`, `report.json`, `report.html`,
/// `junit.xml` and a page per trial (`trials/<id>/trial.html`, those `pages` asks for) into
/// the job directory. `junit.xml` (the big one) and the trial pages are streamed on more
/// threads while the comparisons are computed.
pub(crate) fn write_report(
    job: &JobData,
    opts: &CompareOptions,
    pages: PageMode,
) -> Result<(Report, PagesWritten), ReportError> {
    let mut report = build(job, None);
    let logs_root = std::fs::canonicalize(&job.dir).unwrap_or_else(|_| job.dir.clone());
    let grouping = opts.by.unwrap_or_else(|| Grouping::default_for(&job.arms));
    let (comparisons, junit, pages) = std::thread::scope(|scope| {
        let base = &report;
        let junit = scope.spawn(|| {
            write_file(&job.dir.join("junit.xml"), |w| {
                junit::write_junit(w, job, base, &logs_root)
            })
        });
        let pages = scope.spawn(|| trial_page::write_trial_pages(job, pages));
        let comparisons = compare::compare_within(base, grouping, opts);
        (comparisons, join(junit), join(pages))
    });
    junit?;
    let pages = pages?;
    report.comparisons = comparisons;
    write_file(&job.dir.join("report.md"), |w| {
        w.write_all(text::markdown(&report).as_bytes())
    })?;
    write_file(&job.dir.join("report.json"), |w| {
        w.write_all(to_json(&report).as_bytes())
    })?;
    write_file(&job.dir.join("report.html"), |w| {
        w.write_all(html::html_linked(&report, job).as_bytes())
    })?;
    Ok((report, pages))
}

/// A scoped thread's result, its panic passed on.
pub(crate) fn join<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    match h.join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Read a baseline: a `report.json` file, or a job directory (reported on the fly).
pub(crate) fn load_baseline(path: &Path) -> Result<Report, ReportError> {
    if path.is_dir() {
        let job = load_job(path)?;
        return Ok(build(&job, None));
    }
    let bytes = std::fs::read(path).map_err(ReportError::io(path))?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| ReportError::Field {
            path: path.to_path_buf(),
            field: "file".to_string(),
            message: format!("not JSON ({e})"),
        })?;
    match value.get("schema").and_then(|s| s.as_str()) {
        Some(REPORT_SCHEMA) => {}
        Some(other) => {
            return Err(ReportError::Field {
                path: path.to_path_buf(),
                field: "schema".to_string(),
                message: format!(
                    "is {other:?}, expected {REPORT_SCHEMA:?} (write one with `arbiter report JOB_DIR --format json`)"
                ),
            });
        }
        None => {
            return Err(ReportError::Field {
                path: path.to_path_buf(),
                field: "schema".to_string(),
                message: "missing: not an arbiter report (write one with `arbiter report JOB_DIR --format json`)"
                    .to_string(),
            });
        }
    }
    serde_json::from_value(value).map_err(|e| ReportError::Field {
        path: path.to_path_buf(),
        field: "file".to_string(),
        message: format!("not a valid {REPORT_SCHEMA} report ({e})"),
    })
}
