//! Agent kinds and what each needs in a task container: files to upload, an optional install
//! step, the run step, its environment, and where its outcome record appears. No Docker here.
//!
//! Over 600 lines: the agent kinds' plans side by side (env layering, uploads, steps) so one rule holds for all; presets live in presets/.

mod aworld;
pub mod cache;
pub mod continuation;
mod env;
pub mod install;
mod mounts;
mod planning;
pub mod presets;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sandbox::{ExecEnd, TarEntry, dir_to_tar, files_to_tar};
use crate::task::Task;

pub use aworld::{
    AWORLD_OUTCOME_PATH, AWORLD_TRAJECTORY_PATH, AworldAgent, CONTROL_ROOT, DEADLINE_ENV,
    HarnessOverride, ModelConfig, REQUIRED_FLAG, gateway_env as aworld_gateway_env,
};
pub use continuation::Continuation;
pub use env::{EnvError, is_secret_key, redact_env, resolve_env};
pub use mounts::{MountError, resolve_mounts};
pub use presets::{Adapter, AdapterReads, AgentEnd, ModelWiring, PresetAgent, PresetKind};

/// Container path of the instruction file every agent gets.
pub const INSTRUCTION_PATH: &str = "/arbiter/instruction.md";
/// Default container path of the agent's outcome record.
pub const DEFAULT_OUTCOME_PATH: &str = "/logs/agent/outcome.json";

/// A named agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    pub name: String,
    /// Overrides the task's agent-phase network (SPEC §3); recorded as a harness override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<AgentNetwork>,
    /// With `network: allowlist` (implied when `network` is absent): the hosts the agent may
    /// reach, in task.toml's `allowed_hosts` syntax.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// Goal continuation (SPEC §15): attempts 1…N in one trial's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<Continuation>,
    #[serde(flatten)]
    pub kind: AgentKind,
}

/// An agent's `network:` override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentNetwork {
    None,
    Host,
    Bridge,
    Allowlist,
}

impl AgentNetwork {
    pub const NAMES: &str = "none, host, bridge or allowlist";

    pub fn as_str(self) -> &'static str {
        match self {
            AgentNetwork::None => "none",
            AgentNetwork::Host => "host",
            AgentNetwork::Bridge => "bridge",
            AgentNetwork::Allowlist => "allowlist",
        }
    }

    /// The task-level mode it stands for.
    pub fn mode(self) -> crate::task::NetworkMode {
        use crate::task::NetworkMode;
        match self {
            AgentNetwork::None => NetworkMode::NoNetwork,
            AgentNetwork::Host => NetworkMode::Host,
            AgentNetwork::Bridge => NetworkMode::Bridge,
            AgentNetwork::Allowlist => NetworkMode::Allowlist,
        }
    }
}

impl<'de> Deserialize<'de> for AgentNetwork {
    /// By hand, so a bad value names the field and the choices in one line.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        match raw.as_str() {
            "none" | "no-network" => Ok(AgentNetwork::None),
            "host" => Ok(AgentNetwork::Host),
            "bridge" => Ok(AgentNetwork::Bridge),
            "allowlist" => Ok(AgentNetwork::Allowlist),
            _ => Err(serde::de::Error::custom(format!(
                "network: unknown value {raw:?} (expected {})",
                AgentNetwork::NAMES
            ))),
        }
    }
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
    /// `aworld-cli` run headless (a `command` preset, SPEC §4).
    Aworld(Box<AworldAgent>),
    /// Claude Code (SPEC §12).
    #[serde(rename = "claude-code")]
    ClaudeCode(PresetAgent),
    /// OpenAI Codex CLI.
    #[serde(rename = "codex")]
    Codex(PresetAgent),
    /// mini-swe-agent.
    #[serde(rename = "mini-swe-agent")]
    MiniSweAgent(PresetAgent),
    /// aider.
    #[serde(rename = "aider")]
    Aider(PresetAgent),
}

