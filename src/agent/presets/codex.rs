//! The `codex` preset: OpenAI's Codex CLI (static musl ELF from npm) run as
//! `codex exec <instruction> --json`, with its provider (the gateway, Responses API) in a
//! per-trial `$CODEX_HOME/config.toml`. The claim is read from the JSON event stream.
//!
//! Mapping (last `turn.completed` / `turn.failed` event → `semantic_status`):
//! - `turn.completed` → `succeeded` (Codex has no give-up signal and no turn limit: a
//!   completed turn is all it ever says; the verifier decides the rest)
//! - `turn.failed` whose error is a model-endpoint failure (`unexpected status 401/429/5xx`,
//!   "high demand", stream disconnects, connection errors) → `infrastructure_failed`
//! - any other `turn.failed` (e.g. context window exceeded) → `task_failed`
//! - no turn event → claim `missing` (`invalid` when stdout was cut by the log cap).
//!
//! Pitfalls handled: analytics and plugin / remote-plugin / apps sync are off (each would
//! cost a 5 s DNS stall with no network); `shell_snapshot` is off (it writes the process env,
//! key included, under `$CODEX_HOME`); `$CODEX_HOME` is `/arbiter/codex-home`, outside the
//! collected `/logs/agent`.

use serde_json::json;

use super::{
    AgentEnd, Failure, NativeOutcome, PresetInput, PresetKind, PresetPlan, Semantic, env_of,
    json_lines, root_upload,
};
use crate::agent::AgentError;

pub const PINNED_VERSION: &str = "0.171.0";
pub const NPM_PACKAGE: &str = "@openai/codex";
pub const ENTRY_POINT: &str = "bin/codex";
/// The directory of the npm tarball whose contents become the cache entry.
pub const TARBALL_DIR: &str = "package/vendor/x86_64-unknown-linux-musl";
/// Parts of [`TARBALL_DIR`] left out of the cache (a voice host Codex never starts headless).
pub const TARBALL_SKIP: &[&str] = &["codex-resources/voice"];
pub const CODEX_HOME: &str = "/arbiter/codex-home";
/// Env var the provider config reads the key from.
pub const KEY_ENV: &str = "OPENAI_API_KEY";

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// `$CODEX_HOME/config.toml`: the gateway as the only provider, no retries of its own (the
/// gateway retries upstream), no analytics, no update check, no shell snapshot.
pub(crate) fn config_toml(base_url: &str, model: &str) -> String {
    format!(
        "# written by arbiter for one trial\n\
         model = {model}\n\
         model_provider = \"arbiter\"\n\
         check_for_update_on_startup = false\n\
         \n\
         [model_providers.arbiter]\n\
         name = \"arbiter gateway\"\n\
         base_url = {base_url}\n\
         env_key = \"{KEY_ENV}\"\n\
         wire_api = \"responses\"\n\
         request_max_retries = 0\n\
         stream_max_retries = 0\n\
         \n\
         [analytics]\n\
         enabled = false\n\
         \n\
         [features]\n\
         shell_snapshot = false\n",
        model = toml_str(model),
        base_url = toml_str(base_url),
    )
}

pub(crate) fn plan(input: &PresetInput<'_>) -> Result<PresetPlan, AgentError> {
    let bin = format!("{}/{ENTRY_POINT}", PresetKind::Codex.mount_point());
    let mut argv = vec![
        bin,
        "exec".to_string(),
        super::claude_code::positional(input.instruction),
        "--skip-git-repo-check".to_string(),
        "--dangerously-bypass-approvals-and-sandbox".to_string(),
        "--json".to_string(),
    ];
    for feature in ["plugins", "remote_plugin", "apps"] {
        argv.extend(["--disable".to_string(), feature.to_string()]);
    }
    argv.extend(input.config.flags.iter().cloned());
    let config = config_toml(&input.model.openai_base_url, &input.model.model);
    // mtime 0, as the generic archive helper writes it.
    let upload = root_upload(
        &[
            ("arbiter/", None, 0o755),
            ("arbiter/codex-home/", None, 0o777),
            (
                "arbiter/codex-home/config.toml",
                Some(config.as_bytes()),
                0o644,
            ),
        ],
        0,
        "codex config.toml",
    )?;
    let env = env_of(&[
        ("CODEX_HOME", CODEX_HOME),
        (KEY_ENV, input.model.token.as_str()),
    ]);
    Ok(PresetPlan {
        argv,
        env,
        uploads: vec![upload],
        trajectory_path: None,
    })
}

