//! ATIF export of the gateway's ledger: `agent/model-calls.jsonl` → `agent/trajectory.atif.json`.
//!
//! The Agent Trajectory Interchange Format is Harbor's (RFC 0001; schema `ATIF-v1.8`, as JSON
//! Schema in docs/atif.schema.json). [`trajectory`] is pure: ledger lines in, an ATIF JSON value
//! out. It reads what the gateway saw, so every fact in it was measured by the harness, not
//! reported by the agent:
//!
//! - a `system` step for the system prompt (again whenever a call's system prompt changes);
//! - a `user` step for each user message new in a call's request — "new" meaning after the
//!   last assistant turn the request replays, since agents resend their history (and not
//!   again when the call before already had it: a retry);
//! - an `agent` step per call: the reply's text, reasoning and tool calls (streams reassembled
//!   from their events), the call's tokens and cost as `metrics`, its ledger facts in `extra`;
//! - tool results (found in a later request, in each protocol's own shape) as the
//!   `observation` of the agent step that made the call, as ATIF requires; a result whose call
//!   is not in the trajectory goes to a `system` step with `source_call_id: null`;
//! - `final_metrics` summed over the calls the way the record's `usage` is.
//!
//! Bodies are kept in the ledger up to 64 KiB: a request cut there is read from the fields
//! whole before the cut (often the conversation; else its new messages are missing), a cut
//! stream is reassembled as far as it goes; either is marked in the step's `extra` and counted
//! in `notes`. Token counts never depend on
//! bodies (they come from the ledger's own fields), so the totals stay exact.
//!
//! [`export_trial`] is the one call the trial makes after the gateway has closed the ledger.

use std::collections::HashMap;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::ledger::{BODY_CAP, CallOutcome, CallRecord, LEDGER_SCHEMA};

mod reply;
mod request;

use reply::{Reply, parse_response};
use request::{Input, Read, parse_request};

/// The ATIF version written.
pub const ATIF_SCHEMA_VERSION: &str = "ATIF-v1.8";
/// The export, under the trial's `agent/`.
pub const TRAJECTORY_FILE: &str = "trajectory.atif.json";
/// The ledger it is built from, under the trial's `agent/`.
pub const LEDGER_FILE: &str = "model-calls.jsonl";

/// A failure reading the ledger or writing the export.
#[derive(Debug, thiserror::Error)]
pub enum AtifError {
    #[error("cannot read the model-call ledger {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the ATIF trajectory {path}: {message}")]
    Write { path: String, message: String },
}

/// The ATIF `agent` object: who the trajectory is of.
#[derive(Debug, Clone, PartialEq)]
pub struct AtifAgent {
    /// The agent's name in the job.
    pub name: String,
    /// The preset's version, or `unknown` for a `command` agent.
    pub version: String,
    /// The agent kind (`command`, `claude-code`, …).
    pub kind: String,
}

impl AtifAgent {
    pub fn of(agent: &crate::agent::Agent) -> Self {
        use crate::agent::AgentKind;
        let kind = match &agent.kind {
            AgentKind::Oracle => "oracle".to_string(),
            AgentKind::Nop => "nop".to_string(),
            AgentKind::Command(_) => "command".to_string(),
            AgentKind::Aworld(_) => "aworld".to_string(),
            other => other
                .preset()
                .map(|(k, _)| k.name().to_string())
                .unwrap_or_else(|| "unknown".to_string()),
        };
        let version = agent
            .kind
            .preset()
            .map(|(k, p)| p.version_or_pinned(k).to_string())
            .unwrap_or_else(|| "unknown".to_string());
        AtifAgent {
            name: agent.name.clone(),
            version,
            kind,
        }
    }
}

