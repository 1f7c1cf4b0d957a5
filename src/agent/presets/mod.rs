//! Presets for widely used agent CLIs (SPEC §12): `claude-code`, `codex`, `mini-swe-agent`,
//! `aider`. One file per agent; each knows
//!
//! - its pinned default version and where `arbiter agents install` fetches it from
//!   ([`PresetKind::source`]);
//! - its headless invocation with the instruction, the model wiring (gateway base URL, the
//!   per-trial token as the API key, the model name — all plain inputs, [`ModelWiring`]),
//!   telemetry / auto-update / phone-home switched off, and its turn limit where it has one
//!   (`plan`);
//! - how its native end state reads as a claim (`claim.source = "adapter"`, [`Adapter`]).
//!
//! The agent's files come from the host cache ([`super::cache`]), mounted read-only at
//! `/opt/arbiter/agents/<name>`: nothing is installed into the task's filesystem. Secrets
//! (the token) travel only in the env, never in argv or an uploaded file.
//!
//! Over 600 lines: what the four presets share (config, validation, model wiring, the adapter's record) with its tests; each preset's own part is in its file.

pub(crate) mod aider;
pub(crate) mod claude_code;
pub(crate) mod codex;
pub(crate) mod mini_swe_agent;
pub mod model_flag;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::agent::cache::AgentCache;
use crate::agent::{
    AgentConfigError, AgentError, AgentPlan, PlanContext, Step, resolve_env, secret_values,
};
use crate::outcome::{Claim, ClaimSource, ClaimStatus, OUTCOME_SCHEMA};
use crate::task::Task;

/// The preset agent kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PresetKind {
    ClaudeCode,
    Codex,
    MiniSweAgent,
    Aider,
}

/// Which package registry an agent comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    /// `npm pack <package>@<version>`, then the ELF is taken out of the tarball.
    Npm,
    /// `pip download` on the host, a venv built from those wheels inside a container.
    Pypi,
}

/// Where an agent's files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageSource {
    pub registry: Registry,
    /// The registry's package name.
    pub package: String,
    /// The version string the registry knows (Codex's linux build is `<version>-linux-x64`).
    pub version: String,
}

impl PresetKind {
    pub const ALL: [PresetKind; 4] = [
        PresetKind::ClaudeCode,
        PresetKind::Codex,
        PresetKind::MiniSweAgent,
        PresetKind::Aider,
    ];

    /// The kind's name as written in configs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PresetKind::ClaudeCode => "claude-code",
            PresetKind::Codex => "codex",
            PresetKind::MiniSweAgent => "mini-swe-agent",
            PresetKind::Aider => "aider",
        }
    }

    pub fn from_name(name: &str) -> Option<PresetKind> {
        PresetKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The version used when the config names none (checked on these machines, see
    /// ENVIRONMENT.md "Real agent CLIs, offline").
    pub fn pinned_version(self) -> &'static str {
        match self {
            PresetKind::ClaudeCode => claude_code::PINNED_VERSION,
            PresetKind::Codex => codex::PINNED_VERSION,
            PresetKind::MiniSweAgent => mini_swe_agent::PINNED_VERSION,
            PresetKind::Aider => aider::PINNED_VERSION,
        }
    }

    /// Whether the agent has its own turn/step limit (`max_turns`).
    pub fn has_max_turns(self) -> bool {
        matches!(self, PresetKind::ClaudeCode | PresetKind::MiniSweAgent)
    }

    /// Where `arbiter agents install` fetches `version` from.
    pub fn source(self, version: &str) -> PackageSource {
        let (registry, package, version) = match self {
            PresetKind::ClaudeCode => {
                (Registry::Npm, claude_code::NPM_PACKAGE, version.to_string())
            }
            PresetKind::Codex => (
                Registry::Npm,
                codex::NPM_PACKAGE,
                format!("{version}-linux-x64"),
            ),
            PresetKind::MiniSweAgent => (
                Registry::Pypi,
                mini_swe_agent::PYPI_PACKAGE,
                version.to_string(),
            ),
            PresetKind::Aider => (Registry::Pypi, aider::PYPI_PACKAGE, version.to_string()),
        };
        PackageSource {
            registry,
            package: package.to_string(),
            version,
        }
    }

    /// The executable inside the cache entry (relative path).
    pub fn entry_point(self) -> &'static str {
        match self {
            PresetKind::ClaudeCode => claude_code::ENTRY_POINT,
            PresetKind::Codex => codex::ENTRY_POINT,
            PresetKind::MiniSweAgent => mini_swe_agent::ENTRY_POINT,
            PresetKind::Aider => aider::ENTRY_POINT,
        }
    }

    /// Container path of the cache entry.
    pub fn mount_point(self) -> String {
        super::cache::mount_point(self.name())
    }

    /// The adapter that reads this agent's end state.
    pub fn adapter(self) -> Adapter {
        match self {
            PresetKind::ClaudeCode => Adapter::ClaudeCode,
            PresetKind::Codex => Adapter::Codex,
            PresetKind::MiniSweAgent => Adapter::MiniSweAgent,
            PresetKind::Aider => Adapter::Aider,
        }
    }
}

