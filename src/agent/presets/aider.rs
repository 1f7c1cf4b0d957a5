//! The `aider` preset: aider-chat as a Python venv (read-only mount), run once on the
//! instruction file with `--message-file`, auto-confirming (`--yes-always`), without git,
//! update checks or analytics, in the `whole` edit format, against the gateway's Chat
//! Completions endpoint.
//!
//! aider has no notion of finishing a task: it answers the message, applies the edits it
//! wrote, and exits — with code 0 even when every model call failed. So the claim is weaker
//! than the other presets' (documented in docs/agents.md):
//! - a model-endpoint error (`litellm.AuthenticationError`, `RateLimitError`,
//!   `APIConnectionError`, `InternalServerError`, …) printed after the last applied edit →
//!   `infrastructure_failed`
//! - otherwise exit 0 → `succeeded` (aider completed its reply; whether that solved anything
//!   is the verifier's call, and a reply that changed nothing shows up as `false_completion`)
//! - a non-zero exit → `task_failed`; killed / timed out (no exit code) → claim `missing`.
//!
//! aider never runs the shell commands it suggests (`--yes-always` does not extend to them),
//! so tasks that need a command run (e.g. `chmod +x`) are beyond it.

use serde_json::json;

use super::{
    AgentEnd, Failure, NativeOutcome, PresetInput, PresetKind, PresetPlan, Semantic, args, env_of,
    root_upload,
};
use crate::agent::{AgentError, INSTRUCTION_PATH};

pub const PINNED_VERSION: &str = "0.86.2";
pub const PYPI_PACKAGE: &str = "aider-chat";
pub const ENTRY_POINT: &str = "bin/aider";
/// `HOME` for aider (its analytics flag and model-metadata cache), outside the collected logs.
pub const HOME: &str = "/arbiter/aider-home";
/// aider's chat transcript (kept with the agent's logs).
pub const CHAT_HISTORY: &str = "/logs/agent/aider.chat.history.md";

/// `mtime` (Unix seconds, normally now) stamps the seeded model-metadata cache: aider
/// refetches a cache older than a day from GitHub, which would be a phone-home (and, with no
/// network, a failed DNS lookup on every start).
pub(crate) fn plan(input: &PresetInput<'_>, mtime: u64) -> Result<PresetPlan, AgentError> {
    let bin = format!("{}/{ENTRY_POINT}", PresetKind::Aider.mount_point());
    let mut argv = args(&[
        bin.as_str(),
        "--message-file",
        INSTRUCTION_PATH,
        "--yes-always",
        "--no-git",
        "--no-check-update",
        "--analytics-disable",
        "--edit-format",
        "whole",
        "--no-show-model-warnings",
        "--no-pretty",
        "--no-fancy-input",
        "--map-tokens",
        "0",
        "--chat-history-file",
        CHAT_HISTORY,
        "--input-history-file",
        "/logs/agent/aider.input.history",
        "--llm-history-file",
        "/logs/agent/aider.llm.history",
        "--model",
    ]);
    argv.push(format!("openai/{}", input.model.model));
    argv.extend(input.config.flags.iter().cloned());
    let env = env_of(&[
        ("OPENAI_API_BASE", input.model.openai_base_url.as_str()),
        ("OPENAI_API_KEY", input.model.token.as_str()),
        ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
        ("HOME", HOME),
        ("PYTHONDONTWRITEBYTECODE", "1"),
    ]);
    let placeholder: &[u8] = b"{\"arbiter-offline-placeholder\": {}}\n";
    let upload = root_upload(
        &[
            ("arbiter/", None, 0o755),
            ("arbiter/aider-home/", None, 0o777),
            ("arbiter/aider-home/.aider/", None, 0o777),
            ("arbiter/aider-home/.aider/caches/", None, 0o777),
            (
                "arbiter/aider-home/.aider/caches/model_prices_and_context_window.json",
                Some(placeholder),
                0o666,
            ),
        ],
        mtime,
        HOME,
    )?;
    Ok(PresetPlan {
        argv,
        env,
        uploads: vec![upload],
        trajectory_path: Some(CHAT_HISTORY.to_string()),
    })
}

