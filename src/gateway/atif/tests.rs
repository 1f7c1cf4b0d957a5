//! Unit tests of the ATIF export: requests and replies of each protocol turned into steps,
//! salvaged bodies, usage and cost, and every document checked against docs/atif.schema.json.
//!
//! Over 600 lines: one scenario per protocol and per way a body can arrive (whole, streamed,
//! cut at the ledger's cap), each built from the scripted provider's real replies.

use super::request::{json_value_len, salvage};
use super::*;
use crate::gateway::config::Price;
use crate::gateway::ledger::BodyRecord;
use crate::gateway::scripted::{Script, respond};
use crate::gateway::usage::{Protocol, SseMeter, Tokens, meter_json};

const SCHEMA: &str = include_str!("../../../docs/atif.schema.json");

fn agent() -> AtifAgent {
    AtifAgent {
        name: "caller".into(),
        version: "unknown".into(),
        kind: "command".into(),
    }
}

/// Schema errors and the two invariants JSON Schema cannot state.
fn problems(v: &Value) -> Vec<String> {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut out: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    out.extend(invariant_errors(v));
    out
}

fn valid(v: &Value) {
    let p = problems(v);
    assert!(p.is_empty(), "{p:#?}\n{v:#}");
}

fn record(seq: u64, api: Protocol, stream: bool, request: &Value, response: &[u8]) -> CallRecord {
    let metered = if stream {
        let mut m = SseMeter::new(api);
        m.feed(response);
        m.finish()
    } else {
        meter_json(api, response)
    };
    CallRecord {
        schema: LEDGER_SCHEMA.into(),
        seq,
        time: format!("2026-01-01T00:00:0{seq}Z"),
        api,
        provider: "fake".into(),
        model: Some("scripted-model".into()),
        stream,
        status: 200,
        outcome: CallOutcome::Ok,
        attempts: 1,
        latency_ms: 2,
        tokens: metered.tokens,
        cost_usd: None,
        stop_reason: metered.stop_reason,
        upstream_errors: vec![],
        detail: None,
        request: BodyRecord::of(request.to_string().as_bytes()),
        response: BodyRecord::of(response),
    }
}

fn script() -> Script {
    Script::parse(
        r#"{"turns": [
            {"say": "Looking.", "run": "ls /app", "usage": {"input_tokens": 120, "output_tokens": 12, "cache_read_tokens": 30}},
            {"say": "All done.", "usage": {"input_tokens": 300, "output_tokens": 30}}
        ]}"#,
    )
    .unwrap()
}

const OUTPUT: &str = "report.txt\n";

/// A two-turn agent in `api`: the instruction, a `bash` tool call, its result, the answer.
/// The conversation is driven by the non-streaming replies (read here, independently of the
/// code under test); the ledger holds the replies as asked (`stream` or not).
fn conversation(api: Protocol, stream: bool) -> Vec<CallRecord> {
    let script = script();
    let mut req = match api {
        Protocol::AnthropicMessages => json!({"model": "scripted-model", "max_tokens": 100,
            "system": [{"type": "text", "text": "You are a test agent."}],
            "messages": [{"role": "user", "content": "Write the report."}],
            "tools": [{"name": "bash", "description": "run", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]}),
        Protocol::ChatCompletions => json!({"model": "scripted-model",
            "messages": [{"role": "system", "content": "You are a test agent."},
                         {"role": "user", "content": "Write the report."}],
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]}),
        Protocol::Responses => {
            json!({"model": "scripted-model", "instructions": "You are a test agent.",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "Write the report."}]}],
            "tools": [{"type": "function", "name": "bash", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}]})
        }
    };
    let mut calls = Vec::new();
    for seq in 1..=2u64 {
        let mut asked = req.clone();
        if stream {
            asked["stream"] = json!(true);
            asked["stream_options"] = json!({"include_usage": true});
        }
        let served = respond(&script, api, &asked, |_| 0).chunks.concat();
        calls.push(record(seq, api, stream, &asked, &served));
        let plain: Value =
            serde_json::from_slice(&respond(&script, api, &req, |_| 0).chunks.concat()).unwrap();
        match api {
            Protocol::AnthropicMessages => {
                let content = plain["content"].clone();
                req["messages"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"role": "assistant", "content": content}));
                let results: Vec<Value> = content.as_array().unwrap().iter()
                    .filter(|b| b["type"] == "tool_use")
                    .map(|b| json!({"type": "tool_result", "tool_use_id": b["id"], "content": OUTPUT}))
                    .collect();
                req["messages"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"role": "user", "content": results}));
            }
            Protocol::ChatCompletions => {
                let msg = plain["choices"][0]["message"].clone();
                let msgs = req["messages"].as_array_mut().unwrap();
                msgs.push(msg.clone());
                for c in msg["tool_calls"].as_array().into_iter().flatten() {
                    msgs.push(json!({"role": "tool", "tool_call_id": c["id"], "content": OUTPUT}));
                }
            }
            Protocol::Responses => {
                let input = req["input"].as_array_mut().unwrap();
                for item in plain["output"].as_array().unwrap() {
                    input.push(item.clone());
                    if item["type"] == "function_call" {
                        input.push(json!({"type": "function_call_output", "call_id": item["call_id"], "output": OUTPUT}));
                    }
                }
            }
        }
    }
    calls
}