impl AgentKind {
    /// The model the agent reaches through the gateway, and its budget, when it has one.
    pub fn model(&self) -> Option<(&crate::gateway::AgentModel, Option<&crate::gateway::Budget>)> {
        match self {
            AgentKind::Command(cmd) => cmd.model.as_ref().map(|m| (m, cmd.budget.as_ref())),
            AgentKind::ClaudeCode(p)
            | AgentKind::Codex(p)
            | AgentKind::MiniSweAgent(p)
            | AgentKind::Aider(p) => p.model.as_ref().map(|m| (m, p.budget.as_ref())),
            AgentKind::Aworld(aw) => aw.gateway(),
            AgentKind::Oracle | AgentKind::Nop => None,
        }
    }

    /// The `budget:` written without a `model:` (an error the job config reports).
    pub fn budget_without_model(&self) -> bool {
        match self {
            AgentKind::Command(cmd) => cmd.model.is_none() && cmd.budget.is_some(),
            AgentKind::ClaudeCode(p)
            | AgentKind::Codex(p)
            | AgentKind::MiniSweAgent(p)
            | AgentKind::Aider(p) => p.model.is_none() && p.budget.is_some(),
            AgentKind::Aworld(aw) => aw.gateway().is_none() && aw.budget.is_some(),
            AgentKind::Oracle | AgentKind::Nop => false,
        }
    }

    /// The preset kind and its config, for the agent-CLI presets.
    pub fn preset(&self) -> Option<(PresetKind, &PresetAgent)> {
        match self {
            AgentKind::ClaudeCode(p) => Some((PresetKind::ClaudeCode, p)),
            AgentKind::Codex(p) => Some((PresetKind::Codex, p)),
            AgentKind::MiniSweAgent(p) => Some((PresetKind::MiniSweAgent, p)),
            AgentKind::Aider(p) => Some((PresetKind::Aider, p)),
            AgentKind::Oracle | AgentKind::Nop | AgentKind::Command(_) | AgentKind::Aworld(_) => {
                None
            }
        }
    }
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
    /// The model reached through arbiter's gateway (`{provider, name}`, a job `models:` entry):
    /// the run gets `OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`, both API keys (the per-trial
    /// token) and `ARBITER_MODEL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::gateway::AgentModel>,
    /// Per-trial limits on the model calls (needs `model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::gateway::Budget>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    pub host: PathBuf,
    pub container: String,
}

pub(crate) fn default_install_timeout() -> f64 {
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
    /// A fresh per-trial control root to mount (the `aworld` kind).
    pub control: Option<ControlPlan>,
    /// Env var that receives the agent phase's deadline as Unix seconds when the run starts.
    pub deadline_env: Option<String>,
    /// A command whose output must mention a flag before the run may start.
    pub cli_check: Option<CliCheck>,
    /// An exit-0 run without an outcome record is an infrastructure failure (the `aworld` kind:
    /// aworld-cli exits 0 with no record on a bad argument); the message says why.
    pub record_required: Option<String>,
    /// Container path of the agent's trajectory, when it writes one.
    pub trajectory_path: Option<String>,
    /// `AWORLD_*` settings that are not the preset's defaults, for the record.
    pub harness_overrides: Vec<HarnessOverride>,
    /// Resolved secret values (secret-named keys, `${NAME}`-derived values): scrubbed from
    /// everything arbiter writes.
    pub secrets: Vec<String>,
    /// For the agent-CLI presets: how the claim is read from the agent's native end state
    /// when it writes no outcome record (`claim.source = "adapter"`). The collect phase should
    /// call `adapter.claim(&AgentEnd { exit_code, stdout, stdout_truncated, stderr, file })`,
    /// with `file` the bytes at `adapter.reads()`'s path when that is `AdapterReads::File`.
    pub adapter: Option<Adapter>,
}

