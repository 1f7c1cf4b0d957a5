//! The OpenTelemetry project's OTLP/HTTP exporter (protobuf over reqwest), fed the finished
//! spans of one trial at a time.

use std::path::Path;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanExporter as _;

use crate::gateway::CallRecord;
use crate::trial::TrialRecord;

use super::error::OtlpError;
use super::spans::trial_spans;

/// How long one trial's trace may take to be sent (connection included).
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends traces to one endpoint. Headers come from `OTEL_EXPORTER_OTLP_TRACES_HEADERS` or
/// `OTEL_EXPORTER_OTLP_HEADERS` (`key=value,…`), as every OpenTelemetry exporter reads them.
#[derive(Debug)]
pub(crate) struct TraceExporter {
    inner: opentelemetry_otlp::SpanExporter,
    endpoint: String,
}

impl TraceExporter {
    /// An exporter for `endpoint`, a URL from [`super::traces_url`].
    pub(crate) fn new(endpoint: &str) -> Result<Self, OtlpError> {
        let failed = |message: String| OtlpError::Exporter {
            endpoint: endpoint.to_string(),
            message,
        };
        let client = reqwest::Client::builder()
            .timeout(SEND_TIMEOUT)
            .connect_timeout(SEND_TIMEOUT)
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let mut inner = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .with_timeout(SEND_TIMEOUT)
            .build()
            .map_err(|e| failed(e.to_string()))?;
        inner.set_resource(&resource());
        Ok(TraceExporter {
            inner,
            endpoint: endpoint.to_string(),
        })
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Send the trace of one finished trial: its record and the calls of its ledger.
    pub(crate) async fn send(
        &self,
        job_id: &str,
        record: &TrialRecord,
        calls: &[CallRecord],
    ) -> Result<(), OtlpError> {
        let spans = trial_spans(job_id, record, calls);
        self.inner.export(spans).await.map_err(|e| OtlpError::Send {
            trial: record.id.clone(),
            endpoint: self.endpoint.clone(),
            message: one_line(&e.to_string()),
        })
    }
}

/// What every trace says about its sender.
fn resource() -> Resource {
    Resource::builder_empty()
        .with_attributes([
            KeyValue::new("service.name", "arbiter"),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build()
}

/// The calls of a trial's ledger (`agent/model-calls.jsonl` under its dir), in the ledger's
/// order; none when the trial has no ledger (its agent had no model). A line that is not a
/// call is skipped with a warning: the record stays the source of truth.
pub(crate) fn read_calls(trial_dir: &Path) -> Vec<CallRecord> {
    let path = trial_dir
        .join("agent")
        .join(crate::gateway::atif::LEDGER_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), "reading the model calls for the trace: {e}");
            return Vec::new();
        }
    };
    let mut calls = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<CallRecord>(line) {
            Ok(call) => calls.push(call),
            Err(e) => tracing::warn!(
                path = %path.display(),
                line = i + 1,
                "not a model call, left out of the trace: {e}"
            ),
        }
    }
    calls
}

/// An error's text on one line (reqwest's debug output spans several).
fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    const MAX: usize = 300;
    match joined.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &joined[..at]),
        None => joined,
    }
}
