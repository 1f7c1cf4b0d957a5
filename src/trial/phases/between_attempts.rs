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

/// Remove the previous attempt's completion state and put its claim and error at
/// [`contract::PREVIOUS_PATH`], read-only. Everything happens inside the container, with the
/// harness toolbox as root, so it is the same on every backend (on Kubernetes the control root
/// is a volume of the pod that the host sees only when the trial collects it): the outcome
/// record, `completion.json`, trajectory and receipt-named entries of `/logs/agent` the caller
/// found (`completion_paths`), and the same names anywhere in the control root, found by a
/// toolbox `find` there. `dir` is the attempt's directory on the host (the list is kept there).
/// Returns what was removed.
pub(super) async fn clear_completion_state<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
    dir: &Path,
    completion_paths: &[String],
    previous: &PreviousAttempt,
) -> Result<Vec<String>, Infra> {
    let mut cleared = completion_paths.to_vec();
    if let Some(control) = &env.agent.control {
        for found in control_completion_state(ctx, env, &control.container_path, dir).await? {
            if !cleared.contains(&found) {
                cleared.push(found);
            }
        }
    }
    if !cleared.is_empty() {
        // A harness command from the toolbox, as root: nothing of the agent's runs.
        let mut args = vec!["-rf", "--"];
        args.extend(cleared.iter().map(String::as_str));
        let spec = harness_spec(ctx.sb.harness_argv("rm", &args), None, ctx);
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
    Ok(cleared)
}

/// A toolbox command run as root with a minute to finish, its stdout to `stdout`.
fn harness_spec<S: Sandbox + ?Sized>(
    argv: Vec<String>,
    stdout: Option<PathBuf>,
    ctx: &Ctx<'_, S>,
) -> ExecSpec {
    ExecSpec {
        argv,
        env: Vec::new(),
        user: Some("0".to_string()),
        workdir: None,
        stdout,
        stderr: None,
        cap_bytes: LIST_CAP,
        timeout: Some(std::time::Duration::from_secs(60)),
        grace: ctx.plan.settings.kill_grace,
    }
}

/// The most bytes of the control root's completion-state list read (beyond it the list is
/// incomplete and the goal cannot go on safely).
const LIST_CAP: u64 = 1024 * 1024;

/// Container paths of entries under the control root `root` named like completion state (as
/// [`named_completion_state`] names them; links are not followed, a directory so named is
/// listed once), found inside the container by a toolbox `find` as root.
async fn control_completion_state<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    env: &EnvReady,
    root: &str,
    dir: &Path,
) -> Result<Vec<String>, Infra> {
    let list = dir.join("control-completion-state.list");
    let pattern = format!("*{RECEIPT_MARK}*");
    let mut args = vec![root, "-mindepth", "1", "("];
    for (i, name) in COMPLETION_NAMES.iter().enumerate() {
        if i > 0 {
            args.push("-o");
        }
        args.extend(["-iname", name]);
    }
    args.extend(["-o", "-iname", pattern.as_str(), ")", "-prune", "-print0"]);
    let spec = harness_spec(ctx.sb.harness_argv("find", &args), Some(list.clone()), ctx);
    let found = ctx
        .sb
        .exec(&env.container, &spec)
        .await
        .map_err(infra(Phase::Agent))?;
    if found.end != ExecEnd::Exited(0) || found.truncated {
        return Err(Infra {
            phase: Phase::Agent,
            message: format!(
                "listing the previous attempt's completion state in the control root {root} failed: {:?}{}",
                found.end,
                if found.truncated { " (list cut)" } else { "" }
            ),
        });
    }
    let bytes = std::fs::read(&list).map_err(|e| Infra {
        phase: Phase::Agent,
        message: format!("{}: {e}", list.display()),
    })?;
    let _ = std::fs::remove_file(&list);
    let mut paths = Vec::new();
    for raw in bytes.split(|b| *b == 0).filter(|p| !p.is_empty()) {
        // A name that is not UTF-8 could not be named to `rm`: like an unremovable one, it
        // cannot be told apart from the next attempt's.
        let path = String::from_utf8(raw.to_vec()).map_err(|_| Infra {
            phase: Phase::Agent,
            message: format!(
                "completion state in the control root {root} has a name that is not UTF-8: {}",
                String::from_utf8_lossy(raw)
            ),
        })?;
        if path.starts_with(root) {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
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
pub(super) fn continue_argv<S: ?Sized>(
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
        AgentKind::Codex(preset) => {
            if let Some(prompt) = argv.get(2).cloned() {
                *argv = codex::resume_argv(argv, &prompt, preset.flags.len());
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
