//! Reports: statistics over a finished (or running) job, paired comparisons, CI gates, and the
//! renderings (terminal table, `report.md`, `report.json`, `report.html`, `junit.xml`).
//!
//! Owns: reading `trials.jsonl` into compact per-trial facts ([`load`]), the statistics
//! ([`stats`]), the report model that `report.json` holds and baselines are read from
//! ([`model`]), comparisons ([`compare`]) and gates ([`gate`]).
//!
//! Invariants:
//! - infra errors are never scored: excluded from every rate and counted apart;
//! - a scored trial without a reward (verifier error or skipped) counts as not passed;
//! - nothing here runs a container or prints: the CLI prints, this module returns values and
//!   writes report files.

pub mod compare;
mod error;
pub mod gate;
pub mod html;
pub mod junit;
pub mod load;
pub mod model;
pub mod stats;
pub mod text;

use std::path::Path;

pub use compare::{CompareOptions, ComparisonSet, Grouping, PairComparison};
pub use error::ReportError;
pub use gate::{CheckOutcome, check};
pub use load::{JobData, Outcome, load_job};
pub use model::{REPORT_SCHEMA, Report, build};

/// Every rendering of one report.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub table: String,
    pub markdown: String,
    pub json: String,
    pub html: String,
    pub junit: String,
}

pub const FILES: [&str; 4] = ["report.md", "report.json", "report.html", "junit.xml"];

/// Render a report in every format.
pub fn render(job: &JobData, report: &Report) -> Rendered {
    let logs_root = std::fs::canonicalize(&job.dir).unwrap_or_else(|_| job.dir.clone());
    Rendered {
        table: text::table(report),
        markdown: text::markdown(report),
        json: to_json(report),
        html: html::html(report),
        junit: junit::junit(job, report, &logs_root),
    }
}

pub fn to_json(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(report).unwrap_or_else(|e| {
        // serialising plain structs of strings and numbers does not fail; keep the file valid
        tracing::error!(error = %e, "cannot serialise the report");
        "{}".to_string()
    });
    s.push('\n');
    s
}

/// Write `report.md`, `report.json`, `report.html` and `junit.xml` into the job directory
/// (each atomically).
pub fn write_files(dir: &Path, rendered: &Rendered) -> Result<(), ReportError> {
    for (name, body) in FILES.iter().zip([
        &rendered.markdown,
        &rendered.json,
        &rendered.html,
        &rendered.junit,
    ]) {
        let path = dir.join(name);
        crate::job::write_atomic(&path, body.as_bytes()).map_err(|e| ReportError::Io {
            path: path.clone(),
            source: e.source,
        })?;
    }
    Ok(())
}

/// Read a baseline: a `report.json` file, or a job directory (reported on the fly).
pub fn load_baseline(path: &Path) -> Result<Report, ReportError> {
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
