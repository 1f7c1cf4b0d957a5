//! Agent kinds and what each needs in a task container: files to upload, an optional install
//! step, the run step, its environment, and where its outcome record appears. No Docker here.

mod env;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sandbox::{TarEntry, dir_to_tar, files_to_tar};
use crate::task::Task;

pub use env::{EnvError, is_secret_key, redact_env, resolve_env};

/// Container path of the instruction file every agent gets.
pub const INSTRUCTION_PATH: &str = "/arbiter/instruction.md";
/// Default container path of the agent's outcome record.
pub const DEFAULT_OUTCOME_PATH: &str = "/logs/agent/outcome.json";

/// A named agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    pub name: String,
    #[serde(flatten)]
    pub kind: AgentKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentKind {
    /// Copies `solution/` in and runs `solve.sh`.
    Oracle,
    /// Does nothing.
    Nop,
    /// A generic installed agent.
    Command(CommandAgent),
}

/// The `command` kind (SPEC §3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandAgent {
    /// Shell script run in the task container before the agent phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<String>,
    #[serde(default = "default_install_timeout")]
    pub install_timeout_sec: f64,
    /// The agent's argv. The instruction is in `/arbiter/instruction.md` and `$ARBITER_INSTRUCTION_FILE`.
    pub run: Vec<String>,
    /// Environment; values may reference the harness's environment as `${NAME}`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Read-only host paths mounted into the container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// Where the agent writes its outcome record.
    #[serde(default = "default_outcome_path")]
    pub outcome_path: String,
    /// User to run as (defaults to the task's `[agent] user`, then the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    pub host: PathBuf,
    pub container: String,
}

fn default_install_timeout() -> f64 {
    600.0
}

fn default_outcome_path() -> String {
    DEFAULT_OUTCOME_PATH.to_string()
}

/// One command the harness runs for the agent.
#[derive(Debug, Clone)]
pub struct Step {
    pub argv: Vec<String>,
    pub timeout: Duration,
    pub user: Option<String>,
}

/// A tar archive to unpack at a directory in the container.
#[derive(Debug, Clone)]
pub struct Upload {
    pub dest: String,
    pub tar: Vec<u8>,
}

/// What an agent needs for one trial.
#[derive(Debug, Clone)]
pub struct AgentPlan {
    pub uploads: Vec<Upload>,
    pub install: Option<Step>,
    /// `None`: the agent runs nothing (nop).
    pub run: Option<Step>,
    /// Container environment (resolved; may hold secrets — never write it to a file).
    pub env: Vec<(String, String)>,
    pub ro_mounts: Vec<(PathBuf, String)>,
    pub outcome_path: String,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("task {task} has no solution/solve.sh, so the oracle agent cannot run it")]
    NoSolution { task: String },
    #[error("packing {path}: {source}")]
    Pack {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Env(#[from] EnvError),
}

/// Run a script with bash when the image has it, else with sh.
pub fn shell_script(path: &str) -> Vec<String> {
    vec![
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "if command -v bash >/dev/null 2>&1; then exec bash {path}; else exec sh {path}; fi"
        ),
    ]
}

impl Agent {
    /// The built-in agent called `name`, if there is one.
    pub fn builtin(name: &str) -> Option<Agent> {
        let kind = match name {
            "oracle" => AgentKind::Oracle,
            "nop" => AgentKind::Nop,
            _ => return None,
        };
        Some(Agent {
            name: name.to_string(),
            kind,
        })
    }

    /// Check up front that the agent can run `task` (e.g. the oracle needs a solution).
    pub fn check(&self, task: &Task) -> Result<(), AgentError> {
        match &self.kind {
            AgentKind::Oracle if task.solution_dir.is_none() => Err(AgentError::NoSolution {
                task: task.name.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// What the agent needs in `task`'s container. `overrides` are variant env overrides.
    pub fn plan(
        &self,
        task: &Task,
        overrides: &BTreeMap<String, String>,
    ) -> Result<AgentPlan, AgentError> {
        let timeout = Duration::from_secs_f64(task.agent.timeout_sec);
        let mut plan = AgentPlan {
            uploads: Vec::new(),
            install: None,
            run: None,
            env: Vec::new(),
            ro_mounts: Vec::new(),
            outcome_path: DEFAULT_OUTCOME_PATH.to_string(),
        };
        match &self.kind {
            AgentKind::Nop => {}
            AgentKind::Oracle => {
                let dir = task
                    .solution_dir
                    .as_ref()
                    .ok_or_else(|| AgentError::NoSolution {
                        task: task.name.clone(),
                    })?;
                let tar = dir_to_tar(dir, "solution").map_err(|source| AgentError::Pack {
                    path: dir.clone(),
                    source,
                })?;
                plan.uploads.push(Upload {
                    dest: "/".to_string(),
                    tar,
                });
                plan.run = Some(Step {
                    argv: shell_script("/solution/solve.sh"),
                    timeout,
                    user: task.agent.user.clone(),
                });
            }
            AgentKind::Command(cmd) => {
                let user = cmd.user.clone().or_else(|| task.agent.user.clone());
                if let Some(script) = &cmd.install {
                    let entries = [
                        TarEntry {
                            path: "arbiter/",
                            content: None,
                            mode: 0o755,
                        },
                        TarEntry {
                            path: "arbiter/install.sh",
                            content: Some(script.as_bytes()),
                            mode: 0o755,
                        },
                    ];
                    let tar = files_to_tar(&entries).map_err(|source| AgentError::Pack {
                        path: "install.sh".into(),
                        source,
                    })?;
                    plan.uploads.push(Upload {
                        dest: "/".to_string(),
                        tar,
                    });
                    plan.install = Some(Step {
                        argv: shell_script("/arbiter/install.sh"),
                        timeout: Duration::from_secs_f64(cmd.install_timeout_sec),
                        user: Some("0".to_string()),
                    });
                }
                plan.run = Some(Step {
                    argv: cmd.run.clone(),
                    timeout,
                    user,
                });
                let mut env = cmd.env.clone();
                env.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
                plan.env = resolve_env(&env)?;
                plan.ro_mounts = cmd
                    .mounts
                    .iter()
                    .map(|m| (m.host.clone(), m.container.clone()))
                    .collect();
                plan.outcome_path = cmd.outcome_path.clone();
            }
        }
        if !matches!(self.kind, AgentKind::Command(_)) && !overrides.is_empty() {
            plan.env = resolve_env(overrides)?;
        }
        Ok(plan)
    }
}