/// What the harness supplies to plan an agent beyond the task: the model wiring (from the
/// gateway) and the host agent cache. Both are only needed by the agent-CLI presets.
#[derive(Debug, Clone, Default)]
pub struct PlanContext {
    pub model: Option<ModelWiring>,
    pub cache: Option<cache::AgentCache>,
    /// Unix seconds used to stamp uploaded cache files (aider); `None`: now.
    pub now_unix: Option<u64>,
}

/// A per-trial control root.
#[derive(Debug, Clone)]
pub struct ControlPlan {
    /// Container path it is mounted at.
    pub container_path: String,
    /// Host directory copied into it first.
    pub template: Option<PathBuf>,
}

/// A pre-flight check of an installed CLI: `argv` must run and its output mention `required`.
#[derive(Debug, Clone)]
pub struct CliCheck {
    pub argv: Vec<String>,
    /// Must appear in the command's stdout or stderr.
    pub required: String,
    /// What to tell the user when the command does not run (the CLI is likely not installed).
    pub not_installed: String,
    /// What to tell the user when it runs but does not mention `required` (`{shown}` is
    /// replaced by the command).
    pub unsupported: String,
    /// Instead of refusing when `required` is not mentioned: run this (the `aworld` kind runs
    /// a CLI without `--outcome-output` without the flag, and records why there is no claim).
    pub fallback: Option<CliFallback>,
}

/// How to run a CLI that lacks the checked flag (see [`CliCheck::fallback`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CliFallback {
    /// The run step's argv in its place.
    pub argv: Vec<String>,
    /// Recorded as the claim's `error` when no claim is read (the claim is `missing`); an
    /// exit 0 without a record is then the agent's result, not an infrastructure failure.
    pub note: String,
}

impl CliCheck {
    /// Judge how the check ended (with its limit `timeout`) and what it said: a help text
    /// that exits non-zero is fine as long as it mentions `required`. `Ok(Some(_))`: it does
    /// not, and the run goes ahead the fallback's way.
    pub fn judge(
        &self,
        end: ExecEnd,
        timeout: Duration,
        said: &str,
    ) -> Result<Option<CliFallback>, String> {
        let shown = self.argv.join(" ");
        let mentions = said.contains(&self.required);
        let failed = match end {
            ExecEnd::TimedOut => Some(format!("timed out after {}s", timeout.as_secs())),
            ExecEnd::Exited(0) => None,
            _ if mentions => None,
            ExecEnd::Exited(code) => Some(format!("exited with {code}")),
            ExecEnd::Killed { .. } => Some("exited with no exit code".to_string()),
        };
        match failed {
            Some(why) => Err(format!(
                "pre-flight `{shown}` {why} — {}",
                self.not_installed
            )),
            None if !mentions => match &self.fallback {
                Some(fallback) => Ok(Some(fallback.clone())),
                None => Err(self.unsupported.replace("{shown}", &shown)),
            },
            None => Ok(None),
        }
    }
}

