//! The `aworld` kind (SPEC §4): a `command` preset that runs `aworld-cli` headless with a
//! per-trial control root, the outcome/trajectory paths, the model env and the completion
//! contract wired in.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::task::Task;

use super::{
    AgentConfigError, AgentError, ModelWiring, Mount, default_install_timeout, redact_env,
};
use crate::gateway::{AgentModel, Budget, ModelConfig as JobModel, ProviderApi};

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
    /// The model: `{provider: <a job models: entry>, name}` reaches it through arbiter's
    /// gateway (recommended; the task may stay on network `none`), or the literal form
    /// `{name, provider, base_url, api_key}` passed to aworld-cli as is.
    #[serde(default)]
    pub model: ModelConfig,
    /// Per-trial limits on the model calls (needs a gateway model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Set by [`AworldAgent::route_model`] when `model` names a job `models:` entry: the
    /// trial is admitted to the gateway and `LLM_*` point at it ([`gateway_env`]).
    #[serde(skip)]
    pub(crate) gateway_model: Option<AgentModel>,
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

/// Model access, passed as `LLM_MODEL_NAME`, `LLM_PROVIDER`, `LLM_API_KEY`, `LLM_BASE_URL`
/// (the literal form), or a gateway model's `{provider, name}` (see [`AworldAgent::route_model`]).
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

/// `LLM_*` keys arbiter sets from the gateway for a gateway model; a config's `env:` may not
/// set them (the real key never enters a container).
pub const GATEWAY_ENV: [&str; 4] = [
    "LLM_BASE_URL",
    "LLM_API_KEY",
    "LLM_MODEL_NAME",
    "LLM_PROVIDER",
];

