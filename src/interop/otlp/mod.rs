//! Traces out (SPEC §17): each trial as one OpenTelemetry trace over OTLP/HTTP — the trial,
//! its phases, and its model calls with the GenAI semantic conventions' token counts (and
//! arbiter's cost). docs/traces.md lists every attribute.
//!
//! - `endpoint.rs`: the URL a user gives (`--otlp`, `otlp: {endpoint}`), checked.
//! - `spans.rs`: one record and its ledger → finished spans (pure; deterministic ids).
//! - `exporter.rs`: the OpenTelemetry project's OTLP/HTTP exporter, one trace per send.
//! - `sink.rs`: a running job's traces, sent in the background as records become final.
//! - `jobdir.rs`: `arbiter export otlp`: a finished job's traces, after the fact.

mod endpoint;
mod error;
mod exporter;
mod jobdir;
mod sink;
mod spans;
#[cfg(test)]
mod tests;

pub(crate) use endpoint::traces_url;
pub(crate) use error::OtlpError;
pub(crate) use jobdir::export_job;
pub(crate) use sink::{TraceReport, TraceSink};
