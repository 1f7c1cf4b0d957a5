use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::agent::Agent;
use crate::sandbox::{ImageRecipe, ImageSpec, LABEL_CACHE, LABEL_MANAGED};
use crate::task::{EnvironmentSpec, ImageSource, Task};
use crate::trial::{TrialPlan, TrialSettings, safe_name};

use super::config::{RetryPolicy, TimeoutMultipliers, Variant};
use super::lock::Lock;

/// A resolved, validated job: everything needed to plan its trials.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Which backend runs the trials, as `backend:` and the flags chose it (not part of the
    /// lock); the CLI connects it ([`crate::sandbox::choose`]).
    pub backend: crate::sandbox::BackendConfig,
    pub name: String,
    pub dir: PathBuf,
    pub tasks: Vec<Arc<Task>>,
    /// Environment image per task (same order as `tasks`).
    pub images: Vec<ImageSpec>,
    /// The `separate` verifier's own image per task (same order; `None` in other modes).
    pub verifier_images: Vec<Option<ImageSpec>>,
    pub agents: Vec<Arc<Agent>>,
    pub variants: Vec<Arc<Variant>>,
    /// (agent index, variant index) pairs that run.
    pub arms: Vec<(usize, usize)>,
    pub attempts: u32,
    pub concurrency: usize,
    pub pass_threshold: f64,
    pub log_cap_bytes: u64,
    /// Bytes of the agent's changed files kept per trial for regrading (0: none).
    pub change_content_cap_bytes: u64,
    pub kill_grace: Duration,
    pub timeouts: TimeoutMultipliers,
    pub retry: RetryPolicy,
    /// Run again the trials whose final record is an `infra_error` (their records are
    /// replaced; the earlier errors carried into `previous_errors`).
    pub retry_infra: bool,
    /// The resolved configuration as saved in `job.yaml` (secrets redacted); loadable again.
    pub config_yaml: String,
    pub(crate) lock: Lock,
    /// The job's `models:`, keys resolved and scripts loaded (empty when no agent has a model).
    pub models: Vec<crate::gateway::ResolvedModel>,
    /// Agents whose trials keep a copy of their frozen filesystem (`arbiter tasks check`).
    pub keep_snapshots: std::collections::BTreeSet<String>,
    /// The job's network override (`--network`, `network:`), already applied to `tasks`.
    pub network: super::NetworkOverride,
    /// Where each trial's trace goes (`--otlp`, `otlp:`): the URL traces are POSTed to.
    pub otlp: Option<String>,
}

/// `<task>__<agent>__<variant>__<attempt>`, each part reduced to `[A-Za-z0-9._-]`.
pub(crate) fn trial_id(task: &str, agent: &str, variant: &str, attempt: u32) -> String {
    format!(
        "{}__{}__{}__{attempt}",
        safe_name(task),
        safe_name(agent),
        safe_name(variant)
    )
}

/// The image a task's environment resolves to. Built images are named after a hash of the
/// build context, so each distinct environment is built once per engine.
pub(crate) fn image_spec(task: &Task, context_digest: Option<&str>, multiplier: f64) -> ImageSpec {
    environment_image(&task.name, &task.environment, context_digest, multiplier)
}

/// The image of a `separate` verifier (`[verifier.environment]` or `tests/Dockerfile`, else
/// the task's own image), when the task has one.
pub(crate) fn verifier_image_spec(
    task: &Task,
    context_digest: Option<&str>,
    multiplier: f64,
) -> Option<ImageSpec> {
    let env = task.verifier.environment.as_ref()?;
    Some(environment_image(
        &task.name,
        env,
        context_digest,
        multiplier,
    ))
}

fn environment_image(
    name: &str,
    env: &EnvironmentSpec,
    context_digest: Option<&str>,
    multiplier: f64,
) -> ImageSpec {
    let timeout = Duration::from_secs_f64(env.build_timeout_sec * multiplier);
    let labels = BTreeMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_CACHE.to_string(), "env".to_string()),
    ]);
    match &env.source {
        ImageSource::Image(name) => ImageSpec {
            recipe: ImageRecipe::Named(name.clone()),
            key: name.clone(),
            timeout,
            labels,
        },
        ImageSource::Build {
            context,
            dockerfile,
        } => {
            let digest = context_digest.unwrap_or("unknown");
            let hex = digest.trim_start_matches("sha256:");
            // Image repositories are lowercase and take no `_`.
            let repo = safe_name(&name.to_ascii_lowercase()).replace('_', "-");
            let file = dockerfile
                .strip_prefix(context)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "Dockerfile".to_string());
            // The key names the image by its build context's digest: a separate verifier
            // built from the task's own context shares the environment's image.
            ImageSpec {
                recipe: ImageRecipe::Build {
                    context: context.clone(),
                    file,
                },
                key: format!(
                    "arbiter-env/{}:{}",
                    repo.trim_matches(|c| c == '.' || c == '-'),
                    &hex[..hex.len().min(16)]
                ),
                timeout,
                labels,
            }
        }
    }
}

