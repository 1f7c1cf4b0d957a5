//! The verify phase: arbiter's own validation commands, then the task's verifier in a fresh
//! container from the snapshot (or, in live mode, in the agent's container).

use super::*;

impl Trial<'_> {
    /// Run the task's validation commands in containers from `image` (the agent's final
    /// filesystem), one after the other; a command that times out takes its container down with
    /// it (every process in it), and the next command gets a fresh one.
    pub(super) async fn validate<S: Sandbox>(&mut self, sb: &S, image: &str) -> Result<(), Infra> {
        let task = self.plan.task.clone();
        let Some(completion) = &task.completion else {
            return Ok(());
        };
        let dir = self.path("validation");
        std::fs::create_dir_all(&dir).map_err(infra(Phase::Collect))?;
        let spec = ContainerSpec {
            image: image.to_string(),
            name: None,
            env: Vec::new(),
            labels: self.labels("validation"),
            cpus: task.environment.cpus,
            memory_mb: task.environment.memory_mb,
            pids_limit: task.environment.pids_limit,
            network: Network::None,
            workdir: task.environment.workdir.clone(),
            ro_mounts: Vec::new(),
            rw_mounts: Vec::new(),
        };
        let mut container: Option<String> = None;
        for (i, command) in completion.validation.iter().enumerate() {
            let id = match &container {
                Some(id) => id.clone(),
                None => {
                    let id = sb.create(&spec).await.map_err(infra(Phase::Collect))?;
                    self.containers.push(id.clone());
                    sb.start(&id).await.map_err(infra(Phase::Collect))?;
                    container = Some(id.clone());
                    id
                }
            };
            let stem = format!("{:02}-{}", i + 1, safe_name(&command.id));
            let out_rel = format!("validation/{stem}.stdout.log");
            let err_rel = format!("validation/{stem}.stderr.log");
            let argv = command.exec_argv();
            let mut exec = self.exec_spec(
                argv.clone(),
                task.agent.user.clone(),
                command.timeout(),
                Some((&out_rel, &err_rel)),
            );
            if let Some(cwd) = &command.cwd {
                exec.workdir = Some(cwd.clone());
            }
            let out = sb.exec(&id, &exec).await.map_err(infra(Phase::Collect))?;
            let digest = |rel: &str| {
                let bytes = std::fs::read(self.path(rel)).unwrap_or_default();
                crate::digest::sha256_hex(&bytes)
            };
            self.rec.validation.push(Receipt {
                id: command.id.clone(),
                argv,
                exit_code: if out.timed_out { None } else { out.exit_code },
                seconds: round3(out.seconds),
                timed_out: out.timed_out,
                stdout_sha256: digest(&out_rel),
                stderr_sha256: digest(&err_rel),
                stdout_bytes: out.stdout_bytes,
                stderr_bytes: out.stderr_bytes,
            });
            if out.timed_out {
                // The sandbox killed the whole container at the deadline.
                sb.remove_container(&id)
                    .await
                    .map_err(infra(Phase::Collect))?;
                self.containers.retain(|c| c != &id);
                container = None;
            }
        }
        if let Some(id) = container {
            sb.remove_container(&id)
                .await
                .map_err(infra(Phase::Collect))?;
            self.containers.retain(|c| c != &id);
        }
        Ok(())
    }

    pub(super) async fn verify<S: Sandbox>(
        &mut self,
        sb: &S,
        agent_id: &str,
        snapshot: Option<&str>,
    ) -> Result<(), Infra> {
        let task = self.plan.task.clone();
        let mode = mode_name(task.verifier.mode);
        let id = match snapshot {
            Some(image) => {
                let spec = ContainerSpec {
                    image: image.to_string(),
                    name: None,
                    env: Vec::new(),
                    labels: self.labels("verifier"),
                    cpus: task.environment.cpus,
                    memory_mb: task.environment.memory_mb,
                    pids_limit: task.environment.pids_limit,
                    network: sandbox_network(task.verifier.network),
                    workdir: task.environment.workdir.clone(),
                    ro_mounts: Vec::new(),
                    rw_mounts: Vec::new(),
                };
                let id = sb.create(&spec).await.map_err(infra(Phase::Verify))?;
                self.containers.push(id.clone());
                sb.start(&id).await.map_err(infra(Phase::Verify))?;
                id
            }
            None => agent_id.to_string(),
        };
        let prep = vec![
            "sh".to_string(),
            "-c".to_string(),
            "rm -rf /tests /logs/verifier && mkdir -p /tests /logs/verifier && chmod 0777 /logs/verifier".to_string(),
        ];
        let prep_spec = self.exec_spec(prep, Some("0".to_string()), Duration::from_secs(60), None);
        let prepared = sb
            .exec(&id, &prep_spec)
            .await
            .map_err(infra(Phase::Verify))?;
        if prepared.exit_code != Some(0) {
            self.rec.verifier = VerifierOutcome {
                status: VerifierStatus::Error,
                mode: mode.to_string(),
                reward: None,
                exit_code: prepared.exit_code,
                detail: Some(
                    "could not prepare /tests and /logs/verifier in the agent's final filesystem"
                        .to_string(),
                ),
            };
            return Ok(());
        }
        let tests = dir_to_tar(&task.tests_dir, "tests").map_err(infra(Phase::Verify))?;
        sb.put_archive(&id, "/", tests)
            .await
            .map_err(infra(Phase::Verify))?;
        let timeout = Duration::from_secs_f64(task.verifier.timeout_sec)
            .mul_f64(self.plan.settings.verifier_timeout_multiplier);
        let mut spec = self.exec_spec(
            shell_script("/tests/test.sh"),
            None,
            timeout,
            Some(("verifier/stdout.log", "verifier/stderr.log")),
        );
        spec.env = resolve_env(&task.verifier.env).map_err(infra(Phase::Verify))?;
        let out = sb.exec(&id, &spec).await.map_err(infra(Phase::Verify))?;
        if out.timed_out {
            self.rec.verifier = VerifierOutcome {
                status: VerifierStatus::Error,
                mode: mode.to_string(),
                reward: None,
                exit_code: None,
                detail: Some(format!("verifier timed out after {}s", fmt_secs(timeout))),
            };
            return Ok(());
        }
        let logs = self.path("verifier/logs");
        if let FetchResult::Failed(why) = self
            .fetch(sb, &id, "/logs/verifier", &logs, VERIFIER_LOGS_LIMIT)
            .await?
        {
            tracing::warn!(trial = self.plan.id, "verifier logs not collected: {why}");
        }
        let read = |name: &str| -> Option<Vec<u8>> {
            let path = logs.join(name);
            let meta = std::fs::symlink_metadata(&path).ok()?;
            meta.is_file().then(|| read_capped(&path, OUTCOME_LIMIT))
        };
        let (json, txt) = (read("reward.json"), read("reward.txt"));
        for (name, bytes) in [("reward.json", &json), ("reward.txt", &txt)] {
            if let Some(bytes) = bytes {
                let _ = std::fs::write(self.path("verifier").join(name), bytes);
            }
        }
        self.rec.verifier = match parse_reward(json.as_deref(), txt.as_deref()) {
            Ok(reward) => {
                let passed = primary_value(&reward) >= self.plan.settings.pass_threshold;
                VerifierOutcome {
                    status: if passed {
                        VerifierStatus::Passed
                    } else {
                        VerifierStatus::Failed
                    },
                    mode: mode.to_string(),
                    reward: Some(reward),
                    exit_code: out.exit_code,
                    detail: None,
                }
            }
            Err(e) => VerifierOutcome {
                status: VerifierStatus::Error,
                mode: mode.to_string(),
                reward: None,
                exit_code: out.exit_code,
                detail: Some(format!(
                    "{e} (test.sh exited with {})",
                    code_words(out.exit_code)
                )),
            },
        };
        Ok(())
    }
}
