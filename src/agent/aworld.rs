//! The `aworld` kind (SPEC §4): a `command` preset that runs `aworld-cli` headless with a
//! per-trial control root, the outcome/trajectory paths, the model env and the completion
//! contract wired in.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::task::Task;

use super::{AgentError, Mount, default_install_timeout, redact_env};

/// Container path of the per-trial control root.
pub const CONTROL_ROOT: &str = "/arbiter/control";
/// Where the preset asks aworld-cli to write its outcome record.
pub const AWORLD_OUTCOME_PATH: &str = "/logs/agent/outcome.json";
/// Where the preset asks aworld-cli to write its trajectory.
pub const AWORLD_TRAJECTORY_PATH: &str = "/logs/agent/trajectory.json";
/// Env var carrying the agent phase's deadline (Unix seconds).
pub const DEADLINE_ENV: &str = "AWORLD_TASK_DEADLINE_EPOCH_SECONDS";
/// The flag an aworld-cli must support for arbiter to read its claim.
pub const REQUIRED_FLAG: &str = "--outcome-output";

/// Why an exit-0 run without an outcome record is an infrastructure failure.
pub(crate) fn missing_record_message() -> String {
    format!(
        "the agent exited 0 without an outcome record (no {AWORLD_OUTCOME_PATH} and no AWORLD_RUN_OUTCOME= line on stderr); aworld-cli does this when it rejects an argument — see agent/stderr.log"
    )
}

/// The `aworld` kind's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AworldAgent {
    /// The CLI to run (a name on `PATH` or an absolute path in the container).
    #[serde(default = "default_binary")]
    pub binary: String,
    /// Flags before the `run` subcommand.
    #[serde(default = "default_global_args")]
    pub global_args: Vec<String>,
    /// Flags after `run`, before the ones the preset wires in.
    #[serde(default = "default_run_args")]
    pub run_args: Vec<String>,
    /// Passed as `--env-file`; a path that does not exist, so no `.env` in the task's files can
    /// replace the credentials arbiter passes.
    #[serde(default = "default_env_file")]
    pub env_file: String,
    /// Appended after the wired-in flags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    #[serde(default)]
    pub model: ModelConfig,
    /// More environment; values may reference the harness's environment as `${NAME}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Shell script run (as root) in the task container before the agent phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<String>,
    #[serde(default = "default_install_timeout")]
    pub install_timeout_sec: f64,
    /// Read-only host paths mounted into the task container (e.g. an aworld-cli installation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// A host directory copied into each trial's fresh control root before the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_template: Option<PathBuf>,
    /// User to run as (defaults to the task's `[agent] user`, then the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Check before the run that the CLI supports `--outcome-output`.
    #[serde(default = "yes")]
    pub check_cli: bool,
}

/// Model access, passed as `LLM_MODEL_NAME`, `LLM_PROVIDER`, `LLM_API_KEY`, `LLM_BASE_URL`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
}

fn default_binary() -> String {
    "aworld-cli".to_string()
}

fn default_global_args() -> Vec<String> {
    vec!["--no-banner".to_string()]
}

