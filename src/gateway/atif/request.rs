//! Requests as the trajectory reads them: each protocol's conversation as [`Input`]s (system
//! prompt, user messages, replayed assistant turns, tool results) and its tool definitions;
//! a body cut at the ledger's cap read from the fields whole before the cut.

use serde_json::{Map, Value, json};

use crate::gateway::ledger::CallRecord;
use crate::gateway::usage::Protocol;

/// One item of a request's conversation, whatever the protocol.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Input {
    System(String),
    User(String),
    /// A replayed assistant turn (text, tool call, reasoning item): history.
    Assistant,
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

/// A request as read for the trajectory.
#[derive(Debug, Default)]
pub(super) struct Request {
    pub(super) inputs: Vec<Input>,
    /// Tool definitions, in OpenAI's function-calling shape (ATIF `agent.tool_definitions`).
    pub(super) tools: Vec<Value>,
}

/// A request read in full, or — when its body was cut at the cap — from the fields that lie
/// whole before the cut (`salvaged` names them).
pub(super) struct Read {
    pub(super) request: Request,
    pub(super) salvaged: Option<Vec<&'static str>>,
}

pub(super) fn parse_request(call: &CallRecord) -> Result<Read, String> {
    let body = &call.request.body;
    let (v, salvaged) = match serde_json::from_str::<Value>(body) {
        Ok(v) => (v, None),
        Err(e) if !call.request.truncated => return Err(format!("request body is not JSON: {e}")),
        Err(_) => {
            let cut = format!(
                "request body cut at {} of {} bytes",
                body.len(),
                call.request.bytes
            );
            let (conversation, others): (&str, &[&'static str]) = match call.api {
                Protocol::AnthropicMessages => ("messages", &["system", "tools"]),
                Protocol::ChatCompletions => ("messages", &["tools"]),
                Protocol::Responses => ("input", &["instructions", "tools"]),
            };
            let mut v = Map::new();
            let mut names = Vec::new();
            for key in std::iter::once(&conversation).chain(others) {
                if let Some(field) = salvage(body, key) {
                    v.insert((*key).to_string(), field);
                    names.push(*key);
                }
            }
            if !v.contains_key(conversation) {
                return Err(cut);
            }
            (Value::Object(v), Some(names))
        }
    };
    let request = match call.api {
        Protocol::AnthropicMessages => anthropic_request(&v),
        Protocol::ChatCompletions => chat_request(&v),
        Protocol::Responses => responses_request(&v),
    };
    Ok(Read { request, salvaged })
}

/// The value of the first `"key":` in `body` when it ends before the body does: clients
/// often send the conversation before a long system prompt or tool list, so a request cut at
/// the cap may still hold it whole.
pub(super) fn salvage(body: &str, key: &str) -> Option<Value> {
    let needle = format!("\"{key}\"");
    let mut from = 0;
    while let Some(at) = body[from..].find(&needle) {
        let after = from + at + needle.len();
        from = after;
        let rest = body[after..].trim_start();
        let Some(rest) = rest.strip_prefix(':') else {
            continue;
        };
        let rest = rest.trim_start();
        let start = body.len() - rest.len();
        let end = start + json_value_len(rest)?;
        return serde_json::from_str(&body[start..end]).ok();
    }
    None
}

/// Length of the JSON value `s` starts with (a string, array or object), if it ends in `s`.
pub(super) fn json_value_len(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => {
                    in_string = false;
                    if depth == 0 {
                        return Some(i + 1);
                    }
                }
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '[' | '{' => depth += 1,
            ']' | '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The text of a content value: a string, or the text parts of an array (other parts named).
pub(super) fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => {
                    match o.get("text").and_then(Value::as_str) {
                        Some(t) => Some(t.to_string()),
                        // Images, files, documents: named, not carried.
                        None => o
                            .get("type")
                            .and_then(Value::as_str)
                            .map(|t| format!("[{t}]")),
                    }
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The elements of the array at `v[key]`, none when it is absent or not an array.
pub(super) fn items<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

pub(super) fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn anthropic_request(v: &Value) -> Request {
    let mut inputs = Vec::new();
    if let Some(system) = v.get("system") {
        let s = text_of(system);
        if !s.is_empty() {
            inputs.push(Input::System(s));
        }
    }
    for m in items(v, "messages") {
        let content = m.get("content").unwrap_or(&Value::Null);
        match str_of(m, "role") {
            "assistant" => inputs.push(Input::Assistant),
            _ => match content {
                Value::Array(blocks) => {
                    let mut text = Vec::new();
                    for block in blocks {
                        if str_of(block, "type") == "tool_result" {
                            inputs.push(Input::ToolResult {
                                call_id: str_of(block, "tool_use_id").to_string(),
                                content: text_of(block.get("content").unwrap_or(&Value::Null)),
                                is_error: block
                                    .get("is_error")
                                    .and_then(Value::as_bool)
                                    .unwrap_or(false),
                            });
                        } else {
                            text.push(block.clone());
                        }
                    }
                    if !text.is_empty() {
                        inputs.push(Input::User(text_of(&Value::Array(text))));
                    }
                }
                other => inputs.push(Input::User(text_of(other))),
            },
        }
    }
    let tools = items(v, "tools")
        .map(|t| match t.get("input_schema") {
            Some(schema) => json!({"type": "function", "function": {
                "name": str_of(t, "name"),
                "description": t.get("description").cloned().unwrap_or(Value::Null),
                "parameters": schema,
            }}),
            None => t.clone(),
        })
        .collect();
    Request { inputs, tools }
}

fn chat_request(v: &Value) -> Request {
    let mut inputs = Vec::new();
    for m in items(v, "messages") {
        let content = m.get("content").unwrap_or(&Value::Null);
        match str_of(m, "role") {
            "system" | "developer" => inputs.push(Input::System(text_of(content))),
            "assistant" => inputs.push(Input::Assistant),
            "tool" => inputs.push(Input::ToolResult {
                call_id: str_of(m, "tool_call_id").to_string(),
                content: text_of(content),
                is_error: false,
            }),
            // The legacy `function` role names the function, not a call id.
            "function" => inputs.push(Input::ToolResult {
                call_id: str_of(m, "name").to_string(),
                content: text_of(content),
                is_error: false,
            }),
            _ => inputs.push(Input::User(text_of(content))),
        }
    }
    let tools = v
        .get("tools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Request { inputs, tools }
}

fn responses_request(v: &Value) -> Request {
    let mut inputs = Vec::new();
    if let Some(s) = v.get("instructions").and_then(Value::as_str)
        && !s.is_empty()
    {
        inputs.push(Input::System(s.to_string()));
    }
    match v.get("input") {
        Some(Value::String(s)) => inputs.push(Input::User(s.clone())),
        Some(Value::Array(items)) => {
            for item in items {
                let kind = str_of(item, "type");
                match kind {
                    "function_call_output"
                    | "custom_tool_call_output"
                    | "local_shell_call_output" => {
                        let output = item.get("output").unwrap_or(&Value::Null);
                        inputs.push(Input::ToolResult {
                            call_id: str_of(item, "call_id").to_string(),
                            content: text_of(output),
                            is_error: false,
                        });
                    }
                    "" | "message" => {
                        let content = item.get("content").unwrap_or(&Value::Null);
                        match str_of(item, "role") {
                            "assistant" => inputs.push(Input::Assistant),
                            "system" | "developer" => inputs.push(Input::System(text_of(content))),
                            _ => inputs.push(Input::User(text_of(content))),
                        }
                    }
                    // function_call, reasoning, item_reference, *_call: the model's own items.
                    _ => inputs.push(Input::Assistant),
                }
            }
        }
        _ => {}
    }
    let tools = items(v, "tools")
        .map(|t| {
            if str_of(t, "type") == "function" && t.get("function").is_none() {
                json!({"type": "function", "function": {
                    "name": str_of(t, "name"),
                    "description": t.get("description").cloned().unwrap_or(Value::Null),
                    "parameters": t.get("parameters").cloned().unwrap_or(Value::Null),
                }})
            } else {
                t.clone()
            }
        })
        .collect();
    Request { inputs, tools }
}
