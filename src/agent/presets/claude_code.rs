//! The `claude-code` preset: Claude Code's native ELF from npm, run headless with
//! `-p <instruction> --output-format stream-json --verbose`; the claim is read from the
//! stream's final `result` event.
//!
//! Mapping (`result` event → `semantic_status`):
//! - `subtype: "success"`, `is_error: false` → `succeeded`
//! - `subtype: "error_max_turns"` → `task_failed` (`failure.error_code = "max_turns"`)
//! - `subtype: "error_max_budget_usd"` → `task_failed` (`max_budget`)
//! - `is_error: true` with `api_error_status` or `terminal_reason: "api_error"` (the model
//!   endpoint refused or failed: 401, 429, 5xx, 529) → `infrastructure_failed`
//! - any other error (`error_during_execution`, …) → `task_failed` with the subtype as code
//! - no `result` event (killed, timed out) → claim `missing`; stdout cut by the log cap
//!   before it → `invalid`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{
    AgentEnd, Failure, NativeOutcome, PresetInput, PresetKind, PresetPlan, Semantic, env_of,
    json_lines,
};

pub const PINNED_VERSION: &str = "2.1.332";
pub const NPM_PACKAGE: &str = "@anthropic-ai/claude-code-linux-x64";
/// The ELF inside the cache entry.
pub const ENTRY_POINT: &str = "bin/claude";
/// Path of the ELF inside the npm tarball.
pub const TARBALL_BINARY: &str = "package/claude";
/// `CLAUDE_CONFIG_DIR`: settings and the session transcript (`projects/<cwd>/<id>.jsonl`),
/// collected with the agent's logs. Holds no credentials (the key is only in the env).
pub const CONFIG_DIR: &str = "/logs/agent/claude";

/// An argument that starts with `-` would be read as an option; a leading newline keeps the
/// instruction positional without changing what the model reads in substance.
pub(crate) fn positional(instruction: &str) -> String {
    if instruction.starts_with('-') {
        format!("\n{instruction}")
    } else {
        instruction.to_string()
    }
}