/// Configuration shared by every preset (the agent entry in a job file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PresetAgent {
    /// Agent version (default: the kind's pinned version). Must be in the host cache
    /// (`arbiter agents install <kind>@<version>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The agent's own turn / step limit (Claude Code `--max-turns`, mini-swe-agent
    /// `agent.step_limit`); refused for agents that have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// Extra command-line flags, appended after the preset's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// More environment (may override the preset's switches); values may reference the
    /// harness's environment as `${NAME}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// User to run as (defaults to the task's `[agent] user`, then the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The model, a job `models:` entry reached through arbiter's gateway (required to run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<crate::gateway::AgentModel>,
    /// Per-trial limits on the model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::gateway::Budget>,
}

impl PresetAgent {
    /// The version to run.
    pub fn version_or_pinned(&self, kind: PresetKind) -> &str {
        self.version
            .as_deref()
            .unwrap_or_else(|| kind.pinned_version())
    }
}

/// How a preset reaches its model: plain inputs the harness fills from the model gateway
/// (SPEC §11). The token is the per-trial gateway token, used as the agent's API key.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelWiring {
    /// OpenAI-style base URL, ending in `/v1` (`http://127.0.0.1:PORT/v1`).
    pub openai_base_url: String,
    /// Anthropic-style base URL, without `/v1` (`http://127.0.0.1:PORT`).
    pub anthropic_base_url: String,
    /// The per-trial token (a secret: env only).
    pub token: String,
    /// Model name as the agent should request it (`claude-sonnet-4-5`, `gpt-5`).
    pub model: String,
}

/// What a preset's `plan` produces besides the generic parts (`Agent::plan_in` fills the rest).
#[derive(Debug, Clone, Default)]
pub(crate) struct PresetPlan {
    pub argv: Vec<String>,
    /// The preset's env before the config's `env` and variant overrides.
    pub env: BTreeMap<String, String>,
    /// Extra files (tar archives unpacked at `/`).
    pub uploads: Vec<super::Upload>,
    /// Container path of the agent's own trajectory file, when it writes one.
    pub trajectory_path: Option<String>,
}

/// Everything a preset needs to plan one trial.
pub(crate) struct PresetInput<'a> {
    pub config: &'a PresetAgent,
    pub instruction: &'a str,
    pub model: &'a ModelWiring,
}

/// Env keys a preset sets from the gateway wiring; a config may not replace them (real
/// credentials never enter a container).
pub const WIRED_ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_API_BASE",
    "OPENAI_BASE_URL",
    "CODEX_HOME",
];

/// Check a preset definition before anything starts. Fields are relative to the agent entry.
pub(crate) fn validate(kind: PresetKind, config: &PresetAgent) -> Result<(), AgentConfigError> {
    let err = |field: &str, message: String| AgentConfigError {
        field: field.to_string(),
        message,
    };
    if let Some(version) = &config.version {
        let ok = !version.is_empty()
            && !version.starts_with('.')
            && version
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'));
        if !ok {
            return Err(err(
                "version",
                format!("{version:?} is not a version (letters, digits, `.`, `-`, `_`, `+`)"),
            ));
        }
    }
    match config.max_turns {
        Some(_) if !kind.has_max_turns() => {
            return Err(err(
                "max_turns",
                format!(
                    "{} has no turn limit of its own; bound it with the task's agent timeout",
                    kind.name()
                ),
            ));
        }
        Some(0) => return Err(err("max_turns", "must be at least 1".to_string())),
        _ => {}
    }
    for key in config.env.keys() {
        if WIRED_ENV.contains(&key.as_str()) {
            return Err(err(
                &format!("env.{key}"),
                format!(
                    "set by arbiter for {}: the model is reached through arbiter's gateway with a per-trial token",
                    kind.name()
                ),
            ));
        }
    }
    let prefixed: BTreeMap<String, String> = config
        .env
        .iter()
        .map(|(k, v)| (format!("env.{k}"), v.clone()))
        .collect();
    resolve_env(&prefixed).map_err(|e| err(e.key(), e.reason()))?;
    Ok(())
}