fn default_run_args() -> Vec<String> {
    ["--non-interactive", "--agent", "Aworld"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn default_env_file() -> String {
    "/nonexistent/.env".to_string()
}

fn yes() -> bool {
    true
}

/// An `AWORLD_*` setting that did not come from the preset's defaults, recorded in the trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessOverride {
    pub key: String,
    /// As configured (secret-named keys and `${NAME}`-derived values redacted).
    pub value: String,
    /// `variant` or `agent_config`.
    pub source: String,
}

impl AworldAgent {
    /// The environment before overrides and the deadline: preset defaults, model, completion
    /// contract, then the config's own `env` (unresolved).
    pub(crate) fn base_env(&self, task: &Task) -> Result<BTreeMap<String, String>, AgentError> {
        let mut env = BTreeMap::from([(
            "AWORLD_REQUIRE_STREAM_FINISH_REASON".to_string(),
            "true".to_string(),
        )]);
        let model = [
            ("LLM_MODEL_NAME", &self.model.name),
            ("LLM_PROVIDER", &self.model.provider),
            ("LLM_API_KEY", &self.model.api_key),
            ("LLM_BASE_URL", &self.model.base_url),
        ];
        for (key, value) in model {
            if let Some(value) = value {
                env.insert(key.to_string(), value.clone());
            }
        }
        if let Some(completion) = &task.completion {
            env.insert(
                "AWORLD_COMPLETION_MODE".to_string(),
                completion.mode.as_str().to_string(),
            );
            // aworld-cli reads a JSON array of paths here.
            let paths: Vec<&str> = completion
                .deliverables
                .iter()
                .map(|d| d.path.as_str())
                .collect();
            let commands: Vec<serde_json::Value> = completion
                .validation
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "command_id": c.id,
                        "argv": c.exec_argv(),
                        "cwd": c.cwd,
                        // aworld-cli wants a positive integer.
                        "timeout_seconds": (c.timeout_sec.ceil() as u64).max(1),
                    })
                })
                .collect();
            let json = |v: serde_json::Value| {
                serde_json::to_string(&v).map_err(|e| AgentError::Encode(e.to_string()))
            };
            if !paths.is_empty() {
                env.insert(
                    "AWORLD_REQUIRED_ARTIFACTS_JSON".to_string(),
                    json(serde_json::json!(paths))?,
                );
            }
            if !commands.is_empty() {
                env.insert(
                    "AWORLD_VALIDATION_COMMANDS_JSON".to_string(),
                    json(serde_json::Value::Array(commands))?,
                );
            }
        }
        env.extend(self.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(env)
    }

    /// `AWORLD_*` keys set by the config's `env` or by the variant, as recorded.
    pub(crate) fn harness_overrides(
        &self,
        overrides: &BTreeMap<String, String>,
    ) -> Vec<HarnessOverride> {
        let shown_config = redact_env(&self.env);
        let shown_variant = redact_env(overrides);
        let pick = |shown: &BTreeMap<String, String>, source: &str| -> Vec<HarnessOverride> {
            shown
                .iter()
                .filter(|(k, _)| k.starts_with("AWORLD_"))
                .map(|(k, v)| HarnessOverride {
                    key: k.clone(),
                    value: v.clone(),
                    source: source.to_string(),
                })
                .collect()
        };
        let mut out = pick(&shown_config, "agent_config");
        out.extend(pick(&shown_variant, "variant"));
        out
    }

    /// The headless invocation.
    pub(crate) fn run_argv(&self, task: &Task) -> Vec<String> {
        let mut argv = vec![self.binary.clone()];
        argv.extend(self.global_args.iter().cloned());
        argv.push("run".to_string());
        argv.extend(self.run_args.iter().cloned());
        argv.extend([
            "--env-file".to_string(),
            self.env_file.clone(),
            "--task".to_string(),
            task.instruction.clone(),
            "--trajectory-output".to_string(),
            AWORLD_TRAJECTORY_PATH.to_string(),
            "--outcome-output".to_string(),
            AWORLD_OUTCOME_PATH.to_string(),
        ]);
        argv.extend(self.extra_args.iter().cloned());
        argv
    }

    /// The pre-flight check: `<binary> <global args> run --help` must mention
    /// [`REQUIRED_FLAG`].
    pub(crate) fn cli_check(&self) -> super::CliCheck {
        let mut argv = vec![self.binary.clone()];
        argv.extend(self.global_args.iter().cloned());
        argv.extend(["run".to_string(), "--help".to_string()]);
        super::CliCheck {
            argv,
            required: REQUIRED_FLAG.to_string(),
            not_installed: "is aworld-cli installed in the task container (agent `install:` or a read-only `mounts:` entry, see docker/agents/aworld/README.md)? Output in agent/cli-check.stderr.log".to_string(),
            unsupported: format!("the installed aworld-cli does not support {REQUIRED_FLAG} (`{{shown}}` does not mention it); arbiter needs {REQUIRED_FLAG} to read the aworld.run.outcome.v1 record — upgrade aworld-cli to a release that has it (pip install -U aworld-cli, or rebuild docker/agents/aworld with a newer AWORLD_PIP_SPEC)"),
        }
    }

    pub(crate) fn install_timeout(&self) -> Duration {
        Duration::try_from_secs_f64(self.install_timeout_sec).unwrap_or(Duration::from_secs(600))
    }

    /// Every env value as configured (for `${NAME}` checks up front).
    pub(crate) fn configured_env(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        let model = [
            ("model.name", &self.model.name),
            ("model.provider", &self.model.provider),
            ("model.api_key", &self.model.api_key),
            ("model.base_url", &self.model.base_url),
        ];
        for (key, value) in model {
            if let Some(value) = value {
                env.insert(key.to_string(), value.clone());
            }
        }
        for (k, v) in &self.env {
            env.insert(format!("env.{k}"), v.clone());
        }
        env
    }

    /// The config as it may be written to disk.
    pub(crate) fn redacted(&self) -> AworldAgent {
        let mut out = self.clone();
        out.env = redact_env(&self.env);
        out.model.api_key = self.model.api_key.as_ref().map(|v| {
            if v.starts_with("${") && v.ends_with('}') && v.matches("${").count() == 1 {
                v.clone()
            } else {
                "***".to_string()
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{Agent, AgentKind};

    fn agent(yaml: &str) -> AworldAgent {
        let agent: Agent = serde_yaml::from_str(yaml).expect("parses");
        match agent.kind {
            AgentKind::Aworld(a) => *a,
            other => panic!("not aworld: {other:?}"),
        }
    }

    #[test]
    fn defaults_follow_the_documented_direct_run() {
        let a = agent("name: aw\nkind: aworld\n");
        let help = a.cli_check().argv;
        assert_eq!(help, ["aworld-cli", "--no-banner", "run", "--help"]);
        assert!(a.check_cli);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err =
            serde_yaml::from_str::<Agent>("name: aw\nkind: aworld\nmodle: {}\n").expect_err("typo");
        assert!(err.to_string().contains("modle"), "{err}");
    }

    #[test]
    fn redaction_hides_literal_keys_but_keeps_references() {
        let a = agent(
            "name: aw\nkind: aworld\nmodel: {name: m, api_key: sk-literal}\nenv: {MY_TOKEN: t0k, MODE: x}\n",
        );
        let r = a.redacted();
        assert_eq!(r.model.api_key.as_deref(), Some("***"));
        assert_eq!(r.model.name.as_deref(), Some("m"));
        assert_eq!(r.env["MY_TOKEN"], "***");
        assert_eq!(r.env["MODE"], "x");
        let a = agent("name: aw\nkind: aworld\nmodel: {api_key: '${KEY}'}\n");
        assert_eq!(a.redacted().model.api_key.as_deref(), Some("${KEY}"));
    }

    #[test]
    fn harness_overrides_are_labelled_and_redacted() {
        let a = agent("name: aw\nkind: aworld\nenv: {AWORLD_X: '1', OTHER: '2'}\n");
        let overrides = BTreeMap::from([
            (
                "AWORLD_SUCCESS_FIRST_TERMINAL_GATE".to_string(),
                "false".to_string(),
            ),
            ("AWORLD_API_KEY".to_string(), "sk".to_string()),
            ("UNRELATED".to_string(), "1".to_string()),
        ]);
        let got = a.harness_overrides(&overrides);
        let shown: Vec<(&str, &str, &str)> = got
            .iter()
            .map(|o| (o.key.as_str(), o.value.as_str(), o.source.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("AWORLD_X", "1", "agent_config"),
                ("AWORLD_API_KEY", "***", "variant"),
                ("AWORLD_SUCCESS_FIRST_TERMINAL_GATE", "false", "variant"),
            ]
        );
    }
}
