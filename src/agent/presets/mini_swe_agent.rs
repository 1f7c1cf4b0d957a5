//! The `mini-swe-agent` preset: a Python venv from PyPI (built for the task image's Python,
//! mounted read-only) run as `mini -y --exit-immediately -m openai/<model> -t <instruction>
//! -o /logs/agent/trajectory.json` against the gateway's Chat Completions endpoint. The claim
//! is read from the trajectory's `info.exit_status`.
//!
//! Mapping (`info.exit_status` → `semantic_status`):
//! - `Submitted` (a command printed `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`) → `succeeded`
//! - `LimitsExceeded` (step or cost limit), `TimeExceeded`, format errors → `task_failed`
//! - a model-endpoint exception (litellm's `AuthenticationError`, `RateLimitError`,
//!   `APIConnectionError`, `InternalServerError`, `ServiceUnavailableError`, …) →
//!   `infrastructure_failed`
//! - `KeyboardInterrupt` → `cancelled`; any other exception → `task_failed` (its name kept as
//!   `failure.error_type`)
//! - no trajectory file → claim `missing`; one that does not parse → `invalid`.

use serde_json::{Value, json};

use super::{
    AgentEnd, Failure, Fidelity, NativeOutcome, PresetInput, PresetKind, PresetPlan, Semantic,
    env_of, root_upload,
};
use crate::agent::AgentError;

pub const PINNED_VERSION: &str = "2.4.6";
pub const PYPI_PACKAGE: &str = "mini-swe-agent";
pub const ENTRY_POINT: &str = "bin/mini";
/// Where the preset asks mini-swe-agent to write its trajectory (the claim's source).
pub const TRAJECTORY_PATH: &str = "/logs/agent/trajectory.json";
/// `MSWEA_GLOBAL_CONFIG_DIR`: mini-swe-agent's own `.env`, outside the collected logs.
pub const CONFIG_DIR: &str = "/arbiter/mini-swe-agent";

pub(crate) fn plan(input: &PresetInput<'_>) -> Result<PresetPlan, AgentError> {
    let bin = format!("{}/{ENTRY_POINT}", PresetKind::MiniSweAgent.mount_point());
    let mut argv = vec![
        bin,
        "-y".to_string(),
        "--exit-immediately".to_string(),
        "-m".to_string(),
        format!("openai/{}", input.model.model),
        "-t".to_string(),
        super::claude_code::positional(input.instruction),
        "-o".to_string(),
        TRAJECTORY_PATH.to_string(),
    ];
    if let Some(n) = input.config.max_turns {
        // `-c` replaces the default config, so name it first.
        argv.extend([
            "-c".to_string(),
            "mini.yaml".to_string(),
            "-c".to_string(),
            format!("agent.step_limit={n}"),
        ]);
    }
    argv.extend(input.config.flags.iter().cloned());
    let base = input.model.openai_base_url.as_str();
    let env = env_of(&[
        // Without these three it prompts for set-up or fetches a price map at import.
        ("MSWEA_CONFIGURED", "true"),
        ("MSWEA_COST_TRACKING", "ignore_errors"),
        ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
        ("MSWEA_SILENT_STARTUP", "1"),
        ("MSWEA_GLOBAL_CONFIG_DIR", CONFIG_DIR),
        // The gateway retries upstream errors; one attempt here.
        ("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1"),
        // The venv is read-only and precompiled; never write bytecode into the task.
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("OPENAI_API_BASE", base),
        ("OPENAI_BASE_URL", base),
        ("OPENAI_API_KEY", input.model.token.as_str()),
    ]);
    // mtime 0, as the generic archive helper writes it.
    let upload = root_upload(
        &[
            ("arbiter/", None, 0o755),
            ("arbiter/mini-swe-agent/", None, 0o777),
        ],
        0,
        CONFIG_DIR,
    )?;
    Ok(PresetPlan {
        argv,
        env,
        uploads: vec![upload],
        trajectory_path: Some(TRAJECTORY_PATH.to_string()),
    })
}