fn steps(v: &Value) -> &Vec<Value> {
    v["steps"].as_array().unwrap()
}

/// The trajectory of `calls` (session `t`), checked against the schema.
fn checked(calls: &[CallRecord]) -> Value {
    let v = trajectory(calls, 0, "t", &agent()).unwrap();
    valid(&v);
    v
}

/// The `source` of each step, in order.
fn sources(v: &Value) -> Vec<&str> {
    steps(v)
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect()
}

#[test]
fn each_protocol_streaming_or_not_becomes_system_user_and_agent_steps_with_observations() {
    for api in [
        Protocol::AnthropicMessages,
        Protocol::ChatCompletions,
        Protocol::Responses,
    ] {
        for stream in [false, true] {
            let what = format!("{api:?} stream={stream}");
            let calls = conversation(api, stream);
            assert!(calls.iter().all(|c| c.tokens.is_some()), "{what}");
            let v = trajectory(&calls, 0, "trial-1", &agent()).unwrap();
            valid(&v);
            let s = steps(&v);
            assert_eq!(
                sources(&v),
                ["system", "user", "agent", "agent"],
                "{what}: {v:#}"
            );
            assert_eq!(s[0]["message"], "You are a test agent.", "{what}");
            assert_eq!(s[1]["message"], "Write the report.", "{what}");
            let first = &s[2];
            assert_eq!(first["message"], "Looking.", "{what}: {first:#}");
            let call = &first["tool_calls"][0];
            let id = call["tool_call_id"].as_str().unwrap();
            assert!(!id.is_empty(), "{what}");
            assert_eq!(call["function_name"], "bash", "{what}");
            assert_eq!(call["arguments"], json!({"command": "ls /app"}), "{what}");
            let results = first["observation"]["results"].as_array().unwrap();
            assert_eq!(results.len(), 1, "{what}");
            assert_eq!(results[0]["source_call_id"], id, "{what}");
            assert_eq!(results[0]["content"], OUTPUT, "{what}");
            assert_eq!(s[3]["message"], "All done.", "{what}");
            assert!(s[3].get("tool_calls").is_none(), "{what}");
            assert_eq!(first["extra"]["stream"], stream, "{what}");
            assert_eq!(first["llm_call_count"], 1, "{what}");
            // Per-step metrics from the ledger; totals are their sums, as usage counts them.
            let t0 = calls[0].tokens.unwrap();
            let t1 = calls[1].tokens.unwrap();
            assert_eq!(
                first["metrics"]["prompt_tokens"],
                t0.input + t0.cache_read + t0.cache_write,
                "{what}"
            );
            assert_eq!(first["metrics"]["cached_tokens"], 30, "{what}");
            assert_eq!(first["metrics"]["completion_tokens"], 12, "{what}");
            let fm = &v["final_metrics"];
            assert_eq!(fm["total_completion_tokens"], 42, "{what}");
            assert_eq!(fm["total_cached_tokens"], 30, "{what}");
            assert_eq!(
                fm["total_prompt_tokens"],
                t0.input
                    + t0.cache_read
                    + t0.cache_write
                    + t1.input
                    + t1.cache_read
                    + t1.cache_write,
                "{what}"
            );
            assert_eq!(fm["total_steps"], 4, "{what}");
            assert!(fm.get("total_cost_usd").is_none(), "{what}");
            assert_eq!(v["agent"]["model_name"], "scripted-model", "{what}");
            assert_eq!(
                v["agent"]["tool_definitions"][0]["function"]["name"], "bash",
                "{what}"
            );
            assert_eq!(v["schema_version"], ATIF_SCHEMA_VERSION);
            assert_eq!(v["session_id"], "trial-1");
        }
    }
}

