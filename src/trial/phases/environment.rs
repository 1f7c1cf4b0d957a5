//! The environment phase: the task's image, the agent's plan for this trial, and the agent's
//! container — started, with the instruction, `/logs/agent` and the agent's uploads in place.

use std::path::PathBuf;

use crate::agent::{AgentPlan, INSTRUCTION_PATH};
use crate::sandbox::{
    Base, ContainerId, ContainerSpec, ImageRef, Mount, Role, Sandbox, TarEntry, files_to_tar,
};

use super::super::control;
use super::{Ctx, Infra, infra, sandbox_network};
use crate::trial::plan::Phase;

/// The agent's container is running and holds everything the agent needs.
pub(crate) struct EnvReady {
    pub image: ImageRef,
    pub container: ContainerId,
    pub agent: AgentPlan,
    /// Host directory mounted as the control root, when the agent has one.
    pub control_dir: Option<PathBuf>,
}

/// Host path of a trial's control root (removed by the trial's cleanup on every path).
pub(crate) const CONTROL_DIR: &str = ".control";

pub(crate) async fn run<S: Sandbox>(ctx: &Ctx<'_, S>) -> Result<EnvReady, Infra> {
    let fail = infra(Phase::Environment);
    let plan = ctx.plan;
    let task = &plan.task;
    let image = ctx.sb.prepare_image(&plan.image).await.map_err(fail)?;
    let mut agent = plan
        .agent
        .plan(task, &plan.overrides)
        .map_err(infra(Phase::Environment))?;
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
        network: sandbox_network(task.environment.network),
        workdir: task.environment.workdir.clone(),
        mounts,
    };
    let container = ctx
        .scope
        .launch(ctx.sb, &spec)
        .await
        .map_err(infra(Phase::Environment))?;
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
    ])
    .map_err(infra(Phase::Environment))?;
    ctx.sb
        .upload(&container, "/", base)
        .await
        .map_err(infra(Phase::Environment))?;
    for upload in &agent.uploads {
        ctx.sb
            .upload(&container, &upload.dest, upload.tar.clone())
            .await
            .map_err(infra(Phase::Environment))?;
    }
    Ok(EnvReady {
        image,
        container,
        agent,
        control_dir,
    })
}