pub(crate) fn plan(input: &PresetInput<'_>) -> PresetPlan {
    let bin = format!("{}/{ENTRY_POINT}", PresetKind::ClaudeCode.mount_point());
    let mut argv = vec![
        bin,
        "-p".to_string(),
        positional(input.instruction),
        "--output-format".to_string(),
        "stream-json".to_string(),
        "--verbose".to_string(),
        "--dangerously-skip-permissions".to_string(),
        "--model".to_string(),
        input.model.model.clone(),
    ];
    if let Some(n) = input.config.max_turns {
        argv.extend(["--max-turns".to_string(), n.to_string()]);
    }
    argv.extend(input.config.flags.iter().cloned());
    let model = &input.model.model;
    let env = env_of(&[
        (
            "ANTHROPIC_BASE_URL",
            input.model.anthropic_base_url.as_str(),
        ),
        ("ANTHROPIC_API_KEY", input.model.token.as_str()),
        // Side calls (titles, summaries) go to the same model, through the same gateway.
        ("ANTHROPIC_SMALL_FAST_MODEL", model),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", model),
        // --dangerously-skip-permissions is refused as root unless the CLI is told it
        // runs in a sandbox.
        ("IS_SANDBOX", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        // The gateway retries upstream errors itself; the CLI's own backoff (10 tries)
        // would only stretch a refused budget or a dead endpoint into minutes.
        ("CLAUDE_CODE_MAX_RETRIES", "0"),
        ("CLAUDE_CONFIG_DIR", CONFIG_DIR),
    ]);
    PresetPlan {
        argv,
        env,
        uploads: Vec::new(),
        trajectory_path: None,
    }
}

pub(crate) fn read_end(end: &AgentEnd<'_>) -> Result<Option<NativeOutcome>, String> {
    let events = json_lines(end.stdout);
    let Some(result) = events
        .iter()
        .rev()
        .find(|e| e["type"].as_str() == Some("result"))
    else {
        return end.stdout_without("Claude Code's final result event");
    };
    let mut messages = BTreeSet::new();
    let mut tool_calls = 0u64;
    for e in events.iter().filter(|e| e["type"] == "assistant") {
        if let Some(id) = e["message"]["id"].as_str() {
            messages.insert(id.to_string());
        }
        tool_calls += e["message"]["content"]
            .as_array()
            .map(|c| c.iter().filter(|b| b["type"] == "tool_use").count() as u64)
            .unwrap_or(0);
    }
    let subtype = result["subtype"].as_str().unwrap_or("");
    let is_error = result["is_error"].as_bool().unwrap_or(true);
    let api_status = result["api_error_status"].as_u64();
    let api_error = api_status.is_some() || result["terminal_reason"] == "api_error";
    let failed = |code: &str| (Semantic::TaskFailed, Some(Failure::agent(code)));
    let (semantic, failure) = match (subtype, is_error) {
        ("success", false) => (Semantic::Succeeded, None),
        ("error_max_turns", _) => failed("max_turns"),
        ("error_max_budget_usd", _) => failed("max_budget"),
        _ if api_error => (
            Semantic::InfrastructureFailed,
            Some(Failure::model_api(api_status.map(|s| format!("http_{s}")))),
        ),
        ("success", true) => failed("is_error"),
        (other, _) => failed(if other.is_empty() { "unknown" } else { other }),
    };
    let keep = [
        "subtype",
        "is_error",
        "num_turns",
        "terminal_reason",
        "stop_reason",
        "api_error_status",
        "errors",
        "total_cost_usd",
        "usage",
        "duration_ms",
        "session_id",
    ];
    let native: serde_json::Map<String, Value> = keep
        .iter()
        .filter_map(|k| result.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect();
    Ok(Some(NativeOutcome {
        semantic,
        fidelity: end.stdout_fidelity(),
        llm_calls: Some(messages.len() as u64),
        tool_calls: Some(tool_calls),
        failure,
        final_answer: result["result"].as_str().map(str::to_string),
        evidence: "stdout stream-json `result` event",
        native: json!(native),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::presets::test_support::{self, fixture, semantic, wiring};
    use crate::agent::presets::{Adapter, PresetAgent};
    use crate::outcome::{ClaimSource, ClaimStatus};

    fn claim_of(file: &str, exit: i64) -> crate::outcome::Claim {
        test_support::claim_of(Adapter::ClaudeCode, "claude-code", file, Some(exit))
    }

    #[test]
    fn success_result_is_succeeded_with_counts_and_answer() {
        let claim = claim_of("stream-success.jsonl", 0);
        assert_eq!(claim.source, Some(ClaimSource::Adapter));
        assert_eq!(semantic(&claim), "succeeded");
        let r = claim.record.expect("record");
        assert_eq!(r["llm_call_count"], 2);
        assert_eq!(r["tool_call_count"], 1);
        assert_eq!(r["final_answer"], "I wrote out.txt.");
        assert_eq!(r["adapter"]["native"]["num_turns"], 2);
        assert_eq!(r["process_exit_code"], 0);
        assert!(r.get("failure").is_none());
    }

    #[test]
    fn turn_limit_is_task_failed() {
        let claim = claim_of("stream-maxturns.jsonl", 1);
        assert_eq!(semantic(&claim), "task_failed");
        let r = claim.record.expect("record");
        assert_eq!(r["failure"]["error_code"], "max_turns");
        assert_eq!(r["adapter"]["native"]["terminal_reason"], "max_turns");
    }

    #[test]
    fn refused_credentials_and_overload_are_infrastructure() {
        for (file, status) in [
            ("stream-auth.jsonl", "http_401"),
            ("stream-overloaded.jsonl", "http_529"),
        ] {
            let claim = claim_of(file, 1);
            assert_eq!(semantic(&claim), "infrastructure_failed", "{file}");
            let r = claim.record.expect("record");
            assert_eq!(r["failure"]["stage"], "model");
            assert_eq!(r["failure"]["error_type"], status);
        }
    }

    #[test]
    fn no_result_event_is_missing_and_a_cut_stream_is_invalid() {
        let full = fixture("claude-code/stream-success.jsonl");
        let text = String::from_utf8_lossy(&full);
        let without_result: String = text
            .lines()
            .filter(|l| !l.contains("\"type\":\"result\""))
            .map(|l| format!("{l}\n"))
            .collect();
        let end = AgentEnd {
            exit_code: None,
            stdout: without_result.as_bytes(),
            ..AgentEnd::default()
        };
        assert_eq!(Adapter::ClaudeCode.claim(&end).status, ClaimStatus::Missing);
        let cut = AgentEnd {
            stdout_truncated: true,
            ..end
        };
        let claim = Adapter::ClaudeCode.claim(&cut);
        assert_eq!(claim.status, ClaimStatus::Invalid);
        assert!(claim.error.expect("why").contains("log cap"));
    }

    #[test]
    fn plan_wires_the_gateway_and_switches_off_phoning_home() {
        let config = PresetAgent {
            max_turns: Some(7),
            flags: vec!["--fallback-model".into(), "x".into()],
            ..PresetAgent::default()
        };
        let w = wiring();
        let plan = test_support::plan(PresetKind::ClaudeCode, &config, "--- title\nfix it");
        assert_eq!(plan.argv[0], "/opt/arbiter/agents/claude-code/bin/claude");
        assert_eq!(plan.argv[1], "-p");
        assert_eq!(plan.argv[2], "\n--- title\nfix it", "kept positional");
        let joined = plan.argv.join(" ");
        assert!(joined.contains("--output-format stream-json --verbose"));
        assert!(joined.contains("--model scripted-model"));
        assert!(joined.contains("--max-turns 7"));
        assert!(joined.ends_with("--fallback-model x"));
        assert!(!joined.contains(&w.token), "no secret in argv");
        assert_eq!(plan.env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:4000");
        assert_eq!(plan.env["ANTHROPIC_API_KEY"], w.token);
        for key in [
            "IS_SANDBOX",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            "DISABLE_TELEMETRY",
            "DISABLE_AUTOUPDATER",
        ] {
            assert_eq!(plan.env[key], "1", "{key}");
        }
        assert_eq!(plan.env["CLAUDE_CONFIG_DIR"], CONFIG_DIR);
    }

    #[test]
    fn no_max_turns_flag_unless_configured() {
        let plan = test_support::plan(PresetKind::ClaudeCode, &PresetAgent::default(), "hi");
        assert!(!plan.argv.iter().any(|a| a == "--max-turns"));
    }
}