/// What [`fill_plan`] needs.
pub(crate) struct FillInput<'a> {
    pub agent: &'a str,
    pub kind: PresetKind,
    pub config: &'a PresetAgent,
    pub task: &'a Task,
    pub overrides: &'a BTreeMap<String, String>,
    pub ctx: &'a PlanContext,
    pub timeout: std::time::Duration,
}

/// Fill `plan` for a preset: the run step, env (preset switches, then the config's `env`,
/// then variant overrides), uploads, the read-only mount of the cache entry, the adapter.
pub(crate) fn fill_plan(plan: &mut AgentPlan, input: FillInput<'_>) -> Result<(), AgentError> {
    let FillInput {
        agent,
        kind,
        config,
        task,
        overrides,
        ctx,
        timeout,
    } = input;
    let model = ctx.model.as_ref().ok_or_else(|| AgentError::NoModel {
        agent: agent.to_string(),
        kind: kind.name(),
    })?;
    let cache = match &ctx.cache {
        Some(cache) => cache.clone(),
        None => AgentCache::from_env()?,
    };
    let entry = cache.lookup(kind.name(), config.version_or_pinned(kind))?;
    let preset_input = PresetInput {
        config,
        instruction: &task.instruction,
        model,
    };
    let now = ctx.now_unix.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    });
    let preset = preset_plan(kind, &preset_input, now)?;
    let mut configured = config.env.clone();
    configured.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
    let resolved = resolve_env(&configured)?;
    let mut secrets = secret_values(&configured, &resolved);
    secrets.push(model.token.clone());
    let mut env = preset.env;
    env.extend(resolved);
    secrets.extend(
        env.iter()
            .filter(|(k, v)| crate::agent::is_secret_key(k) && v.len() >= 4)
            .map(|(_, v)| v.clone()),
    );
    secrets.sort();
    secrets.dedup();
    plan.env = env.into_iter().collect();
    plan.secrets = secrets;
    plan.run = Some(Step {
        argv: preset.argv,
        timeout,
        user: config.user.clone().or_else(|| task.agent.user.clone()),
    });
    plan.uploads = preset.uploads;
    plan.ro_mounts = vec![(entry.dir, kind.mount_point())];
    plan.trajectory_path = preset.trajectory_path;
    plan.adapter = Some(kind.adapter());
    Ok(())
}

/// The preset's own part of a plan (`now`: Unix seconds, for the files aider needs fresh).
fn preset_plan(
    kind: PresetKind,
    input: &PresetInput<'_>,
    now: u64,
) -> Result<PresetPlan, AgentError> {
    match kind {
        PresetKind::ClaudeCode => Ok(claude_code::plan(input)),
        PresetKind::Codex => codex::plan(input),
        PresetKind::MiniSweAgent => mini_swe_agent::plan(input),
        PresetKind::Aider => aider::plan(input, now),
    }
}

/// Reads an agent's native end state as a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Adapter {
    ClaudeCode,
    Codex,
    MiniSweAgent,
    Aider,
}

/// What an adapter needs besides the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdapterReads {
    /// The agent's stdout (`agent/stdout.log`), and stderr.
    Output,
    /// A file the agent wrote in the container (under `/logs/agent/`).
    File(String),
}

/// The end state of one agent run, as the collect phase has it.
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentEnd<'a> {
    /// `None` when the process did not exit by itself (timeout, kill).
    pub exit_code: Option<i64>,
    pub stdout: &'a [u8],
    /// Some stdout was dropped by the log cap.
    pub stdout_truncated: bool,
    pub stderr: &'a [u8],
    /// The bytes of [`AdapterReads::File`], when the agent wrote it.
    pub file: Option<&'a [u8]>,
}