/// The argv of a later attempt of a continued goal (SPEC §15): the same run, resuming Codex's
/// own most recent session (`codex exec resume --last <prompt>`) instead of starting a new
/// one, so the model sees its earlier turns. `argv` is [`plan`]'s, whose last `user_flags`
/// arguments are the agent's `flags:`; `prompt` is the next prompt. arbiter's own flags stay
/// after the prompt (`exec resume` takes them: `--json`, `--skip-git-repo-check`,
/// `--dangerously-bypass-approvals-and-sandbox`, `--disable`); the user's go before `resume`,
/// as options of `exec`, since `exec resume` refuses some of `exec`'s (`-s`, `-p`, `--oss`,
/// `-C`, `--add-dir`). An argv already resuming, or not `<bin> exec <prompt> …`, is left as
/// it is.
pub(crate) fn resume_argv(argv: &[String], prompt: &str, user_flags: usize) -> Vec<String> {
    if argv.get(1).map(String::as_str) != Some("exec")
        || argv.get(2).is_none_or(|a| a == "resume")
        || argv.len() < 3 + user_flags
    {
        return argv.to_vec();
    }
    let (own, user) = argv[3..].split_at(argv.len() - 3 - user_flags);
    let mut out = Vec::with_capacity(argv.len() + 2);
    out.extend(argv[..2].iter().cloned());
    out.extend(user.iter().cloned());
    out.push("resume".to_string());
    out.push("--last".to_string());
    out.push(super::claude_code::positional(prompt));
    out.extend(own.iter().cloned());
    out
}

/// A `turn.failed` message that says the model endpoint failed, with its HTTP status if any.
fn endpoint_failure(message: &str) -> Option<Option<u16>> {
    let lower = message.to_lowercase();
    if let Some(rest) = lower.split("unexpected status ").nth(1) {
        let code: String = rest.chars().take_while(char::is_ascii_digit).collect();
        return Some(code.parse().ok());
    }
    let transport = [
        "high demand",
        "stream disconnected",
        "error sending request",
        "connection",
        "timed out",
        "exceeded retry limit",
        "service unavailable",
    ];
    transport.iter().any(|t| lower.contains(t)).then_some(None)
}

