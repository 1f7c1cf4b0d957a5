//! The key-by-key reader of a compose document (services, builds, healthchecks).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml::Value as Yaml;

use super::super::checksum::normalize;
use super::super::error::{FileCtx, TaskError, TaskErrorKind, quote};
use super::interpolate::{Interpolated, interpolate};
use super::values::{
    depends_on, environment, health_test, key_text, parse_duration, scalar, type_error,
    valid_service_name, words,
};
use super::{
    BUILD_KEYS, Build, Compose, DependsCondition, HEALTHCHECK_KEYS, HealthTest,
    MAIN_IMAGE_PLACEHOLDERS, MAIN_SERVICE, SERVICE_KEYS, Service, ServiceHealthcheck, TOP_KEYS,
};

type Result<T> = std::result::Result<T, TaskError>;

/// Why a key of the main service is not applied.
fn main_ignored(key: &str) -> &'static str {
    match key {
        "healthcheck" => {
            "not run by arbiter, ignored: the agent's container is checked by task.toml's [environment.healthcheck], which arbiter runs in it before the agent starts"
        }
        "user" => {
            "not applied to the agent's container, ignored: task.toml sets the agent's user ([agent] user)"
        }
        "working_dir" => {
            "not applied to the agent's container, ignored: task.toml sets its working dir ([environment] workdir)"
        }
        _ => {
            "not applied to the agent's container, ignored: it runs the image's ENTRYPOINT with arbiter's keep-alive as its command"
        }
    }
}

/// Service keys that hand a container host devices or privileges. arbiter grants none of
/// them, and a task that asks for one (InfraBench passes an AMD GPU through with the first
/// four) would run without what it needs, so the task is refused, naming the key. Each entry
/// says what the key asks for.
const REFUSED_KEYS: &[(&str, &str)] = &[
    (
        "devices",
        "host devices in the container (GPU passthrough such as /dev/kfd, /dev/dri)",
    ),
    (
        "group_add",
        "supplementary groups for the container's processes (device access)",
    ),
    ("ipc", "an IPC namespace other than the container's own"),
    ("cap_add", "added Linux capabilities"),
    ("privileged", "a privileged container"),
];

pub(super) struct Reader<'a> {
    pub(super) ctx: &'a FileCtx,
    pub(super) environment_dir: &'a Path,
    pub(super) root: &'a Path,
    pub(super) warnings: Vec<String>,
}