/// ATIF-v1.8 adds `audio` content parts; documents of every earlier version stay valid.
#[test]
fn the_schema_takes_v1_8_audio_parts_and_every_earlier_version() {
    let calls = conversation(Protocol::ChatCompletions, false);
    let written = checked(&calls);
    assert_eq!(written["schema_version"], "ATIF-v1.8");
    for version in ["ATIF-v1.0", "ATIF-v1.4", "ATIF-v1.7"] {
        let mut v = written.clone();
        v["schema_version"] = json!(version);
        valid(&v);
    }
    let with_part = |part: Value| {
        let mut v = written.clone();
        v["steps"][1]["message"] = json!([{"type": "text", "text": "listen"}, part]);
        v
    };
    valid(&with_part(json!({"type": "audio", "source": {
        "media_type": "audio/wav", "path": "audio/1.wav", "duration_sec": 2.5}})));
    valid(&with_part(
        json!({"type": "audio", "source": {"media_type": "audio/mpeg", "path": "a.mp3"}}),
    ));
    for bad in [
        json!({"type": "audio", "source": {"media_type": "audio/mp3", "path": "a.mp3"}}),
        json!({"type": "audio", "source": {"media_type": "audio/wav", "path": "a", "duration_sec": -1}}),
        json!({"type": "audio", "text": "no source"}),
        json!({"type": "image", "source": {"media_type": "audio/wav", "path": "a.wav"}}),
        json!({"type": "video", "source": {"media_type": "audio/wav", "path": "a.wav"}}),
    ] {
        assert!(!problems(&with_part(bad.clone())).is_empty(), "{bad}");
    }
    let mut future = written.clone();
    future["schema_version"] = json!("ATIF-v1.9");
    assert!(!problems(&future).is_empty());
}

#[test]
fn ledger_lines_in_end_order_are_put_in_start_order() {
    let mut calls = conversation(Protocol::ChatCompletions, false);
    calls.reverse();
    let v = checked(&calls);
    assert_eq!(steps(&v)[2]["extra"]["seq"], 1);
    assert_eq!(steps(&v)[3]["extra"]["seq"], 2);
}

fn with_reply(api: Protocol, stream: bool, request: Value, response: &str) -> CallRecord {
    let mut c = record(1, api, stream, &request, response.as_bytes());
    c.tokens = Some(Tokens {
        input: 10,
        output: 5,
        ..Tokens::default()
    });
    c
}

