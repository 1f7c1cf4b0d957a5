//! One trial record (and its model-call ledger) as the finished spans of one trace:
//!
//! ```text
//! trial <task>                      root: the trial's facts (arbiter.*)
//! ├── environment                   one span per phase that ran, with its own times
//! ├── agent                         gen_ai.operation.name = invoke_agent
//! │   ├── chat <model>              one span per model call (GenAI semantic conventions)
//! │   └── chat <model>
//! ├── collect
//! ├── verify
//! └── cleanup
//! ```
//!
//! Pure: no I/O, no clock. Ids are derived from the job's id, the trial's id and its start, so
//! exporting the same record twice sends the same trace and span ids (a backend that keys on
//! them replaces rather than duplicates), while a trial run again gets a trace of its own.

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use serde::Serialize;

use crate::gateway::{CallOutcome, CallRecord, Protocol};
use crate::trial::{Phase, TrialRecord};

/// The instrumentation scope of every span arbiter sends.
pub(crate) const SCOPE: &str = "arbiter";

/// The trace id of a trial record: the first 16 bytes of a digest of the job's id, the
/// trial's id and its start.
pub(crate) fn trace_id(job_id: &str, rec: &TrialRecord) -> TraceId {
    let digest = digest(&format!(
        "arbiter.trace.v1\0{job_id}\0{}\0{}",
        rec.id, rec.started_at
    ));
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    if bytes == [0; 16] {
        bytes[15] = 1;
    }
    TraceId::from_bytes(bytes)
}

/// A span id within `trace`, derived from what the span stands for (`trial`, `phase:agent`,
/// `call:3`).
fn span_id(trace: TraceId, what: &str) -> SpanId {
    let digest = digest(&format!("{trace}\0{what}"));
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    if bytes == [0; 8] {
        bytes[7] = 1;
    }
    SpanId::from_bytes(bytes)
}

fn digest(text: &str) -> Vec<u8> {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes()).to_vec()
}