impl JobSpec {
    /// Label value identifying this job's resources on the engine.
    pub(crate) fn job_label(&self) -> String {
        let digest = crate::digest::sha256_hex(self.dir.to_string_lossy().as_bytes());
        format!("{}-{}", self.name, &digest[..12])
    }

    /// Every trial of the job, interleaved so arms alternate (attempt-major, then task, then
    /// agent × variant): a slow or rate-limited arm never holds up the others for long.
    /// `backend`: the name the backend running them gives itself ([`Sandbox::name`]), for
    /// the records.
    ///
    /// [`Sandbox::name`]: crate::sandbox::Sandbox::name
    pub(crate) fn trials(
        &self,
        labels: BTreeMap<String, String>,
        backend: &'static str,
    ) -> Vec<TrialPlan> {
        self.trials_with(labels, None, backend)
    }

    /// The job's model gateway, when any agent has a `model:` (once per job, at job start).
    pub(crate) fn start_gateway(
        &self,
    ) -> Result<Option<Arc<crate::gateway::Gateway>>, crate::gateway::GatewayError> {
        if !self.agents.iter().any(|a| a.kind.model().is_some()) {
            return Ok(None);
        }
        crate::gateway::Gateway::start(self.models.clone()).map(|g| Some(Arc::new(g)))
    }

    /// [`JobSpec::trials`] with the job's gateway (from [`JobSpec::start_gateway`]).
    pub(crate) fn trials_with(
        &self,
        labels: BTreeMap<String, String>,
        gateway: Option<Arc<crate::gateway::Gateway>>,
        backend: &'static str,
    ) -> Vec<TrialPlan> {
        let secrets: Vec<String> = self
            .models
            .iter()
            .filter_map(|m| m.secret().map(str::to_string))
            .collect();
        let settings = Arc::new(TrialSettings {
            backend,
            pass_threshold: self.pass_threshold,
            log_cap_bytes: self.log_cap_bytes,
            change_content_cap_bytes: self.change_content_cap_bytes,
            kill_grace: self.kill_grace,
            job_label: self.job_label(),
            labels,
            agent_timeout_multiplier: self.timeouts.agent,
            install_timeout_multiplier: self.timeouts.install,
            verifier_timeout_multiplier: self.timeouts.verifier,
            image_indexes: Default::default(),
            gateway,
            model_secrets: secrets,
            keep_snapshots: self.keep_snapshots.clone(),
            network_overrides: self.network.recorded("job"),
        });
        let mut plans = Vec::new();
        for attempt in 1..=self.attempts {
            let images = self.images.iter().zip(&self.verifier_images);
            for (task, (image, verifier_image)) in self.tasks.iter().zip(images) {
                for &(a, v) in &self.arms {
                    let (agent, variant) = (&self.agents[a], &self.variants[v]);
                    let id = trial_id(&task.name, &agent.name, &variant.name, attempt);
                    plans.push(TrialPlan {
                        dir: self.dir.join("trials").join(&id),
                        id,
                        job: self.name.clone(),
                        task: task.clone(),
                        agent: agent.clone(),
                        variant: variant.name.clone(),
                        overrides: variant.env.clone(),
                        args: variant.args.clone(),
                        attempt,
                        continuation: variant.continuation.or(agent.continuation),
                        image: image.clone(),
                        verifier_image: verifier_image.clone(),
                        settings: settings.clone(),
                    });
                }
            }
        }
        plans
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trial_ids_are_deterministic_and_sanitised() {
        assert_eq!(
            trial_id("hello", "oracle", "default", 1),
            "hello__oracle__default__1"
        );
        assert_eq!(
            trial_id("suite/a b", "my agent", "v:1", 3),
            "suite-a-b__my-agent__v-1__3"
        );
    }
}
