//! The environment phase: the task's image, the agent's plan for this trial, and the agent's
//! container — started, with the instruction, `/logs/agent` and the agent's uploads in place.

use std::path::PathBuf;

use crate::agent::{AgentKind, AgentPlan, INSTRUCTION_PATH, ModelWiring, PlanContext};
use crate::sandbox::{
    Base, ContainerId, ContainerSpec, ImageRecipe, ImageRef, ImageSpec, Mount, Process, Role,
    Sandbox, SandboxError, StartSpec, TarEntry, files_to_tar,
};

use super::super::control;
use super::{Ctx, Infra, infra, sandbox_network};
use crate::task::NetworkMode;
use crate::trial::plan::Phase;

/// The agent's container is running and holds everything the agent needs.
pub(crate) struct EnvReady {
    pub image: ImageRef,
    pub container: ContainerId,
    pub agent: AgentPlan,
    /// Host directory mounted as the control root, when the agent has one.
    pub control_dir: Option<PathBuf>,
    /// The compose sidecars, running in the agent container's network namespace.
    pub sidecars: super::sidecars::Sidecars,
    /// The egress allowlist proxy of the agent's container (`network_mode = "allowlist"`):
    /// the caller takes it and finishes it when the agent phase ends.
    pub egress: Option<super::egress::Egress>,
}

impl EnvReady {
    /// The same container with another agent plan (the next attempt's, the next step's);
    /// the egress proxy stays with the trial, which holds the first one for every run.
    pub(crate) fn with_agent(&self, agent: AgentPlan) -> EnvReady {
        EnvReady {
            image: self.image.clone(),
            container: self.container.clone(),
            agent,
            control_dir: self.control_dir.clone(),
            sidecars: self.sidecars.clone(),
            egress: None,
        }
    }
}

/// Host path of a trial's control root (removed by the trial's cleanup on every path).
pub(crate) const CONTROL_DIR: &str = ".control";

/// Container port of the model gateway on the agent container's own loopback.
pub(crate) const GATEWAY_PORT: u16 = 4141;

/// Admit the trial to the job's gateway when its agent has a `model:`: a fresh token and the
/// ledger `agent/model-calls.jsonl`. `None` for agents without a model.
pub(crate) fn register_model(
    plan: &crate::trial::plan::TrialPlan,
) -> Result<Option<crate::gateway::TrialToken>, Infra> {
    let Some((model, budget)) = plan.agent.kind.model() else {
        return Ok(None);
    };
    let fail = |message: String| Infra {
        phase: Phase::Environment,
        message,
    };
    let gateway = plan.settings.gateway.as_ref().ok_or_else(|| {
        fail(format!(
            "agent {} has a model but the job started no model gateway",
            plan.agent.name
        ))
    })?;
    let ledger_path = plan.dir.join("agent/model-calls.jsonl");
    if let Some(parent) = ledger_path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| fail(format!("{}: {e}", parent.display())))?;
    }
    gateway
        .register_trial(crate::gateway::TrialGrant {
            trial_id: plan.id.clone(),
            provider: model.provider.clone(),
            model: model.name.clone(),
            budget: budget.copied().unwrap_or_default(),
            ledger_path,
        })
        .map(Some)
        .map_err(|e| fail(e.to_string()))
}

/// The gateway as the agent sees it on `port` of its loopback.
fn wiring(port: u16, token: &crate::gateway::TrialToken, model: &str) -> ModelWiring {
    ModelWiring {
        openai_base_url: format!("http://127.0.0.1:{port}/v1"),
        anthropic_base_url: format!("http://127.0.0.1:{port}"),
        token: token.as_str().to_string(),
        model: model.to_string(),
    }
}