/// `(byte offset, error name)` of every `litellm.<Name>Error` aider printed.
fn model_errors(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (offset, _) in text.match_indices("litellm.") {
        let rest = &text[offset + "litellm.".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if rest[name.len()..].starts_with(':') && (name.ends_with("Error") || name == "Timeout") {
            out.push((offset, name));
        }
    }
    out
}

pub(crate) fn read_end(end: &AgentEnd<'_>) -> Result<Option<NativeOutcome>, String> {
    let Some(code) = end.exit_code else {
        return Ok(None);
    };
    let mut text = String::from_utf8_lossy(end.stdout).into_owned();
    text.push('\n');
    text.push_str(&String::from_utf8_lossy(end.stderr));
    let edits: Vec<(usize, String)> = text
        .match_indices("Applied edit to ")
        .map(|(i, m)| {
            let file = text[i + m.len()..].lines().next().unwrap_or("").trim();
            (i, file.to_string())
        })
        .collect();
    let errors = model_errors(&text);
    let last_edit = edits.last().map(|(i, _)| *i);
    let failing_error = errors
        .iter()
        .rev()
        .find(|(i, name)| {
            super::LITELLM_ENDPOINT_ERRORS.contains(&name.as_str())
                && last_edit.is_none_or(|e| *i > e)
        })
        .map(|(_, name)| name.clone());
    let tokens = text
        .lines()
        .rev()
        .find(|l| l.starts_with("Tokens: "))
        .map(str::to_string);
    let llm_calls = text.lines().filter(|l| l.starts_with("Tokens: ")).count() as u64;
    let (semantic, failure) = match (&failing_error, code) {
        (Some(name), _) => (
            Semantic::InfrastructureFailed,
            Some(Failure::model_api(Some(name.clone()))),
        ),
        (None, 0) => (Semantic::Succeeded, None),
        (None, code) => (
            Semantic::TaskFailed,
            Some(Failure::agent(&format!("exit_{code}"))),
        ),
    };
    let edited: Vec<&str> = edits.iter().map(|(_, f)| f.as_str()).collect();
    let error_names: Vec<&str> = errors.iter().map(|(_, n)| n.as_str()).collect();
    Ok(Some(NativeOutcome {
        semantic,
        fidelity: end.stdout_fidelity(),
        llm_calls: Some(llm_calls),
        tool_calls: Some(edits.len() as u64),
        failure,
        final_answer: None,
        evidence: "exit code and stdout (applied edits, litellm errors)",
        native: json!({
            "exit_code": code,
            "applied_edits": edited,
            "model_errors": error_names,
            "tokens": tokens,
        }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::presets::test_support::{self, semantic, wiring};
    use crate::agent::presets::{Adapter, PresetAgent};
    use crate::outcome::ClaimStatus;

    fn claim_of(file: &str, exit: Option<i64>) -> crate::outcome::Claim {
        test_support::claim_of(Adapter::Aider, "aider", file, exit)
    }

    #[test]
    fn applied_edit_and_exit_0_is_succeeded() {
        let claim = claim_of("stdout-success.txt", Some(0));
        assert_eq!(semantic(&claim), "succeeded");
        let r = claim.record.expect("record");
        assert_eq!(r["adapter"]["native"]["applied_edits"][0], "out4.txt");
        assert_eq!(r["tool_call_count"], 1);
    }

    #[test]
    fn model_errors_are_infrastructure_even_with_exit_0() {
        for (file, name) in [
            ("stdout-auth.txt", "AuthenticationError"),
            ("stdout-server-error.txt", "InternalServerError"),
        ] {
            let claim = claim_of(file, Some(0));
            assert_eq!(semantic(&claim), "infrastructure_failed", "{file}");
            assert_eq!(claim.record.expect("record")["failure"]["error_type"], name);
        }
    }

    #[test]
    fn non_zero_exit_is_task_failed_and_a_kill_is_missing() {
        let claim = claim_of("stdout-success.txt", Some(2));
        assert_eq!(semantic(&claim), "task_failed");
        assert_eq!(
            claim.record.expect("record")["failure"]["error_code"],
            "exit_2"
        );
        assert_eq!(
            claim_of("stdout-success.txt", None).status,
            ClaimStatus::Missing
        );
    }

    #[test]
    fn an_error_before_a_later_edit_does_not_count() {
        let stdout =
            b"litellm.RateLimitError: slow down\nRetrying...\nout.txt\nApplied edit to out.txt\n";
        let claim = Adapter::Aider.claim(&AgentEnd {
            exit_code: Some(0),
            stdout,
            ..AgentEnd::default()
        });
        assert_eq!(semantic(&claim), "succeeded");
    }

    #[test]
    fn plan_passes_the_instruction_file_and_seeds_a_fresh_cache() {
        let config = PresetAgent {
            flags: vec!["--edit-format".into(), "diff".into()],
            ..PresetAgent::default()
        };
        let w = wiring();
        let plan = test_support::plan(PresetKind::Aider, &config, "ignored: aider reads the file");
        let joined = plan.argv.join(" ");
        assert!(joined.contains("--message-file /arbiter/instruction.md"));
        for flag in [
            "--yes-always",
            "--no-git",
            "--no-check-update",
            "--analytics-disable",
            "--edit-format whole",
        ] {
            assert!(joined.contains(flag), "{flag}");
        }
        assert!(joined.contains("--model openai/scripted-model"));
        assert!(joined.ends_with("--edit-format diff"), "user flags last");
        assert!(!joined.contains("ignored"));
        assert!(!joined.contains(&w.token));
        assert_eq!(plan.env["HOME"], HOME);
        assert_eq!(plan.env["OPENAI_API_KEY"], w.token);
        let mut archive = tar::Archive::new(plan.uploads[0].tar.as_slice());
        let cache = archive
            .entries()
            .expect("entries")
            .map(|e| e.expect("entry"))
            .find(|e| {
                e.path()
                    .map(|p| p.ends_with("model_prices_and_context_window.json"))
                    .unwrap_or(false)
            })
            .expect("seeded cache");
        assert_eq!(cache.header().mtime().expect("mtime"), 1_800_000_000);
    }
}
