//! What an agent needs in a task's container ([`Agent::plan_in`]) and the check of its
//! definition ([`Agent::validate`]): where the agent kinds' own modules (`presets/`,
//! `aworld.rs`) are asked, below the vocabulary in `agent/mod.rs` they share, so that the
//! kinds depend on the vocabulary and never the other way round.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

impl Agent {
    /// What the agent needs in `task`'s container. `overrides` are variant env overrides.
    ///
    /// The env of every command run for the agent (install, pre-flight check, run) is layered,
    /// later layers winning key by key: the task's `[environment] env`, then for the oracle
    /// the task's `[solution] env`, then the agent's own env, then the variant's overrides.
    /// `${NAME}` references are resolved once, over the layered env.
    ///
    /// The agent-CLI presets need [`Agent::plan_in`] with a model and a cache.
    pub fn plan(
        &self,
        task: &Task,
        overrides: &BTreeMap<String, String>,
    ) -> Result<AgentPlan, AgentError> {
        self.plan_in(task, overrides, &PlanContext::default())
    }

    /// [`Agent::plan`] with the model wiring and agent cache the presets need.
    pub fn plan_in(
        &self,
        task: &Task,
        overrides: &BTreeMap<String, String>,
        ctx: &PlanContext,
    ) -> Result<AgentPlan, AgentError> {
        let timeout = Duration::from_secs_f64(task.agent.timeout_sec);
        let mut plan = AgentPlan {
            uploads: Vec::new(),
            install: None,
            run: None,
            env: Vec::new(),
            ro_mounts: Vec::new(),
            outcome_path: DEFAULT_OUTCOME_PATH.to_string(),
            control: None,
            deadline_env: None,
            cli_check: None,
            record_required: None,
            trajectory_path: None,
            harness_overrides: Vec::new(),
            secrets: Vec::new(),
            adapter: None,
        };
        // Harbor's `[environment] env` is the task container's, so the agent's layers go on top.
        let mut env = task.environment.env.clone();
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
                env.extend(task.solution_env.clone());
            }
            AgentKind::Command(cmd) => {
                let user = cmd.user.clone().or_else(|| task.agent.user.clone());
                if let Some(script) = &cmd.install {
                    plan.uploads.push(install_upload(script)?);
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
                env.extend(cmd.env.clone());
                plan.ro_mounts = cmd
                    .mounts
                    .iter()
                    .map(|m| (m.host.clone(), m.container.clone()))
                    .collect();
                plan.outcome_path = cmd.outcome_path.clone();
            }
            AgentKind::Aworld(aw) => {
                let user = aw.user.clone().or_else(|| task.agent.user.clone());
                if let Some(script) = &aw.install {
                    plan.uploads.push(install_upload(script)?);
                    plan.install = Some(Step {
                        argv: shell_script("/arbiter/install.sh"),
                        timeout: aw.install_timeout(),
                        user: Some("0".to_string()),
                    });
                }
                plan.run = Some(Step {
                    argv: aw.run_argv(task),
                    timeout,
                    user: user.clone(),
                });
                env.extend(aw.base_env(task)?);
                plan.ro_mounts = aw
                    .mounts
                    .iter()
                    .map(|m| (m.host.clone(), m.container.clone()))
                    .collect();
                plan.outcome_path = AWORLD_OUTCOME_PATH.to_string();
                plan.trajectory_path = Some(AWORLD_TRAJECTORY_PATH.to_string());
                plan.control = Some(ControlPlan {
                    container_path: CONTROL_ROOT.to_string(),
                    template: aw.control_template.clone(),
                });
                plan.deadline_env = Some(DEADLINE_ENV.to_string());
                plan.cli_check = aw.check_cli.then(|| aw.cli_check(task));
                plan.record_required = Some(aworld::missing_record_message());
                plan.harness_overrides = aw.harness_overrides(overrides);
            }
            AgentKind::ClaudeCode(config)
            | AgentKind::Codex(config)
            | AgentKind::MiniSweAgent(config)
            | AgentKind::Aider(config) => {
                let Some((kind, _)) = self.kind.preset() else {
                    unreachable!("preset kinds have a preset")
                };
                presets::fill_plan(
                    &mut plan,
                    presets::FillInput {
                        agent: &self.name,
                        kind,
                        config,
                        task,
                        overrides,
                        ctx,
                        timeout,
                    },
                )?;
            }
        }
        if self.kind.preset().is_some() {
            // A preset builds its own env (model wiring included); the task's env goes under it.
            let preset_env = std::mem::take(&mut plan.env);
            let mut merged = resolve_env(&task.environment.env)?;
            plan.secrets
                .extend(secret_values(&task.environment.env, &merged));
            merged.retain(|(k, _)| !preset_env.iter().any(|(p, _)| p == k));
            merged.extend(preset_env);
            plan.env = merged;
            return Ok(plan);
        }
        env.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let AgentKind::Aworld(_) = &self.kind {
            for fixed in ["AWORLD_CONTROL_ROOT", DEADLINE_ENV] {
                if let Some(value) = env.remove(fixed) {
                    tracing::warn!(
                        agent = self.name,
                        "{fixed}={value} ignored: arbiter sets it for every trial"
                    );
                }
            }
            env.insert("AWORLD_CONTROL_ROOT".to_string(), CONTROL_ROOT.to_string());
        }
        plan.env = resolve_env(&env)?;
        plan.secrets = secret_values(&env, &plan.env);
        Ok(plan)
    }

    /// Check a definition before any trial starts (paths exist, `${NAME}` references resolve).
    /// Fields are relative to the agent entry (`model.api_key`, `mounts[0].host`, …).
    pub fn validate(&self) -> Result<(), AgentConfigError> {
        if let Some((kind, config)) = self.kind.preset() {
            return presets::validate(kind, config);
        }
        let AgentKind::Aworld(aw) = &self.kind else {
            return Ok(());
        };
        let err = |field: String, message: String| AgentConfigError { field, message };
        if aw.binary.trim().is_empty() {
            return Err(err("binary".into(), "must not be empty".into()));
        }
        resolve_env(&aw.configured_env()).map_err(|e| err(e.key().to_string(), e.reason()))?;
        for (m, mount) in aw.mounts.iter().enumerate() {
            if !mount.host.exists() {
                return Err(err(
                    format!("mounts[{m}].host"),
                    format!("{} does not exist", mount.host.display()),
                ));
            }
            if !mount.container.starts_with('/') {
                return Err(err(
                    format!("mounts[{m}].container"),
                    "must be an absolute container path".into(),
                ));
            }
        }
        if let Some(template) = &aw.control_template
            && !template.is_dir()
        {
            return Err(err(
                "control_template".into(),
                format!("{} is not a directory", template.display()),
            ));
        }
        if !aw.install_timeout_sec.is_finite() || aw.install_timeout_sec <= 0.0 {
            return Err(err(
                "install_timeout_sec".into(),
                "must be a positive number of seconds".into(),
            ));
        }
        Ok(())
    }
}

fn install_upload(script: &str) -> Result<Upload, AgentError> {
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
    Ok(Upload {
        dest: "/".to_string(),
        tar,
    })
}
