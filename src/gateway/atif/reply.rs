//! Replies as the trajectory reads them: text, reasoning and tool calls from each protocol's
//! body, streams reassembled from their server-sent events (as far as they go when cut).

use serde_json::{Value, json};

use super::request::{items, str_of, text_of};
use crate::gateway::ledger::CallRecord;
use crate::gateway::usage::Protocol;

/// One tool call of a reply.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Call {
    pub(super) id: String,
    pub(super) name: String,
    /// Always an object; see `raw`.
    pub(super) arguments: Value,
    /// The arguments as sent when they were not a JSON object.
    pub(super) raw: Option<String>,
}

impl Call {
    /// A call of `name` with `args` as [`arguments_of`] or [`arguments_value`] read them.
    fn new(id: &str, name: &str, (arguments, raw): (Value, Option<String>)) -> Call {
        Call {
            id: id.to_string(),
            name: name.to_string(),
            arguments,
            raw,
        }
    }
}

/// A reply as reassembled.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Reply {
    pub(super) text: String,
    pub(super) reasoning: String,
    pub(super) calls: Vec<Call>,
    pub(super) model: Option<String>,
}

pub(super) fn parse_response(call: &CallRecord) -> Result<Reply, String> {
    let body = &call.response.body;
    if body.trim().is_empty() {
        return Err("no response body".into());
    }
    let is_sse = call.stream && !body.trim_start().starts_with('{');
    if is_sse {
        let events = sse_events(body);
        if events.is_empty() {
            return Err("no event could be read from the stream".into());
        }
        return Ok(match call.api {
            Protocol::AnthropicMessages => anthropic_stream(&events),
            Protocol::ChatCompletions => chat_stream(&events),
            Protocol::Responses => responses_stream(&events),
        });
    }
    let v: Value = serde_json::from_str(body).map_err(|e| {
        if call.response.truncated {
            format!(
                "response body cut at {} of {} bytes",
                body.len(),
                call.response.bytes
            )
        } else {
            format!("response body is not JSON: {e}")
        }
    })?;
    if v.get("error").is_some_and(|e| !e.is_null()) && call.status >= 400 {
        return Err(format!("the upstream answered {}", call.status));
    }
    Ok(match call.api {
        Protocol::AnthropicMessages => anthropic_reply(&v),
        Protocol::ChatCompletions => chat_reply(&v),
        Protocol::Responses => responses_reply(&v),
    })
}

/// The JSON data of each complete server-sent event (`[DONE]` and unreadable ones skipped).
fn sse_events(body: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut data = String::new();
    let flush = |data: &mut String, out: &mut Vec<Value>| {
        if !data.is_empty() {
            if let Ok(v) = serde_json::from_str::<Value>(data) {
                out.push(v);
            }
            data.clear();
        }
    };
    for line in body.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            flush(&mut data, &mut out);
        } else if let Some(d) = line.strip_prefix("data:") {
            let d = d.strip_prefix(' ').unwrap_or(d);
            if d != "[DONE]" {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(d);
            }
        }
    }
    // A last event without its blank line is kept only if it parses (a cut one does not).
    flush(&mut data, &mut out);
    out
}

/// Arguments given as a JSON string: an object, or `{}` with the text kept.
fn arguments_of(s: &str) -> (Value, Option<String>) {
    match serde_json::from_str::<Value>(s) {
        Ok(v @ Value::Object(_)) => (v, None),
        _ if s.trim().is_empty() => (json!({}), None),
        _ => (json!({}), Some(s.to_string())),
    }
}

/// Arguments given as a JSON value.
fn arguments_value(v: Option<&Value>) -> (Value, Option<String>) {
    match v {
        Some(v @ Value::Object(_)) => (v.clone(), None),
        Some(Value::String(s)) => arguments_of(s),
        None | Some(Value::Null) => (json!({}), None),
        Some(other) => (json!({}), Some(other.to_string())),
    }
}

fn push_text(into: &mut String, s: &str) {
    if s.is_empty() {
        return;
    }
    if !into.is_empty() {
        into.push('\n');
    }
    into.push_str(s);
}

fn model_of(v: &Value) -> Option<String> {
    v.get("model").and_then(Value::as_str).map(str::to_string)
}

fn anthropic_block(reply: &mut Reply, block: &Value) {
    match str_of(block, "type") {
        "text" => push_text(&mut reply.text, str_of(block, "text")),
        "thinking" => push_text(&mut reply.reasoning, str_of(block, "thinking")),
        "redacted_thinking" => push_text(&mut reply.reasoning, "[redacted thinking]"),
        "tool_use" | "server_tool_use" => reply.calls.push(Call::new(
            str_of(block, "id"),
            str_of(block, "name"),
            arguments_value(block.get("input")),
        )),
        _ => {}
    }
}

/// The reply of `model` that `read` builds from each of `parts` in turn.
fn assemble<'a>(
    model: Option<String>,
    parts: impl IntoIterator<Item = &'a Value>,
    read: fn(&mut Reply, &Value),
) -> Reply {
    let mut reply = Reply {
        model,
        ..Reply::default()
    };
    for part in parts {
        read(&mut reply, part);
    }
    reply
}