/// A problem in an agent definition: the field (relative to the agent) and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct AgentConfigError {
    pub field: String,
    pub message: String,
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
    #[error("encoding the completion contract: {0}")]
    Encode(String),
    #[error(
        "agent {agent} (kind {kind}) needs a model: presets reach their model through arbiter's gateway, and none was wired in for this trial"
    )]
    NoModel { agent: String, kind: &'static str },
    #[error(transparent)]
    Cache(#[from] cache::CacheError),
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
            network: None,
            allowed_hosts: Vec::new(),
            continuation: None,
            kind,
        })
    }

    /// Check up front that the agent can run `task` (e.g. the oracle needs a solution).
    pub fn check(&self, task: &Task) -> Result<(), AgentError> {
        match &self.kind {
            // A Harbor multi-step task: each step's `solution/`, else the task's (harbor-steps).
            AgentKind::Oracle
                if task.solution_dir.is_none()
                    && (task.steps.is_empty()
                        || task.steps.iter().any(|s| s.solution_dir.is_none())) =>
            {
                Err(AgentError::NoSolution {
                    task: task.name.clone(),
                })
            }
            _ => Ok(()),
        }
    }

    /// The definition as it may be written to disk (secrets redacted).
    pub fn redacted(&self) -> Agent {
        let mut agent = self.clone();
        match &mut agent.kind {
            AgentKind::Command(cmd) => cmd.env = redact_env(&cmd.env),
            AgentKind::Aworld(aw) => **aw = aw.redacted(),
            AgentKind::ClaudeCode(p)
            | AgentKind::Codex(p)
            | AgentKind::MiniSweAgent(p)
            | AgentKind::Aider(p) => p.env = redact_env(&p.env),
            AgentKind::Oracle | AgentKind::Nop => {}
        }
        agent
    }

    /// For a preset: check that its version is in the host cache, before any trial starts.
    /// The error is one line naming the `arbiter agents install` command to run; the caller
    /// reports it as a configuration error (exit 2) on the agent's `version` field. Other
    /// kinds always pass.
    pub fn check_installed(&self, cache: &cache::AgentCache) -> Result<(), AgentConfigError> {
        let Some((kind, config)) = self.kind.preset() else {
            return Ok(());
        };
        cache
            .lookup(kind.name(), config.version_or_pinned(kind))
            .map(|_| ())
            .map_err(|e| AgentConfigError {
                field: "version".to_string(),
                message: e.to_string(),
            })
    }
}

/// Resolved values that must never be written: those of secret-named keys and those that came
/// from `${NAME}` references. Very short values are left alone (they would mangle every file).
/// The values of `resolved` that are secrets: secret-named keys and values made from `${NAME}`.
pub fn secret_values(raw: &BTreeMap<String, String>, resolved: &[(String, String)]) -> Vec<String> {
    let mut out: Vec<String> = resolved
        .iter()
        .filter(|(k, v)| {
            v.len() >= 4
                && (is_secret_key(k) || raw.get(k).is_some_and(|r| r.contains("${") && r != v))
        })
        .map(|(_, v)| v.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_agents_env_layers_over_the_task_env_and_variant_overrides_over_both() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = crate::testing::task_dir(
            tmp.path(),
            "t",
            "env = { A = \"task\", B = \"task\", C = \"task\" }\n[solution.env]\nC = \"solution\"\n",
        );
        let task = crate::task::load(&dir).expect("task loads");
        let agent = Agent {
            name: "cmd".into(),
            network: None,
            allowed_hosts: Vec::new(),
            continuation: None,
            kind: AgentKind::Command(CommandAgent {
                install: Some("true".into()),
                install_timeout_sec: 60.0,
                run: vec!["run".into()],
                env: BTreeMap::from([
                    ("B".to_string(), "agent".to_string()),
                    ("D".to_string(), "agent".to_string()),
                ]),
                mounts: Vec::new(),
                outcome_path: DEFAULT_OUTCOME_PATH.into(),
                user: None,
                model: None,
                budget: None,
            }),
        };
        let overrides = BTreeMap::from([("D".to_string(), "variant".to_string())]);
        let plan = agent.plan(&task, &overrides).expect("plan");
        let env: BTreeMap<_, _> = plan.env.into_iter().collect();
        let want: BTreeMap<String, String> = [
            ("A", "task"),
            ("B", "agent"),
            // `[solution] env` is the oracle's only.
            ("C", "task"),
            ("D", "variant"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env, want);
        let oracle = Agent::builtin("oracle").expect("oracle");
        let plan = oracle.plan(&task, &BTreeMap::new()).expect("plan");
        assert!(
            plan.env
                .contains(&("C".to_string(), "solution".to_string()))
        );
        assert!(plan.env.contains(&("A".to_string(), "task".to_string())));
    }
}
