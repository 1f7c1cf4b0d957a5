//! What arbiter observed about a trial's deliverables and validation commands, and the agent's
//! optional typed completion record (`/logs/agent/completion.json`, SPEC §6). Plain data and
//! parsing; the audit joins them in `audit.rs`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What arbiter found at a path in the agent's final filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    /// Exists, non-empty when that was required, and matches the expected hash if one was given.
    Ok,
    Missing,
    Empty,
    HashMismatch,
    /// Present but could not be read back (too large, not a regular file where a hash was asked…).
    Unreadable,
}

impl FileStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            FileStatus::Ok => "ok",
            FileStatus::Missing => "missing",
            FileStatus::Empty => "empty",
            FileStatus::HashMismatch => "hash_mismatch",
            FileStatus::Unreadable => "unreadable",
        }
    }
}

/// One path arbiter checked itself: a declared deliverable, or a path the agent's completion
/// record names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileCheck {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    pub status: FileStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl FileCheck {
    /// Words for evidence: `/app/out.md (goal: …) is missing`.
    pub fn describe(&self) -> String {
        let goal = self
            .goal
            .as_deref()
            .map(|g| format!(" (goal: {g})"))
            .unwrap_or_default();
        let what = match self.status {
            FileStatus::Ok => "present".to_string(),
            FileStatus::Missing => "missing".to_string(),
            FileStatus::Empty => "empty".to_string(),
            FileStatus::HashMismatch => format!(
                "present but its sha256 {} differs from the declared {}",
                self.sha256.as_deref().unwrap_or("?"),
                self.expected_sha256.as_deref().unwrap_or("?")
            ),
            FileStatus::Unreadable => format!(
                "not readable ({})",
                self.detail.as_deref().unwrap_or("unknown reason")
            ),
        };
        format!("{}{goal} is {what}", self.path)
    }
}

/// Evidence of one validation command that arbiter ran itself after the agent phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub id: String,
    /// The argv that was executed (a shell string appears as `bash -o pipefail -c …`).
    pub argv: Vec<String>,
    /// `None` when the command was killed at its timeout or vanished.
    pub exit_code: Option<i64>,
    pub seconds: f64,
    pub timed_out: bool,
    pub stdout_sha256: String,
    pub stderr_sha256: String,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
}

impl Receipt {
    pub fn passed(&self) -> bool {
        !self.timed_out && self.exit_code == Some(0)
    }

    pub fn describe(&self) -> String {
        if self.timed_out {
            format!(
                "validation {:?} timed out after {:.1}s in arbiter's own run",
                self.id, self.seconds
            )
        } else {
            format!(
                "validation {:?} exited {} in arbiter's own run",
                self.id,
                self.exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "without an exit code".to_string())
            )
        }
    }
}

/// The agent's typed completion record, read leniently (unknown fields ignored, wrong types
/// treated as absent) from `/logs/agent/completion.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompletionRecord {
    pub deliverable: Option<String>,
    pub operation: Option<String>,
    pub attempts: Vec<Attempt>,
    pub status: Option<String>,
    /// The agent's final answer, when the record (`final_answer` / `answer`) carries it.
    pub final_answer: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attempt {
    /// The command as one line (an argv array is joined with spaces).
    pub command: Option<String>,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    /// Paths the attempt says it produced (`produced` may be a string or a list).
    pub produced: Vec<String>,
    pub for_goal: Option<String>,
}

impl Attempt {
    /// Ended without an error by its own account.
    pub fn succeeded(&self) -> bool {
        self.error.is_none() && self.exit_code.is_none_or(|c| c == 0)
    }
}

impl CompletionRecord {
    /// Parse `completion.json`. Errors are one line.
    pub fn parse(bytes: &[u8]) -> Result<CompletionRecord, String> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
        let Some(object) = value.as_object() else {
            return Err("completion record is not a JSON object".to_string());
        };
        let goal = object.get("goal");
        let text = |v: Option<&Value>| -> Option<String> {
            match v? {
                Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
                Value::Array(items) => {
                    let parts: Vec<String> = items.iter().map(one_line).collect();
                    (!parts.is_empty()).then(|| parts.join(" "))
                }
                Value::Null => None,
                other => Some(one_line(other)),
            }
        };
        let attempts = match object.get("attempts") {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_object)
                .map(|a| Attempt {
                    command: text(a.get("command")),
                    exit_code: a.get("exit_code").and_then(Value::as_i64),
                    error: text(a.get("error")),
                    produced: match a.get("produced") {
                        Some(Value::String(s)) if !s.trim().is_empty() => {
                            vec![s.trim().to_string()]
                        }
                        Some(Value::Array(items)) => items
                            .iter()
                            .filter_map(Value::as_str)
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty())
                            .collect(),
                        _ => Vec::new(),
                    },
                    for_goal: text(a.get("for_goal")),
                })
                .collect(),
            Some(Value::Null) | None => Vec::new(),
            Some(_) => return Err("attempts is not a list".to_string()),
        };
        Ok(CompletionRecord {
            deliverable: text(goal.and_then(|g| g.get("deliverable"))),
            operation: text(goal.and_then(|g| g.get("operation"))),
            attempts,
            status: text(object.get("status")),
            final_answer: text(object.get("final_answer").or_else(|| object.get("answer"))),
        })
    }

    /// `status` says the work is complete.
    pub fn claims_completion(&self) -> bool {
        self.status.as_deref().is_some_and(|s| {
            matches!(
                s.to_ascii_lowercase().as_str(),
                "complete"
                    | "completed"
                    | "succeeded"
                    | "success"
                    | "successful"
                    | "done"
                    | "finished"
                    | "satisfied"
            )
        })
    }

    /// Absolute paths the record names (goal deliverable, produced files), for arbiter to check.
    pub fn named_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .deliverable
            .iter()
            .chain(self.attempts.iter().flat_map(|a| a.produced.iter()))
            .filter(|p| p.starts_with('/'))
            .cloned()
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }
}

fn one_line(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Whether `completion.json` was a valid completion record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionStatus {
    Present,
    Invalid,
}

/// What became of `completion.json` in the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionSummary {
    pub status: CompletionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spec_shape_leniently() {
        let record = CompletionRecord::parse(
            br#"{"goal":{"deliverable":"/app/out.md","operation":"crawl"},
                 "attempts":[{"command":["curl","x"],"exit_code":7,"error":"no network"},
                             {"command":"cp cache.md /app/out.md","exit_code":0,
                              "produced":"/app/out.md","for_goal":"/app/cache.md"}],
                 "status":"completed","final_answer":"Done."}"#,
        )
        .expect("parses");
        assert_eq!(record.deliverable.as_deref(), Some("/app/out.md"));
        assert_eq!(record.attempts.len(), 2);
        assert_eq!(record.attempts[0].command.as_deref(), Some("curl x"));
        assert!(!record.attempts[0].succeeded());
        assert!(record.attempts[1].succeeded());
        assert_eq!(record.attempts[1].produced, vec!["/app/out.md"]);
        assert!(record.claims_completion());
        assert_eq!(record.named_paths(), vec!["/app/out.md"]);
    }

    #[test]
    fn rejects_what_is_not_a_record() {
        assert!(CompletionRecord::parse(b"[1]").is_err());
        assert!(CompletionRecord::parse(b"{oops").is_err());
        assert!(CompletionRecord::parse(br#"{"attempts":3}"#).is_err());
        let empty = CompletionRecord::parse(b"{}").expect("empty object is a record");
        assert!(!empty.claims_completion());
    }
}