#[test]
fn reasoning_is_read_in_each_protocol() {
    let user = json!({"messages": [{"role": "user", "content": "hi"}], "input": "hi"});
    let cases = [
        with_reply(
            Protocol::AnthropicMessages,
            false,
            user.clone(),
            r#"{"model": "claude-x", "content": [{"type": "thinking", "thinking": "Let me think.", "signature": "s"}, {"type": "text", "text": "Hello."}]}"#,
        ),
        with_reply(
            Protocol::AnthropicMessages,
            true,
            user.clone(),
            concat!(
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me \"}}\n\n",
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"think.\"}}\n\n",
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello.\"}}\n\n",
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
            ),
        ),
        with_reply(
            Protocol::ChatCompletions,
            false,
            user.clone(),
            r#"{"model": "deepseek-x", "choices": [{"message": {"role": "assistant", "content": "Hello.", "reasoning_content": "Let me think."}}]}"#,
        ),
        with_reply(
            Protocol::ChatCompletions,
            true,
            user.clone(),
            concat!(
                "data: {\"model\":\"deepseek-x\",\"choices\":[{\"delta\":{\"reasoning_content\":\"Let me \"}}]}\n\n",
                "data: {\"model\":\"deepseek-x\",\"choices\":[{\"delta\":{\"reasoning_content\":\"think.\"}}]}\n\n",
                "data: {\"model\":\"deepseek-x\",\"choices\":[{\"delta\":{\"content\":\"Hello.\"}}]}\n\n",
                "data: [DONE]\n\n"
            ),
        ),
        with_reply(
            Protocol::Responses,
            false,
            user.clone(),
            r#"{"model": "gpt-x", "output": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "Let me think."}]}, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]}]}"#,
        ),
        // A Responses stream cut before `response.completed`: rebuilt from its deltas.
        with_reply(
            Protocol::Responses,
            true,
            user.clone(),
            concat!(
                "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-x\"}}\n\n",
                "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"reasoning\",\"summary\":[]}}\n\n",
                "event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"output_index\":0,\"delta\":\"Let me think.\"}\n\n",
                "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":1,\"item\":{\"type\":\"message\",\"content\":[]}}\n\n",
                "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":1,\"delta\":\"Hel\"}\n\n",
                "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":1,\"delta\":\"lo.\"}\n\n"
            ),
        ),
    ];
    for call in cases {
        let what = format!("{:?} stream={}", call.api, call.stream);
        let v = trajectory(std::slice::from_ref(&call), 0, "t", &agent()).unwrap();
        valid(&v);
        let s = steps(&v);
        assert_eq!(s.len(), 2, "{what}: {v:#}");
        assert_eq!(s[0]["source"], "user");
        assert_eq!(s[0]["message"], "hi");
        assert_eq!(s[1]["reasoning_content"], "Let me think.", "{what}: {v:#}");
        assert_eq!(s[1]["message"], "Hello.", "{what}: {v:#}");
        assert!(
            s[1]["model_name"].as_str().unwrap().ends_with("-x"),
            "{what}"
        );
    }
}

#[test]
fn streamed_tool_call_arguments_are_joined_and_bad_ones_kept_raw() {
    let req = json!({"messages": [{"role": "user", "content": "go"}]});
    let chat = with_reply(
        Protocol::ChatCompletions,
        true,
        req.clone(),
        concat!(
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"comm\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"and\\\": \\\"ls\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"function\":{\"name\":\"edit\",\"arguments\":\"not json\"}}]}}]}\n\n",
            "data: [DONE]\n\n"
        ),
    );
    let anthropic = with_reply(
        Protocol::AnthropicMessages,
        true,
        req,
        concat!(
            "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_a\",\"name\":\"bash\",\"input\":{}}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\"\"}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\": \\\"ls\\\"}\"}}\n\n",
            "data: {\"type\":\"message_stop\"}\n\n"
        ),
    );
    let v = checked(&[chat]);
    let calls = &steps(&v)[1]["tool_calls"];
    assert_eq!(calls[0]["tool_call_id"], "call_a");
    assert_eq!(calls[0]["arguments"], json!({"command": "ls"}));
    assert_eq!(calls[1]["function_name"], "edit");
    assert_eq!(calls[1]["arguments"], json!({}));
    assert_eq!(calls[1]["extra"]["raw_arguments"], "not json");
    let v = checked(&[anthropic]);
    let call = &steps(&v)[1]["tool_calls"][0];
    assert_eq!(call["tool_call_id"], "toolu_a");
    assert_eq!(call["arguments"], json!({"command": "ls"}));
}