impl Reader<'_> {
    pub(super) fn warn(&mut self, field: &str, message: &str) {
        self.warnings.push(self.ctx.warning(field, message));
    }

    pub(super) fn document(&mut self, doc: &Yaml, file: PathBuf) -> Result<Compose> {
        let top = match doc {
            Yaml::Mapping(m) => m,
            Yaml::Null => return Err(self.ctx.value("services", "missing (an empty file)")),
            other => return Err(type_error(self.ctx, "compose file", "a mapping", other)),
        };
        for (key, _) in top {
            let key = key_text(self.ctx, "compose file", key)?;
            if !TOP_KEYS.contains(&key.as_str()) && !key.starts_with("x-") {
                self.warn(&key, "not supported by arbiter, ignored");
            }
        }
        if top.get("networks").is_some() {
            self.warn(
                "networks",
                "ignored: services share the trial's network scope (SPEC §2.1)",
            );
        }
        if top.get("volumes").is_some() {
            self.warn(
                "volumes",
                "named volumes are not supported by arbiter, ignored",
            );
        }
        let mut services: BTreeMap<String, Service> = BTreeMap::new();
        match top.get("services") {
            None => {
                return Err(self
                    .ctx
                    .value("services", "missing (a compose file needs services:)"));
            }
            Some(Yaml::Null) => {}
            Some(Yaml::Mapping(m)) => {
                for (name, body) in m {
                    let name = key_text(self.ctx, "services", name)?;
                    let field = format!("services.{name}");
                    if !valid_service_name(&name) {
                        return Err(self.ctx.value(
                            &field,
                            format!(
                                "invalid service name {} (start with a letter or digit; then letters, digits, _ . -)",
                                quote(&name)
                            ),
                        ));
                    }
                    let service = self.service(&field, &name, body)?;
                    services.insert(name, service);
                }
            }
            Some(other) => return Err(type_error(self.ctx, "services", "a mapping", other)),
        }
        services.entry(MAIN_SERVICE.to_string()).or_default();
        self.check_dependencies(&services)?;
        self.check_interpolation(&services)?;
        let main_env = self.main_env(&services)?;
        Ok(Compose {
            file,
            main: MAIN_SERVICE.to_string(),
            services,
            main_env,
        })
    }

    fn service(&mut self, field: &str, name: &str, body: &Yaml) -> Result<Service> {
        let map = match body {
            Yaml::Null => return Ok(Service::default()),
            Yaml::Mapping(m) => m,
            other => return Err(type_error(self.ctx, field, "a mapping", other)),
        };
        for (key, value) in map {
            let key = key_text(self.ctx, field, key)?;
            if let Some((_, what)) = REFUSED_KEYS.iter().find(|(k, _)| *k == key)
                && asks_for_something(&key, value)
            {
                return Err(self.ctx.value(
                    &format!("{field}.{key}"),
                    format!(
                        "asks for {what}, which arbiter does not grant; the task is refused rather than run without it"
                    ),
                ));
            }
            if SERVICE_KEYS.contains(&key.as_str()) || key.starts_with("x-") {
                continue;
            }
            let why = match key.as_str() {
                "ports" | "expose" => {
                    "not published: sidecars share the trial's network scope and reach each other on 127.0.0.1 (SPEC §2.1), ignored"
                }
                "volumes" => "host and named volumes are not supported by arbiter, ignored",
                _ => "not supported by arbiter, ignored",
            };
            self.warn(&format!("{field}.{key}"), why);
        }
        if name == MAIN_SERVICE {
            for key in [
                "command",
                "entrypoint",
                "healthcheck",
                "user",
                "working_dir",
            ] {
                // Harbor's own keep-alive command is what arbiter runs anyway.
                let keepalive = key == "command"
                    && map.get(key).is_some_and(|v| {
                        words(self.ctx, "command", v)
                            .ok()
                            .flatten()
                            .is_some_and(|w| {
                                w == ["sh", "-c", "sleep infinity"] || w == ["sleep", "infinity"]
                            })
                    });
                if map.get(key).is_some() && !keepalive {
                    self.warn(&format!("{field}.{key}"), main_ignored(key));
                }
            }
        }
        let get = |key: &str| map.get(key);
        let build = match get("build") {
            Some(v) => Some(self.build(&format!("{field}.build"), v)?),
            None => None,
        };
        let mut image = match get("image") {
            Some(v) => Some(scalar(self.ctx, &format!("{field}.image"), v)?),
            None => None,
        };
        // Checked as written unless interpolation may change it (a `${VAR:?message}`).
        if let Some(img) = &image
            && (img.trim().is_empty()
                || (!img.contains('$') && img.chars().any(char::is_whitespace)))
        {
            return Err(self.ctx.value(
                &format!("{field}.image"),
                format!("not a valid image reference (got {})", quote(img)),
            ));
        }
        if name == MAIN_SERVICE
            && image
                .as_deref()
                .is_some_and(|i| MAIN_IMAGE_PLACEHOLDERS.contains(&i))
        {
            image = None;
        }
        // The main service's own image is the task's image: interpolated now, as compose would.
        if name == MAIN_SERVICE
            && let Some(img) = &image
        {
            let image_field = format!("{field}.image");
            let Interpolated { value, unset } = interpolate(img, &|n| self.lookup(n, false))
                .map_err(|e| self.ctx.value(&image_field, e.to_string()))?;
            self.warn_unset(&image_field, &unset);
            if value.trim().is_empty() || value.chars().any(char::is_whitespace) {
                return Err(self.ctx.value(
                    &image_field,
                    format!(
                        "not a valid image reference once interpolated (got {})",
                        quote(img)
                    ),
                ));
            }
            image = Some(value);
        }
        if name != MAIN_SERVICE && build.is_none() && image.is_none() {
            return Err(self
                .ctx
                .value(field, "a sidecar service needs build or image"));
        }
        Ok(Service {
            build,
            image,
            environment: match get("environment") {
                Some(v) => environment(self.ctx, &format!("{field}.environment"), v)?,
                None => BTreeMap::new(),
            },
            command: match get("command") {
                Some(v) => words(self.ctx, &format!("{field}.command"), v)?,
                None => None,
            },
            entrypoint: match get("entrypoint") {
                Some(v) => words(self.ctx, &format!("{field}.entrypoint"), v)?,
                None => None,
            },
            healthcheck: match get("healthcheck") {
                Some(v) => self.healthcheck(&format!("{field}.healthcheck"), v)?,
                None => None,
            },
            depends_on: match get("depends_on") {
                Some(v) => depends_on(self.ctx, &format!("{field}.depends_on"), v)?,
                None => Vec::new(),
            },
            working_dir: match get("working_dir") {
                Some(v) => {
                    let dir = scalar(self.ctx, &format!("{field}.working_dir"), v)?;
                    if !dir.starts_with('/') && !dir.starts_with("${") {
                        return Err(self.ctx.err(
                            TaskErrorKind::Path,
                            &format!("{field}.working_dir"),
                            format!(
                                "must be an absolute path inside the container (got {})",
                                quote(&dir)
                            ),
                        ));
                    }
                    Some(dir)
                }
                None => None,
            },
            user: match get("user") {
                Some(v) => Some(scalar(self.ctx, &format!("{field}.user"), v)?),
                None => None,
            },
        })
    }

    fn build(&mut self, field: &str, v: &Yaml) -> Result<Build> {
        let (context, dockerfile, args) = match v {
            Yaml::String(s) => (s.clone(), None, BTreeMap::new()),
            Yaml::Mapping(m) => {
                for (key, _) in m {
                    let key = key_text(self.ctx, field, key)?;
                    if !BUILD_KEYS.contains(&key.as_str()) && !key.starts_with("x-") {
                        self.warn(
                            &format!("{field}.{key}"),
                            "not supported by arbiter, ignored",
                        );
                    }
                }
                let context = match m.get("context") {
                    Some(v) => scalar(self.ctx, &format!("{field}.context"), v)?,
                    None => ".".to_string(),
                };
                let dockerfile = match m.get("dockerfile") {
                    Some(v) => Some(scalar(self.ctx, &format!("{field}.dockerfile"), v)?),
                    None => None,
                };
                if m.get("args").is_some() {
                    self.warn(
                        &format!("{field}.args"),
                        "build args are not passed to the build yet, ignored (the Dockerfile's ARG defaults apply)",
                    );
                }
                let args = match m.get("args") {
                    Some(v) => environment(self.ctx, &format!("{field}.args"), v)?
                        .into_iter()
                        .map(|(k, v)| (k, v.unwrap_or_default()))
                        .collect(),
                    None => BTreeMap::new(),
                };
                (context, dockerfile, args)
            }
            other => return Err(type_error(self.ctx, field, "a string or a mapping", other)),
        };
        let context_field = format!("{field}.context");
        let spelled = context.replace(
            "${CONTEXT_DIR}",
            &self.environment_dir.display().to_string(),
        );
        if spelled.contains("${") || spelled.contains("://") || spelled.starts_with("git@") {
            return Err(self.ctx.err(
                TaskErrorKind::Path,
                &context_field,
                format!(
                    "must be a directory inside the task (got {}; only ${{CONTEXT_DIR}} is resolved)",
                    quote(&context)
                ),
            ));
        }
        let context_dir = self.inside(
            &context_field,
            &context,
            &self.environment_dir.join(&spelled),
        )?;
        if !context_dir.is_dir() {
            return Err(self.ctx.err(
                TaskErrorKind::Path,
                &context_field,
                format!("not a directory inside the task (got {})", quote(&context)),
            ));
        }
        let dockerfile_field = format!("{field}.dockerfile");
        let name = dockerfile.unwrap_or_else(|| "Dockerfile".to_string());
        let path = self.inside(&dockerfile_field, &name, &context_dir.join(&name))?;
        if !path.is_file() {
            return Err(self.ctx.err(
                TaskErrorKind::File,
                &dockerfile_field,
                format!(
                    "{} does not exist in the build context {}",
                    quote(&name),
                    quote(&context)
                ),
            ));
        }
        Ok(Build {
            context: context_dir,
            dockerfile: path,
            args,
        })
    }

    /// `path` made canonical (lexically when it does not exist), refused when
    /// it leaves the task directory.
    fn inside(&self, field: &str, spelled: &str, path: &Path) -> Result<PathBuf> {
        let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| normalize(path));
        if !resolved.starts_with(self.root) {
            return Err(self.ctx.err(
                TaskErrorKind::Path,
                field,
                format!(
                    "must stay inside the task directory (got {})",
                    quote(spelled)
                ),
            ));
        }
        Ok(resolved)
    }

    fn healthcheck(&mut self, field: &str, v: &Yaml) -> Result<Option<ServiceHealthcheck>> {
        let map = match v {
            Yaml::Mapping(m) => m,
            other => return Err(type_error(self.ctx, field, "a mapping", other)),
        };
        for (key, _) in map {
            let key = key_text(self.ctx, field, key)?;
            if !HEALTHCHECK_KEYS.contains(&key.as_str()) {
                self.warn(
                    &format!("{field}.{key}"),
                    "not supported by arbiter, ignored",
                );
            }
        }
        let disabled = match map.get("disable") {
            None => false,
            Some(Yaml::Bool(b)) => *b,
            Some(other) => {
                return Err(type_error(
                    self.ctx,
                    &format!("{field}.disable"),
                    "a boolean",
                    other,
                ));
            }
        };
        let test = match (disabled, map.get("test")) {
            (true, _) => HealthTest::Disabled,
            (false, None) => {
                return Err(self.ctx.value(
                    &format!("{field}.test"),
                    "missing (a healthcheck needs a test)",
                ));
            }
            (false, Some(v)) => health_test(self.ctx, &format!("{field}.test"), v)?,
        };
        let duration = |key: &str| -> Result<Option<f64>> {
            match map.get(key) {
                None => Ok(None),
                Some(v) => {
                    let text = scalar(self.ctx, &format!("{field}.{key}"), v)?;
                    parse_duration(&text).map(Some).ok_or_else(|| {
                        self.ctx.value(
                            &format!("{field}.{key}"),
                            format!(
                                "not a duration like \"5s\" or \"1m30s\" (got {})",
                                quote(&text)
                            ),
                        )
                    })
                }
            }
        };
        let retries = match map.get("retries") {
            None => None,
            Some(Yaml::Number(n)) if n.as_u64().is_some_and(|r| r <= u64::from(u32::MAX)) => {
                n.as_u64().map(|r| r as u32)
            }
            Some(other) => {
                return Err(type_error(
                    self.ctx,
                    &format!("{field}.retries"),
                    "a non-negative integer",
                    other,
                ));
            }
        };
        Ok(Some(ServiceHealthcheck {
            test,
            interval_sec: duration("interval")?,
            timeout_sec: duration("timeout")?,
            start_period_sec: duration("start_period")?,
            start_interval_sec: duration("start_interval")?,
            retries,
        }))
    }

    fn check_dependencies(&self, services: &BTreeMap<String, Service>) -> Result<()> {
        for (name, service) in services {
            for (i, dep) in service.depends_on.iter().enumerate() {
                if !services.contains_key(&dep.service) {
                    return Err(self.ctx.value(
                        &format!("services.{name}.depends_on[{i}]"),
                        format!("unknown service {}", quote(&dep.service)),
                    ));
                }
                if dep.condition == DependsCondition::Healthy
                    && services[&dep.service].healthcheck.is_none()
                {
                    // The image may define a HEALTHCHECK; only the engine knows.
                    tracing::debug!(service = %dep.service, "service_healthy on a service without a compose healthcheck");
                }
            }
        }
        // A cycle leaves services that never become startable.
        let compose = Compose {
            file: PathBuf::new(),
            main: MAIN_SERVICE.to_string(),
            services: services.clone(),
            main_env: BTreeMap::new(),
        };
        let order = compose.start_order();
        if order.len() < services.len() {
            let stuck: Vec<&str> = services
                .keys()
                .map(String::as_str)
                .filter(|n| !order.contains(n))
                .collect();
            return Err(self.ctx.value(
                "services",
                format!("depends_on has a cycle among: {}", stuck.join(", ")),
            ));
        }
        Ok(())
    }
}

/// Whether a refused key asks for anything: `privileged: false`, `ipc: private` and an empty
/// list are compose's defaults.
fn asks_for_something(key: &str, value: &Yaml) -> bool {
    match value {
        Yaml::Null => false,
        Yaml::Bool(b) => *b,
        Yaml::Sequence(items) => !items.is_empty(),
        Yaml::String(s) if key == "ipc" => !matches!(s.trim(), "" | "private" | "shareable"),
        Yaml::String(s) => !s.trim().is_empty(),
        _ => true,
    }
}
