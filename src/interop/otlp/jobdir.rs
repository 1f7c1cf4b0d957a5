//! `arbiter export otlp JOB_DIR --endpoint URL`: the traces of a finished job's trials, sent
//! after the fact (the same trace and span ids as when the job sent them itself).

use std::path::{Path, PathBuf};

use crate::trial::TrialRecord;

use super::error::OtlpError;
use super::exporter::{TraceExporter, read_calls};
use super::sink::TraceReport;

/// Send the trace of every finished trial of the job in `dir` (or of those named in `only`)
/// to `endpoint`, a URL from [`super::traces_url`], one trial after the other.
pub(crate) async fn export_job(
    dir: &Path,
    endpoint: &str,
    only: &[String],
) -> Result<TraceReport, OtlpError> {
    let job_id = job_id(dir)?;
    let mut records = records(dir)?;
    if !only.is_empty() {
        if let Some(missing) = only.iter().find(|id| !records.iter().any(|r| &r.id == *id)) {
            return Err(OtlpError::Invalid {
                path: dir.join("trials.jsonl"),
                message: format!("no finished trial {missing:?} in this job"),
            });
        }
        records.retain(|r| only.contains(&r.id));
    }
    let exporter = TraceExporter::new(endpoint)?;
    let mut report = TraceReport {
        endpoint: exporter.endpoint().to_string(),
        ..TraceReport::default()
    };
    for record in &records {
        let calls = read_calls(&dir.join("trials").join(&record.id));
        match exporter.send(&job_id, record, &calls).await {
            Ok(()) => report.sent += 1,
            Err(e) => {
                tracing::warn!("{e}");
                report.failed += 1;
                report.last_error = Some(e.reason());
            }
        }
    }
    Ok(report)
}

/// The job's id (`job-id`), which every trace id of the job derives from.
fn job_id(dir: &Path) -> Result<String, OtlpError> {
    let path = dir.join(crate::job::JOB_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => Ok(text.trim().to_string()),
        Ok(_) => Err(OtlpError::Invalid {
            path,
            message: "empty: not an arbiter job directory".to_string(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(OtlpError::Invalid {
            path,
            message: "missing: not an arbiter job directory (or no trial of it ran yet)"
                .to_string(),
        }),
        Err(source) => Err(OtlpError::Read { path, source }),
    }
}

/// `trials.jsonl`: the final record of each trial, in file order (a later line of the same
/// trial, e.g. after a regrade, replaces it).
fn records(dir: &Path) -> Result<Vec<TrialRecord>, OtlpError> {
    let path: PathBuf = dir.join("trials.jsonl");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(OtlpError::Read { path, source }),
    };
    let lines = text
        .lines()
        .map(|l| Ok::<_, std::convert::Infallible>(l.to_string()));
    crate::trial::final_records(lines).map_err(|e| match e {
        crate::trial::JsonlError::Invalid { line, source } => OtlpError::Invalid {
            path,
            message: format!("line {line}: not a trial record this arbiter reads ({source})"),
        },
        crate::trial::JsonlError::Read(never) => match never {},
    })
}