/// The spans of one trial: its root first, then its phases in run order, then its model
/// calls in the ledger's order. `calls` are the lines of the trial's `agent/model-calls.jsonl`
/// (empty when the agent had no model).
pub(crate) fn trial_spans(job_id: &str, rec: &TrialRecord, calls: &[CallRecord]) -> Vec<SpanData> {
    let trace = trace_id(job_id, rec);
    let scope = InstrumentationScope::builder(SCOPE)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let root_id = span_id(trace, "trial");
    let trial_start = secs(&rec.started_at);

    // Phases: their own start when the record has it, else back to back from the trial's.
    let mut phases = Vec::new();
    let mut at = trial_start;
    // The record's map is ordered as `Phase` is: the order a trial runs them.
    for (&phase, time) in &rec.phases {
        let measured = time
            .started_at
            .as_deref()
            .and_then(crate::timefmt::parse_rfc3339);
        let start = measured.or(at);
        let end = start.map(|s| s + time.seconds.max(0.0));
        at = end.or(at);
        phases.push((phase, start, end, measured.is_none()));
    }
    let calls_at: Vec<(Option<f64>, Option<f64>)> = calls
        .iter()
        .map(|c| {
            let start = crate::timefmt::parse_rfc3339(&c.time);
            (start, start.map(|s| s + c.latency_ms as f64 / 1000.0))
        })
        .collect();

    // The root spans everything under it. The record's own times are whole seconds: its start
    // counts only when no phase has a measured one.
    let measured = phases.iter().any(|p| !p.3);
    let starts = phases
        .iter()
        .map(|p| p.1)
        .chain(calls_at.iter().map(|c| c.0));
    let ends = phases
        .iter()
        .map(|p| p.2)
        .chain(calls_at.iter().map(|c| c.1));
    let root_start = starts
        .flatten()
        .chain(trial_start.filter(|_| !measured))
        .reduce(f64::min);
    let root_end = ends
        .flatten()
        .chain(secs(&rec.finished_at))
        .reduce(f64::max);
    let root_start = root_start.unwrap_or(0.0);
    let root_end = root_end.unwrap_or(root_start).max(root_start);

    let mut spans = Vec::with_capacity(1 + phases.len() + calls.len());
    spans.push(span(
        SpanContext::new(
            trace,
            root_id,
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        SpanId::INVALID,
        SpanKind::Internal,
        format!("trial {}", rec.task),
        (root_start, root_end),
        root_attributes(job_id, rec),
        root_status(rec),
        scope.clone(),
    ));

    let mut agent_id = None;
    for (phase, start, end, estimated) in phases {
        let id = span_id(trace, &format!("phase:{}", phase.as_str()));
        let mut attrs = vec![
            kv("arbiter.trial.id", rec.id.clone()),
            kv("arbiter.phase", phase.as_str()),
        ];
        if estimated {
            attrs.push(kv("arbiter.phase.start_estimated", true));
        }
        if phase == Phase::Agent {
            agent_id = Some(id);
            attrs.push(kv("gen_ai.operation.name", "invoke_agent"));
            attrs.push(kv("gen_ai.agent.name", rec.agent.clone()));
            attrs.push(kv("arbiter.termination.kind", word(&rec.termination.kind)));
        }
        let status = match &rec.infra_error {
            Some(e) if e.phase == phase => {
                attrs.push(kv("error.type", "infra_error"));
                Status::error(e.message.clone())
            }
            _ => Status::Unset,
        };
        let start = start.unwrap_or(root_start);
        spans.push(span(
            SpanContext::new(trace, id, TraceFlags::SAMPLED, false, TraceState::default()),
            root_id,
            SpanKind::Internal,
            phase.as_str().to_string(),
            (start, end.unwrap_or(start)),
            attrs,
            status,
            scope.clone(),
        ));
    }

    // Model calls belong to the agent phase (the gateway refuses the trial's token after it).
    let parent = agent_id.unwrap_or(root_id);
    for (call, (start, end)) in calls.iter().zip(calls_at) {
        let id = span_id(trace, &format!("call:{}", call.seq));
        let (attrs, status) = call_attributes(rec, call);
        let start = start.unwrap_or(root_start);
        spans.push(span(
            SpanContext::new(trace, id, TraceFlags::SAMPLED, false, TraceState::default()),
            parent,
            SpanKind::Client,
            match &call.model {
                Some(model) => format!("{} {model}", operation(call.api)),
                None => operation(call.api).to_string(),
            },
            (start, end.unwrap_or(start)),
            attrs,
            status,
            scope.clone(),
        ));
    }
    spans
}

#[allow(clippy::too_many_arguments)]
fn span(
    context: SpanContext,
    parent: SpanId,
    kind: SpanKind,
    name: String,
    (start, end): (f64, f64),
    attributes: Vec<KeyValue>,
    status: Status,
    scope: InstrumentationScope,
) -> SpanData {
    SpanData {
        span_context: context,
        parent_span_id: parent,
        parent_span_is_remote: false,
        span_kind: kind,
        name: Cow::Owned(name),
        start_time: at(start),
        end_time: at(end.max(start)),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope,
    }
}

/// The trial's facts: who ran what, how it ended, what it cost.
fn root_attributes(job_id: &str, rec: &TrialRecord) -> Vec<KeyValue> {
    let mut a = vec![
        kv("arbiter.job.id", job_id.to_string()),
        kv("arbiter.job.name", rec.job.clone()),
        kv("arbiter.trial.id", rec.id.clone()),
        kv("arbiter.task", rec.task.clone()),
        kv("arbiter.task.checksum", rec.task_checksum.clone()),
        kv("arbiter.agent", rec.agent.clone()),
        kv("gen_ai.agent.name", rec.agent.clone()),
        kv("arbiter.variant", rec.variant.clone()),
        kv("arbiter.attempt", i64::from(rec.attempt)),
        kv("arbiter.retries", i64::from(rec.retries)),
        kv("arbiter.termination.kind", word(&rec.termination.kind)),
        kv("arbiter.claim.status", word(&rec.claim.status)),
        kv("arbiter.verifier.status", word(&rec.verifier.status)),
        kv("arbiter.verifier.mode", word(&rec.verifier.mode)),
        kv("arbiter.passed", rec.passed()),
        kv("arbiter.infra", rec.is_infra()),
    ];
    if let Some(code) = rec.termination.exit_code {
        a.push(kv("arbiter.termination.exit_code", code));
    }
    if let Some(reward) = &rec.verifier.reward {
        a.push(kv("arbiter.reward", crate::verifier::primary_value(reward)));
        for (key, value) in reward {
            a.push(kv(format!("arbiter.reward.{key}"), *value));
        }
    }
    if let Some(e) = &rec.infra_error {
        a.push(kv("arbiter.infra_error.phase", e.phase.as_str()));
        a.push(kv("arbiter.infra_error.message", e.message.clone()));
        a.push(kv("error.type", "infra_error"));
    }
    if let Some(i) = &rec.integrity {
        a.push(kv("arbiter.integrity.status", word(&i.status)));
    }
    if let Some(image) = &rec.image {
        a.push(kv("arbiter.image", image.clone()));
    }
    if let Some(sandbox) = &rec.sandbox {
        a.push(kv("arbiter.backend", sandbox.backend.clone()));
    }
    if let Some(u) = &rec.usage {
        // The trial's totals under arbiter's names: the semantic conventions' gen_ai.usage.*
        // stay on the model-call spans, so a backend summing them counts each call once.
        a.push(kv("arbiter.usage.requests", to_i64(u.requests)));
        a.push(kv("arbiter.usage.input_tokens", to_i64(u.input_tokens)));
        a.push(kv("arbiter.usage.output_tokens", to_i64(u.output_tokens)));
        a.push(kv(
            "arbiter.usage.cache_read_tokens",
            to_i64(u.cache_read_tokens),
        ));
        a.push(kv(
            "arbiter.usage.cache_write_tokens",
            to_i64(u.cache_write_tokens),
        ));
        if let Some(cost) = u.cost_usd {
            a.push(kv("arbiter.usage.cost_usd", cost));
        }
        if u.refused > 0 {
            a.push(kv("arbiter.usage.refused", to_i64(u.refused)));
        }
    }
    a
}

fn root_status(rec: &TrialRecord) -> Status {
    match &rec.infra_error {
        Some(e) => Status::error(format!("infra error in {}: {}", e.phase, e.message)),
        None => Status::Unset,
    }
}

/// `gen_ai.operation.name` of a call (all three APIs arbiter meters are chat APIs).
fn operation(api: Protocol) -> &'static str {
    match api {
        Protocol::AnthropicMessages | Protocol::ChatCompletions | Protocol::Responses => "chat",
    }
}