impl AgentEnd<'_> {
    /// `partial` when the log cap cut stdout (the adapter read it), else `complete`.
    pub(crate) fn stdout_fidelity(&self) -> Fidelity {
        if self.stdout_truncated {
            Fidelity::Partial
        } else {
            Fidelity::Complete
        }
    }

    /// What an adapter reading stdout says when `event` never came: `invalid` when the log
    /// cap may have cut it, else no claim (`missing`).
    pub(crate) fn stdout_without(&self, event: &str) -> Result<Option<NativeOutcome>, String> {
        if self.stdout_truncated {
            return Err(format!("stdout was cut by the log cap before {event}"));
        }
        Ok(None)
    }
}

impl Adapter {
    pub fn reads(self) -> AdapterReads {
        match self {
            Adapter::MiniSweAgent => AdapterReads::File(mini_swe_agent::TRAJECTORY_PATH.into()),
            Adapter::ClaudeCode | Adapter::Codex | Adapter::Aider => AdapterReads::Output,
        }
    }

    /// The claim the agent's end state supports (`source = "adapter"`), or `missing` /
    /// `invalid` when it supports none. Pure: bytes in, claim out.
    pub fn claim(self, end: &AgentEnd<'_>) -> Claim {
        let outcome = match self {
            Adapter::ClaudeCode => claude_code::read_end(end),
            Adapter::Codex => codex::read_end(end),
            Adapter::MiniSweAgent => mini_swe_agent::read_end(end),
            Adapter::Aider => aider::read_end(end),
        };
        match outcome {
            Ok(Some(native)) => budget_refused(native, end).into_claim(self, end.exit_code),
            Ok(None) => Claim::missing(),
            Err(why) => Claim {
                status: ClaimStatus::Invalid,
                source: Some(ClaimSource::Adapter),
                error: Some(why),
                ..Claim::missing()
            },
        }
    }

    fn name(self) -> &'static str {
        match self {
            Adapter::ClaudeCode => "claude-code",
            Adapter::Codex => "codex",
            Adapter::MiniSweAgent => "mini-swe-agent",
            Adapter::Aider => "aider",
        }
    }
}

/// What the gateway answers once a trial's `budget:` is used up (server.rs); an agent prints
/// it as its model error.
pub(crate) const BUDGET_REFUSAL: &str = "this trial's model budget is used up";

/// An agent whose model calls the gateway refused for its budget stopped for that reason,
/// whatever its own end state says (Claude Code calls it an API error, aider "completes" its
/// reply): the claim becomes `task_failed` with `failure.error_code = "budget_exhausted"`
/// (stage `model`), the native facts kept.
fn budget_refused(mut native: NativeOutcome, end: &AgentEnd<'_>) -> NativeOutcome {
    // Whitespace-insensitive: aider wraps long error lines.
    let says = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .contains(BUDGET_REFUSAL)
    };
    if says(end.stdout) || says(end.stderr) || end.file.is_some_and(says) {
        native.semantic = Semantic::TaskFailed;
        native.failure = Some(Failure {
            stage: "model",
            error_code: "budget_exhausted".to_string(),
            error_type: None,
        });
    }
    native
}

/// `semantic_status` values of `aworld.run.outcome.v1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Semantic {
    Succeeded,
    TaskFailed,
    InfrastructureFailed,
    Cancelled,
}

impl Semantic {
    fn as_str(self) -> &'static str {
        match self {
            Semantic::Succeeded => "succeeded",
            Semantic::TaskFailed => "task_failed",
            Semantic::InfrastructureFailed => "infrastructure_failed",
            Semantic::Cancelled => "cancelled",
        }
    }
}

/// `trajectory_fidelity` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fidelity {
    Complete,
    Partial,
}

impl Fidelity {
    fn as_str(self) -> &'static str {
        match self {
            Fidelity::Complete => "complete",
            Fidelity::Partial => "partial",
        }
    }
}

/// Why an agent says it failed (`failure` of the outcome record).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    pub stage: &'static str,
    pub error_code: String,
    pub error_type: Option<String>,
}

impl Failure {
    /// The agent failed by itself (stage `agent`), for the reason `code`.
    pub(crate) fn agent(code: &str) -> Failure {
        Failure {
            stage: "agent",
            error_code: code.to_string(),
            error_type: None,
        }
    }

    /// The model endpoint failed, not the agent (stage `model`, `model_api_error`).
    pub(crate) fn model_api(error_type: Option<String>) -> Failure {
        Failure {
            stage: "model",
            error_code: "model_api_error".to_string(),
            error_type,
        }
    }
}

