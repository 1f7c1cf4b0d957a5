//! The per-trial call ledger (`agent/model-calls.jsonl`) and the `usage` summary of the record.
//!
//! One JSON line per call the agent made through the gateway, appended as the call ends, in
//! the order calls ended. Bodies are kept up to [`BODY_CAP`] bytes each (their sha256 and full
//! size always); every line is scrubbed of the provider's real key before it is written.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::config::{Budget, Price};
use super::usage::{Protocol, Tokens};

/// Bytes of each request and response body kept in a ledger line.
pub const BODY_CAP: usize = 64 * 1024;

/// Schema of a ledger line.
pub const LEDGER_SCHEMA: &str = "arbiter.model-call.v1";

/// How one call ended, from the gateway's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The upstream answered with a 2xx and (when streaming) the stream ended properly.
    Ok,
    /// The upstream's last answer was an error status (after retries), passed to the agent.
    UpstreamError,
    /// The stream broke off or ended without the protocol's end event.
    StreamCut,
    /// Refused by the gateway: the trial's budget is used up. Not sent upstream.
    BudgetExhausted,
    /// The upstream could not be reached or refused arbiter's credentials.
    Unavailable,
    /// The agent hung up before the response ended.
    ClientClosed,
}

/// One line of `model-calls.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub schema: String,
    /// 1-based, in the order calls started.
    pub seq: u64,
    /// When the call started (RFC 3339, UTC).
    pub time: String,
    pub api: Protocol,
    pub provider: String,
    /// The `model` the request named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub stream: bool,
    /// Status the agent received.
    pub status: u16,
    pub outcome: CallOutcome,
    /// Upstream tries (0 when the gateway refused the call itself).
    pub attempts: u32,
    /// From the call's arrival to the end of its response.
    pub latency_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// One entry per failed upstream try or stream fault: `"429"`, `"503"`, `"connect"`,
    /// `"stream_cut"`, `"overloaded_error"`, …
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_errors: Vec<String>,
    /// Why the call was refused or failed, for a reader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub request: BodyRecord,
    pub response: BodyRecord,
}

/// A body as kept in the ledger.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct BodyRecord {
    pub sha256: String,
    pub bytes: u64,
    /// The first [`BODY_CAP`] bytes (lossy UTF-8).
    pub body: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl BodyRecord {
    pub fn of(bytes: &[u8]) -> Self {
        let kept = &bytes[..bytes.len().min(BODY_CAP)];
        BodyRecord {
            sha256: crate::digest::sha256_hex(bytes),
            bytes: bytes.len() as u64,
            body: String::from_utf8_lossy(kept).into_owned(),
            truncated: bytes.len() > BODY_CAP,
        }
    }
}

/// An append-only, scrubbed JSONL file.
#[derive(Debug)]
pub struct Ledger {
    path: PathBuf,
    file: Mutex<Option<File>>,
    secrets: Vec<String>,
}

