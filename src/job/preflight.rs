//! What a job needs of its backend, asked once before any trial starts (SPEC §14: nothing
//! silently downgraded): the backend's own readiness checks, the network of every phase of
//! every task, and GPUs. The backend answers in its own words ([`Sandbox::preflight`],
//! [`Sandbox::network_available`], [`Sandbox::gpus`]); this module names none of them, and
//! each refusal is one line naming the task and the field (exit 2, nothing started).

use crate::sandbox::{Availability, Network, Sandbox, SandboxError};

use super::{ConfigError, JobSpec, gpus, network};

/// Why a job cannot start on its backend.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// The backend is not ready for any job: one line per problem it found.
    #[error("{}", .0.join("\n"))]
    NotReady(Vec<String>),
    /// A task needs what this backend cannot give.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The backend could not be asked.
    #[error("{0}")]
    Sandbox(#[from] SandboxError),
}

/// Check the job against its backend before any trial starts.
pub(crate) async fn preflight<S: Sandbox + ?Sized>(
    spec: &JobSpec,
    sandbox: &S,
) -> Result<(), PreflightError> {
    let problems = sandbox.preflight().await;
    if !problems.is_empty() {
        return Err(PreflightError::NotReady(problems));
    }
    // Every network some phase needs, asked once each.
    let needs = network::phase_networks(&spec.tasks, &spec.agents, &spec.network);
    let mut answers: Vec<(Network, Availability)> = Vec::new();
    for need in &needs {
        if !answers.iter().any(|(n, _)| *n == need.network) {
            let answer = sandbox.network_available(need.network).await?;
            answers.push((need.network, answer));
        }
    }
    network::refuse_unavailable(&needs, |n| {
        answers
            .iter()
            .find(|(m, _)| *m == n)
            .map_or(Availability::Available, |(_, a)| a.clone())
    })?;
    if gpus::gpus_wanted(&spec.tasks) > 0 {
        let available = sandbox.gpus().await?;
        gpus::check_gpus(&spec.tasks, available)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::RunArgs;
    use crate::sandbox::FakeSandbox;

    /// The job of one task (`extra` appended to its task.toml) under `agents` (job.yaml).
    fn spec(extra_toml: &str, agents: &str) -> (tempfile::TempDir, JobSpec) {
        let root = tempfile::tempdir().expect("tmp");
        let task = crate::testing::task_dir(root.path(), "hello", extra_toml);
        let config = root.path().join("job.yaml");
        std::fs::write(
            &config,
            format!("tasks: [{}]\nagents: {agents}\n", task.display()),
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

    fn check(spec: &JobSpec, sandbox: &FakeSandbox) -> Result<(), String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(preflight(spec, sandbox))
            .map_err(|e| e.to_string())
    }

    /// A backend that gives neither `none` nor `host` (as a namespace under Pod Security
    /// baseline on Kubernetes).
    fn strict() -> FakeSandbox {
        let sb = FakeSandbox::new();
        sb.set_unavailable(Network::None, "no NET_ADMIN here; run it elsewhere");
        sb.set_unavailable(Network::Host, "no host network here");
        sb
    }

    #[test]
    fn what_the_backend_cannot_give_is_refused_in_its_words_naming_task_and_phase() {
        let offline = "network_mode = \"no-network\"\n";
        let (_root, job) = spec(offline, "[oracle, nop]");
        assert!(check(&job, &FakeSandbox::new()).is_ok());
        let err = check(&job, &strict()).expect_err("refused");
        assert!(err.contains("hello/task.toml"), "{err}");
        assert!(err.contains("environment.network_mode"), "{err}");
        assert!(
            err.contains("the agent phase needs network \"no-network\""),
            "{err}"
        );
        assert!(err.contains("no NET_ADMIN here; run it elsewhere"), "{err}");
        assert!(!err.contains('\n'), "one line: {err}");

        // `allowlist` is network none with the egress proxy: it needs what `none` needs.
        let allowlist = "network_mode = \"allowlist\"\nallowed_hosts = [\"example.com\"]\n";
        let (_root, job) = spec(allowlist, "[oracle]");
        assert!(check(&job, &FakeSandbox::new()).is_ok());
        let err = check(&job, &strict()).expect_err("refused");
        assert!(err.contains("network \"allowlist\""), "{err}");

        let (_root, job) = spec("network_mode = \"host\"\n", "[oracle]");
        let sb = FakeSandbox::new();
        sb.set_unavailable(Network::Host, "no host network here");
        let err = check(&job, &sb).expect_err("refused");
        assert!(
            err.contains("network \"host\", but no host network here"),
            "{err}"
        );

        // The verifier's network is asked too.
        let (_root, job) = spec(
            "network_mode = \"host\"\n[verifier]\nnetwork_mode = \"no-network\"\n",
            "[oracle]",
        );
        let sb = FakeSandbox::new();
        sb.set_unavailable(Network::None, "no NET_ADMIN here");
        let err = check(&job, &sb).expect_err("refused");
        assert!(err.contains("the verifier phase needs network"), "{err}");
    }

    #[test]
    fn a_backend_that_is_not_ready_says_why_before_anything_else() {
        let (_root, job) = spec("network_mode = \"no-network\"\n", "[oracle]");
        let sb = strict();
        sb.set_preflight_problems(&["namespace evals does not exist", "registry down"]);
        let err = check(&job, &sb).expect_err("refused");
        assert_eq!(err, "namespace evals does not exist\nregistry down");
    }
}