/// What an adapter read from a native end state, before it becomes an outcome record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NativeOutcome {
    pub semantic: Semantic,
    pub fidelity: Fidelity,
    pub llm_calls: Option<u64>,
    pub tool_calls: Option<u64>,
    pub failure: Option<Failure>,
    /// The agent's final answer, kept for the audit.
    pub final_answer: Option<String>,
    /// Where the facts came from (`stdout result event`, `trajectory info.exit_status`).
    pub evidence: &'static str,
    /// The native facts the mapping used, verbatim.
    pub native: Value,
}

impl NativeOutcome {
    fn into_claim(self, adapter: Adapter, exit_code: Option<i64>) -> Claim {
        let mut record = json!({
            "schema_version": OUTCOME_SCHEMA,
            "semantic_status": self.semantic.as_str(),
            "process_exit_code": exit_code,
            "trajectory_fidelity": self.fidelity.as_str(),
            "llm_call_count": self.llm_calls,
            "tool_call_count": self.tool_calls,
            "action_count": self.tool_calls,
            "last_successful_checkpoint": null,
            "adapter": {
                "agent": adapter.name(),
                "evidence": self.evidence,
                "native": self.native,
            },
        });
        if let Some(failure) = &self.failure {
            let mut f = json!({ "stage": failure.stage, "error_code": failure.error_code });
            if let Some(t) = &failure.error_type {
                f["error_type"] = json!(t);
            }
            record["failure"] = f;
        }
        if let Some(answer) = &self.final_answer {
            record["final_answer"] = json!(answer);
        }
        Claim {
            status: ClaimStatus::Present,
            source: Some(ClaimSource::Adapter),
            semantic_status: Some(self.semantic.as_str().to_string()),
            record: Some(record),
            ..Claim::missing()
        }
    }
}

/// Non-empty lines of `bytes` parsed as JSON objects; lines that are not JSON are skipped
/// (agents print the odd warning between events).
pub(crate) fn json_lines(bytes: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect()
}

/// A tar archive of `(path, content, mode)` regular files and `(path, None, mode)` dirs with
/// the given modification time (the generic helper writes mtime 0, which some agents read as
/// "stale cache").
pub(crate) fn tar_with_mtime(
    entries: &[(&str, Option<&[u8]>, u32)],
    mtime: u64,
) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content, mode) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(*mode);
        header.set_mtime(mtime);
        header.set_uid(0);
        header.set_gid(0);
        match content {
            Some(bytes) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(bytes.len() as u64);
                builder.append_data(&mut header, path, *bytes)?;
            }
            None => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, path, std::io::empty())?;
            }
        }
    }
    builder.into_inner()
}