#[test]
fn truncated_bodies_are_marked_and_do_not_break_the_trajectory() {
    let mut calls = conversation(Protocol::AnthropicMessages, true);
    // Call 2's request is over the cap (a long tool result): cut, unreadable.
    let mut big = serde_json::from_str::<Value>(&calls[1].request.body).unwrap();
    big["messages"][2]["content"][0]["content"] = json!("x".repeat(BODY_CAP + 100));
    calls[1].request = BodyRecord::of(big.to_string().as_bytes());
    assert!(calls[1].request.truncated);
    // Call 1's streamed reply is over the cap too: its tool call comes after the cut.
    let long = "y".repeat(BODY_CAP);
    let stream = format!(
        "data: {{\"type\":\"message_start\",\"message\":{{\"model\":\"m\"}}}}\n\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"Looking.\"}}}}\n\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{long}\"}}}}\n\ndata: {{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{{\"type\":\"tool_use\",\"id\":\"toolu_z\",\"name\":\"bash\",\"input\":{{}}}}}}\n\n"
    );
    calls[0].response = BodyRecord::of(stream.as_bytes());
    assert!(calls[0].response.truncated);
    let v = checked(&calls);
    let s = steps(&v);
    assert_eq!(sources(&v), ["system", "user", "agent", "agent"], "{v:#}");
    // The cut event is dropped; the text before it is kept.
    assert_eq!(s[2]["message"], "Looking.");
    assert_eq!(s[2]["extra"]["response_truncated"], true);
    assert!(s[2].get("tool_calls").is_none());
    assert_eq!(s[3]["extra"]["request_truncated"], true);
    assert!(
        s[3]["extra"]["request_unreadable"]
            .as_str()
            .unwrap()
            .contains("cut at 65536")
    );
    assert_eq!(s[3]["message"], "All done.");
    let notes = v["notes"].as_str().unwrap();
    assert!(notes.contains("1 request body(ies) were cut"), "{notes}");
    assert!(notes.contains("1 response body(ies) were cut"), "{notes}");
    assert_eq!(v["extra"]["truncated_requests"], 1);
    // Tokens come from the ledger's own counts, never from bodies.
    assert_eq!(v["final_metrics"]["total_completion_tokens"], 42);
}

#[test]
fn a_non_streaming_reply_cut_at_the_cap_is_an_empty_marked_step() {
    let req = json!({"messages": [{"role": "user", "content": "go"}]});
    let body = format!(
        r#"{{"choices": [{{"message": {{"content": "{}"}}}}]}}"#,
        "z".repeat(BODY_CAP)
    );
    let call = with_reply(Protocol::ChatCompletions, false, req, &body);
    let v = checked(&[call]);
    let step = &steps(&v)[1];
    assert_eq!(step["message"], "");
    assert_eq!(step["extra"]["response_truncated"], true);
    assert!(
        step["extra"]["response_unreadable"]
            .as_str()
            .unwrap()
            .starts_with("response body cut at 65536")
    );
    assert_eq!(step["metrics"]["completion_tokens"], 5);
}

#[test]
fn a_tool_result_without_its_call_goes_to_a_system_step() {
    let req = json!({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_gone", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_gone", "content": "out"}]});
    let call = with_reply(
        Protocol::ChatCompletions,
        false,
        req,
        r#"{"choices": [{"message": {"content": "ok"}}]}"#,
    );
    let v = checked(&[call]);
    let s = steps(&v);
    assert_eq!(s[0]["source"], "system");
    let r = &s[0]["observation"]["results"][0];
    assert_eq!(r["source_call_id"], Value::Null);
    assert_eq!(r["extra"]["tool_call_id"], "call_gone");
    assert_eq!(r["content"], "out");
    assert_eq!(s[1]["source"], "agent");
}