/// Write `agent_dir/trajectory.atif.json` from `agent_dir/model-calls.jsonl`, atomically.
/// Nothing is written (and `Ok(None)` returned) when the ledger is absent or has no call.
pub fn export(
    agent_dir: &Path,
    session_id: &str,
    agent: &AtifAgent,
) -> Result<Option<PathBuf>, AtifError> {
    let ledger = agent_dir.join(LEDGER_FILE);
    let Some((calls, unreadable)) = read_ledger(&ledger)? else {
        return Ok(None);
    };
    let Some(value) = trajectory(&calls, unreadable, session_id, agent) else {
        return Ok(None);
    };
    let path = agent_dir.join(TRAJECTORY_FILE);
    let write_err = |message: String| AtifError::Write {
        path: path.display().to_string(),
        message,
    };
    let bytes = serde_json::to_vec_pretty(&value).map_err(|e| write_err(e.to_string()))?;
    crate::job::write_atomic(&path, &bytes).map_err(|e| write_err(e.to_string()))?;
    Ok(Some(path))
}

/// The trial's one call, once the gateway has finished the trial (its ledger closed): export
/// `<trial dir>/agent/trajectory.atif.json`. A failure is logged, never the trial's.
pub fn export_trial(trial_dir: &Path, trial_id: &str, agent: &crate::agent::Agent) {
    match export(&trial_dir.join("agent"), trial_id, &AtifAgent::of(agent)) {
        Ok(Some(path)) => {
            tracing::debug!(trial = trial_id, path = %path.display(), "ATIF trajectory written")
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(trial = trial_id, "{e}"),
    }
}

/// The ledger's calls and the number of lines that could not be read; `None` when there is
/// no ledger file.
pub fn read_ledger(path: &Path) -> Result<Option<(Vec<CallRecord>, usize)>, AtifError> {
    let read_err = |source| AtifError::Read {
        path: path.display().to_string(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_err(e)),
    };
    let mut calls = Vec::new();
    let mut unreadable = 0;
    for line in io::BufReader::new(file).lines() {
        let line = line.map_err(read_err)?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<CallRecord>(&line) {
            Ok(c) => calls.push(c),
            Err(_) => unreadable += 1,
        }
    }
    Ok(Some((calls, unreadable)))
}

/// What Harbor's `Trajectory` validators check beyond the JSON Schema (docs/atif.schema.json
/// cannot state them): `step_id`s run 1, 2, … and every observation result's `source_call_id`
/// names a `tool_call_id` of its own step. Empty when both hold.
pub fn invariant_errors(trajectory: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let steps = trajectory
        .get("steps")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, step) in steps.iter().enumerate() {
        if step.get("step_id").and_then(Value::as_u64) != Some(i as u64 + 1) {
            out.push(format!("steps[{i}].step_id: expected {}", i + 1));
        }
        let ids: Vec<&str> = step
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("tool_call_id").and_then(Value::as_str))
            .collect();
        for r in step
            .pointer("/observation/results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(id) = r.get("source_call_id").and_then(Value::as_str)
                && !ids.contains(&id)
            {
                out.push(format!(
                    "steps[{i}]: source_call_id {id:?} is not a tool call of this step"
                ));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The conversion

/// The ATIF trajectory of `calls` (ledger lines, in any order: sorted by `seq` here), or
/// `None` when there is no call. `unreadable` ledger lines are counted in `notes`.
pub fn trajectory(
    calls: &[CallRecord],
    unreadable: usize,
    session_id: &str,
    agent: &AtifAgent,
) -> Option<Value> {
    if calls.is_empty() {
        return None;
    }
    let mut calls: Vec<&CallRecord> = calls.iter().collect();
    calls.sort_by_key(|c| c.seq);

    let mut b = Builder::default();
    let mut tools: Option<Vec<Value>> = None;
    let mut last_system: Option<String> = None;
    // The new messages of the call before, with the assistant turns its request replayed.
    let mut last_new: Option<(usize, Vec<Input>)> = None;
    let mut truncated_requests = 0usize;
    let mut salvaged_requests = 0usize;
    let mut truncated_responses = 0usize;

    for call in &calls {
        let mut extra = call_extra(call);
        if call.request.truncated {
            truncated_requests += 1;
            extra.insert("request_truncated".into(), json!(true));
        }
        match parse_request(call) {
            Ok(Read {
                request: req,
                salvaged,
            }) => {
                if let Some(fields) = salvaged {
                    salvaged_requests += 1;
                    extra.insert("request_salvaged".into(), json!(fields));
                }
                if tools.is_none() && !req.tools.is_empty() {
                    tools = Some(req.tools.clone());
                }
                let system: Vec<&str> = req
                    .inputs
                    .iter()
                    .filter_map(|i| match i {
                        Input::System(s) => Some(s.as_str()),
                        _ => None,
                    })
                    .collect();
                if !system.is_empty() {
                    let system = system.join("\n\n");
                    if last_system.as_deref() != Some(system.as_str()) {
                        b.system(&call.time, system.clone(), None);
                        last_system = Some(system);
                    }
                }
                let after = req
                    .inputs
                    .iter()
                    .rposition(|i| *i == Input::Assistant)
                    .map_or(0, |p| p + 1);
                let new: Vec<Input> = req.inputs[after..]
                    .iter()
                    .filter(|i| !matches!(i, Input::System(_)))
                    .cloned()
                    .collect();
                // What the call before had already shown is not new again: the same messages
                // are a retry (or a refused call resent); a longer list adds only its tail.
                let turns = req
                    .inputs
                    .iter()
                    .filter(|i| **i == Input::Assistant)
                    .count();
                let seen = match &last_new {
                    Some((t, prev)) if *t == turns && new.starts_with(prev) => prev.len(),
                    _ => 0,
                };
                for input in &new[seen..] {
                    b.input(&call.time, input);
                }
                last_new = Some((turns, new));
            }
            Err(why) => {
                extra.insert("request_unreadable".into(), json!(why));
                last_new = None;
            }
        }
        let reply = parse_response(call);
        if call.response.truncated {
            truncated_responses += 1;
            extra.insert("response_truncated".into(), json!(true));
        }
        let reply = match reply {
            Ok(r) => r,
            Err(why) => {
                if call.outcome == CallOutcome::Ok || !call.response.body.is_empty() {
                    extra.insert("response_unreadable".into(), json!(why));
                }
                Reply::default()
            }
        };
        b.agent(call, reply, extra);
    }

    let steps = b.steps;
    let totals = Totals::of(&calls);
    let mut notes = vec![format!(
        "Built by arbiter from its model gateway's ledger (agent/{LEDGER_FILE}, {LEDGER_SCHEMA}): one agent step per model call the agent made, in the order calls started; tokens and cost as the gateway counted them."
    )];
    if truncated_requests > 0 {
        notes.push(format!(
            "{truncated_requests} request body(ies) were cut at {BODY_CAP} bytes in the ledger ({salvaged_requests} read from the fields whole before the cut, their steps say request_salvaged; the messages new in the others — user turns, tool results — are missing, their steps say request_unreadable)."
        ));
    }
    if truncated_responses > 0 {
        notes.push(format!(
            "{truncated_responses} response body(ies) were cut at {BODY_CAP} bytes: those replies are shown as far as they could be read; their steps say response_truncated."
        ));
    }
    if unreadable > 0 {
        notes.push(format!(
            "{unreadable} ledger line(s) could not be read and are not in this trajectory."
        ));
    }
    let first = calls[0];
    let mut agent_obj = Map::new();
    agent_obj.insert("name".into(), json!(agent.name));
    agent_obj.insert("version".into(), json!(agent.version));
    if let Some(m) = calls.iter().find_map(|c| c.model.clone()) {
        agent_obj.insert("model_name".into(), json!(m));
    }
    if let Some(t) = tools {
        agent_obj.insert("tool_definitions".into(), Value::Array(t));
    }
    agent_obj.insert(
        "extra".into(),
        json!({"kind": agent.kind, "provider": first.provider, "api": first.api.as_str()}),
    );
    let total_steps = steps.len();
    Some(json!({
        "schema_version": ATIF_SCHEMA_VERSION,
        "session_id": session_id,
        "agent": agent_obj,
        "steps": steps,
        "notes": notes.join(" "),
        "final_metrics": totals.final_metrics(total_steps),
        "extra": {
            "source": "arbiter model gateway",
            "ledger": format!("agent/{LEDGER_FILE}"),
            "ledger_schema": LEDGER_SCHEMA,
            "calls": calls.len(),
            "unreadable_ledger_lines": unreadable,
            "truncated_requests": truncated_requests,
            "salvaged_requests": salvaged_requests,
            "truncated_responses": truncated_responses,
        },
    }))
}

/// The ledger facts of a call, for its agent step's `extra`.
fn call_extra(call: &CallRecord) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("seq".into(), json!(call.seq));
    m.insert("api".into(), json!(call.api.as_str()));
    m.insert("provider".into(), json!(call.provider));
    m.insert("stream".into(), json!(call.stream));
    m.insert("status".into(), json!(call.status));
    m.insert("outcome".into(), json!(call.outcome));
    m.insert("attempts".into(), json!(call.attempts));
    m.insert("latency_ms".into(), json!(call.latency_ms));
    if let Some(s) = &call.stop_reason {
        m.insert("stop_reason".into(), json!(s));
    }
    if !call.upstream_errors.is_empty() {
        m.insert("upstream_errors".into(), json!(call.upstream_errors));
    }
    if let Some(d) = &call.detail {
        m.insert("detail".into(), json!(d));
    }
    m
}

/// Sums over the calls, as [`super::ledger::Usage::add`] makes them.
#[derive(Debug, Default)]
struct Totals {
    requests: u64,
    refused: u64,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    cost: Option<f64>,
}

impl Totals {
    fn of(calls: &[&CallRecord]) -> Self {
        let mut t = Totals::default();
        for c in calls {
            if c.outcome == CallOutcome::BudgetExhausted {
                t.refused += 1;
                continue;
            }
            t.requests += 1;
            if let Some(k) = &c.tokens {
                t.input += k.input;
                t.output += k.output;
                t.cache_read += k.cache_read;
                t.cache_write += k.cache_write;
            }
            if let Some(cost) = c.cost_usd {
                *t.cost.get_or_insert(0.0) += cost;
            }
        }
        t
    }

    fn final_metrics(&self, steps: usize) -> Value {
        let mut m = json!({
            "total_prompt_tokens": self.input + self.cache_read + self.cache_write,
            "total_completion_tokens": self.output,
            "total_cached_tokens": self.cache_read,
            "total_steps": steps,
            "extra": {
                "requests": self.requests,
                "refused": self.refused,
                "input_tokens": self.input,
                "output_tokens": self.output,
                "cache_read_tokens": self.cache_read,
                "cache_write_tokens": self.cache_write,
            },
        });
        if let Some(c) = self.cost {
            m["total_cost_usd"] = json!(c);
        }
        m
    }
}

/// Steps as they are made; tool results find the step of their call.
#[derive(Default)]
struct Builder {
    steps: Vec<Value>,
    /// tool_call_id → index of the agent step that made the call.
    calls: HashMap<String, usize>,
    /// Index of the current system step collecting results without a known call.
    orphans: Option<usize>,
}

impl Builder {
    fn push(&mut self, mut step: Map<String, Value>) -> usize {
        let i = self.steps.len();
        let mut ordered = Map::new();
        ordered.insert("step_id".into(), json!(i + 1));
        ordered.append(&mut step);
        self.steps.push(Value::Object(ordered));
        self.orphans = None;
        i
    }

    fn system(&mut self, time: &str, message: String, observation: Option<Value>) -> usize {
        let mut s = Map::new();
        s.insert("timestamp".into(), json!(time));
        s.insert("source".into(), json!("system"));
        s.insert("message".into(), json!(message));
        if let Some(o) = observation {
            s.insert("observation".into(), o);
        }
        self.push(s)
    }

    fn input(&mut self, time: &str, input: &Input) {
        match input {
            Input::User(text) => {
                let mut s = Map::new();
                s.insert("timestamp".into(), json!(time));
                s.insert("source".into(), json!("user"));
                s.insert("message".into(), json!(text));
                self.push(s);
            }
            Input::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let mut result = Map::new();
                let known = self.calls.get(call_id).copied();
                result.insert(
                    "source_call_id".into(),
                    known.map_or(Value::Null, |_| json!(call_id)),
                );
                result.insert("content".into(), json!(content));
                let mut extra = Map::new();
                if known.is_none() {
                    extra.insert("tool_call_id".into(), json!(call_id));
                }
                if *is_error {
                    extra.insert("is_error".into(), json!(true));
                }
                if !extra.is_empty() {
                    result.insert("extra".into(), Value::Object(extra));
                }
                let at = match known.or(self.orphans) {
                    Some(i) => i,
                    None => {
                        let i = self.system(
                            time,
                            "Tool results for calls not in this trajectory.".into(),
                            None,
                        );
                        self.orphans = Some(i);
                        i
                    }
                };
                let step = &mut self.steps[at];
                let results = step
                    .as_object_mut()
                    .map(|s| {
                        s.entry("observation")
                            .or_insert_with(|| json!({"results": []}))
                    })
                    .and_then(|o| o.get_mut("results"))
                    .and_then(Value::as_array_mut);
                if let Some(results) = results {
                    results.push(Value::Object(result));
                }
            }
            Input::System(_) | Input::Assistant => {}
        }
    }

    fn agent(&mut self, call: &CallRecord, reply: Reply, extra: Map<String, Value>) {
        let mut s = Map::new();
        s.insert("timestamp".into(), json!(call.time));
        s.insert("source".into(), json!("agent"));
        if let Some(m) = reply.model.clone().or_else(|| call.model.clone()) {
            s.insert("model_name".into(), json!(m));
        }
        s.insert("message".into(), json!(reply.text));
        // Did the call reach a model? A refused or unreachable call is not an inference.
        let inferred = !matches!(
            call.outcome,
            CallOutcome::BudgetExhausted | CallOutcome::Unavailable
        );
        if inferred && !reply.reasoning.is_empty() {
            s.insert("reasoning_content".into(), json!(reply.reasoning));
        }
        let mut ids = Vec::new();
        if !reply.calls.is_empty() {
            let calls: Vec<Value> = reply
                .calls
                .iter()
                .map(|c| {
                    ids.push(c.id.clone());
                    let mut v = json!({
                        "tool_call_id": c.id,
                        "function_name": c.name,
                        "arguments": c.arguments,
                    });
                    if let Some(raw) = &c.raw {
                        v["extra"] = json!({"raw_arguments": raw});
                    }
                    v
                })
                .collect();
            s.insert("tool_calls".into(), Value::Array(calls));
        }
        if inferred && let Some(m) = metrics(call) {
            s.insert("metrics".into(), m);
        }
        s.insert("llm_call_count".into(), json!(u8::from(inferred)));
        s.insert("extra".into(), Value::Object(extra));
        let i = self.push(s);
        for id in ids {
            self.calls.insert(id, i);
        }
    }
}

/// ATIF `metrics` of a call: prompt tokens include the cached and cache-write ones.
fn metrics(call: &CallRecord) -> Option<Value> {
    let t = call.tokens?;
    let mut m = json!({
        "prompt_tokens": t.input + t.cache_read + t.cache_write,
        "completion_tokens": t.output,
        "cached_tokens": t.cache_read,
        "extra": {"input_tokens": t.input, "cache_write_tokens": t.cache_write},
    });
    if let Some(c) = call.cost_usd {
        m["cost_usd"] = json!(c);
    }
    Some(m)
}

#[cfg(test)]
mod tests;