/// A preset's env from `(key, value)` pairs.
pub(crate) fn env_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Owned argv pieces.
pub(crate) fn args(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// A preset's files (entries as [`tar_with_mtime`] takes them) as one archive unpacked at
/// `/`; `what` names it in an error.
pub(crate) fn root_upload(
    entries: &[(&str, Option<&[u8]>, u32)],
    mtime: u64,
    what: &str,
) -> Result<super::Upload, AgentError> {
    let tar = tar_with_mtime(entries, mtime).map_err(|source| AgentError::Pack {
        path: what.into(),
        source,
    })?;
    Ok(super::Upload {
        dest: "/".to_string(),
        tar,
    })
}

/// Exceptions of litellm (the model client of aider and mini-swe-agent, printed as
/// `litellm.<Name>: …`) that mean the model endpoint failed, not the agent.
pub(crate) const LITELLM_ENDPOINT_ERRORS: &[&str] = &[
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "RateLimitError",
    "APIConnectionError",
    "APIError",
    "APIResponseValidationError",
    "InternalServerError",
    "ServiceUnavailableError",
    "BadGatewayError",
    "Timeout",
    "APITimeoutError",
    "BudgetExceededError",
];

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub fn wiring() -> ModelWiring {
        ModelWiring {
            openai_base_url: "http://127.0.0.1:4000/v1".into(),
            anthropic_base_url: "http://127.0.0.1:4000".into(),
            token: "arb-trial-token-123".into(),
            model: "scripted-model".into(),
        }
    }

    pub fn fixture(rel: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/agents")
            .join(rel);
        std::fs::read(&path).unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()))
    }

    pub fn semantic(claim: &Claim) -> &str {
        claim.semantic_status.as_deref().unwrap_or("<none>")
    }

    /// The claim `adapter` reads from fixture `tests/fixtures/agents/{dir}/{file}` as stdout.
    pub fn claim_of(adapter: Adapter, dir: &str, file: &str, exit: Option<i64>) -> Claim {
        let stdout = fixture(&format!("{dir}/{file}"));
        adapter.claim(&AgentEnd {
            exit_code: exit,
            stdout: &stdout,
            ..AgentEnd::default()
        })
    }

    /// `kind`'s own plan for `instruction` with [`wiring`], at Unix time 1,800,000,000.
    pub fn plan(kind: PresetKind, config: &PresetAgent, instruction: &str) -> PresetPlan {
        let model = wiring();
        let input = PresetInput {
            config,
            instruction,
            model: &model,
        };
        preset_plan(kind, &input, 1_800_000_000).expect("plan")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_their_names_and_pins() {
        for kind in PresetKind::ALL {
            assert_eq!(PresetKind::from_name(kind.name()), Some(kind));
            assert!(!kind.pinned_version().is_empty());
        }
        assert_eq!(PresetKind::ClaudeCode.pinned_version(), "2.1.332");
        assert_eq!(PresetKind::Codex.pinned_version(), "0.171.0");
        assert_eq!(PresetKind::MiniSweAgent.pinned_version(), "2.4.6");
        assert_eq!(PresetKind::Aider.pinned_version(), "0.86.2");
        assert_eq!(PresetKind::from_name("claude"), None);
    }

    #[test]
    fn sources_follow_the_registries() {
        let codex = PresetKind::Codex.source("0.171.0");
        assert_eq!(codex.registry, Registry::Npm);
        assert_eq!(codex.package, "@openai/codex");
        assert_eq!(codex.version, "0.171.0-linux-x64");
        let cc = PresetKind::ClaudeCode.source("2.1.332");
        assert_eq!(cc.package, "@anthropic-ai/claude-code-linux-x64");
        assert_eq!(cc.version, "2.1.332");
        assert_eq!(PresetKind::Aider.source("0.86.2").package, "aider-chat");
        assert_eq!(
            PresetKind::MiniSweAgent.source("2.4.6").registry,
            Registry::Pypi
        );
    }

    #[test]
    fn a_budget_refusal_is_a_typed_task_failure_whatever_the_agent_says() {
        // Claude Code calls the gateway's 400 an API error; aider "completes" its reply.
        for (adapter, dir, fixture) in [
            (Adapter::ClaudeCode, "claude-code", "stream-budget.jsonl"),
            (Adapter::Aider, "aider", "stdout-budget.txt"),
        ] {
            let claim = test_support::claim_of(adapter, dir, fixture, Some(0));
            assert_eq!(test_support::semantic(&claim), "task_failed", "{fixture}");
            let record = claim.record.expect("record");
            assert_eq!(
                record["failure"]["error_code"], "budget_exhausted",
                "{fixture}"
            );
            assert_eq!(record["failure"]["stage"], "model", "{fixture}");
        }
        // Without the refusal the same adapter reads the native end state.
        let claim = test_support::claim_of(
            Adapter::ClaudeCode,
            "claude-code",
            "stream-success.jsonl",
            Some(0),
        );
        assert_eq!(test_support::semantic(&claim), "succeeded");
    }

    #[test]
    fn json_lines_skips_noise() {
        let got = json_lines(b"warning: x\n{\"type\":\"a\"}\n\n{broken\n[1]\n{\"type\":\"b\"}\n");
        let types: Vec<&str> = got.iter().filter_map(|v| v["type"].as_str()).collect();
        assert_eq!(types, ["a", "b"]);
    }

    #[test]
    fn claims_are_outcome_records_from_the_adapter() {
        let native = NativeOutcome {
            semantic: Semantic::TaskFailed,
            fidelity: Fidelity::Complete,
            llm_calls: Some(3),
            tool_calls: Some(2),
            failure: Some(Failure {
                stage: "agent",
                error_code: "max_turns".into(),
                error_type: None,
            }),
            final_answer: Some("gave up".into()),
            evidence: "test",
            native: json!({"k": 1}),
        };
        let claim = native.into_claim(Adapter::ClaudeCode, Some(1));
        assert_eq!(claim.status, ClaimStatus::Present);
        assert_eq!(claim.source, Some(ClaimSource::Adapter));
        assert_eq!(claim.semantic_status.as_deref(), Some("task_failed"));
        let record = claim.record.expect("record");
        // The record parses as an outcome.v1 record through the ordinary path too.
        let reparsed = crate::outcome::collect_claim(Some(record.to_string().as_bytes()), b"");
        assert_eq!(reparsed.status, ClaimStatus::Present);
        assert_eq!(record["failure"]["error_code"], "max_turns");
        assert_eq!(record["final_answer"], "gave up");
        assert_eq!(record["process_exit_code"], 1);
        assert_eq!(record["adapter"]["agent"], "claude-code");
    }
}

