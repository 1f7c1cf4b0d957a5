//! Compose sidecars (SPEC §2.1) through the backend, no compose CLI: every service of
//! `environment/docker-compose.yaml` but `main`, started in `depends_on` order once the
//! agent's container runs, pod-style — each joins the agent container's network namespace,
//! so service names resolve to 127.0.0.1 (the agent's container carries them as extra
//! hosts) and a trial still needs no bridge.
//!
//! Every sidecar is created through the trial's [`Scope`] (labelled with the job, the trial,
//! role `sidecar` and `arbiter.service=<name>`), so it is removed with the trial's other
//! resources on every path, and `arbiter gc` finds it by owner. Sidecars get the task's
//! limits. They are stopped after the agent phase unless the verifier runs `live` (in the
//! agent's container, where it reaches them as the agent did); a `snapshot`, `clean` or
//! `separate` verifier has no sidecars.
//!
//! The main service's own `depends_on` is waited on after the sidecars start and before
//! the agent phase: the agent's container must exist first (it owns the network namespace
//! the sidecars join), so its ENTRYPOINT runs before its dependencies are up.
//!
//! Over 600 lines only with its unit tests: starting, waiting on and stopping sidecars is ~400.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::digest::sha256_hex;
use crate::sandbox::{
    Base, ContainerId, ContainerLimits, ContainerSpec, ContainerStatus, Health, HealthCommand,
    HealthSpec, ImageRecipe, ImageSpec, LABEL_CACHE, LABEL_MANAGED, LABEL_SERVICE, Network,
    Process, Role, Sandbox, SandboxError, Scope, StartSpec, dir_to_tar,
};
use crate::task::{Compose, DependsCondition, HealthTest, Service};

/// How long a dependency may take to become healthy, or to complete.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How often a dependency's state is polled.
const POLL: Duration = Duration::from_millis(250);

/// The sidecars of a trial, running.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Sidecars {
    /// (service, container), in start order.
    pub services: Vec<(String, ContainerId)>,
}

/// What starting the sidecars needs from the trial.
pub(crate) struct SidecarInput<'a> {
    pub compose: &'a Compose,
    /// The task's name (names built sidecar images).
    pub task: &'a str,
    /// Limits of the main container, applied to each sidecar.
    pub limits: ContainerLimits,
    /// The main service's image, for Harbor's `${MAIN_IMAGE_NAME}`.
    pub main_image: &'a str,
    pub build_timeout: Duration,
}

/// Why the sidecars could not be started (the task's or the engine's doing, never the
/// agent's).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SidecarError {
    #[error("compose service {service}: {source}")]
    Sandbox {
        service: String,
        #[source]
        source: SandboxError,
    },
    #[error("compose service {service}: {message}")]
    Config { service: String, message: String },
    #[error("compose service {service} (a dependency of {of}) {why}")]
    NotReady {
        service: String,
        of: String,
        why: String,
    },
}

/// `/etc/hosts` entries for the agent's container: every sidecar's name on 127.0.0.1.
pub(crate) fn hosts(compose: &Compose) -> Vec<(String, String)> {
    compose
        .sidecars()
        .map(|(name, _)| (name.clone(), "127.0.0.1".to_string()))
        .collect()
}

