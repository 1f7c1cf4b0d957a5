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
            message: describe(&e.to_string()),
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

/// What the exporter's error text (reqwest's debug output, for a failed connection) says,
/// in a few words.
fn describe(text: &str) -> String {
    if let Some(rest) = text.split("Status Code: ").nth(1) {
        let code: String = rest.chars().take_while(char::is_ascii_digit).collect();
        return format!("the endpoint answered HTTP {code}");
    }
    for (needle, said) in [
        ("ConnectionRefused", "connection refused"),
        ("Connection refused", "connection refused"),
        ("TimedOut", "no answer within 10 s"),
        ("timed out", "no answer within 10 s"),
        ("dns error", "the host name does not resolve"),
        ("certificate", "TLS: the certificate was refused"),
        ("ConnectionReset", "the connection was reset"),
    ] {
        if text.contains(needle) {
            return said.to_string();
        }
    }
    one_line(text)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exporters_errors_come_out_in_a_few_words() {
        for (text, want) in [
            (
                r#"Operation failed: reqwest::Error { kind: Request, url: "http://127.0.0.1:1/v1/traces", source: hyper_util::client::legacy::Error(Connect, ConnectError("tcp connect error", 127.0.0.1:1, Os { code: 111, kind: ConnectionRefused, message: "Connection refused" })) }"#,
                "connection refused",
            ),
            (
                "OpenTelemetry trace export failed. Url: http://x/v1/traces, Status Code: 401, Response: b\"no\"",
                "the endpoint answered HTTP 401",
            ),
            ("something\n  else", "something else"),
        ] {
            assert_eq!(describe(text), want);
        }
    }

    #[test]
    fn a_trial_without_a_ledger_has_no_calls_and_a_bad_line_is_left_out() {
        let dir = tempfile::tempdir().expect("tmp");
        assert!(read_calls(dir.path()).is_empty());
        std::fs::create_dir_all(dir.path().join("agent")).expect("agent dir");
        let good = serde_json::json!({
            "schema": "arbiter.model-call.v1", "seq": 1, "time": "2026-01-01T00:00:01Z",
            "api": "chat_completions", "provider": "p", "stream": false, "status": 200,
            "outcome": "ok", "attempts": 1, "latency_ms": 5,
            "request": {"sha256": "x", "bytes": 0, "body": ""},
            "response": {"sha256": "y", "bytes": 0, "body": ""}
        });
        std::fs::write(
            dir.path().join("agent/model-calls.jsonl"),
            format!("{good}\nnot json\n\n"),
        )
        .expect("ledger");
        let calls = read_calls(dir.path());
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].seq, 1);
    }
}
