//! Token counts and stop reasons read from model responses, streaming or not.
//!
//! Counts are normalised to four disjoint numbers whatever the protocol reports:
//! `input_tokens` (prompt tokens *not* served from a cache), `cache_read_tokens`,
//! `cache_write_tokens` and `output_tokens`. Anthropic reports them that way already; OpenAI's
//! `prompt_tokens` / `input_tokens` include the cached tokens, so those are subtracted. Their sum
//! is every token the provider processed, and cost is each count times its own price.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Prices in US dollars per million tokens (a model's `price:` in the job config). Cache
/// prices default to the input price. Here, with the tokens they price, so that the config
/// (which reads them) and the usage meter (which applies them) do not depend on each other.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
}

/// The protocol of one call, as routed by the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Anthropic Messages, `POST /v1/messages`.
    AnthropicMessages,
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    ChatCompletions,
    /// OpenAI Responses, `POST /v1/responses`.
    Responses,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::AnthropicMessages => "anthropic_messages",
            Protocol::ChatCompletions => "chat_completions",
            Protocol::Responses => "responses",
        }
    }
}

/// Tokens of one call (disjoint counts, see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Tokens {
    pub fn total(&self) -> u64 {
        self.input + self.output + self.cache_read + self.cache_write
    }

    /// Cost in USD at `price` (cache prices default to the input price).
    pub fn cost(&self, price: &Price) -> f64 {
        let per = |n: u64, p: f64| n as f64 * p / 1_000_000.0;
        per(self.input, price.input_per_mtok)
            + per(self.output, price.output_per_mtok)
            + per(
                self.cache_read,
                price.cache_read_per_mtok.unwrap_or(price.input_per_mtok),
            )
            + per(
                self.cache_write,
                price.cache_write_per_mtok.unwrap_or(price.input_per_mtok),
            )
    }
}

/// What one response said about itself.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metered {
    /// `None` when the response carried no usage at all.
    pub tokens: Option<Tokens>,
    pub stop_reason: Option<String>,
    /// The protocol's own end marker was seen (always true for a parsed non-streaming body).
    pub complete: bool,
    /// An error the response reported in its body or stream (e.g. `overloaded_error`).
    pub error_type: Option<String>,
}