/// Start every sidecar in `depends_on` order in `main`'s network namespace, each after the
/// services it depends on are started, healthy or completed as it asks; then wait on the
/// main service's own dependencies.
pub(crate) async fn start<S: Sandbox + ?Sized>(
    sb: &S,
    scope: &Scope,
    input: &SidecarInput<'_>,
    main: &ContainerId,
) -> Result<Sidecars, SidecarError> {
    let compose = input.compose;
    let mut running = Sidecars::default();
    for name in compose.start_order() {
        let Some(service) = compose.services.get(name) else {
            continue;
        };
        await_dependencies(sb, &running, name, service).await?;
        if name == compose.main {
            continue;
        }
        let fail = |source| SidecarError::Sandbox {
            service: name.to_string(),
            source,
        };
        let image = sb
            .prepare_image(&image_spec(input, name, service)?)
            .await
            .map_err(fail)?;
        let mut owner = scope.owner(Role::Sidecar);
        owner
            .extra
            .insert(LABEL_SERVICE.to_string(), name.to_string());
        let spec = ContainerSpec {
            base: Base::Image(image),
            owner,
            env: environment(input, name, service)?,
            limits: input.limits,
            network: Network::None,
            workdir: service
                .working_dir
                .as_deref()
                .map(|w| interpolate(input, name, "working_dir", w))
                .transpose()?,
            mounts: Vec::new(),
            start: StartSpec {
                process: Process::Service {
                    entrypoint: words(input, name, "entrypoint", &service.entrypoint)?,
                    command: words(input, name, "command", &service.command)?,
                },
                join: Some(main.clone()),
                hosts: Vec::new(),
                user: service
                    .user
                    .as_deref()
                    .map(|u| interpolate(input, name, "user", u))
                    .transpose()?,
                healthcheck: match service.healthcheck.as_ref() {
                    Some(h) => Some(HealthSpec {
                        test: match &h.test {
                            HealthTest::Exec(argv) => Some(HealthCommand::Exec(
                                argv.iter()
                                    .map(|w| interpolate(input, name, "healthcheck.test", w))
                                    .collect::<Result<_, _>>()?,
                            )),
                            HealthTest::Shell(cmd) => Some(HealthCommand::Shell(interpolate(
                                input,
                                name,
                                "healthcheck.test",
                                cmd,
                            )?)),
                            HealthTest::Disabled => None,
                        },
                        interval: h.interval_sec.map(Duration::from_secs_f64),
                        timeout: h.timeout_sec.map(Duration::from_secs_f64),
                        start_period: h.start_period_sec.map(Duration::from_secs_f64),
                        retries: h.retries,
                    }),
                    None => None,
                },
            },
        };
        tracing::debug!(service = name, "starting sidecar");
        let id = scope.launch(sb, &spec).await.map_err(fail)?;
        running.services.push((name.to_string(), id));
    }
    Ok(running)
}

/// After the collect phase: stop the sidecars unless the verifier runs `live` in the
/// agent's container (where it reaches them as the agent did). `trial::run` calls this once,
/// right after collect; the trial's scope removes the sidecars at cleanup either way.
pub(crate) async fn before_verify<S: Sandbox + ?Sized>(
    ctx: &super::Ctx<'_, S>,
    env: &super::EnvReady,
) -> Result<(), super::Infra> {
    if ctx.plan.task.verifier.mode == crate::task::VerifierMode::Live {
        return Ok(());
    }
    stop(ctx.sb, &env.sidecars)
        .await
        .map_err(super::infra(crate::trial::plan::Phase::Collect))
}