impl Ledger {
    /// Create (or append to) `path`, creating its directory. `secrets` are replaced by `***`
    /// in every line.
    pub fn open(path: &Path, secrets: Vec<String>) -> io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Ledger {
            path: path.to_path_buf(),
            file: Mutex::new(Some(file)),
            secrets: secrets.into_iter().filter(|s| !s.is_empty()).collect(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one line. After [`Ledger::close`] lines are dropped (with a warning).
    pub fn append(&self, record: &CallRecord) -> io::Result<()> {
        let mut line = serde_json::to_string(record).map_err(io::Error::other)?;
        for s in &self.secrets {
            if line.contains(s.as_str()) {
                line = line.replace(s.as_str(), "***");
            }
        }
        line.push('\n');
        let mut guard = self
            .file
            .lock()
            .map_err(|_| io::Error::other("ledger lock poisoned"))?;
        match guard.as_mut() {
            Some(f) => f.write_all(line.as_bytes()),
            None => {
                tracing::warn!(path = %self.path.display(), "model call ended after its trial finished; not in the ledger");
                Ok(())
            }
        }
    }

    /// Flush to disk and stop writing.
    pub fn close(&self) -> io::Result<()> {
        let mut guard = self
            .file
            .lock()
            .map_err(|_| io::Error::other("ledger lock poisoned"))?;
        match guard.take() {
            Some(f) => f.sync_all(),
            None => Ok(()),
        }
    }
}

/// The record's `usage` (SPEC §7): what the agent spent, as counted by the gateway.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Calls admitted past the budget check (sent upstream whatever the answer, or failed
    /// trying). Calls refused by the budget are `refused`.
    pub requests: u64,
    /// Prompt tokens not served from a cache.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// Absent when the provider has no price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Failed upstream tries and stream faults by kind (`"429"`, `"500"`, `"connect"`,
    /// `"stream_cut"`, …), retried or not.
    #[serde(default)]
    pub upstream_errors: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetUsage>,
    /// Calls the gateway refused because the budget was used up.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub refused: u64,
    /// Calls whose response carried no usage (their tokens are unknown, not zero).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_without_usage: u64,
    /// Set when the upstream could not be reached or refused arbiter's credentials: the lead
    /// turns this into `infra_error {cause: model_unavailable}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `usage.budget`: the limits and whether one was reached.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct BudgetUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    pub exhausted: bool,
}

impl Usage {
    /// Empty usage for a trial with this budget and price.
    pub fn new(budget: &Budget, priced: bool) -> Self {
        Usage {
            cost_usd: priced.then_some(0.0),
            budget: (!budget.is_unlimited()).then_some(BudgetUsage {
                max_requests: budget.max_requests,
                max_tokens: budget.max_tokens,
                max_cost_usd: budget.max_cost_usd,
                exhausted: false,
            }),
            ..Usage::default()
        }
    }

    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens
    }

    /// Add one finished call.
    pub fn add(&mut self, call: &CallRecord, price: Option<&Price>) {
        for e in &call.upstream_errors {
            *self.upstream_errors.entry(e.clone()).or_insert(0) += 1;
        }
        if call.outcome == CallOutcome::BudgetExhausted {
            self.refused += 1;
            if let Some(b) = &mut self.budget {
                b.exhausted = true;
            }
            return;
        }
        self.requests += 1;
        match &call.tokens {
            Some(t) => {
                self.input_tokens += t.input;
                self.output_tokens += t.output;
                self.cache_read_tokens += t.cache_read;
                self.cache_write_tokens += t.cache_write;
                if let (Some(p), Some(c)) = (price, self.cost_usd.as_mut()) {
                    *c += t.cost(p);
                }
            }
            None if call.outcome == CallOutcome::Ok => self.calls_without_usage += 1,
            None => {}
        }
        self.update_exhausted();
    }