/// The env an `aworld` agent with a gateway model gets: aworld-cli's OpenAI-compatible
/// provider pointed at the gateway on the container's loopback, the per-trial token as its key.
/// The environment phase puts these over everything else in the run's env.
pub fn gateway_env(w: &ModelWiring) -> [(&'static str, String); 4] {
    [
        ("LLM_BASE_URL", w.openai_base_url.clone()),
        ("LLM_API_KEY", w.token.clone()),
        ("LLM_MODEL_NAME", w.model.clone()),
        ("LLM_PROVIDER", "openai".to_string()),
    ]
}

impl AworldAgent {
    /// The gateway model and budget, when `model` names a job `models:` entry.
    pub(crate) fn gateway(&self) -> Option<(&AgentModel, Option<&Budget>)> {
        self.gateway_model
            .as_ref()
            .map(|m| (m, self.budget.as_ref()))
    }

    /// Decide which form `model:` is, against the job's `models:` (called by `job::resolve`
    /// before the model is validated). It is a gateway model when it has no `base_url` and no
    /// `api_key` and its `provider` names a `models:` entry; otherwise the literal form, passed
    /// as is. Fields in errors are relative to the agent entry.
    pub(crate) fn route_model(&mut self, models: &[JobModel]) -> Result<(), AgentConfigError> {
        let err = |field: &str, message: String| AgentConfigError {
            field: field.to_string(),
            message,
        };
        let m = &self.model;
        let entry = m
            .provider
            .as_ref()
            .and_then(|p| models.iter().find(|e| &e.name == p));
        let Some(entry) = entry else {
            self.gateway_model = None;
            return Ok(());
        };
        if m.base_url.is_some() || m.api_key.is_some() {
            let which = if m.base_url.is_some() {
                "base_url"
            } else {
                "api_key"
            };
            return Err(err(
                &format!("model.{which}"),
                format!(
                    "provider {:?} is a models: entry, reached through arbiter's gateway: drop base_url and api_key (the gateway holds the key), or name a provider that is not a models: entry for the literal form",
                    entry.name
                ),
            ));
        }
        let Some(name) = m.name.clone() else {
            return Err(err(
                "model.name",
                format!("required: the model to ask provider {:?} for", entry.name),
            ));
        };
        if entry.api == ProviderApi::Anthropic {
            return Err(err(
                "model.provider",
                format!(
                    "provider {:?} speaks only Anthropic Messages; aworld-cli reaches its model over OpenAI Chat Completions (use an api: openai or scripted provider)",
                    entry.name
                ),
            ));
        }
        if let Some(key) = GATEWAY_ENV.iter().find(|k| self.env.contains_key(**k)) {
            return Err(err(
                &format!("env.{key}"),
                "set by arbiter from the gateway for a gateway model; remove it".to_string(),
            ));
        }
        self.gateway_model = Some(AgentModel {
            provider: entry.name.clone(),
            name,
        });
        Ok(())
    }

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
        // A gateway model's `LLM_*` come from the gateway when the container runs.
        if self.gateway_model.is_none() {
            for (key, value) in model {
                if let Some(value) = value {
                    env.insert(key.to_string(), value.clone());
                }
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
        self.argv_with(task, true)
    }

    /// The invocation with or without `--trajectory-output` / `--outcome-output` (an older
    /// aworld-cli refuses flags it does not know, exiting 0 without doing anything).
    fn argv_with(&self, task: &Task, outputs: bool) -> Vec<String> {
        let mut argv = vec![self.binary.clone()];
        argv.extend(self.global_args.iter().cloned());
        argv.push("run".to_string());
        argv.extend(self.run_args.iter().cloned());
        argv.extend([
            "--env-file".to_string(),
            self.env_file.clone(),
            "--task".to_string(),
            task.instruction.clone(),
        ]);
        if outputs {
            argv.extend([
                "--trajectory-output".to_string(),
                AWORLD_TRAJECTORY_PATH.to_string(),
                "--outcome-output".to_string(),
                AWORLD_OUTCOME_PATH.to_string(),
            ]);
        }
        argv.extend(self.extra_args.iter().cloned());
        argv
    }

    /// The pre-flight check: `<binary> <global args> run --help` should mention
    /// [`REQUIRED_FLAG`]. A CLI that does not (every aworld-cli released so far, see docs/aworld.md
    /// "Evaluating AWorld") runs without the output flags: its claim is `missing`, with the
    /// reason, and the verifier's result stands on its own — not an infrastructure error, which
    /// would retry every trial of such a CLI in vain.
    pub(crate) fn cli_check(&self, task: &Task) -> super::CliCheck {
        let mut argv = vec![self.binary.clone()];
        argv.extend(self.global_args.iter().cloned());
        argv.extend(["run".to_string(), "--help".to_string()]);
        super::CliCheck {
            argv,
            required: REQUIRED_FLAG.to_string(),
            not_installed: "is aworld-cli installed in the task container (agent `install:` or a read-only `mounts:` entry, see docker/agents/aworld/README.md)? Output in agent/cli-check.stderr.log".to_string(),
            unsupported: format!("the installed aworld-cli does not support {REQUIRED_FLAG} (`{{shown}}` does not mention it); arbiter needs {REQUIRED_FLAG} to read the aworld.run.outcome.v1 record — upgrade aworld-cli to a release that has it (pip install -U aworld-cli, or rebuild docker/agents/aworld with a newer AWORLD_PIP_SPEC)"),
            fallback: Some(super::CliFallback {
                argv: self.argv_with(task, false),
                note: format!("no claim: the installed aworld-cli has no {REQUIRED_FLAG} (its `run --help` does not mention it), so it was run without {REQUIRED_FLAG} and --trajectory-output and writes no aworld.run.outcome.v1 record; its exit code (0 even on failure) is not a claim — see agent/stdout.log for its final answer"),
            }),
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
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks/quick");
        let task = crate::task::load(&dir).expect("task loads");
        let check = a.cli_check(&task);
        let help = check.argv.clone();
        assert_eq!(help, ["aworld-cli", "--no-banner", "run", "--help"]);
        assert!(a.check_cli);
        // A CLI without --outcome-output runs without the output flags, with a reason.
        let end = crate::sandbox::ExecEnd::Exited(0);
        let old = check
            .judge(
                end,
                Duration::from_secs(1),
                "usage: aworld-cli run [--task TASK]",
            )
            .expect("falls back")
            .expect("a fallback");
        assert!(
            !old.argv.iter().any(|a| a.ends_with("-output")),
            "{:?}",
            old.argv
        );
        assert_eq!(
            &old.argv[..a.run_argv(&task).len() - 4],
            &a.run_argv(&task)[..a.run_argv(&task).len() - 4]
        );
        assert!(old.note.contains("no --outcome-output"), "{}", old.note);
        let new = check
            .judge(end, Duration::from_secs(1), "[--outcome-output PATH]")
            .expect("supported");
        assert!(new.is_none());
        assert!(
            check
                .judge(
                    crate::sandbox::ExecEnd::Exited(127),
                    Duration::from_secs(1),
                    "not found"
                )
                .is_err()
        );
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

    fn models(yaml: &str) -> Vec<JobModel> {
        serde_yaml::from_str(yaml).expect("models parse")
    }

    #[test]
    fn a_provider_naming_a_models_entry_is_a_gateway_model() {
        let jobs =
            models("[{name: fake, api: scripted, script: s.json}, {name: oai, api: openai}]");
        let mut a = agent(
            "name: aw\nkind: aworld\nmodel: {provider: fake, name: m1}\nbudget: {max_requests: 3}\n",
        );
        a.route_model(&jobs).expect("routes");
        let (m, budget) = a.gateway().expect("a gateway model");
        assert_eq!((m.provider.as_str(), m.name.as_str()), ("fake", "m1"));
        assert_eq!(budget.and_then(|b| b.max_requests), Some(3));
        // The literal LLM_* are not passed: the gateway's come in at the environment phase.
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks/quick");
        let task = crate::task::load(&dir).expect("task loads");
        let env = a.base_env(&task).expect("env");
        assert!(!env.contains_key("LLM_PROVIDER"), "{env:?}");
        assert!(!env.contains_key("LLM_MODEL_NAME"), "{env:?}");
        let mut literal = a.clone();
        literal.route_model(&[]).expect("literal");
        let env = literal.base_env(&task).expect("env");
        assert_eq!(env.get("LLM_PROVIDER").map(String::as_str), Some("fake"));
        let w = ModelWiring {
            openai_base_url: "http://127.0.0.1:4141/v1".into(),
            anthropic_base_url: "http://127.0.0.1:4141".into(),
            token: "arb-t".into(),
            model: "m1".into(),
        };
        let env: BTreeMap<_, _> = gateway_env(&w).into_iter().collect();
        assert_eq!(env["LLM_BASE_URL"], "http://127.0.0.1:4141/v1");
        assert_eq!(env["LLM_API_KEY"], "arb-t");
        assert_eq!(env["LLM_MODEL_NAME"], "m1");
        assert_eq!(env["LLM_PROVIDER"], "openai");
    }

    #[test]
    fn the_literal_form_stays_literal() {
        let jobs = models("[{name: fake, api: scripted, script: s.json}]");
        let mut a = agent(
            "name: aw\nkind: aworld\nmodel: {provider: openai, name: m, base_url: 'http://h/v1', api_key: '${K}'}\n",
        );
        a.route_model(&jobs).expect("literal");
        assert!(a.gateway().is_none());
        // No models: at all: literal too, even without a key.
        let mut a = agent("name: aw\nkind: aworld\nmodel: {provider: fake, name: m}\n");
        a.route_model(&[]).expect("literal");
        assert!(a.gateway().is_none());
    }

    #[test]
    fn mixed_or_unusable_gateway_models_are_refused_naming_the_field() {
        let jobs =
            models("[{name: fake, api: scripted, script: s.json}, {name: ant, api: anthropic}]");
        let refused = |yaml: &str| agent(yaml).route_model(&jobs).expect_err("refused");
        let e =
            refused("name: aw\nkind: aworld\nmodel: {provider: fake, name: m, api_key: sk-x}\n");
        assert_eq!(e.field, "model.api_key");
        let e = refused(
            "name: aw\nkind: aworld\nmodel: {provider: fake, name: m, base_url: 'http://h'}\n",
        );
        assert_eq!(e.field, "model.base_url");
        let e = refused("name: aw\nkind: aworld\nmodel: {provider: fake}\n");
        assert_eq!(e.field, "model.name");
        let e = refused("name: aw\nkind: aworld\nmodel: {provider: ant, name: c}\n");
        assert_eq!(e.field, "model.provider");
        assert!(e.message.contains("Chat Completions"), "{}", e.message);
        let e = refused(
            "name: aw\nkind: aworld\nmodel: {provider: fake, name: m}\nenv: {LLM_API_KEY: '${K}'}\n",
        );
        assert_eq!(e.field, "env.LLM_API_KEY");
    }
}