fn num(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// Anthropic `usage`: the four counts are already disjoint.
fn anthropic_usage(u: &Value) -> Tokens {
    Tokens {
        input: num(u, "input_tokens").unwrap_or(0),
        output: num(u, "output_tokens").unwrap_or(0),
        cache_read: num(u, "cache_read_input_tokens").unwrap_or(0),
        cache_write: num(u, "cache_creation_input_tokens").unwrap_or(0),
    }
}

/// OpenAI Chat `usage`: `prompt_tokens` includes `prompt_tokens_details.cached_tokens`.
fn chat_usage(u: &Value) -> Tokens {
    openai_usage(u, "prompt_tokens", "completion_tokens")
}

/// OpenAI Responses `usage`: `input_tokens` includes `input_tokens_details.cached_tokens`.
fn responses_usage(u: &Value) -> Tokens {
    openai_usage(u, "input_tokens", "output_tokens")
}

/// An OpenAI `usage` whose `input` count includes `<input>_details.cached_tokens`.
fn openai_usage(u: &Value, input: &str, output: &str) -> Tokens {
    let total = num(u, input).unwrap_or(0);
    let cached = u
        .get(format!("{input}_details"))
        .and_then(|d| num(d, "cached_tokens"))
        .unwrap_or(0)
        .min(total);
    Tokens {
        input: total - cached,
        output: num(u, output).unwrap_or(0),
        cache_read: cached,
        cache_write: 0,
    }
}

fn usage_object(v: Option<&Value>) -> Option<&Value> {
    v.filter(|u| u.is_object())
}

fn responses_stop_reason(resp: &Value) -> Option<String> {
    let output = resp.get("output").and_then(Value::as_array);
    if output.is_some_and(|items| {
        items.iter().any(|i| {
            matches!(
                i.get("type").and_then(Value::as_str),
                Some("function_call" | "local_shell_call" | "custom_tool_call")
            )
        })
    }) {
        return Some("tool_call".to_string());
    }
    let status = resp.get("status").and_then(Value::as_str)?;
    if status == "incomplete"
        && let Some(reason) = resp
            .get("incomplete_details")
            .and_then(|d| d.get("reason"))
            .and_then(Value::as_str)
    {
        return Some(format!("incomplete:{reason}"));
    }
    Some(status.to_string())
}

fn error_type(body: &Value) -> Option<String> {
    let e = body.get("error")?;
    e.get("type")
        .and_then(Value::as_str)
        .or_else(|| e.get("code").and_then(Value::as_str))
        .map(str::to_string)
}

/// Meter a complete (non-streaming) JSON body.
pub fn meter_json(protocol: Protocol, body: &[u8]) -> Metered {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Metered::default();
    };
    let mut m = Metered {
        complete: true,
        error_type: error_type(&v),
        ..Metered::default()
    };
    match protocol {
        Protocol::AnthropicMessages => {
            m.tokens = usage_object(v.get("usage")).map(anthropic_usage);
            m.stop_reason = v
                .get("stop_reason")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        Protocol::ChatCompletions => {
            m.tokens = usage_object(v.get("usage")).map(chat_usage);
            m.stop_reason = v
                .get("choices")
                .and_then(|c| c.get(0))
                .and_then(|c| c.get("finish_reason"))
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        Protocol::Responses => {
            m.tokens = usage_object(v.get("usage")).map(responses_usage);
            m.stop_reason = responses_stop_reason(&v);
        }
    }
    m
}

/// Incremental meter of a `text/event-stream` body: feed it the bytes as they pass.
#[derive(Debug)]
pub struct SseMeter {
    protocol: Protocol,
    buf: Vec<u8>,
    event: Option<String>,
    data: String,
    metered: Metered,
    /// Anthropic: input-side counts from `message_start`, output from the last `message_delta`.
    anthropic: Option<Tokens>,
}

impl SseMeter {
    pub fn new(protocol: Protocol) -> Self {
        SseMeter {
            protocol,
            buf: Vec::new(),
            event: None,
            data: String::new(),
            metered: Metered::default(),
            anthropic: None,
        }
    }

    /// Feed the next chunk of the stream (chunks may split lines anywhere).
    pub fn feed(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
        while let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=pos).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            self.line(line);
        }
    }

    fn line(&mut self, line: &str) {
        if line.is_empty() {
            self.dispatch();
        } else if let Some(rest) = line.strip_prefix("data:") {
            if !self.data.is_empty() {
                self.data.push('\n');
            }
            self.data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        } else if let Some(rest) = line.strip_prefix("event:") {
            self.event = Some(rest.trim().to_string());
        }
    }

    fn dispatch(&mut self) {
        let event = self.event.take();
        let data = std::mem::take(&mut self.data);
        if data.is_empty() {
            return;
        }
        if self.protocol == Protocol::ChatCompletions && data.trim() == "[DONE]" {
            self.metered.complete = true;
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(&data) else {
            return;
        };
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or(event);
        match self.protocol {
            Protocol::AnthropicMessages => self.anthropic_event(kind.as_deref(), &v),
            Protocol::ChatCompletions => self.chat_chunk(&v),
            Protocol::Responses => self.responses_event(kind.as_deref(), &v),
        }
    }

    fn anthropic_event(&mut self, kind: Option<&str>, v: &Value) {
        match kind {
            Some("message_start") => {
                if let Some(u) = usage_object(v.get("message").and_then(|m| m.get("usage"))) {
                    self.anthropic = Some(anthropic_usage(u));
                }
            }
            Some("message_delta") => {
                if let Some(u) = usage_object(v.get("usage")) {
                    // Cumulative counts; newer streams repeat the input side here too.
                    let t = self.anthropic.get_or_insert_with(Tokens::default);
                    for (key, count) in [
                        ("output_tokens", &mut t.output),
                        ("input_tokens", &mut t.input),
                        ("cache_read_input_tokens", &mut t.cache_read),
                        ("cache_creation_input_tokens", &mut t.cache_write),
                    ] {
                        if let Some(n) = num(u, key) {
                            *count = n;
                        }
                    }
                }
                if let Some(r) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.metered.stop_reason = Some(r.to_string());
                }
            }
            Some("message_stop") => self.metered.complete = true,
            Some("error") => self.metered.error_type = error_type(v),
            _ => {}
        }
        self.metered.tokens = self.anthropic;
    }

    fn chat_chunk(&mut self, v: &Value) {
        if let Some(u) = usage_object(v.get("usage")) {
            self.metered.tokens = Some(chat_usage(u));
        }
        if let Some(choices) = v.get("choices").and_then(Value::as_array) {
            for c in choices {
                if let Some(r) = c.get("finish_reason").and_then(Value::as_str) {
                    self.metered.stop_reason = Some(r.to_string());
                }
            }
        }
        if let Some(e) = error_type(v) {
            self.metered.error_type = Some(e);
        }
    }

    fn responses_event(&mut self, kind: Option<&str>, v: &Value) {
        match kind {
            Some("response.completed" | "response.incomplete" | "response.failed") => {
                if let Some(resp) = v.get("response") {
                    if let Some(u) = usage_object(resp.get("usage")) {
                        self.metered.tokens = Some(responses_usage(u));
                    }
                    self.metered.stop_reason = responses_stop_reason(resp);
                    if let Some(e) = resp
                        .get("error")
                        .filter(|e| e.is_object())
                        .and_then(|e| e.get("code"))
                        .and_then(Value::as_str)
                    {
                        self.metered.error_type = Some(e.to_string());
                    }
                }
                self.metered.complete = true;
            }
            Some("error") => {
                self.metered.error_type = v
                    .get("code")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or_else(|| error_type(v))
                    .or(Some("error".to_string()));
            }
            _ => {}
        }
    }

    /// What the stream said, once it ended (a trailing event without its blank line counts).
    pub fn finish(mut self) -> Metered {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let line = String::from_utf8_lossy(&rest).to_string();
            self.line(line.trim_end_matches('\r'));
        }
        self.dispatch();
        self.metered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shapes follow the public API references (Anthropic Messages and streaming; OpenAI Chat
    // Completions and Responses, including their streaming events).

    const ANTHROPIC_BODY: &str = r#"{
      "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF", "type": "message", "role": "assistant",
      "model": "claude-sonnet-4-5",
      "content": [{"type": "text", "text": "Hi!"}],
      "stop_reason": "end_turn", "stop_sequence": null,
      "usage": {"input_tokens": 2095, "output_tokens": 503,
                "cache_creation_input_tokens": 100, "cache_read_input_tokens": 1800}
    }"#;

    const ANTHROPIC_SSE: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":12,\"cache_read_input_tokens\":3000,\"output_tokens\":2}}}\n\
\n\
event: content_block_start\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\
\n\
event: ping\n\
data: {\"type\": \"ping\"}\n\
\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\
\n\
event: content_block_stop\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\n\
\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\n\
\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\
\n";

    const CHAT_BODY: &str = r#"{
      "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG", "object": "chat.completion",
      "created": 1741570283, "model": "gpt-4o-2024-08-06",
      "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "refusal": null},
                   "logprobs": null, "finish_reason": "stop"}],
      "usage": {"prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
                "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0}}
    }"#;

    const CHAT_SSE: &str = "data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}],\"usage\":null}\n\n\
data: {\"id\":\"chatcmpl-123\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":900,\"completion_tokens\":12,\"total_tokens\":912,\"prompt_tokens_details\":{\"cached_tokens\":512}}}\n\n\
data: [DONE]\n\n";

    const RESPONSES_BODY: &str = r#"{
      "id": "resp_67ccd3a9da748190baa7f1570fe91ac604becb25c45c1d41", "object": "response",
      "created_at": 1741476777, "status": "completed", "model": "gpt-4o-2024-08-06",
      "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                  "content": [{"type": "output_text", "text": "ok", "annotations": []}]}],
      "usage": {"input_tokens": 328, "input_tokens_details": {"cached_tokens": 128},
                "output_tokens": 52, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 380}
    }"#;

    const RESPONSES_SSE: &str = "event: response.created\n\
data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n\
event: response.output_item.added\n\
data: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"shell\",\"arguments\":\"\",\"status\":\"in_progress\"}}\n\n\
event: response.function_call_arguments.delta\n\
data: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":2,\"item_id\":\"fc_1\",\"output_index\":0,\"delta\":\"{\\\"command\\\":[\\\"ls\\\"]}\"}\n\n\
event: response.completed\n\
data: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"output\":[{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"shell\",\"arguments\":\"{}\",\"status\":\"completed\"}],\"usage\":{\"input_tokens\":5000,\"input_tokens_details\":{\"cached_tokens\":4096},\"output_tokens\":30,\"output_tokens_details\":{\"reasoning_tokens\":10},\"total_tokens\":5030}}}\n\n";

    fn t(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Option<Tokens> {
        Some(Tokens {
            input,
            output,
            cache_read,
            cache_write,
        })
    }

    #[test]
    fn non_streaming_bodies() {
        let a = meter_json(Protocol::AnthropicMessages, ANTHROPIC_BODY.as_bytes());
        assert_eq!(a.tokens, t(2095, 503, 1800, 100));
        assert_eq!(a.stop_reason.as_deref(), Some("end_turn"));
        assert!(a.complete);

        let c = meter_json(Protocol::ChatCompletions, CHAT_BODY.as_bytes());
        assert_eq!(c.tokens, t(93, 46, 1024, 0));
        assert_eq!(c.stop_reason.as_deref(), Some("stop"));

        let r = meter_json(Protocol::Responses, RESPONSES_BODY.as_bytes());
        assert_eq!(r.tokens, t(200, 52, 128, 0));
        assert_eq!(r.stop_reason.as_deref(), Some("completed"));

        let bad = meter_json(Protocol::ChatCompletions, b"not json");
        assert_eq!(bad, Metered::default());

        let overloaded = meter_json(
            Protocol::AnthropicMessages,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert_eq!(overloaded.error_type.as_deref(), Some("overloaded_error"));
        assert_eq!(overloaded.tokens, None);
    }

    /// Every stream is fed in chunks of every size from 1 byte up, so split lines are handled.
    fn stream(protocol: Protocol, text: &str) -> Vec<Metered> {
        (1..=text.len().min(64))
            .map(|size| {
                let mut m = SseMeter::new(protocol);
                for chunk in text.as_bytes().chunks(size) {
                    m.feed(chunk);
                }
                m.finish()
            })
            .collect()
    }

    /// However `text` is split, it meters as a complete call with `tokens` and `stop`.
    fn assert_complete(protocol: Protocol, text: &str, tokens: Option<Tokens>, stop: &str) {
        for m in stream(protocol, text) {
            assert_eq!(m.tokens, tokens);
            assert_eq!(m.stop_reason.as_deref(), Some(stop));
            assert!(m.complete);
        }
    }

    #[test]
    fn anthropic_stream_counts_start_and_delta_with_cache() {
        let tokens = t(472, 89, 3000, 12);
        assert_complete(
            Protocol::AnthropicMessages,
            ANTHROPIC_SSE,
            tokens,
            "tool_use",
        );
        // Cut before message_stop: counts so far, not complete.
        let cut = &ANTHROPIC_SSE[..ANTHROPIC_SSE.find("event: message_delta").unwrap()];
        let m = stream(Protocol::AnthropicMessages, cut).pop().unwrap();
        assert_eq!(m.tokens, t(472, 2, 3000, 12));
        assert!(!m.complete);
    }

    #[test]
    fn anthropic_stream_error_event() {
        let text = "event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n";
        let m = stream(Protocol::AnthropicMessages, text).pop().unwrap();
        assert_eq!(m.error_type.as_deref(), Some("overloaded_error"));
        assert!(!m.complete);
    }

    #[test]
    fn chat_stream_final_usage_chunk() {
        let tokens = t(388, 12, 512, 0);
        assert_complete(Protocol::ChatCompletions, CHAT_SSE, tokens, "tool_calls");
        let crlf = CHAT_SSE.replace('\n', "\r\n");
        let m = stream(Protocol::ChatCompletions, &crlf).pop().unwrap();
        assert_eq!(m.tokens, t(388, 12, 512, 0));
    }

    #[test]
    fn responses_stream_completed_event() {
        let tokens = t(904, 30, 4096, 0);
        assert_complete(Protocol::Responses, RESPONSES_SSE, tokens, "tool_call");
    }

    #[test]
    fn cost_uses_each_price() {
        let p = Price {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_read_per_mtok: Some(0.3),
            cache_write_per_mtok: None,
        };
        let tokens = Tokens {
            input: 1_000_000,
            output: 100_000,
            cache_read: 2_000_000,
            cache_write: 10_000,
        };
        let want = 3.0 + 1.5 + 0.6 + 0.03;
        assert!((tokens.cost(&p) - want).abs() < 1e-9, "{}", tokens.cost(&p));
        assert_eq!(tokens.total(), 3_110_000);
    }
}