/// A model call under the GenAI semantic conventions. No request or response content is
/// sent: only the facts the gateway metered.
fn call_attributes(rec: &TrialRecord, call: &CallRecord) -> (Vec<KeyValue>, Status) {
    let mut a = vec![
        kv("arbiter.trial.id", rec.id.clone()),
        kv("gen_ai.operation.name", operation(call.api)),
        kv("gen_ai.provider.name", call.provider.clone()),
        // The attribute the conventions had before gen_ai.provider.name, still read by
        // many backends.
        kv("gen_ai.system", call.provider.clone()),
        kv("arbiter.model_call.seq", to_i64(call.seq)),
        kv("arbiter.model_call.api", call.api.as_str()),
        kv("arbiter.model_call.outcome", word(&call.outcome)),
        kv("arbiter.model_call.attempts", i64::from(call.attempts)),
        kv("arbiter.model_call.stream", call.stream),
        kv("http.response.status_code", i64::from(call.status)),
    ];
    if let Some(model) = &call.model {
        a.push(kv("gen_ai.request.model", model.clone()));
    }
    if let Some(t) = &call.tokens {
        // The conventions count cached prompt tokens in input_tokens; arbiter's are disjoint.
        let input = t.input + t.cache_read + t.cache_write;
        a.push(kv("gen_ai.usage.input_tokens", to_i64(input)));
        a.push(kv("gen_ai.usage.output_tokens", to_i64(t.output)));
        a.push(kv(
            "gen_ai.usage.cache_read.input_tokens",
            to_i64(t.cache_read),
        ));
        a.push(kv(
            "gen_ai.usage.cache_creation.input_tokens",
            to_i64(t.cache_write),
        ));
        a.push(kv("arbiter.usage.input_tokens", to_i64(t.input)));
    }
    if let Some(cost) = call.cost_usd {
        a.push(kv("arbiter.cost_usd", cost));
    }
    if let Some(reason) = &call.stop_reason {
        a.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            Value::Array(Array::String(vec![StringValue::from(reason.clone())])),
        ));
    }
    if !call.upstream_errors.is_empty() {
        a.push(KeyValue::new(
            "arbiter.model_call.upstream_errors",
            Value::Array(Array::String(
                call.upstream_errors
                    .iter()
                    .map(|e| StringValue::from(e.clone()))
                    .collect(),
            )),
        ));
    }
    let status = if call.outcome == CallOutcome::Ok {
        Status::Unset
    } else {
        let kind = word(&call.outcome);
        a.push(kv("error.type", kind.clone()));
        Status::error(call.detail.clone().unwrap_or(kind))
    };
    (a, status)
}