#[cfg(test)]
mod agent_tests {
    use super::test_support::wiring;
    use super::*;
    use crate::agent::{Agent, AgentKind};

    fn agent(yaml: &str) -> Agent {
        serde_yaml::from_str(yaml).expect("parses")
    }

    fn task() -> Task {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks/quick");
        crate::task::load(&dir).expect("task loads")
    }

    /// A cache with a fake (but complete) entry for `kind` at its pinned version.
    fn cache_with(kind: PresetKind) -> (tempfile::TempDir, AgentCache) {
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = AgentCache::at(tmp.path());
        let version = kind.pinned_version();
        let staging = cache.staging(kind.name(), version).expect("staging");
        let entry = staging.path().join(kind.entry_point());
        std::fs::create_dir_all(entry.parent().expect("parent")).expect("mkdir");
        std::fs::write(&entry, b"\x7fELF").expect("write");
        let source = crate::agent::cache::Source {
            registry: "test".into(),
            package: kind.name().into(),
            version: version.into(),
            integrity: None,
        };
        cache
            .commit(staging, source, kind.entry_point(), None)
            .expect("commit");
        (tmp, cache)
    }

    #[test]
    fn kinds_parse_kebab_case_with_their_fields() {
        let a = agent(
            "name: cc\nkind: claude-code\nversion: 2.1.300\nmax_turns: 40\nflags: [--x]\nenv: {A: b}\n",
        );
        let AgentKind::ClaudeCode(p) = &a.kind else {
            panic!("{a:?}")
        };
        assert_eq!(p.version.as_deref(), Some("2.1.300"));
        assert_eq!(p.max_turns, Some(40));
        for (kind, name) in [
            ("codex", PresetKind::Codex),
            ("mini-swe-agent", PresetKind::MiniSweAgent),
            ("aider", PresetKind::Aider),
        ] {
            let a = agent(&format!("name: n\nkind: {kind}\n"));
            assert_eq!(a.kind.preset().map(|(k, _)| k), Some(name));
            assert_eq!(
                a.kind
                    .preset()
                    .map(|(k, c)| c.version_or_pinned(k).to_string()),
                Some(name.pinned_version().to_string())
            );
        }
        let err =
            serde_yaml::from_str::<Agent>("name: n\nkind: codex\nmax_turn: 3\n").expect_err("typo");
        assert!(err.to_string().contains("max_turn"), "{err}");
        assert!(serde_yaml::from_str::<Agent>("name: n\nkind: claude_code\n").is_err());
    }

    #[test]
    fn validation_errors_name_the_field() {
        let cases = [
            (
                "kind: codex\nmax_turns: 5\n",
                "max_turns: codex has no turn limit of its own; bound it with the task's agent timeout",
            ),
            (
                "kind: aider\nmax_turns: 5\n",
                "max_turns: aider has no turn limit of its own; bound it with the task's agent timeout",
            ),
            (
                "kind: claude-code\nmax_turns: 0\n",
                "max_turns: must be at least 1",
            ),
            (
                "kind: mini-swe-agent\nversion: ../x\n",
                "version: \"../x\" is not a version (letters, digits, `.`, `-`, `_`, `+`)",
            ),
            (
                "kind: claude-code\nenv: {ANTHROPIC_API_KEY: '${REAL_KEY}'}\n",
                "env.ANTHROPIC_API_KEY: set by arbiter for claude-code: the model is reached through arbiter's gateway with a per-trial token",
            ),
            (
                "kind: aider\nenv: {X: '${ARBITER_TEST_SURELY_UNSET_VAR}'}\n",
                "env.X: ${ARBITER_TEST_SURELY_UNSET_VAR} is not set in arbiter's environment",
            ),
        ];
        for (yaml, expected) in cases {
            let a = agent(&format!("name: n\n{yaml}"));
            let err = a.validate().expect_err(yaml);
            assert_eq!(err.to_string(), expected, "{yaml}");
        }
        agent("name: n\nkind: claude-code\nmax_turns: 3\nversion: 2.1.332\n")
            .validate()
            .expect("valid");
    }