fn anthropic_reply(v: &Value) -> Reply {
    assemble(model_of(v), items(v, "content"), anthropic_block)
}

fn anthropic_stream(events: &[Value]) -> Reply {
    // Blocks by index: the start block and the deltas' text (or partial JSON input).
    let mut blocks: Vec<(u64, Value, String)> = Vec::new();
    let mut model = None;
    for e in events {
        match str_of(e, "type") {
            "message_start" => model = e.get("message").and_then(model_of),
            "content_block_start" => {
                let index = e.get("index").and_then(Value::as_u64).unwrap_or(0);
                let block = e.get("content_block").cloned().unwrap_or(Value::Null);
                blocks.push((index, block, String::new()));
            }
            "content_block_delta" => {
                let index = e.get("index").and_then(Value::as_u64).unwrap_or(0);
                let delta = e.get("delta").unwrap_or(&Value::Null);
                let piece = match str_of(delta, "type") {
                    "text_delta" => str_of(delta, "text"),
                    "thinking_delta" => str_of(delta, "thinking"),
                    "input_json_delta" => str_of(delta, "partial_json"),
                    _ => "",
                };
                if let Some(b) = blocks.iter_mut().rev().find(|b| b.0 == index) {
                    b.2.push_str(piece);
                }
            }
            _ => {}
        }
    }
    let blocks: Vec<Value> = blocks
        .into_iter()
        .map(|(_, mut block, acc)| {
            match str_of(&block, "type") {
                "text" => block["text"] = json!(format!("{}{acc}", str_of(&block, "text"))),
                "thinking" => {
                    block["thinking"] = json!(format!("{}{acc}", str_of(&block, "thinking")))
                }
                "tool_use" | "server_tool_use" if !acc.is_empty() => block["input"] = json!(acc),
                _ => {}
            }
            block
        })
        .collect();
    assemble(model, &blocks, anthropic_block)
}

fn chat_reply(v: &Value) -> Reply {
    let mut reply = Reply {
        model: model_of(v),
        ..Reply::default()
    };
    let Some(msg) = v.pointer("/choices/0/message") else {
        return reply;
    };
    reply.text = text_of(msg.get("content").unwrap_or(&Value::Null));
    if let Some(r) = msg
        .get("reasoning_content")
        .or_else(|| msg.get("reasoning"))
        .and_then(Value::as_str)
    {
        reply.reasoning = r.to_string();
    }
    for c in items(msg, "tool_calls") {
        let name = c.pointer("/function/name").and_then(Value::as_str);
        reply.calls.push(Call::new(
            str_of(c, "id"),
            name.unwrap_or_default(),
            arguments_value(c.pointer("/function/arguments")),
        ));
    }
    if let Some(f) = msg.get("function_call") {
        let name = str_of(f, "name");
        reply
            .calls
            .push(Call::new(name, name, arguments_value(f.get("arguments"))));
    }
    reply
}

fn chat_stream(events: &[Value]) -> Reply {
    let mut reply = Reply::default();
    // Tool calls by index: id, name, argument text.
    let mut calls: Vec<(u64, (String, String, String))> = Vec::new();
    for e in events {
        if reply.model.is_none() {
            reply.model = model_of(e);
        }
        let Some(delta) = e.pointer("/choices/0/delta") else {
            continue;
        };
        reply.text.push_str(str_of(delta, "content"));
        reply.reasoning.push_str(
            delta
                .get("reasoning_content")
                .or_else(|| delta.get("reasoning"))
                .and_then(Value::as_str)
                .unwrap_or_default(),
        );
        for c in items(delta, "tool_calls") {
            let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
            let (id, name, args) = slot(&mut calls, index, Default::default);
            if let Some(s) = c.get("id").and_then(Value::as_str) {
                *id = s.to_string();
            }
            if let Some(s) = c.pointer("/function/name").and_then(Value::as_str) {
                name.push_str(s);
            }
            if let Some(s) = c.pointer("/function/arguments").and_then(Value::as_str) {
                args.push_str(s);
            }
        }
    }
    for (_, (id, name, args)) in calls {
        reply.calls.push(Call::new(&id, &name, arguments_of(&args)));
    }
    reply
}

fn responses_item(reply: &mut Reply, item: &Value) {
    match str_of(item, "type") {
        "message" => {
            for part in items(item, "content") {
                match str_of(part, "type") {
                    "output_text" => push_text(&mut reply.text, str_of(part, "text")),
                    "refusal" => push_text(&mut reply.text, str_of(part, "refusal")),
                    _ => {}
                }
            }
        }
        "reasoning" => {
            for key in ["summary", "content"] {
                for part in items(item, key) {
                    push_text(&mut reply.reasoning, str_of(part, "text"));
                }
            }
        }
        "function_call" => reply.calls.push(Call::new(
            str_of(item, "call_id"),
            str_of(item, "name"),
            arguments_value(item.get("arguments")),
        )),
        "custom_tool_call" => reply.calls.push(Call::new(
            str_of(item, "call_id"),
            str_of(item, "name"),
            (json!({"input": str_of(item, "input")}), None),
        )),
        "local_shell_call" => reply.calls.push(Call::new(
            str_of(item, "call_id"),
            "local_shell",
            (
                item.get("action").cloned().unwrap_or_else(|| json!({})),
                None,
            ),
        )),
        _ => {}
    }
}