#[test]
fn refused_and_retried_calls_are_steps_without_inference_and_the_turn_is_not_repeated() {
    let req = json!({"messages": [{"role": "user", "content": "go"}]});
    let mut refused = with_reply(
        Protocol::ChatCompletions,
        false,
        req.clone(),
        r#"{"error": {"type": "budget_exhausted", "message": "max_requests"}}"#,
    );
    refused.outcome = CallOutcome::BudgetExhausted;
    refused.status = 429;
    refused.attempts = 0;
    refused.tokens = None;
    refused.detail = Some("budget exhausted: max_requests".into());
    let mut again = with_reply(
        Protocol::ChatCompletions,
        false,
        req,
        r#"{"choices": [{"message": {"content": "ok"}}]}"#,
    );
    again.seq = 2;
    again.cost_usd = Some(0.25);
    let v = checked(&[refused, again]);
    let s = steps(&v);
    assert_eq!(sources(&v), ["user", "agent", "agent"], "{v:#}");
    assert_eq!(s[1]["llm_call_count"], 0);
    assert!(s[1].get("metrics").is_none());
    assert_eq!(s[1]["extra"]["outcome"], "budget_exhausted");
    assert!(s[1]["extra"].get("response_unreadable").is_some());
    assert_eq!(s[2]["metrics"]["cost_usd"], 0.25);
    let fm = &v["final_metrics"];
    assert_eq!(fm["total_cost_usd"], 0.25);
    assert_eq!(fm["extra"]["requests"], 1);
    assert_eq!(fm["extra"]["refused"], 1);
}

#[test]
fn cost_is_per_step_and_summed_when_priced() {
    let price = Price {
        input_per_mtok: 3.0,
        output_per_mtok: 15.0,
        cache_read_per_mtok: Some(0.3),
        cache_write_per_mtok: None,
    };
    let mut calls = conversation(Protocol::AnthropicMessages, false);
    for c in &mut calls {
        c.cost_usd = c.tokens.map(|t| t.cost(&price));
    }
    let v = checked(&calls);
    let want: f64 = calls.iter().filter_map(|c| c.cost_usd).sum();
    let got = v["final_metrics"]["total_cost_usd"].as_f64().unwrap();
    assert!((got - want).abs() < 1e-12, "{got} {want}");
    assert!(steps(&v)[2]["metrics"]["cost_usd"].as_f64().unwrap() > 0.0);
}

#[test]
fn export_writes_nothing_for_an_absent_or_empty_ledger_and_counts_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    assert!(export(dir.path(), "t", &agent()).unwrap().is_none());
    std::fs::write(dir.path().join(LEDGER_FILE), "").unwrap();
    assert!(export(dir.path(), "t", &agent()).unwrap().is_none());
    assert!(!dir.path().join(TRAJECTORY_FILE).exists());

    let mut text = String::new();
    for c in conversation(Protocol::Responses, true) {
        text.push_str(&serde_json::to_string(&c).unwrap());
        text.push('\n');
    }
    text.push_str("{not a call\n");
    std::fs::write(dir.path().join(LEDGER_FILE), text).unwrap();
    let path = export(dir.path(), "t", &agent()).unwrap().unwrap();
    assert_eq!(path, dir.path().join(TRAJECTORY_FILE));
    let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    valid(&v);
    assert_eq!(steps(&v).len(), 4);
    assert_eq!(v["extra"]["unreadable_ledger_lines"], 1);
    assert!(
        v["notes"]
            .as_str()
            .unwrap()
            .contains("1 ledger line(s) could not be read")
    );
}

#[test]
fn the_schema_and_invariants_reject_what_harbor_rejects() {
    let good = trajectory(
        &conversation(Protocol::ChatCompletions, false),
        0,
        "t",
        &agent(),
    )
    .unwrap();
    valid(&good);
    let mut bad = good.clone();
    bad["steps"][1]["metrics"] = json!({"prompt_tokens": 1}); // metrics on a user step
    assert!(!problems(&bad).is_empty());
    let mut bad = good.clone();
    bad["steps"][2]["surprise"] = json!(1); // unknown field
    assert!(!problems(&bad).is_empty());
    let mut bad = good.clone();
    bad["steps"][2]["step_id"] = json!(7);
    assert!(!invariant_errors(&bad).is_empty());
    let mut bad = good.clone();
    bad["steps"][2]["observation"]["results"][0]["source_call_id"] = json!("call_other");
    assert!(!invariant_errors(&bad).is_empty());
    let mut bad = good;
    bad["steps"] = json!([]);
    assert!(!problems(&bad).is_empty());
}