    #[test]
    fn a_missing_cache_entry_is_a_one_line_config_error() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = AgentCache::at(tmp.path());
        let err = agent("name: cc\nkind: claude-code\n")
            .check_installed(&cache)
            .expect_err("not installed");
        assert_eq!(err.field, "version");
        assert_eq!(
            err.message,
            format!(
                "claude-code 2.1.332 is not installed in the agent cache ({}/claude-code/2.1.332); run: arbiter agents install claude-code@2.1.332",
                tmp.path().display()
            )
        );
        assert!(!err.to_string().contains('\n'));
        Agent::builtin("nop")
            .expect("nop")
            .check_installed(&cache)
            .expect("nothing to install");
        let (_tmp, cache) = cache_with(PresetKind::ClaudeCode);
        agent("name: cc\nkind: claude-code\n")
            .check_installed(&cache)
            .expect("installed");
    }

    #[test]
    fn plans_mount_the_cache_read_only_and_keep_the_token_out_of_argv() {
        let task = task();
        let overrides = BTreeMap::from([("VARIANT_FLAG".to_string(), "on".to_string())]);
        for kind in PresetKind::ALL {
            let (_tmp, cache) = cache_with(kind);
            let a = agent(&format!(
                "name: a\nkind: {}\nenv: {{EXTRA: x, DISABLE_TELEMETRY: '0'}}\n",
                kind.name()
            ));
            let ctx = PlanContext {
                model: Some(wiring()),
                cache: Some(cache.clone()),
                now_unix: Some(1_800_000_000),
            };
            let plan = a.plan_in(&task, &overrides, &ctx).expect("plans");
            let run = plan.run.as_ref().expect("run step");
            let token = &wiring().token;
            assert!(
                run.argv.iter().all(|arg| !arg.contains(token.as_str())),
                "{kind:?}: token in argv"
            );
            assert!(plan.secrets.contains(token), "{kind:?}: token scrubbed");
            assert!(run.argv[0].starts_with(&kind.mount_point()));
            assert_eq!(
                plan.ro_mounts,
                [(
                    cache.entry_dir(kind.name(), kind.pinned_version()),
                    kind.mount_point()
                )]
            );
            assert_eq!(plan.adapter, Some(kind.adapter()));
            let env: BTreeMap<_, _> = plan.env.iter().cloned().collect();
            assert_eq!(env["EXTRA"], "x");
            assert_eq!(env["VARIANT_FLAG"], "on");
            assert_eq!(
                env["DISABLE_TELEMETRY"], "0",
                "config env wins over switches"
            );
            assert!(
                env.values().any(|v| v == token),
                "{kind:?}: the token reaches the agent through the env"
            );
            assert!(plan.install.is_none(), "nothing installed into the task");
            let upload_text: String = plan
                .uploads
                .iter()
                .map(|u| String::from_utf8_lossy(&u.tar).into_owned())
                .collect();
            assert!(
                !upload_text.contains(token.as_str()),
                "{kind:?}: token in an upload"
            );
        }
    }

    #[test]
    fn a_preset_without_model_or_cache_entry_fails_to_plan() {
        let task = task();
        let a = agent("name: cc\nkind: claude-code\n");
        let err = a.plan(&task, &BTreeMap::new()).expect_err("no model");
        assert_eq!(
            err.to_string(),
            "agent cc (kind claude-code) needs a model: presets reach their model through arbiter's gateway, and none was wired in for this trial"
        );
        let tmp = tempfile::tempdir().expect("tmp");
        let ctx = PlanContext {
            model: Some(wiring()),
            cache: Some(AgentCache::at(tmp.path())),
            now_unix: None,
        };
        let err = a
            .plan_in(&task, &BTreeMap::new(), &ctx)
            .expect_err("no entry");
        assert!(
            err.to_string()
                .contains("run: arbiter agents install claude-code@2.1.332")
        );
    }

    #[test]
    fn redaction_covers_preset_env() {
        let a = agent("name: a\nkind: codex\nenv: {MY_TOKEN: literal-secret, MODE: fast}\n");
        let r = a.redacted();
        let AgentKind::Codex(p) = &r.kind else {
            panic!("{r:?}")
        };
        assert_eq!(p.env["MY_TOKEN"], "***");
        assert_eq!(p.env["MODE"], "fast");
    }
}
