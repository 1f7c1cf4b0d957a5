use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Schema id of the outcome record agents write.
pub const OUTCOME_SCHEMA: &str = "aworld.run.outcome.v1";
const OUTCOME_MARKER: &str = "AWORLD_RUN_OUTCOME=";
const TERMINATION_MARKER: &str = "AWORLD_AGENT_TERMINATION=";
const FAILURE_MARKER: &str = "AWORLD_RUN_FAILURE=";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimStatus {
    Present,
    Missing,
    Invalid,
    /// Not known: the records came from a harness that does not read claims (a job dir
    /// imported from Harbor). Never written by a trial arbiter ran.
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimSource {
    File,
    Stderr,
    /// Read by the agent's preset from its native end state (SPEC §12).
    Adapter,
}

/// The agent's own account of its run: recorded as found, never guessed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub status: ClaimStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<ClaimSource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic_status: Option<String>,
    /// The record verbatim (unknown fields kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<Value>,
    /// Why an `invalid` record was rejected, or why none could be read (`missing`: an
    /// aworld-cli without `--outcome-output`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Last `AWORLD_AGENT_TERMINATION=` payload on stderr, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_termination: Option<Value>,
    /// Last `AWORLD_RUN_FAILURE=` payload on stderr, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_failure: Option<Value>,
}

impl Claim {
    pub fn missing() -> Self {
        Claim {
            status: ClaimStatus::Missing,
            source: None,
            semantic_status: None,
            record: None,
            error: None,
            agent_termination: None,
            run_failure: None,
        }
    }

    /// The agent says it succeeded.
    pub fn claims_success(&self) -> bool {
        self.status == ClaimStatus::Present && self.semantic_status.as_deref() == Some("succeeded")
    }

    /// The agent says the infrastructure failed it (`semantic_status: infrastructure_failed`).
    pub fn claims_infrastructure_failure(&self) -> bool {
        self.semantic_status.as_deref() == Some("infrastructure_failed")
    }
}

/// Build the claim from the outcome file's bytes (if the agent wrote one) and its stderr.
/// The file wins over stderr; a file that is present but malformed is `invalid` (stderr is
/// not consulted to paper over it).
pub fn collect_claim(outcome_file: Option<&[u8]>, stderr: &[u8]) -> Claim {
    let stderr = String::from_utf8_lossy(stderr);
    let mut claim = match outcome_file {
        Some(bytes) => parse_record(bytes, ClaimSource::File),
        None => match last_marker(&stderr, OUTCOME_MARKER) {
            Some(payload) => parse_record(payload.as_bytes(), ClaimSource::Stderr),
            None => Claim::missing(),
        },
    };
    claim.agent_termination = last_marker(&stderr, TERMINATION_MARKER).map(marker_value);
    claim.run_failure = last_marker(&stderr, FAILURE_MARKER).map(marker_value);
    claim
}

fn parse_record(bytes: &[u8], source: ClaimSource) -> Claim {
    let invalid = |error: String| Claim {
        status: ClaimStatus::Invalid,
        source: Some(source),
        error: Some(error),
        ..Claim::missing()
    };
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return invalid(format!("not valid JSON: {e}")),
    };
    let Some(object) = value.as_object() else {
        return invalid("outcome record is not a JSON object".to_string());
    };
    match object.get("schema_version").and_then(Value::as_str) {
        Some(OUTCOME_SCHEMA) => {}
        Some(other) => {
            return invalid(format!(
                "schema_version is {other:?}, expected {OUTCOME_SCHEMA:?}"
            ));
        }
        None => return invalid("schema_version missing".to_string()),
    }
    let semantic_status = match object.get("semantic_status") {
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return invalid("semantic_status is not a string".to_string()),
        None => return invalid("semantic_status missing".to_string()),
    };
    Claim {
        status: ClaimStatus::Present,
        source: Some(source),
        semantic_status,
        record: Some(value),
        ..Claim::missing()
    }
}

/// Payload of the last line that starts with `marker` (leading whitespace allowed).
fn last_marker<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.lines()
        .rev()
        .find_map(|line| line.trim_start().strip_prefix(marker))
        .map(str::trim)
}

/// A marker payload as JSON, or as a plain string when it is not JSON.
fn marker_value(payload: &str) -> Value {
    serde_json::from_str(payload).unwrap_or_else(|_| Value::String(payload.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUCCEEDED: &str = include_str!("../../tests/fixtures/aworld/outcome-succeeded.json");
    const DEADLINE: &str = include_str!("../../tests/fixtures/aworld/stderr-deadline.txt");

    #[test]
    fn file_record_is_present_and_kept_verbatim() {
        let claim = collect_claim(Some(SUCCEEDED.as_bytes()), b"");
        assert_eq!(claim.status, ClaimStatus::Present);
        assert_eq!(claim.source, Some(ClaimSource::File));
        assert!(claim.claims_success());
        let record = claim.record.expect("record");
        assert_eq!(record["atif_export"]["status"], "persisted");
    }

    #[test]
    fn stderr_record_and_markers_are_found() {
        let claim = collect_claim(None, DEADLINE.as_bytes());
        assert_eq!(claim.status, ClaimStatus::Present);
        assert_eq!(claim.source, Some(ClaimSource::Stderr));
        assert_eq!(
            claim.agent_termination.expect("termination")["reason"],
            "task_deadline_exhausted"
        );
    }

    #[test]
    fn last_stderr_record_wins_and_file_beats_stderr() {
        let stderr = format!(
            "AWORLD_RUN_OUTCOME={}\nnoise\nAWORLD_RUN_OUTCOME={}\n",
            r#"{"schema_version":"aworld.run.outcome.v1","semantic_status":"succeeded"}"#,
            r#"{"schema_version":"aworld.run.outcome.v1","semantic_status":"task_failed"}"#
        );
        assert_eq!(
            collect_claim(None, stderr.as_bytes())
                .semantic_status
                .as_deref(),
            Some("task_failed")
        );
        let file = br#"{"schema_version":"aworld.run.outcome.v1","semantic_status":"cancelled"}"#;
        let claim = collect_claim(Some(file), stderr.as_bytes());
        assert_eq!(claim.semantic_status.as_deref(), Some("cancelled"));
        assert_eq!(claim.source, Some(ClaimSource::File));
    }

    #[test]
    fn malformed_and_missing_are_typed() {
        let claim = collect_claim(Some(b"{not json"), b"");
        assert_eq!(claim.status, ClaimStatus::Invalid);
        assert!(claim.error.expect("error").starts_with("not valid JSON"));
        let claim = collect_claim(
            Some(br#"{"schema_version":"other","semantic_status":"succeeded"}"#),
            b"",
        );
        assert_eq!(claim.status, ClaimStatus::Invalid);
        assert!(!claim.claims_success());
        assert_eq!(
            collect_claim(None, b"just logs\n").status,
            ClaimStatus::Missing
        );
    }
}