#[test]
fn a_cut_stream_and_an_unreachable_upstream_are_steps_that_say_so() {
    let script =
        Script::parse(r#"{"turns": [{"say": "Partial answer here.", "fault": {"cut": true}}]}"#)
            .unwrap();
    let req =
        json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "go"}]});
    let r = respond(&script, Protocol::ChatCompletions, &req, |_| 0);
    let served = r.cut_after.expect("a cut stream");
    assert!(served < r.chunks.len());
    let mut cut = record(
        1,
        Protocol::ChatCompletions,
        true,
        &req,
        &r.chunks[..served].concat(),
    );
    cut.outcome = CallOutcome::StreamCut;
    cut.upstream_errors = vec!["stream_cut".into()];
    let mut down = with_reply(
        Protocol::ChatCompletions,
        false,
        json!({"messages": [{"role": "user", "content": "go"}, {"role": "user", "content": "again"}]}),
        r#"{"error": {"type": "model_unavailable", "message": "connect refused"}}"#,
    );
    down.seq = 2;
    down.outcome = CallOutcome::Unavailable;
    down.status = 502;
    down.tokens = None;
    let v = checked(&[cut, down]);
    let s = steps(&v);
    assert_eq!(sources(&v), ["user", "agent", "user", "agent"], "{v:#}");
    assert_eq!(s[1]["extra"]["outcome"], "stream_cut");
    assert_eq!(s[1]["extra"]["upstream_errors"], json!(["stream_cut"]));
    let text = s[1]["message"].as_str().unwrap();
    assert!("Partial answer here.".starts_with(text), "{text:?}");
    assert_eq!(s[2]["message"], "again");
    assert_eq!(s[3]["llm_call_count"], 0);
    assert_eq!(s[3]["extra"]["outcome"], "unavailable");
    assert_eq!(s[3]["message"], "");
}

#[test]
fn the_same_user_message_in_a_later_turn_is_a_new_step() {
    let first = json!({"messages": [{"role": "user", "content": "continue"}]});
    let second = json!({"messages": [{"role": "user", "content": "continue"},
        {"role": "assistant", "content": "ok"}, {"role": "user", "content": "continue"}]});
    let reply = r#"{"choices": [{"message": {"content": "ok"}}]}"#;
    let a = with_reply(Protocol::ChatCompletions, false, first, reply);
    let mut b = with_reply(Protocol::ChatCompletions, false, second, reply);
    b.seq = 2;
    let v = checked(&[a, b]);
    assert_eq!(sources(&v), ["user", "agent", "user", "agent"], "{v:#}");
}

#[test]
fn a_cut_request_is_read_from_the_fields_whole_before_the_cut() {
    let mut calls = conversation(Protocol::AnthropicMessages, false);
    // A long tool list after the conversation (keys in this order: messages, …, system, tools).
    let mut big = serde_json::from_str::<Value>(&calls[1].request.body).unwrap();
    big["tools"][0]["description"] = json!("d".repeat(BODY_CAP));
    let body = big.to_string();
    assert!(body.find("\"messages\"").unwrap() < body.find("\"tools\"").unwrap());
    calls[1].request = BodyRecord::of(body.as_bytes());
    assert!(calls[1].request.truncated);
    let v = checked(&calls);
    let s = steps(&v);
    assert_eq!(sources(&v), ["system", "user", "agent", "agent"], "{v:#}");
    // The tool result (only in the cut request) is still found.
    assert_eq!(s[2]["observation"]["results"][0]["content"], OUTPUT);
    assert_eq!(s[3]["extra"]["request_truncated"], true);
    assert_eq!(
        s[3]["extra"]["request_salvaged"],
        json!(["messages", "system"])
    );
    assert!(s[3]["extra"].get("request_unreadable").is_none());
    assert_eq!(v["extra"]["salvaged_requests"], 1);

    assert_eq!(json_value_len(r#""a\"b" rest"#), Some(6));
    assert_eq!(json_value_len(r#"[1, "]", {"a": [2]}], "x""#), Some(20));
    assert_eq!(json_value_len(r#"[1, 2"#), None);
    assert_eq!(
        salvage(r#"{"x": "\"messages\": 1", "messages": [3]}"#, "messages"),
        Some(json!([3]))
    );
}