    /// Whether a new call may start; `in_flight` calls already admitted count as requests.
    pub fn over_budget(&self, in_flight: u64) -> Option<&'static str> {
        let b = self.budget.as_ref()?;
        if b.max_requests
            .is_some_and(|m| self.requests + in_flight >= m)
        {
            return Some("max_requests");
        }
        if b.max_tokens.is_some_and(|m| self.total_tokens() >= m) {
            return Some("max_tokens");
        }
        if let (Some(m), Some(c)) = (b.max_cost_usd, self.cost_usd)
            && c >= m
        {
            return Some("max_cost_usd");
        }
        None
    }

    fn update_exhausted(&mut self) {
        if self.over_budget(0).is_some()
            && let Some(b) = &mut self.budget
        {
            b.exhausted = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(outcome: CallOutcome, tokens: Option<Tokens>, errors: &[&str]) -> CallRecord {
        CallRecord {
            schema: LEDGER_SCHEMA.into(),
            seq: 1,
            time: "2026-01-01T00:00:00Z".into(),
            api: Protocol::AnthropicMessages,
            provider: "p".into(),
            model: Some("m".into()),
            stream: false,
            status: 200,
            outcome,
            attempts: 1,
            latency_ms: 3,
            tokens,
            cost_usd: None,
            stop_reason: None,
            upstream_errors: errors.iter().map(|s| s.to_string()).collect(),
            detail: None,
            request: BodyRecord::of(b"{}"),
            response: BodyRecord::of(b"{}"),
        }
    }

    #[test]
    fn usage_serialises_as_spec_section_7() {
        let budget = Budget {
            max_cost_usd: Some(2.0),
            ..Budget::default()
        };
        let price = Price {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_read_per_mtok: Some(0.3),
            cache_write_per_mtok: None,
        };
        let mut u = Usage::new(&budget, true);
        let t = Tokens {
            input: 1000,
            output: 100,
            cache_read: 2000,
            cache_write: 0,
        };
        u.add(
            &call(CallOutcome::Ok, Some(t), &["429", "429"]),
            Some(&price),
        );
        let v = serde_json::to_value(&u).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "requests": 1, "input_tokens": 1000, "output_tokens": 100,
                "cache_read_tokens": 2000, "cache_write_tokens": 0,
                "cost_usd": u.cost_usd.unwrap(),
                "upstream_errors": {"429": 2},
                "budget": {"max_cost_usd": 2.0, "exhausted": false}
            })
        );
        assert!((u.cost_usd.unwrap() - (0.003 + 0.0015 + 0.0006)).abs() < 1e-12);
        let back: Usage = serde_json::from_value(v).unwrap();
        assert_eq!(back, u);
    }

    #[test]
    fn budget_limits() {
        let budget = Budget {
            max_requests: Some(2),
            max_tokens: Some(1000),
            ..Budget::default()
        };
        let mut u = Usage::new(&budget, false);
        assert_eq!(u.cost_usd, None);
        assert_eq!(u.over_budget(0), None);
        assert_eq!(u.over_budget(2), Some("max_requests"));
        let t = Tokens {
            input: 10,
            ..Tokens::default()
        };
        u.add(&call(CallOutcome::Ok, Some(t), &[]), None);
        assert_eq!(u.over_budget(0), None);
        assert!(!u.budget.unwrap().exhausted);
        u.add(&call(CallOutcome::Ok, None, &[]), None);
        assert_eq!(u.calls_without_usage, 1);
        assert_eq!(u.over_budget(0), Some("max_requests"));
        assert!(u.budget.unwrap().exhausted);
        u.add(&call(CallOutcome::BudgetExhausted, None, &[]), None);
        assert_eq!((u.requests, u.refused), (2, 1));

        let mut tok = Usage::new(&budget, false);
        let big = Tokens {
            output: 1000,
            ..Tokens::default()
        };
        tok.add(&call(CallOutcome::Ok, Some(big), &[]), None);
        assert_eq!(tok.over_budget(0), Some("max_tokens"));
    }

    #[test]
    fn ledger_scrubs_and_caps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent/model-calls.jsonl");
        let ledger = Ledger::open(&path, vec!["sk-secret-123".into()]).unwrap();
        let mut rec = call(CallOutcome::Ok, None, &[]);
        rec.request = BodyRecord::of(br#"{"k":"sk-secret-123"}"#);
        let big = vec![b'x'; BODY_CAP + 10];
        rec.response = BodyRecord::of(&big);
        ledger.append(&rec).unwrap();
        ledger.close().unwrap();
        ledger.append(&rec).unwrap(); // dropped after close
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1);
        assert!(!text.contains("sk-secret-123"));
        let back: CallRecord = serde_json::from_str(text.trim()).unwrap();
        assert!(back.response.truncated);
        assert_eq!(back.response.bytes, (BODY_CAP + 10) as u64);
        assert_eq!(back.response.body.len(), BODY_CAP);
        assert_eq!(back.response.sha256, crate::digest::sha256_hex(&big));
        assert!(back.request.body.contains("***"));
    }
}