/// Stop the sidecars (before a verifier that does not run in the agent's container).
pub(crate) async fn stop<S: Sandbox + ?Sized>(
    sb: &S,
    sidecars: &Sidecars,
) -> Result<(), SidecarError> {
    for (service, id) in &sidecars.services {
        sb.stop(id).await.map_err(|source| SidecarError::Sandbox {
            service: service.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Wait until each of `service`'s dependencies meets its condition.
async fn await_dependencies<S: Sandbox + ?Sized>(
    sb: &S,
    running: &Sidecars,
    name: &str,
    service: &Service,
) -> Result<(), SidecarError> {
    for dep in &service.depends_on {
        let Some((_, id)) = running.services.iter().find(|(s, _)| *s == dep.service) else {
            // `main` as a sidecar's dependency: it is already running.
            continue;
        };
        let not_ready = |why: String| SidecarError::NotReady {
            service: dep.service.clone(),
            of: name.to_string(),
            why,
        };
        let started = tokio::time::Instant::now();
        loop {
            let status = sb
                .status(id)
                .await
                .map_err(|source| SidecarError::Sandbox {
                    service: dep.service.clone(),
                    source,
                })?;
            match (dep.condition, status) {
                (DependsCondition::Started, ContainerStatus::Running { .. }) => break,
                (DependsCondition::Started, ContainerStatus::Exited(_)) => break,
                (
                    DependsCondition::Healthy,
                    ContainerStatus::Running {
                        health: Some(Health::Healthy),
                    },
                ) => break,
                (
                    DependsCondition::Healthy,
                    ContainerStatus::Running {
                        health: Some(Health::Unhealthy),
                    },
                ) => return Err(not_ready("is unhealthy (its healthcheck failed)".into())),
                (DependsCondition::Healthy, ContainerStatus::Running { health: None }) => {
                    return Err(not_ready(
                        "must be healthy (service_healthy) but has no healthcheck".into(),
                    ));
                }
                (DependsCondition::Healthy, ContainerStatus::Exited(code)) => {
                    return Err(not_ready(format!(
                        "exited with code {code} before it was healthy"
                    )));
                }
                (DependsCondition::CompletedSuccessfully, ContainerStatus::Exited(0)) => break,
                (DependsCondition::CompletedSuccessfully, ContainerStatus::Exited(code)) => {
                    return Err(not_ready(format!(
                        "exited with code {code} (service_completed_successfully wants 0)"
                    )));
                }
                (DependsCondition::Healthy, _) | (DependsCondition::CompletedSuccessfully, _) => {}
            }
            if started.elapsed() >= READY_TIMEOUT {
                let wanted = match dep.condition {
                    DependsCondition::Healthy => "healthy",
                    _ => "completed",
                };
                return Err(not_ready(format!(
                    "was not {wanted} after {}s",
                    READY_TIMEOUT.as_secs()
                )));
            }
            tokio::time::sleep(POLL).await;
        }
    }
    Ok(())
}

/// The image a sidecar runs: its `build` (named after a hash of the context) or its `image`.
fn image_spec(
    input: &SidecarInput<'_>,
    name: &str,
    service: &Service,
) -> Result<ImageSpec, SidecarError> {
    let labels = BTreeMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_CACHE.to_string(), "env".to_string()),
    ]);
    if let Some(build) = &service.build {
        let tar = dir_to_tar(&build.context, ".").map_err(|e| SidecarError::Config {
            service: name.to_string(),
            message: format!("build context {}: {e}", build.context.display()),
        })?;
        let file = build
            .dockerfile
            .strip_prefix(&build.context)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "Dockerfile".to_string());
        let mut hashed = tar;
        hashed.extend_from_slice(file.as_bytes());
        let hex = sha256_hex(&hashed);
        let repo: String = format!("{}-{name}", input.task)
            .to_ascii_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        return Ok(ImageSpec {
            recipe: ImageRecipe::Build {
                context: build.context.clone(),
                file,
            },
            key: format!(
                "arbiter-env/{}:{}",
                repo.trim_matches(|c| c == '.' || c == '-'),
                &hex[..16]
            ),
            timeout: input.build_timeout,
            labels,
        });
    }
    let Some(image) = &service.image else {
        return Err(SidecarError::Config {
            service: name.to_string(),
            message: "names no build and no image".to_string(),
        });
    };
    let image = interpolate(input, name, "image", image)?;
    Ok(ImageSpec {
        recipe: ImageRecipe::Named(image.clone()),
        key: image,
        timeout: input.build_timeout,
        labels,
    })
}

/// A sidecar's `environment`, interpolated as compose does (Harbor's variables first, then
/// arbiter's environment); a bare `NAME` passes the host's value through when it is set, as
/// compose does.
fn environment(
    input: &SidecarInput<'_>,
    name: &str,
    service: &Service,
) -> Result<Vec<(String, String)>, SidecarError> {
    let mut out = Vec::new();
    for (key, value) in &service.environment {
        match value {
            Some(value) => out.push((key.clone(), interpolate(input, name, key, value)?)),
            None => {
                if let Ok(host) = std::env::var(key) {
                    out.push((key.clone(), host));
                }
            }
        }
    }
    Ok(out)
}

/// `value` interpolated as compose does: Harbor's compose variables (`MAIN_IMAGE_NAME`,
/// `CPUS`, `MEMORY`, `TEST_DIR`, …) and then the host environment; an unset variable is an
/// empty string (the loader already warned about it), `$$` a literal `$`.
fn interpolate(
    input: &SidecarInput<'_>,
    service: &str,
    key: &str,
    value: &str,
) -> Result<String, SidecarError> {
    let lookup = |name: &str| -> Option<String> {
        let fixed = crate::task::HARBOR_FIXED_VARIABLES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string());
        fixed.or_else(|| match name {
            "MAIN_IMAGE_NAME" | "PREBUILT_IMAGE_NAME" => Some(input.main_image.to_string()),
            "CPUS" => Some(format!("{}", input.limits.cpus)),
            "MEMORY" => Some(format!("{}M", input.limits.memory_mb)),
            _ if crate::task::HARBOR_HOST_VARIABLES.contains(&name) => None,
            _ => std::env::var(name).ok(),
        })
    };
    let done =
        crate::task::interpolate_compose(value, &lookup).map_err(|e| SidecarError::Config {
            service: service.to_string(),
            message: format!("{key}: {e}"),
        })?;
    if !done.unset.is_empty() {
        tracing::debug!(service, key, unset = ?done.unset, "compose variables not set: empty");
    }
    Ok(done.value)
}