fn kv(key: impl Into<opentelemetry::Key>, value: impl Into<Value>) -> KeyValue {
    KeyValue::new(key, value)
}

/// A fixed-set record field as the record writes it (`exited`, `passed`, …).
fn word<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn secs(rfc3339: &str) -> Option<f64> {
    crate::timefmt::parse_rfc3339(rfc3339)
}

fn at(secs: f64) -> SystemTime {
    UNIX_EPOCH + Duration::try_from_secs_f64(secs).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn record(extra: serde_json::Value) -> TrialRecord {
        let mut rec = json!({
            "schema": "arbiter.trial.v1", "id": "hello__coder__default__1", "job": "nightly",
            "task": "hello", "agent": "coder", "variant": "default", "attempt": 1,
            "task_checksum": "sha256:abc", "image": "img:1",
            "termination": {"kind": "exited", "exit_code": 0},
            "claim": {"status": "missing"},
            "verifier": {"status": "passed", "mode": "snapshot", "reward": {"reward": 1.0}, "exit_code": 0},
            "audit": null,
            "phases": {
                "environment": {"seconds": 0.5, "started_at": "2026-01-01T00:00:00.100000Z"},
                "agent": {"seconds": 2.0, "started_at": "2026-01-01T00:00:00.700000Z"},
                "collect": {"seconds": 0.25, "started_at": "2026-01-01T00:00:02.800000Z"},
                "verify": {"seconds": 1.0, "started_at": "2026-01-01T00:00:03.100000Z"},
                "cleanup": {"seconds": 0.5, "started_at": "2026-01-01T00:00:04.200000Z"}
            },
            "retries": 0, "artifacts": [], "overrides": {},
            "limits": {"cpus": 1.0, "memory_mb": 512, "pids_limit": 256, "network": "no-network", "storage_enforced": true},
            "output": {"stdout_bytes": 1, "stderr_bytes": 0, "truncated": false},
            "usage": {"requests": 2, "input_tokens": 30, "output_tokens": 12, "cache_read_tokens": 5,
                      "cache_write_tokens": 1, "cost_usd": 0.0042, "upstream_errors": {}},
            "sandbox": {"backend": "docker"},
            "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:04Z"
        });
        if let (Some(rec), Some(extra)) = (rec.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                rec.insert(k.clone(), v.clone());
            }
        }
        serde_json::from_value(rec).expect("a trial record")
    }

    fn call(seq: u64, time: &str, tokens: (u64, u64, u64, u64), outcome: &str) -> CallRecord {
        serde_json::from_value(json!({
            "schema": "arbiter.model-call.v1", "seq": seq, "time": time,
            "api": "anthropic_messages", "provider": "scripted", "model": "claude-test",
            "stream": false, "status": if outcome == "ok" { 200 } else { 529 },
            "outcome": outcome, "attempts": 1, "latency_ms": 250,
            "tokens": {"input": tokens.0, "output": tokens.1, "cache_read": tokens.2, "cache_write": tokens.3},
            "cost_usd": 0.0021, "stop_reason": "end_turn",
            "request": {"sha256": "x", "bytes": 2, "body": "{}"},
            "response": {"sha256": "y", "bytes": 2, "body": "{}"}
        }))
        .expect("a ledger line")
    }

    fn attrs(span: &SpanData) -> BTreeMap<String, Value> {
        span.attributes
            .iter()
            .map(|kv| (kv.key.as_str().to_string(), kv.value.clone()))
            .collect()
    }

    fn int(span: &SpanData, key: &str) -> i64 {
        match attrs(span).get(key) {
            Some(Value::I64(n)) => *n,
            other => panic!("{key} on {}: {other:?}", span.name),
        }
    }

    fn text(span: &SpanData, key: &str) -> String {
        match attrs(span).get(key) {
            Some(Value::String(s)) => s.to_string(),
            other => panic!("{key} on {}: {other:?}", span.name),
        }
    }

    fn secs_of(t: SystemTime) -> f64 {
        t.duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64()
    }

    #[test]
    fn a_trial_is_a_root_its_phases_and_its_model_calls_under_the_agent() {
        let rec = record(json!({}));
        let calls = [
            call(1, "2026-01-01T00:00:01.000000Z", (10, 5, 5, 1), "ok"),
            call(2, "2026-01-01T00:00:01.500000Z", (20, 7, 0, 0), "ok"),
        ];
        let spans = trial_spans("job-1", &rec, &calls);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "trial hello",
                "environment",
                "agent",
                "collect",
                "verify",
                "cleanup",
                "chat claude-test",
                "chat claude-test"
            ]
        );
        let trace = spans[0].span_context.trace_id();
        assert!(spans.iter().all(|s| s.span_context.trace_id() == trace));
        let root = &spans[0];
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        let root_id = root.span_context.span_id();
        for phase in &spans[1..6] {
            assert_eq!(phase.parent_span_id, root_id, "{}", phase.name);
            assert_eq!(text(phase, "arbiter.phase"), phase.name.as_ref());
        }
        let agent_id = spans[2].span_context.span_id();
        for call in &spans[6..] {
            assert_eq!(call.parent_span_id, agent_id);
            assert_eq!(call.span_kind, SpanKind::Client);
        }
        let mut ids: Vec<SpanId> = spans.iter().map(|s| s.span_context.span_id()).collect();
        ids.sort_by_key(|id| id.to_string());
        ids.dedup();
        assert_eq!(ids.len(), spans.len(), "span ids are distinct");

        // The phases' own times; the root covers them all.
        assert!(
            (secs_of(spans[2].start_time) - (secs("2026-01-01T00:00:00.7Z").expect("t"))).abs()
                < 1e-6
        );
        assert!((secs_of(spans[2].end_time) - secs_of(spans[2].start_time) - 2.0).abs() < 1e-6);
        assert!(!attrs(&spans[2]).contains_key("arbiter.phase.start_estimated"));
        assert!(secs_of(root.start_time) <= secs_of(spans[1].start_time));
        assert!(secs_of(root.end_time) >= secs_of(spans[5].end_time));
        assert!((secs_of(spans[6].end_time) - secs_of(spans[6].start_time) - 0.25).abs() < 1e-6);

        // The trial's facts on the root.
        assert_eq!(text(root, "arbiter.task"), "hello");
        assert_eq!(text(root, "arbiter.agent"), "coder");
        assert_eq!(text(root, "arbiter.variant"), "default");
        assert_eq!(int(root, "arbiter.attempt"), 1);
        assert_eq!(text(root, "arbiter.job.id"), "job-1");
        assert_eq!(text(root, "arbiter.termination.kind"), "exited");
        assert_eq!(text(root, "arbiter.verifier.status"), "passed");
        assert_eq!(attrs(root).get("arbiter.reward"), Some(&Value::F64(1.0)));
        assert_eq!(attrs(root).get("arbiter.passed"), Some(&Value::Bool(true)));
        assert_eq!(int(root, "arbiter.usage.input_tokens"), 30);
        assert_eq!(
            attrs(root).get("arbiter.usage.cost_usd"),
            Some(&Value::F64(0.0042))
        );
        assert!(!attrs(root).contains_key("gen_ai.usage.input_tokens"));
        assert_eq!(root.status, Status::Unset);

        // A call under the GenAI conventions: cached prompt tokens count in input_tokens.
        let first = &spans[6];
        assert_eq!(text(first, "gen_ai.operation.name"), "chat");
        assert_eq!(text(first, "gen_ai.provider.name"), "scripted");
        assert_eq!(text(first, "gen_ai.request.model"), "claude-test");
        assert_eq!(int(first, "gen_ai.usage.input_tokens"), 16);
        assert_eq!(int(first, "gen_ai.usage.output_tokens"), 5);
        assert_eq!(int(first, "gen_ai.usage.cache_read.input_tokens"), 5);
        assert_eq!(int(first, "gen_ai.usage.cache_creation.input_tokens"), 1);
        assert_eq!(
            attrs(first).get("arbiter.cost_usd"),
            Some(&Value::F64(0.0021))
        );
        assert_eq!(
            attrs(first).get("gen_ai.response.finish_reasons"),
            Some(&Value::Array(Array::String(vec!["end_turn".into()])))
        );
        assert_eq!(int(first, "http.response.status_code"), 200);
        // No content: neither bodies nor anything that looks like one.
        for span in &spans {
            for kv in &span.attributes {
                assert!(!kv.key.as_str().contains("prompt") && !kv.key.as_str().contains("body"));
            }
        }
    }

    #[test]
    fn ids_are_the_same_for_the_same_record_and_differ_for_another_run_or_job() {
        let rec = record(json!({}));
        let calls = [call(1, "2026-01-01T00:00:01Z", (1, 1, 0, 0), "ok")];
        let ids = |spans: Vec<SpanData>| -> Vec<(TraceId, SpanId)> {
            spans
                .iter()
                .map(|s| (s.span_context.trace_id(), s.span_context.span_id()))
                .collect()
        };
        let once = ids(trial_spans("job-1", &rec, &calls));
        assert_eq!(once, ids(trial_spans("job-1", &rec, &calls)));
        let other_job = ids(trial_spans("job-2", &rec, &calls));
        assert_ne!(once[0].0, other_job[0].0);
        let rerun = record(
            json!({"started_at": "2026-01-01T01:00:00Z", "finished_at": "2026-01-01T01:00:04Z"}),
        );
        assert_ne!(once[0].0, ids(trial_spans("job-1", &rerun, &calls))[0].0);
    }

    #[test]
    fn an_infra_error_marks_the_root_and_its_phase_and_a_failed_call_its_span() {
        let rec = record(json!({
            "termination": {"kind": "infra_error", "detail": "the agent phase did not run"},
            "verifier": {"status": "skipped", "mode": "snapshot", "detail": "the verifier did not run"},
            "phases": {
                "environment": {"seconds": 0.5, "started_at": "2026-01-01T00:00:00.100000Z"},
                "agent": {"seconds": 1.0, "started_at": "2026-01-01T00:00:00.700000Z"},
                "cleanup": {"seconds": 0.5, "started_at": "2026-01-01T00:00:02Z"}
            },
            "infra_error": {"phase": "agent", "message": "model_unavailable: connect"},
            "usage": null
        }));
        let calls = [call(1, "2026-01-01T00:00:01Z", (0, 0, 0, 0), "unavailable")];
        let spans = trial_spans("job-1", &rec, &calls);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "trial hello",
                "environment",
                "agent",
                "cleanup",
                "chat claude-test"
            ]
        );
        assert!(
            matches!(&spans[0].status, Status::Error { description } if description.contains("model_unavailable"))
        );
        assert_eq!(text(&spans[0], "arbiter.infra_error.phase"), "agent");
        assert_eq!(text(&spans[0], "error.type"), "infra_error");
        assert_eq!(
            attrs(&spans[0]).get("arbiter.passed"),
            Some(&Value::Bool(false))
        );
        assert!(!attrs(&spans[0]).contains_key("arbiter.reward"));
        assert!(!attrs(&spans[0]).contains_key("arbiter.usage.requests"));
        assert!(
            matches!(spans[2].status, Status::Error { .. }),
            "the agent phase failed"
        );
        assert_eq!(spans[1].status, Status::Unset);
        assert_eq!(text(&spans[4], "error.type"), "unavailable");
        assert!(matches!(spans[4].status, Status::Error { .. }));
    }

    #[test]
    fn phases_of_an_older_record_run_back_to_back_from_the_trial_start() {
        let rec = record(json!({
            "phases": {"environment": {"seconds": 0.5}, "agent": {"seconds": 2.0}, "verify": {"seconds": 1.0}}
        }));
        let spans = trial_spans("job-1", &rec, &[]);
        let start = secs("2026-01-01T00:00:00Z").expect("t");
        let bounds: Vec<(f64, f64)> = spans[1..]
            .iter()
            .map(|s| (secs_of(s.start_time) - start, secs_of(s.end_time) - start))
            .collect();
        assert_eq!(bounds, [(0.0, 0.5), (0.5, 2.5), (2.5, 3.5)]);
        assert!(
            spans[1..]
                .iter()
                .all(|s| attrs(s).get("arbiter.phase.start_estimated") == Some(&Value::Bool(true)))
        );
        // Without an agent phase nothing hangs under it; without calls, no call spans.
        assert_eq!(spans.len(), 4);
    }
}