pub(crate) fn read_end(end: &AgentEnd<'_>) -> Result<Option<NativeOutcome>, String> {
    let events = json_lines(end.stdout);
    let Some(last) = events
        .iter()
        .rev()
        .find(|e| matches!(e["type"].as_str(), Some("turn.completed" | "turn.failed")))
    else {
        return end.stdout_without("Codex's last turn event");
    };
    let tool_calls = events
        .iter()
        .filter(|e| e["type"] == "item.completed")
        .filter(|e| {
            matches!(
                e["item"]["type"].as_str(),
                Some("command_execution" | "file_change" | "mcp_tool_call" | "web_search")
            )
        })
        .count() as u64;
    let final_answer = events
        .iter()
        .rev()
        .filter(|e| e["type"] == "item.completed" && e["item"]["type"] == "agent_message")
        .find_map(|e| e["item"]["text"].as_str().map(str::to_string));
    let thread = events
        .iter()
        .find(|e| e["type"] == "thread.started")
        .map(|e| e["thread_id"].clone());
    let (semantic, failure, native) = if last["type"] == "turn.completed" {
        (
            Semantic::Succeeded,
            None,
            json!({"last_turn_event": "turn.completed", "usage": last["usage"], "thread_id": thread}),
        )
    } else {
        let message = last["error"]["message"].as_str().unwrap_or("").to_string();
        let native =
            json!({"last_turn_event": "turn.failed", "error": message, "thread_id": thread});
        match endpoint_failure(&message) {
            Some(status) => (
                Semantic::InfrastructureFailed,
                Some(Failure::model_api(status.map(|s| format!("http_{s}")))),
                native,
            ),
            None => (
                Semantic::TaskFailed,
                Some(Failure::agent("turn_failed")),
                native,
            ),
        }
    };
    Ok(Some(NativeOutcome {
        semantic,
        fidelity: end.stdout_fidelity(),
        llm_calls: None,
        tool_calls: Some(tool_calls),
        failure,
        final_answer,
        evidence: "stdout --json last turn event",
        native,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::presets::test_support::{self, semantic, wiring};
    use crate::agent::presets::{Adapter, PresetAgent};
    use crate::outcome::ClaimStatus;

    fn claim_of(file: &str, exit: i64) -> crate::outcome::Claim {
        test_support::claim_of(Adapter::Codex, "codex", file, Some(exit))
    }

    #[test]
    fn completed_turn_is_succeeded_with_the_final_message() {
        let claim = claim_of("events-success.jsonl", 0);
        assert_eq!(semantic(&claim), "succeeded");
        let r = claim.record.expect("record");
        assert_eq!(r["final_answer"], "I wrote out2.txt.");
        assert_eq!(r["tool_call_count"], 1);
        assert_eq!(r["adapter"]["native"]["usage"]["input_tokens"], 200);
    }

    #[test]
    fn endpoint_failures_are_infrastructure() {
        let claim = claim_of("events-auth.jsonl", 1);
        assert_eq!(semantic(&claim), "infrastructure_failed");
        let r = claim.record.expect("record");
        assert_eq!(r["failure"]["error_type"], "http_401");
        let claim = claim_of("events-server-error.jsonl", 1);
        assert_eq!(semantic(&claim), "infrastructure_failed");
        assert!(
            claim.record.expect("record")["failure"]
                .get("error_type")
                .is_none()
        );
    }

    #[test]
    fn other_turn_failures_are_task_failures_and_silence_is_missing() {
        let stdout = br#"{"type":"turn.started"}
{"type":"turn.failed","error":{"message":"context window exceeded for this model"}}
"#;
        let claim = Adapter::Codex.claim(&AgentEnd {
            exit_code: Some(1),
            stdout,
            ..AgentEnd::default()
        });
        assert_eq!(semantic(&claim), "task_failed");
        let claim = Adapter::Codex.claim(&AgentEnd {
            exit_code: None,
            stdout: b"{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n",
            ..AgentEnd::default()
        });
        assert_eq!(claim.status, ClaimStatus::Missing);
    }

    #[test]
    fn plan_writes_the_provider_config_and_keeps_the_key_in_the_env() {
        let config = PresetAgent {
            flags: vec!["-c".into(), "model_reasoning_effort=\"low\"".into()],
            ..PresetAgent::default()
        };
        let w = wiring();
        let plan = test_support::plan(PresetKind::Codex, &config, "fix the bug");
        assert_eq!(
            plan.argv[..3],
            ["/opt/arbiter/agents/codex/bin/codex", "exec", "fix the bug"]
        );
        let joined = plan.argv.join(" ");
        assert!(joined.contains("--disable plugins --disable remote_plugin --disable apps"));
        assert!(joined.contains("--json"));
        assert!(joined.contains("--dangerously-bypass-approvals-and-sandbox"));
        assert!(!joined.contains(&w.token));
        assert_eq!(plan.env["OPENAI_API_KEY"], w.token);
        assert_eq!(plan.env["CODEX_HOME"], CODEX_HOME);
        // The uploaded config carries the URL and model but never the key.
        let tar = &plan.uploads[0].tar;
        let text = String::from_utf8_lossy(tar);
        assert!(!text.contains(&w.token));
        let cfg = config_toml(&w.openai_base_url, &w.model);
        let parsed: toml::Table = cfg.parse().expect("valid toml");
        assert_eq!(parsed["model"].as_str(), Some("scripted-model"));
        let provider = &parsed["model_providers"]["arbiter"];
        assert_eq!(
            provider["base_url"].as_str(),
            Some("http://127.0.0.1:4000/v1")
        );
        assert_eq!(provider["wire_api"].as_str(), Some("responses"));
        assert_eq!(provider["env_key"].as_str(), Some("OPENAI_API_KEY"));
        assert_eq!(parsed["analytics"]["enabled"].as_bool(), Some(false));
        assert_eq!(parsed["features"]["shell_snapshot"].as_bool(), Some(false));
        assert!(text.contains("[analytics]"));
    }

    #[test]
    fn a_later_attempt_resumes_the_last_session_with_the_same_flags() {
        let plan = test_support::plan(PresetKind::Codex, &PresetAgent::default(), "fix it");
        let next = resume_argv(&plan.argv, "fix it\n\nagain", 0);
        assert_eq!(
            next[..5],
            [
                "/opt/arbiter/agents/codex/bin/codex",
                "exec",
                "resume",
                "--last",
                "fix it\n\nagain"
            ]
        );
        assert_eq!(next[5..], plan.argv[3..]);
        // Resuming twice is the same resume; a prompt that looks like a flag stays a prompt.
        assert_eq!(resume_argv(&next, "other", 0), next);
        assert_eq!(resume_argv(&plan.argv, "-x", 0)[4], "\n-x");
        // The user's flags are options of `exec`, before `resume`.
        let config = PresetAgent {
            flags: vec!["-s".into(), "read-only".into()],
            ..PresetAgent::default()
        };
        let plan = test_support::plan(PresetKind::Codex, &config, "fix it");
        let next = resume_argv(&plan.argv, "again", 2);
        assert_eq!(next[1..6], ["exec", "-s", "read-only", "resume", "--last"]);
        assert_eq!(next[6], "again");
        assert_eq!(next[7..], plan.argv[3..plan.argv.len() - 2]);
    }

    #[test]
    fn config_escapes_odd_model_names() {
        let cfg = config_toml("http://x/v1", "we\"ird\nname");
        let parsed: toml::Table = cfg.parse().expect("valid toml");
        assert_eq!(parsed["model"].as_str(), Some("we\"ird\nname"));
    }
}