fn responses_reply(v: &Value) -> Reply {
    assemble(model_of(v), items(v, "output"), responses_item)
}

/// The streamed part at `index` (a tool call, an output item), `empty()` until an event
/// fills it.
fn slot<T>(parts: &mut Vec<(u64, T)>, index: u64, empty: impl FnOnce() -> T) -> &mut T {
    let i = match parts.iter().position(|p| p.0 == index) {
        Some(i) => i,
        None => {
            parts.push((index, empty()));
            parts.len() - 1
        }
    };
    &mut parts[i].1
}

/// `item` becomes a `kind` whose `key` is one `part` holding its text so far and `delta`.
fn grow_part(item: &mut Value, kind: &str, key: &str, part: &str, delta: &str) {
    item["type"] = json!(kind);
    let text = format!(
        "{}{delta}",
        item.pointer(&format!("/{key}/0/text"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    );
    item[key] = json!([{"type": part, "text": text}]);
}

fn responses_stream(events: &[Value]) -> Reply {
    // The final response object says it all when the stream got that far.
    for e in events.iter().rev() {
        if matches!(
            str_of(e, "type"),
            "response.completed" | "response.incomplete" | "response.failed"
        ) && let Some(r) = e.get("response")
            && r.get("output").and_then(Value::as_array).is_some()
        {
            return responses_reply(r);
        }
    }
    // Else the items as far as they went: each `output_item.added`, grown by its deltas,
    // replaced by its `output_item.done`.
    let mut items: Vec<(u64, Value)> = Vec::new();
    let mut model = None;
    for e in events {
        let index = e.get("output_index").and_then(Value::as_u64).unwrap_or(0);
        let delta = str_of(e, "delta");
        match str_of(e, "type") {
            "response.created" | "response.in_progress" => {
                model = e.get("response").and_then(model_of);
            }
            "response.output_item.added" | "response.output_item.done" => {
                *slot(&mut items, index, || json!({})) =
                    e.get("item").cloned().unwrap_or_else(|| json!({}));
            }
            "response.output_text.delta" => {
                grow_part(
                    slot(&mut items, index, || json!({})),
                    "message",
                    "content",
                    "output_text",
                    delta,
                );
            }
            "response.function_call_arguments.delta" => {
                let item = slot(&mut items, index, || json!({}));
                let args = format!("{}{delta}", str_of(item, "arguments"));
                item["arguments"] = json!(args);
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                grow_part(
                    slot(&mut items, index, || json!({})),
                    "reasoning",
                    "summary",
                    "summary_text",
                    delta,
                );
            }
            _ => {}
        }
    }
    items.sort_by_key(|i| i.0);
    assemble(model, items.iter().map(|(_, item)| item), responses_item)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str, arguments: Value, raw: Option<&str>) -> Call {
        Call {
            id: id.to_string(),
            name: name.to_string(),
            arguments,
            raw: raw.map(str::to_string),
        }
    }

    #[test]
    fn custom_shell_and_legacy_function_calls_are_read() {
        let r = responses_reply(&json!({"model": "m", "output": [
            {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin"},
            {"type": "local_shell_call", "call_id": "c2", "action": {"command": ["ls"]}},
            {"type": "function_call", "call_id": "c3", "name": "f", "arguments": "not json"},
        ]}));
        assert_eq!(r.model.as_deref(), Some("m"));
        assert_eq!(
            r.calls,
            [
                call("c1", "apply_patch", json!({"input": "*** Begin"}), None),
                call("c2", "local_shell", json!({"command": ["ls"]}), None),
                call("c3", "f", json!({}), Some("not json")),
            ]
        );
        let r = chat_reply(&json!({"choices": [{"message": {"content": "hi",
            "function_call": {"name": "g", "arguments": "{\"a\": 1}"}}}]}));
        assert_eq!(r.text, "hi");
        assert_eq!(r.calls, [call("g", "g", json!({"a": 1}), None)]);
    }

    #[test]
    fn streamed_chat_tool_calls_join_their_deltas_by_index() {
        let chunk = |delta: Value| json!({"model": "m", "choices": [{"delta": delta}]});
        let r = chat_stream(&[
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "sh", "arguments": "{\"x\""}}]}),
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "ed", "arguments": "{}"}}]}),
            ),
            chunk(json!({"tool_calls": [{"index": 1, "function": {"arguments": ": 2}"}}]})),
        ]);
        assert_eq!(
            r.calls,
            [
                call("b", "sh", json!({"x": 2}), None),
                call("a", "ed", json!({}), None),
            ]
        );
    }
}
