//! Traces of a running job: each trial is sent once its record is final, in the background,
//! so a slow or dead endpoint never holds up the job. A failure is a warning and a count in
//! the [`TraceReport`], never a failed trial.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::trial::TrialRecord;

use super::exporter::{TraceExporter, read_calls};

/// What became of a job's traces.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TraceReport {
    /// Where they went (the URL traces were POSTed to).
    pub endpoint: String,
    /// Trials whose trace the endpoint took.
    pub sent: usize,
    /// Trials whose trace was refused or could not be delivered (or was still waiting when
    /// the job stopped waiting for the endpoint).
    pub failed: usize,
    /// The last failure, for the summary line.
    pub last_error: Option<String>,
}

impl TraceReport {
    /// One line for the job's summary.
    pub(crate) fn line(&self, job_dir: &std::path::Path) -> String {
        let total = self.sent + self.failed;
        if self.failed == 0 {
            return format!(
                "traces: {} trial{} sent to {}",
                self.sent,
                if self.sent == 1 { "" } else { "s" },
                self.endpoint
            );
        }
        format!(
            "traces: {} of {total} trial{} not sent to {}{}; send them again with: arbiter export otlp {} --endpoint {}",
            self.failed,
            if total == 1 { "" } else { "s" },
            self.endpoint,
            self.last_error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default(),
            job_dir.display(),
            self.endpoint,
        )
    }
}

/// The background sender of one job's traces.
#[derive(Debug)]
pub(crate) struct TraceSink {
    queue: mpsc::UnboundedSender<(Box<TrialRecord>, PathBuf)>,
    worker: JoinHandle<()>,
    report: Arc<Mutex<TraceReport>>,
    queued: usize,
}

impl TraceSink {
    /// Start sending to `endpoint` (a URL from [`super::traces_url`]) the traces of the job
    /// whose id is `job_id`.
    pub(crate) fn start(endpoint: &str, job_id: String) -> Self {
        let report = Arc::new(Mutex::new(TraceReport {
            endpoint: endpoint.to_string(),
            ..TraceReport::default()
        }));
        let exporter = TraceExporter::new(endpoint).map_err(|e| e.reason());
        let (queue, mut rx) = mpsc::unbounded_channel::<(Box<TrialRecord>, PathBuf)>();
        let tally = report.clone();
        let worker = tokio::spawn(async move {
            while let Some((record, dir)) = rx.recv().await {
                let result = match &exporter {
                    Ok(exporter) => {
                        let calls = tokio::task::spawn_blocking(move || read_calls(&dir))
                            .await
                            .unwrap_or_default();
                        exporter
                            .send(&job_id, &record, &calls)
                            .await
                            .map_err(|e| (e.to_string(), e.reason()))
                    }
                    Err(e) => Err((e.clone(), e.clone())),
                };
                let Ok(mut r) = tally.lock() else { return };
                match result {
                    Ok(()) => r.sent += 1,
                    Err((e, reason)) => {
                        tracing::warn!("{e}");
                        r.failed += 1;
                        r.last_error = Some(reason);
                    }
                }
            }
        });
        TraceSink {
            queue,
            worker,
            report,
            queued: 0,
        }
    }

    /// Queue the trace of a trial whose record is final (its files are under `trial_dir`).
    pub(crate) fn send(&mut self, record: &TrialRecord, trial_dir: PathBuf) {
        if self
            .queue
            .send((Box::new(record.clone()), trial_dir))
            .is_ok()
        {
            self.queued += 1;
        }
    }

    /// Wait up to `wait` for the queued traces to be sent; what is still waiting then counts
    /// as not sent.
    pub(crate) async fn finish(self, wait: Duration) -> TraceReport {
        let TraceSink {
            queue,
            mut worker,
            report,
            queued,
        } = self;
        drop(queue);
        if tokio::time::timeout(wait, &mut worker).await.is_err() {
            worker.abort();
            tracing::warn!(
                "stopped waiting for the OTLP endpoint after {} s",
                wait.as_secs()
            );
        }
        let mut out = report.lock().map(|r| r.clone()).unwrap_or_default();
        let unsent = queued.saturating_sub(out.sent + out.failed);
        if unsent > 0 {
            out.failed += unsent;
            out.last_error = Some(format!(
                "{unsent} still waiting when the job stopped waiting for the endpoint"
            ));
        }
        out
    }
}
