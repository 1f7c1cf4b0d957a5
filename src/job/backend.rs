//! What a job needs that the Kubernetes backend cannot give yet (SPEC §14, "nothing silently
//! downgraded"): found before any trial, reported as one line naming the task (or agent) and
//! the feature: network `host`, and network `none` (or `allowlist`, which is `none` plus the
//! egress proxy) in a namespace that admits no NET_ADMIN init container.

use crate::task::{NetworkMode, Task};

use super::config::field;
use super::{ConfigError, JobSpec};

/// The first need of the job the Kubernetes backend cannot meet, as a config error.
/// `no_network`: whether the namespace admits arbiter's network-`none` pods.
pub(crate) fn refuse_on_kubernetes(spec: &JobSpec, no_network: bool) -> Result<(), ConfigError> {
    for task in &spec.tasks {
        for agent in &spec.agents {
            let agent_network = agent.network.map_or(task.environment.network, |n| n.mode());
            for (phase, mode) in [
                ("agent", agent_network),
                ("verifier", task.verifier.network),
            ] {
                // `allowlist` is network `none` with the egress proxy on the pod's loopback
                // (the backend's relay): it needs what `none` needs.
                let feature = match mode {
                    NetworkMode::Host => Some(format!("the {phase} phase's network host")),
                    NetworkMode::NoNetwork | NetworkMode::Allowlist if !no_network => {
                        let name = if mode == NetworkMode::Allowlist {
                            "allowlist (network none and the egress proxy)"
                        } else {
                            "none"
                        };
                        Some(format!(
                            "the {phase} phase's network {name} (the namespace does not admit a NET_ADMIN init container; Pod Security baseline forbids it)"
                        ))
                    }
                    _ => None,
                };
                if let Some(feature) = feature {
                    return Err(refusal(task, &feature));
                }
            }
        }
    }
    Ok(())
}

fn refusal(task: &Task, feature: &str) -> ConfigError {
    field(
        task.dir.join("task.toml").display().to_string(),
        format!("task {}", task.name),
        format!("{feature} is not supported on Kubernetes yet; run it with --backend docker"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{BackendKind, RunArgs};

    /// The job of one task (`extra` appended to its task.toml) under `agents` (job.yaml).
    fn spec(extra_toml: &str, agents: &str) -> (tempfile::TempDir, JobSpec) {
        let root = tempfile::tempdir().expect("tmp");
        let task = crate::testing::task_dir(root.path(), "hello", extra_toml);
        let config = root.path().join("job.yaml");
        std::fs::write(
            &config,
            format!(
                "tasks: [{}]\nagents: {agents}\nbackend: {{kind: kubernetes, namespace: evals}}\n",
                task.display()
            ),
        )
        .expect("job.yaml");
        let args = RunArgs {
            config: Some(config),
            job_dir: Some(root.path().join("job")),
            ..RunArgs::default()
        };
        let spec = crate::job::resolve(&args).expect("resolves");
        (root, spec)
    }

    #[test]
    fn what_kubernetes_cannot_do_yet_is_refused_naming_task_and_feature() {
        let offline = "network_mode = \"no-network\"\n";
        let (_root, ok) = spec(offline, "[oracle, nop]");
        assert_eq!(ok.backend.kind, BackendKind::Kubernetes);
        assert_eq!(ok.backend.namespace.as_deref(), Some("evals"));
        assert!(refuse_on_kubernetes(&ok, true).is_ok());
        // Host directories reach a pod (mounts.rs).
        let (_root, mounted) = spec(
            offline,
            "[{name: cmd, kind: command, run: [\"true\"], mounts: [{host: /tmp, container: /m}]}]",
        );
        assert!(refuse_on_kubernetes(&mounted, true).is_ok());
        // The model gateway and the egress proxy reach a pod through the loopback relay.
        let modelled = "[{name: m, kind: command, run: [\"true\"], model: {provider: p, name: x}}]\nmodels: [{name: p, api: openai, base_url: 'http://127.0.0.1:9/v1'}]";
        let (_root, ok) = spec(offline, modelled);
        assert!(refuse_on_kubernetes(&ok, true).is_ok());
        let allowlist = "network_mode = \"allowlist\"\nallowed_hosts = [\"example.com\"]\n";
        let (_root, ok) = spec(allowlist, "[oracle]");
        assert!(refuse_on_kubernetes(&ok, true).is_ok());
        let err = refuse_on_kubernetes(&ok, false).unwrap_err().to_string();
        assert!(err.contains("network allowlist (network none"), "{err}");
        // Frozen filesystems and the change set work (changes.rs, frozen.rs).
        for works in [
            "network_mode = \"no-network\"\n[verifier]\nenvironment_mode = \"clean\"\n",
            "network_mode = \"no-network\"\n[verifier]\nintegrity = \"enforce\"\n",
            "network_mode = \"no-network\"\n[verifier]\nenvironment_mode = \"separate\"\n",
        ] {
            let (_root, spec) = spec(works, "[oracle]");
            assert!(refuse_on_kubernetes(&spec, true).is_ok(), "{works}");
        }
        let cases: &[(&str, &str, bool, &str)] = &[
            (
                offline,
                "[oracle]",
                false,
                "network none (the namespace does not admit",
            ),
            (
                "network_mode = \"host\"\n",
                "[oracle]",
                true,
                "network host",
            ),
        ];
        for (toml, agents, no_network, want) in cases {
            let (_root, spec) = spec(toml, agents);
            let err = refuse_on_kubernetes(&spec, *no_network)
                .expect_err(want)
                .to_string();
            assert!(err.contains(want), "{want}: {err}");
            assert!(err.contains("not supported on Kubernetes yet"), "{err}");
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }
}