/// The env a `command` agent with a model gets (SDK variables of both protocols).
fn command_model_env(w: &ModelWiring) -> [(&'static str, String); 5] {
    [
        ("OPENAI_BASE_URL", w.openai_base_url.clone()),
        ("OPENAI_API_KEY", w.token.clone()),
        ("ANTHROPIC_BASE_URL", w.anthropic_base_url.clone()),
        ("ANTHROPIC_API_KEY", w.token.clone()),
        ("ARBITER_MODEL", w.model.clone()),
    ]
}

pub(crate) async fn run<S: Sandbox + ?Sized>(
    ctx: &Ctx<'_, S>,
    token: Option<&crate::gateway::TrialToken>,
) -> Result<EnvReady, Infra> {
    let fail = infra(Phase::Environment);
    let plan = ctx.plan;
    let task = &plan.task;
    let image = ctx
        .sb
        .prepare_image(&plan.image)
        .await
        .map_err(|e| with_base_images(&plan.image, e))
        .map_err(fail)?;
    let model = plan.agent.kind.model().map(|(m, _)| m.name.clone());
    let wired = match (token, &model) {
        (Some(token), Some(model)) => Some(wiring(GATEWAY_PORT, token, model)),
        _ => None,
    };
    let context = PlanContext {
        model: wired.clone(),
        ..PlanContext::default()
    };
    let mut agent = plan
        .agent
        .plan_in(task, &plan.overrides, &context)
        .map_err(infra(Phase::Environment))?;
    let wired_env = match (&wired, &plan.agent.kind) {
        (Some(w), AgentKind::Command(_)) => command_model_env(w).to_vec(),
        (Some(w), AgentKind::Aworld(_)) => crate::agent::aworld_gateway_env(w).to_vec(),
        _ => Vec::new(),
    };
    if !wired_env.is_empty() {
        agent
            .env
            .retain(|(k, _)| !wired_env.iter().any(|(w, _)| w == k));
        agent
            .env
            .extend(wired_env.into_iter().map(|(k, v)| (k.to_string(), v)));
    }
    let (network, allowed_hosts) = super::egress::agent_network(plan);
    agent
        .harness_overrides
        .extend(super::egress::network_overrides(plan));
    if super::changes::bench_skips_change_set(plan) {
        agent.harness_overrides.push(crate::agent::HarnessOverride {
            key: super::changes::BENCH_NO_CHANGESET.to_string(),
            value: "1: no change set and no integrity verdict (benchmark only)".to_string(),
            source: "environment".to_string(),
        });
    }
    let settings = &plan.settings;
    if let Some(run) = agent.run.as_mut() {
        run.argv.extend(plan.args.iter().cloned());
        run.timeout = run.timeout.mul_f64(settings.agent_timeout_multiplier);
    }
    if let Some(install) = agent.install.as_mut() {
        install.timeout = install.timeout.mul_f64(settings.install_timeout_multiplier);
    }
    // The agent's env (which may hold secrets) goes to its exec calls only: an env in the
    // container's config would be frozen into the filesystem the verifier starts from.
    let env = vec![(
        "ARBITER_INSTRUCTION_FILE".to_string(),
        INSTRUCTION_PATH.to_string(),
    )];
    let mut mounts: Vec<Mount> = agent
        .ro_mounts
        .iter()
        .map(|(host, container)| Mount {
            host: host.clone(),
            container: container.clone(),
            read_only: true,
        })
        .collect();
    let mut control_dir = None;
    if let Some(control) = &agent.control {
        let dir = control::prepare(&ctx.path(CONTROL_DIR), control.template.as_deref())
            .map_err(infra(Phase::Environment))?;
        mounts.push(Mount {
            host: dir.clone(),
            container: control.container_path.clone(),
            read_only: false,
        });
        control_dir = Some(dir);
    }
    let spec = ContainerSpec {
        base: Base::Image(image.clone()),
        owner: ctx.scope.owner(Role::Agent),
        env,
        limits: ctx.limits(),
        network: sandbox_network(network),
        workdir: task.environment.workdir.clone(),
        mounts,
        // Harbor: the image's ENTRYPOINT runs, with the keep-alive as its arguments.
        start: StartSpec {
            process: Process::ImageEntrypoint,
            hosts: task
                .environment
                .compose
                .as_ref()
                .map(super::sidecars::hosts)
                .unwrap_or_default(),
            ..StartSpec::default()
        },
    };
    let container = ctx
        .scope
        .create(ctx.sb, &spec)
        .await
        .map_err(infra(Phase::Environment))?;
    // The instruction, `/logs` and the agent's files, in one archive: in place before the
    // start where the backend can put them there as its upload would (issue 16), else
    // uploaded once the container runs.
    let (base, elsewhere) = base_archive(task, &agent).map_err(infra(Phase::Environment))?;
    let placed = ctx
        .sb
        .upload_before_start(&container, &base)
        .await
        .map_err(infra(Phase::Environment))?;
    ctx.sb
        .start(&container)
        .await
        .map_err(infra(Phase::Environment))?;
    let sidecars = match &task.environment.compose {
        Some(compose) => {
            let input = super::sidecars::SidecarInput {
                compose,
                task: &task.name,
                // The task's GPUs are the agent's container's, not its sidecars'.
                limits: crate::sandbox::ContainerLimits {
                    gpus: 0,
                    ..ctx.limits()
                },
                main_image: image.as_str(),
                build_timeout: plan.image.timeout,
            };
            super::sidecars::start(ctx.sb, ctx.scope, &input, &container)
                .await
                .map_err(infra(Phase::Environment))?
        }
        None => super::sidecars::Sidecars::default(),
    };
    // The listener's server runs until the trial is finished (`Gateway::finish_trial`).
    if let (Some(token), Some(gateway)) = (token, &plan.settings.gateway) {
        let listener = ctx
            .sb
            .loopback_listener(&container, GATEWAY_PORT)
            .await
            .map_err(|e| Infra {
                phase: Phase::Environment,
                message: format!("cannot reach the model gateway from the agent's container: {e}"),
            })?;
        let handle = gateway
            .serve_trial(listener, token)
            .map_err(infra(Phase::Environment))?;
        // A backend without namespaces (the fake) listens on another port: the agent's
        // env names the one that is served.
        let port = handle.addr.port();
        if port != GATEWAY_PORT {
            let from = format!("http://127.0.0.1:{GATEWAY_PORT}");
            let to = format!("http://127.0.0.1:{port}");
            for (_, value) in agent.env.iter_mut() {
                if value.starts_with(&from) {
                    *value = value.replacen(&from, &to, 1);
                }
            }
        }
    }
    // After the gateway's port rewrite: the proxy's own URL names its port already.
    let egress = match network {
        NetworkMode::Allowlist => {
            let egress = super::egress::start(
                ctx.sb,
                &container,
                &allowed_hosts,
                plan.task.loopback_hosts(),
                Phase::Environment,
                "the agent's container",
            )
            .await?;
            super::egress::set_env(&mut agent.env, egress.env());
            Some(egress)
        }
        _ => None,
    };
    if !placed {
        ctx.sb
            .upload(&container, "/", base)
            .await
            .map_err(infra(Phase::Environment))?;
    }
    for upload in &agent.uploads[elsewhere..] {
        ctx.sb
            .upload(&container, &upload.dest, upload.tar.clone())
            .await
            .map_err(infra(Phase::Environment))?;
    }
    // Harbor: `[environment.healthcheck]` runs once the environment is up (sidecars and the
    // main service's dependencies included), and must pass before the agent is set up. It
    // runs as the image's user with the task container's env. A failure is the task's
    // environment's (an environment error), never the agent's.
    if let Some(check) = &task.environment.healthcheck {
        let env =
            crate::agent::resolve_env(&task.environment.env).map_err(infra(Phase::Environment))?;
        if let Err(why) =
            super::healthcheck::run(ctx, &container, check, None, &env, Phase::Environment).await?
        {
            return Err(Infra {
                phase: Phase::Environment,
                message: format!("[environment.healthcheck] failed: {why}"),
            });
        }
    }
    Ok(EnvReady {
        image,
        container,
        agent,
        control_dir,
        sidecars,
        egress,
    })
}

/// A failed build's error, with the base images of its Dockerfile named (the engine's own
/// message often does not say which image it could not get).
pub(crate) fn with_base_images(spec: &ImageSpec, e: SandboxError) -> String {
    let message = e.to_string();
    let (SandboxError::Build { message: why, .. }, ImageRecipe::Build { context, file }) =
        (&e, &spec.recipe)
    else {
        return message;
    };
    let Ok(dockerfile) = std::fs::read_to_string(context.join(file)) else {
        return message;
    };
    match base_image_note(&dockerfile, why) {
        Some(note) => format!("{message} {note}"),
        None => message,
    }
}

/// "(base image: X — …)" for a build that failed before its own steps ran; `None` when a
/// step's command failed (the base image was there) or the Dockerfile names none.
pub(crate) fn base_image_note(dockerfile: &str, build_message: &str) -> Option<String> {
    let step_failed = ["returned a non-zero code", "did not complete successfully"]
        .iter()
        .any(|m| build_message.contains(m));
    let images = crate::task::dockerfile_base_images(dockerfile);
    if step_failed || images.is_empty() {
        return None;
    }
    let (label, is_it, it) = if images.len() == 1 {
        ("base image", "is it", "it")
    } else {
        ("base images", "are they", "them")
    };
    Some(format!(
        "({label}: {} — {is_it} available locally? arbiter cannot pull from a registry it cannot reach; pull or build {it} before the run)",
        images.join(", ")
    ))
}

/// The archive unpacked at the agent container's `/`: the instruction, the `/logs` dirs and
/// every leading upload of the agent's into `/`, in the order separate requests would apply
/// them (one request, issue 16); and the index of the agent's first upload elsewhere.
fn base_archive(task: &crate::task::Task, agent: &AgentPlan) -> std::io::Result<(Vec<u8>, usize)> {
    let base = files_to_tar(&[
        TarEntry {
            path: "arbiter/",
            content: None,
            mode: 0o755,
        },
        TarEntry {
            path: "arbiter/instruction.md",
            content: Some(task.instruction.as_bytes()),
            mode: 0o644,
        },
        TarEntry {
            path: "logs/",
            content: None,
            mode: 0o755,
        },
        TarEntry {
            path: "logs/agent/",
            content: None,
            mode: 0o777,
        },
        TarEntry {
            path: "logs/artifacts/",
            content: None,
            mode: 0o777,
        },
    ])?;
    let leading = agent.uploads.iter().take_while(|u| u.dest == "/").count();
    let mut parts: Vec<&[u8]> = vec![&base];
    parts.extend(agent.uploads[..leading].iter().map(|u| u.tar.as_slice()));
    Ok((crate::sandbox::concat_archives(&parts)?, leading))
}
