//! Between two attempts of a continued goal (`attempts`): the previous attempt's completion
//! state removed, its own words handed on read-only, and a preset's argv for the next one.

use std::path::{Path, PathBuf};

use crate::agent::AgentKind;
use crate::agent::continuation::{self as contract, PreviousAttempt};
use crate::agent::presets::codex;
use crate::sandbox::{ExecEnd, ExecSpec, Sandbox, TarEntry, files_to_tar};
use crate::trial::plan::Phase;

use super::{Ctx, EnvReady, Infra, infra};

/// Names of completion state removed before the next attempt, wherever they are in
/// `/logs/agent` or the control root (besides the agent's own outcome and trajectory paths).
const COMPLETION_NAMES: [&str; 2] = ["outcome.json", "completion.json"];
/// An entry whose name holds this is a receipt, and is removed too.
const RECEIPT_MARK: &str = "receipt";

/// Remove the previous attempt's completion state (in the container: its outcome record,
/// `completion.json`, trajectory and receipt-named entries of `/logs/agent`; on the host: the
/// same names in the control root) and put its claim and error at
/// [`contract::PREVIOUS_PATH`], read-only. Returns what was removed.
pub(super) async fn clear_completion_state<S: Sandbox>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
    completion_paths: &[String],
    previous: &PreviousAttempt,
) -> Result<Vec<String>, Infra> {
    let mut cleared = completion_paths.to_vec();
    if !cleared.is_empty() {
        // A harness command from the toolbox, as root: nothing of the agent's runs.
        let mut args = vec!["-rf", "--"];
        args.extend(cleared.iter().map(String::as_str));
        let spec = ExecSpec {
            argv: ctx.sb.harness_argv("rm", &args),
            env: Vec::new(),
            user: Some("0".to_string()),
            workdir: None,
            stdout: None,
            stderr: None,
            cap_bytes: 64 * 1024,
            timeout: Some(std::time::Duration::from_secs(60)),
            grace: ctx.plan.settings.kill_grace,
        };
        let removed = ctx
            .sb
            .exec(&env.container, &spec)
            .await
            .map_err(infra(Phase::Agent))?;
        if removed.end != ExecEnd::Exited(0) {
            // The agent made its completion state unremovable: it cannot be told apart from
            // the next attempt's, so no next attempt runs on it.
            return Err(Infra {
                phase: Phase::Agent,
                message: format!(
                    "removing the previous attempt's completion state ({}) failed: {:?}",
                    cleared.join(" "),
                    removed.end
                ),
            });
        }
    }
    let body = serde_json::to_vec_pretty(previous).map_err(infra(Phase::Agent))?;
    let rel = contract::PREVIOUS_PATH.trim_start_matches('/');
    let tar = files_to_tar(&[TarEntry {
        path: rel,
        content: Some(&body),
        mode: 0o444,
    }])
    .map_err(infra(Phase::Agent))?;
    ctx.sb
        .upload_replacing(&env.container, &[contract::PREVIOUS_PATH], tar)
        .await
        .map_err(infra(Phase::Agent))?;
    if let (Some(host), Some(control)) = (&env.control_dir, &env.agent.control) {
        for found in named_completion_state(host) {
            let removed = if std::fs::symlink_metadata(&found).is_ok_and(|m| m.is_dir()) {
                std::fs::remove_dir_all(&found)
            } else {
                std::fs::remove_file(&found)
            };
            if let Err(e) = removed {
                return Err(Infra {
                    phase: Phase::Agent,
                    message: format!("{}: {e}", found.display()),
                });
            }
            if let Ok(rel) = found.strip_prefix(host) {
                cleared.push(format!(
                    "{}/{}",
                    control.container_path.trim_end_matches('/'),
                    rel.to_string_lossy()
                ));
            }
        }
    }
    Ok(cleared)
}

/// Entries under `root` (not following symlinks) named like completion state: an outcome
/// record, a completion record, or anything whose name holds "receipt". A directory so named
/// is listed once, not its contents.
pub(super) fn named_completion_state(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
            let path = entry.path();
            if COMPLETION_NAMES.contains(&name.as_str()) || name.contains(RECEIPT_MARK) {
                found.push(path);
            } else if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The next attempt's argv: for a preset with a native way to continue its own session
/// (Claude Code's `--continue`, Codex's `exec resume --last`), that; and for every preset the instruction again with the
/// previous attempt's own error after it. `command` and `aworld` agents keep their argv: they
/// read [`contract::PREVIOUS_ENV`] and their ledger.
pub(super) fn continue_argv<S>(
    ctx: &Ctx<'_, S>,
    argv: &mut Vec<String>,
    previous: &PreviousAttempt,
    k: u32,
    max: u32,
) {
    let kind = &ctx.plan.agent.kind;
    if kind.preset().is_none() {
        return;
    }
    let instruction = &ctx.plan.task.instruction;
    let error = previous
        .error
        .as_ref()
        .map(|e| match e {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .unwrap_or_else(|| "none given".to_string());
    let note = format!(
        "\n\n[arbiter] This is attempt {k} of {max} at the task above. The previous attempt ended ({}): {}. Its own error: {error}. Keep working on the task until it is complete.",
        previous.ended, previous.continued_because
    );
    for arg in argv.iter_mut() {
        if arg == instruction || arg.strip_prefix('\n') == Some(instruction.as_str()) {
            arg.push_str(&note);
        }
    }
    match kind {
        AgentKind::ClaudeCode(_) if !argv.iter().any(|a| a == "--continue") => {
            argv.insert(1.min(argv.len()), "--continue".to_string());
        }
        AgentKind::Codex(_) => {
            if let Some(prompt) = argv.get(2).cloned() {
                *argv = codex::resume_argv(argv, &prompt);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_state_is_found_by_name_and_the_ledger_is_left_alone() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        for dir in ["sub", "receipts", "notes"] {
            std::fs::create_dir_all(root.join(dir)).expect("mkdir");
        }
        for file in [
            "ledger.md",
            "outcome.json",
            "sub/completion.json",
            "receipts/unit.json",
            "My-Receipt.txt",
            "notes/plan.md",
        ] {
            std::fs::write(root.join(file), b"x").expect("write");
        }
        // A link is listed as itself, never followed.
        std::os::unix::fs::symlink("/etc", root.join("receipt-link")).expect("symlink");
        std::os::unix::fs::symlink("/etc", root.join("etc-link")).expect("symlink");
        let found: Vec<String> = named_completion_state(root)
            .iter()
            .map(|p| {
                p.strip_prefix(root)
                    .expect("under root")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(
            found,
            [
                "My-Receipt.txt",
                "outcome.json",
                "receipt-link",
                "receipts",
                "sub/completion.json"
            ]
        );
    }
}
