//! Harbor multi-step tasks: each `[[steps]]` entry's files under
//! `steps/<name>/`, and Harbor's fallbacks from the step's tables to the task's.
//!
//! Layout (Harbor's `TaskPaths`): `steps/<name>/instruction.md` (required),
//! `steps/<name>/tests/` (optional; its `test.sh`, else the task's
//! `tests/test.sh`, is the step's verifier), `steps/<name>/solution/solve.sh`
//! (optional; the oracle falls back to the task's `solution/`),
//! `steps/<name>/workdir/` (optional; copied into the working directory before
//! the step, `workdir/setup.sh` run as its setup hook).

use std::path::Path;

use super::config::{EnvConfig, StepConfig, only_for_allowlist};
use super::error::{TaskError, quote};
use super::files::{missing, read_prompt, separate_source};
use super::model::{
    AgentSection, DEFAULT_VERIFIER_TIMEOUT_SEC, ImageSource, NetworkMode, Step, VerifierMode,
    VerifierSection,
};

type Result<T> = std::result::Result<T, TaskError>;

/// What a step falls back to: the task's resolved tables.
pub(crate) struct TaskLevel<'a> {
    pub agent: &'a AgentSection,
    /// The task's agent-phase network and hosts.
    pub network: (NetworkMode, &'a [String]),
    /// The task's resolved `[verifier]` (its `environment` set when separate).
    pub verifier: &'a VerifierSection,
    /// `[verifier.environment]` as written.
    pub verifier_environment: Option<&'a EnvConfig>,
    pub environment: &'a EnvConfig,
    pub source: &'a ImageSource,
    /// `<task>/tests`, canonical.
    pub tests_dir: &'a Path,
}

/// Checks every step's files and resolves its tables. `shown` is the task
/// directory as the user spelled it (for messages), `root` the canonical one.
pub(crate) fn load(
    shown: &Path,
    root: &Path,
    configs: Vec<StepConfig>,
    task: &TaskLevel<'_>,
) -> Result<Vec<Step>> {
    configs
        .into_iter()
        .map(|cfg| load_step(shown, root, cfg, task))
        .collect()
}

fn load_step(shown: &Path, root: &Path, cfg: StepConfig, task: &TaskLevel<'_>) -> Result<Step> {
    let name = cfg.name;
    let shown_dir = shown.join("steps").join(&name);
    let dir = root.join("steps").join(&name);
    let instruction = read_prompt(
        &shown_dir.join("instruction.md"),
        &format!(
            "step {} of task.toml needs the prompt given to the agent for that step",
            quote(&name)
        ),
    )?;

    let own_tests = dir.join("tests");
    let test_script = if own_tests.join("test.sh").is_file() {
        own_tests.join("test.sh")
    } else if task.tests_dir.join("test.sh").is_file() {
        task.tests_dir.join("test.sh")
    } else {
        return Err(missing(
            &shown_dir.join("tests").join("test.sh"),
            &format!(
                "step {} has no verifier entry point; add it, or tests/test.sh for every step",
                quote(&name)
            ),
        ));
    };
    let solution_dir = if dir.join("solution").is_dir() {
        if !dir.join("solution/solve.sh").is_file() {
            return Err(missing(
                &shown_dir.join("solution").join("solve.sh"),
                &format!("steps/{name}/solution/ exists, so the oracle agent needs it"),
            ));
        }
        Some(dir.join("solution"))
    } else {
        None
    };
    let workdir_dir = dir.join("workdir");
    let setup_script = workdir_dir.join("setup.sh");

    let agent = AgentSection {
        timeout_sec: cfg.agent_timeout_sec.unwrap_or(task.agent.timeout_sec),
        user: cfg.agent_user.or_else(|| task.agent.user.clone()),
    };
    let (network, allowed_hosts) = cfg
        .agent_network
        .unwrap_or_else(|| (task.network.0, task.network.1.to_vec()));

    let raw = cfg.verifier;
    let mode = raw.mode.unwrap_or(task.verifier.mode);
    let mut env = task.verifier.env.clone();
    env.extend(raw.env);
    let (verifier_network, verifier_hosts) = match raw.network {
        Some(policy) => policy,
        None => match raw.environment.as_ref().and_then(|e| e.network) {
            Some(n) => (
                n,
                raw.environment
                    .as_ref()
                    .map(|e| e.allowed_hosts.clone())
                    .unwrap_or_default(),
            ),
            None => (task.verifier.network, task.verifier.allowed_hosts.clone()),
        },
    };
    let verifier_hosts = only_for_allowlist(verifier_network, verifier_hosts);
    let verifier_environment = (mode == VerifierMode::Separate).then(|| {
        // Harbor: step environment > task [verifier.environment] > a copy of
        // [environment]; images: docker_image > steps/<name>/tests/Dockerfile
        // > tests/Dockerfile > the task's own.
        let env_cfg = raw
            .environment
            .clone()
            .or_else(|| task.verifier_environment.cloned())
            .unwrap_or_else(|| EnvConfig {
                docker_image: None,
                ..task.environment.clone()
            });
        let source = separate_source(&env_cfg, &[&own_tests, task.tests_dir], task.source);
        env_cfg.into_spec(source, verifier_network, verifier_hosts.clone())
    });
    let verifier = VerifierSection {
        timeout_sec: raw.timeout_sec.unwrap_or(DEFAULT_VERIFIER_TIMEOUT_SEC),
        mode,
        env,
        network: verifier_network,
        allowed_hosts: verifier_hosts,
        user: raw.user.or_else(|| task.verifier.user.clone()),
        environment: verifier_environment,
        integrity: raw.integrity.unwrap_or(task.verifier.integrity),
        protect: if raw.protect.is_empty() {
            task.verifier.protect.clone()
        } else {
            raw.protect
        },
    };

    Ok(Step {
        name,
        instruction,
        agent,
        network,
        allowed_hosts: only_for_allowlist(network, allowed_hosts),
        verifier,
        tests_dir: own_tests.is_dir().then_some(own_tests),
        test_script,
        solution_dir,
        setup_script: setup_script.is_file().then_some(setup_script),
        workdir_dir: workdir_dir.is_dir().then_some(workdir_dir),
        min_reward: cfg.min_reward,
        healthcheck: cfg.healthcheck,
        artifacts: cfg.artifacts,
        dir,
    })
}