pub(crate) fn read_end(end: &AgentEnd<'_>) -> Result<Option<NativeOutcome>, String> {
    let Some(bytes) = end.file else {
        return Ok(None);
    };
    let traj: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("{TRAJECTORY_PATH} is not valid JSON: {e}"))?;
    let info = &traj["info"];
    let Some(status) = info["exit_status"].as_str() else {
        return Err(format!("{TRAJECTORY_PATH} has no info.exit_status"));
    };
    let messages = traj["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let tool_calls = messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| {
            m["extra"]["actions"]
                .as_array()
                .map(|a| a.len() as u64)
                .unwrap_or(0)
        })
        .sum();
    let assistant_turns = messages.iter().filter(|m| m["role"] == "assistant").count() as u64;
    let exit = messages.iter().rev().find(|m| m["role"] == "exit");
    let failed = |code: &str| (Semantic::TaskFailed, Some(Failure::agent(code)));
    let (semantic, failure) = match status {
        "Submitted" => (Semantic::Succeeded, None),
        "LimitsExceeded" => failed("limits_exceeded"),
        "TimeExceeded" => failed("time_exceeded"),
        "RepeatedFormatError" | "FormatError" => failed("format_error"),
        "KeyboardInterrupt" | "UserInterruption" => (Semantic::Cancelled, None),
        name if super::LITELLM_ENDPOINT_ERRORS.contains(&name) => (
            Semantic::InfrastructureFailed,
            Some(Failure::model_api(Some(name.to_string()))),
        ),
        name => (
            Semantic::TaskFailed,
            Some(Failure {
                error_type: Some(name.to_string()),
                ..Failure::agent("exception")
            }),
        ),
    };
    let submission = info["submission"].as_str().filter(|s| !s.trim().is_empty());
    let final_answer = submission.map(str::to_string).or_else(|| {
        messages
            .iter()
            .rev()
            .filter(|m| m["role"] == "assistant")
            .find_map(|m| m["content"].as_str().map(str::to_string))
    });
    let native = json!({
        "exit_status": status,
        "submission": info["submission"],
        "model_stats": info["model_stats"],
        "mini_version": info["mini_version"],
        "exception_str": exit.map(|m| m["extra"]["exception_str"].clone()).unwrap_or(Value::Null),
    });
    Ok(Some(NativeOutcome {
        semantic,
        fidelity: Fidelity::Complete,
        llm_calls: info["model_stats"]["api_calls"]
            .as_u64()
            .or(Some(assistant_turns)),
        tool_calls: Some(tool_calls),
        failure,
        final_answer,
        evidence: "trajectory info.exit_status",
        native,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::presets::test_support::{self, fixture, semantic, wiring};
    use crate::agent::presets::{Adapter, AdapterReads, PresetAgent};
    use crate::outcome::ClaimStatus;

    fn claim_of(file: &str) -> crate::outcome::Claim {
        let traj = fixture(&format!("mini-swe-agent/{file}"));
        Adapter::MiniSweAgent.claim(&AgentEnd {
            exit_code: Some(0),
            file: Some(&traj),
            ..AgentEnd::default()
        })
    }

    #[test]
    fn submitted_is_succeeded() {
        let claim = claim_of("trajectory-submitted.json");
        assert_eq!(semantic(&claim), "succeeded");
        let r = claim.record.expect("record");
        assert_eq!(r["llm_call_count"], 2);
        assert_eq!(r["tool_call_count"], 2);
        assert_eq!(r["adapter"]["native"]["mini_version"], "2.4.6");
    }

    #[test]
    fn step_limit_is_task_failed() {
        let claim = claim_of("trajectory-limits.json");
        assert_eq!(semantic(&claim), "task_failed");
        assert_eq!(
            claim.record.expect("record")["failure"]["error_code"],
            "limits_exceeded"
        );
    }

    #[test]
    fn refused_credentials_are_infrastructure() {
        let claim = claim_of("trajectory-auth-error.json");
        assert_eq!(semantic(&claim), "infrastructure_failed");
        let r = claim.record.expect("record");
        assert_eq!(r["failure"]["error_type"], "AuthenticationError");
        assert!(
            r["adapter"]["native"]["exception_str"]
                .as_str()
                .expect("kept")
                .contains("Incorrect API key")
        );
    }

    #[test]
    fn other_exceptions_are_task_failures_and_bad_files_are_invalid() {
        let traj = br#"{"info":{"exit_status":"ValueError","submission":""},"messages":[]}"#;
        let claim = Adapter::MiniSweAgent.claim(&AgentEnd {
            file: Some(traj),
            ..AgentEnd::default()
        });
        assert_eq!(semantic(&claim), "task_failed");
        let claim = Adapter::MiniSweAgent.claim(&AgentEnd {
            file: Some(b"{\"info\":{}}"),
            ..AgentEnd::default()
        });
        assert_eq!(claim.status, ClaimStatus::Invalid);
        let claim = Adapter::MiniSweAgent.claim(&AgentEnd::default());
        assert_eq!(claim.status, ClaimStatus::Missing);
        assert_eq!(
            Adapter::MiniSweAgent.reads(),
            AdapterReads::File(TRAJECTORY_PATH.into())
        );
    }

    #[test]
    fn plan_sets_the_three_switches_and_the_step_limit() {
        let config = PresetAgent {
            max_turns: Some(30),
            ..PresetAgent::default()
        };
        let w = wiring();
        let plan = test_support::plan(PresetKind::MiniSweAgent, &config, "solve");
        assert_eq!(plan.argv[0], "/opt/arbiter/agents/mini-swe-agent/bin/mini");
        let joined = plan.argv.join(" ");
        assert!(joined.contains("-y --exit-immediately -m openai/scripted-model -t solve"));
        assert!(joined.contains("-o /logs/agent/trajectory.json"));
        assert!(joined.ends_with("-c mini.yaml -c agent.step_limit=30"));
        assert!(!joined.contains(&w.token));
        assert_eq!(plan.env["MSWEA_CONFIGURED"], "true");
        assert_eq!(plan.env["MSWEA_COST_TRACKING"], "ignore_errors");
        assert_eq!(plan.env["LITELLM_LOCAL_MODEL_COST_MAP"], "True");
        assert_eq!(plan.env["OPENAI_API_BASE"], w.openai_base_url);
        assert_eq!(plan.env["OPENAI_API_KEY"], w.token);
        assert_eq!(plan.trajectory_path.as_deref(), Some(TRAJECTORY_PATH));
    }
}