/// A service's `command` / `entrypoint` words, interpolated like its other values.
fn words(
    input: &SidecarInput<'_>,
    service: &str,
    key: &str,
    words: &Option<Vec<String>>,
) -> Result<Option<Vec<String>>, SidecarError> {
    words
        .as_ref()
        .map(|w| {
            w.iter()
                .map(|word| interpolate(input, service, key, word))
                .collect()
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use super::*;
    use crate::sandbox::{FakeSandbox, Op, Owner, Resource};
    use crate::task::{Dependency, MAIN_SERVICE};

    fn service(image: &str, deps: &[(&str, DependsCondition)]) -> Service {
        Service {
            image: Some(image.to_string()),
            depends_on: deps
                .iter()
                .map(|(s, c)| Dependency {
                    service: s.to_string(),
                    condition: *c,
                })
                .collect(),
            ..Service::default()
        }
    }

    fn compose(services: Vec<(&str, Service)>) -> Compose {
        Compose {
            file: PathBuf::from("/task/environment/docker-compose.yaml"),
            main: MAIN_SERVICE.to_string(),
            services: services
                .into_iter()
                .map(|(n, s)| (n.to_string(), s))
                .collect(),
            main_env: BTreeMap::new(),
        }
    }

    fn input(compose: &Compose) -> SidecarInput<'_> {
        SidecarInput {
            compose,
            task: "t",
            limits: ContainerLimits {
                cpus: 1.5,
                memory_mb: 512,
                pids_limit: 64,
                gpus: 0,
                storage_mb: None,
            },
            main_image: "main-image",
            build_timeout: Duration::from_secs(60),
        }
    }

    /// A fake with the main container running, and the trial's scope holding it.
    async fn main_running() -> (Arc<FakeSandbox>, Scope, ContainerId) {
        let sb = Arc::new(FakeSandbox::new());
        let scope = Scope::new(Owner {
            job: "j".into(),
            trial: "t1".into(),
            role: Role::Agent,
            extra: BTreeMap::new(),
        });
        let image = sb
            .prepare_image(&ImageSpec {
                recipe: ImageRecipe::Named("main-image".into()),
                key: "main-image".into(),
                timeout: Duration::from_secs(1),
                labels: BTreeMap::new(),
            })
            .await
            .expect("image");
        let spec = ContainerSpec {
            base: Base::Image(image),
            owner: scope.owner(Role::Agent),
            env: Vec::new(),
            limits: input(&compose(vec![])).limits,
            network: Network::None,
            workdir: None,
            mounts: Vec::new(),
            start: StartSpec::default(),
        };
        let main = scope.launch(&*sb, &spec).await.expect("main");
        (sb, scope, main)
    }

    fn healthy() -> ContainerStatus {
        ContainerStatus::Running {
            health: Some(Health::Healthy),
        }
    }

    fn starting() -> ContainerStatus {
        ContainerStatus::Running {
            health: Some(Health::Starting),
        }
    }

    /// The service label of each sidecar spec created, in order.
    fn created(sb: &FakeSandbox) -> Vec<String> {
        sb.specs()
            .iter()
            .filter_map(|s| s.owner.extra.get(LABEL_SERVICE).cloned())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn sidecars_start_in_dependency_order_after_their_dependencies_are_healthy() {
        let (sb, scope, main) = main_running().await;
        let mut db = service("db-image:${CPUS}", &[]);
        db.environment = BTreeMap::from([
            ("PASSWORD".to_string(), Some("pw$$1".to_string())),
            ("FROM_HOST_UNSET_X".to_string(), None),
        ]);
        db.command = Some(vec!["serve".into(), "--image=${MAIN_IMAGE_NAME}".into()]);
        let c = compose(vec![
            (
                "api",
                service("api-image", &[("db", DependsCondition::Healthy)]),
            ),
            ("db", db),
            (
                MAIN_SERVICE,
                service("ignored", &[("api", DependsCondition::Started)]),
            ),
        ]);
        sb.on_status("db", vec![starting(), starting(), healthy()]);
        let began = tokio::time::Instant::now();
        let running = start(&*sb, &scope, &input(&c), &main).await.expect("start");
        assert_eq!(created(&sb), ["db", "api"]);
        assert_eq!(
            running
                .services
                .iter()
                .map(|(s, _)| s.as_str())
                .collect::<Vec<_>>(),
            ["db", "api"]
        );
        // Two polls while db was starting, then healthy: api was created after the third.
        assert_eq!(began.elapsed(), POLL * 2);
        let calls = sb.calls();
        let db_id = running.services[0].1.to_string();
        let last_status = calls
            .iter()
            .rposition(|(op, d)| *op == Op::Status && *d == db_id);
        let api_create = calls.iter().rposition(|(op, _)| *op == Op::Create);
        assert!(last_status < api_create, "{calls:?}");
        let db_spec = &sb.specs()[1];
        assert_eq!(db_spec.start.join, Some(main.clone()));
        assert_eq!(db_spec.limits, input(&c).limits);
        assert_eq!(db_spec.owner.role, Role::Sidecar);
        assert_eq!(db_spec.owner.labels()["arbiter.role"], "sidecar");
        assert_eq!(db_spec.owner.labels()["arbiter.trial"], "t1");
        assert_eq!(db_spec.env, [("PASSWORD".to_string(), "pw$1".to_string())]);
        assert_eq!(
            db_spec.start.process,
            Process::Service {
                entrypoint: None,
                command: Some(vec!["serve".into(), "--image=main-image".into()]),
            }
        );
        assert!(
            sb.calls()
                .iter()
                .any(|(op, d)| *op == Op::PrepareImage && d == "db-image:1.5")
        );
        assert_eq!(
            hosts(&c),
            [
                ("api".to_string(), "127.0.0.1".to_string()),
                ("db".to_string(), "127.0.0.1".to_string())
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn values_are_interpolated_as_compose_does() {
        let (sb, scope, main) = main_running().await;
        let mut db = service("db-image", &[]);
        db.environment = BTreeMap::from([
            (
                "KEY".to_string(),
                Some("${ARBITER_SIDECAR_TEST_SURELY_UNSET}".to_string()),
            ),
            (
                "MODEL".to_string(),
                Some("${ARBITER_SIDECAR_TEST_SURELY_UNSET:-sonnet}".to_string()),
            ),
            ("TESTS".to_string(), Some("${TEST_DIR}".to_string())),
            (
                "LOGS".to_string(),
                Some("${HOST_AGENT_LOGS_PATH}".to_string()),
            ),
        ]);
        db.working_dir = Some("${ENV_AGENT_LOGS_PATH}".to_string());
        db.healthcheck = Some(crate::task::ServiceHealthcheck {
            test: HealthTest::Shell("pg_isready -U $$POSTGRES_USER".to_string()),
            interval_sec: None,
            timeout_sec: None,
            start_period_sec: None,
            start_interval_sec: None,
            retries: None,
        });
        let c = compose(vec![("db", db)]);
        start(&*sb, &scope, &input(&c), &main).await.expect("start");
        let spec = &sb.specs()[1];
        assert_eq!(
            spec.env,
            [
                ("KEY".to_string(), String::new()),
                ("LOGS".to_string(), String::new()),
                ("MODEL".to_string(), "sonnet".to_string()),
                ("TESTS".to_string(), "/tests".to_string()),
            ]
        );
        assert_eq!(spec.workdir.as_deref(), Some("/logs/agent"));
        assert_eq!(
            spec.start.healthcheck.as_ref().and_then(|h| h.test.clone()),
            Some(HealthCommand::Shell(
                "pg_isready -U $POSTGRES_USER".to_string()
            ))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unhealthy_dependency_fails_and_everything_is_cleaned_up() {
        let (sb, scope, main) = main_running().await;
        let c = compose(vec![
            ("db", service("db-image", &[])),
            (
                "api",
                service("api-image", &[("db", DependsCondition::Healthy)]),
            ),
        ]);
        sb.on_status(
            "db",
            vec![
                starting(),
                ContainerStatus::Running {
                    health: Some(Health::Unhealthy),
                },
            ],
        );
        let err = start(&*sb, &scope, &input(&c), &main)
            .await
            .expect_err("unhealthy");
        assert_eq!(
            err.to_string(),
            "compose service db (a dependency of api) is unhealthy (its healthcheck failed)"
        );
        assert_eq!(created(&sb), ["db"]);
        assert_eq!(sb.live().len(), 2, "main and db until the trial's cleanup");
        scope.cleanup(&*sb, true).await.expect("cleanup");
        assert_eq!(sb.live(), Vec::<Resource>::new());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dependency_that_never_gets_healthy_times_out() {
        let (sb, scope, main) = main_running().await;
        let c = compose(vec![
            ("db", service("db-image", &[])),
            (
                MAIN_SERVICE,
                service("x", &[("db", DependsCondition::Healthy)]),
            ),
        ]);
        sb.on_status("db", vec![starting()]);
        let began = tokio::time::Instant::now();
        let err = start(&*sb, &scope, &input(&c), &main)
            .await
            .expect_err("timeout");
        assert_eq!(
            err.to_string(),
            "compose service db (a dependency of main) was not healthy after 300s"
        );
        assert!(began.elapsed() >= READY_TIMEOUT);
        assert!(began.elapsed() < READY_TIMEOUT + POLL * 2);
    }

    #[tokio::test(start_paused = true)]
    async fn completed_successfully_waits_for_exit_zero() {
        let c = compose(vec![
            ("migrate", service("m", &[])),
            (
                "api",
                service("a", &[("migrate", DependsCondition::CompletedSuccessfully)]),
            ),
            ("web", service("w", &[("api", DependsCondition::Healthy)])),
        ]);
        let (sb, scope, main) = main_running().await;
        sb.on_status(
            "migrate",
            vec![
                ContainerStatus::Running { health: None },
                ContainerStatus::Exited(0),
            ],
        );
        sb.on_status("api", vec![ContainerStatus::Running { health: None }]);
        let err = start(&*sb, &scope, &input(&c), &main)
            .await
            .expect_err("api has no healthcheck");
        assert_eq!(
            err.to_string(),
            "compose service api (a dependency of web) must be healthy (service_healthy) but has no healthcheck"
        );
        assert_eq!(created(&sb), ["migrate", "api"]);

        let (sb, scope, main) = main_running().await;
        sb.on_status("migrate", vec![ContainerStatus::Exited(2)]);
        let err = start(&*sb, &scope, &input(&c), &main)
            .await
            .expect_err("migration failed");
        assert_eq!(
            err.to_string(),
            "compose service migrate (a dependency of api) exited with code 2 (service_completed_successfully wants 0)"
        );
        assert_eq!(created(&sb), ["migrate"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_create_is_an_error_and_earlier_sidecars_are_cleaned_up() {
        let (sb, scope, main) = main_running().await;
        let c = compose(vec![
            ("a", service("a", &[])),
            ("b", service("b", &[("a", DependsCondition::Started)])),
        ]);
        sb.fail(Op::Create, 3); // main, a, then b fails
        let err = start(&*sb, &scope, &input(&c), &main)
            .await
            .expect_err("create fails");
        assert_eq!(
            err.to_string(),
            "compose service b: container create failed: fake Create failure"
        );
        scope.cleanup(&*sb, true).await.expect("cleanup");
        assert_eq!(sb.live(), Vec::<Resource>::new());
    }

    #[tokio::test(start_paused = true)]
    async fn stopped_sidecars_no_longer_run() {
        let (sb, scope, main) = main_running().await;
        let c = compose(vec![("a", service("a", &[]))]);
        let running = start(&*sb, &scope, &input(&c), &main).await.expect("start");
        stop(&*sb, &running).await.expect("stop");
        let (_, id) = &running.services[0];
        assert_eq!(
            sb.status(id).await.expect("status"),
            ContainerStatus::Exited(137)
        );
        assert_eq!(
            sb.status(&main).await.expect("status"),
            ContainerStatus::Running { health: None }
        );
    }
    /// A whole trial of a compose task on the fake: the agent's container starts through the
    /// image's ENTRYPOINT with the service names as hosts, the sidecar joins it, and is
    /// stopped before a snapshot verifier (kept running for a live one); nothing is left.
    async fn compose_trial(extra_toml: &str) -> (Arc<FakeSandbox>, crate::trial::TrialRecord) {
        let root = tempfile::tempdir().expect("tmp");
        let task = crate::testing::task_dir(root.path(), "web", extra_toml);
        std::fs::create_dir_all(task.join("environment")).expect("environment dir");
        std::fs::write(
            task.join("environment/docker-compose.yaml"),
            "services:\n  web:\n    image: fake/web\n    command: [httpd, -f]\n",
        )
        .expect("compose");
        let spec = crate::testing::job_spec(root.path(), &[task], &["oracle"], 1);
        let plan = spec.trials(Default::default(), "fake").remove(0);
        std::fs::create_dir_all(&plan.dir).expect("trial dir");
        let sb = Arc::new(FakeSandbox::new());
        sb.on_exec(
            "/tests/test.sh",
            crate::sandbox::FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1\n"),
        );
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let rec = match crate::trial::run(sb.clone(), &plan, rx, &|_| {}).await {
            crate::trial::TrialRun::Finished(rec) => *rec,
            crate::trial::TrialRun::Cancelled => panic!("cancelled"),
        };
        (sb, rec)
    }

    /// Index in the call log of the first call of `op` whose detail contains `detail`.
    fn first(sb: &FakeSandbox, op: Op, detail: &str) -> usize {
        sb.calls()
            .iter()
            .position(|(o, d)| *o == op && d.contains(detail))
            .unwrap_or_else(|| panic!("no {op:?} {detail}: {:?}", sb.calls()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_compose_trial_runs_its_sidecar_beside_the_agent_and_stops_it_before_a_snapshot_verifier()
     {
        let (sb, rec) = compose_trial("").await;
        assert_eq!(
            rec.verifier.status,
            crate::verifier::VerifierStatus::Passed,
            "{rec:#?}"
        );
        let specs = sb.specs();
        let agent = specs
            .iter()
            .find(|s| s.owner.role == Role::Agent)
            .expect("agent");
        assert_eq!(agent.start.process, Process::ImageEntrypoint);
        assert_eq!(
            agent.start.hosts,
            [("web".to_string(), "127.0.0.1".to_string())]
        );
        let web = specs
            .iter()
            .find(|s| s.owner.role == Role::Sidecar)
            .expect("sidecar");
        assert_eq!(
            web.start.process,
            Process::Service {
                entrypoint: None,
                command: Some(vec!["httpd".into(), "-f".into()])
            }
        );
        assert!(web.start.join.is_some());
        let verifier = specs
            .iter()
            .find(|s| s.owner.role == Role::Verifier)
            .expect("verifier");
        assert_eq!(verifier.start.process, Process::ImageEntrypoint);
        // container-1 is the agent's, container-2 the sidecar's: stopped before the verifier
        // container is created.
        let sidecar_stop = first(&sb, Op::Stop, "container-2");
        let verifier_create = first(&sb, Op::Create, "verifier");
        assert!(sidecar_stop < verifier_create, "{:?}", sb.calls());
        assert_eq!(sb.live(), Vec::<Resource>::new());
    }

    #[tokio::test(start_paused = true)]
    async fn a_live_verifier_keeps_the_sidecars_running() {
        let (sb, rec) = compose_trial("[verifier]\nenvironment_mode = \"live\"\n").await;
        assert_eq!(
            rec.verifier.status,
            crate::verifier::VerifierStatus::Passed,
            "{rec:#?}"
        );
        let test_sh = first(&sb, Op::Exec, "/tests/test.sh");
        assert!(
            !sb.calls()[..test_sh]
                .iter()
                .any(|(o, d)| *o == Op::Stop && d == "container-2"),
            "{:?}",
            sb.calls()
        );
        assert_eq!(sb.live(), Vec::<Resource>::new());
    }
}
