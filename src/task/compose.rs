//! `environment/docker-compose.yaml` → typed services (SPEC §2.1), read key by key
//! like `task.toml`: every error names the file and the dotted key.
//!
//! Harbor's convention, followed here: the agent's container is the service
//! named `main`. Harbor lays the task's compose file over its own base file,
//! which defines `main` as built from `environment/` (or from
//! `[environment] docker_image`) with a keep-alive command; so a task's compose
//! file may omit `main` entirely or only add to it (env, `depends_on`, a
//! healthcheck). When `main` names no `build` and no `image` of its own, it
//! runs the task's usual image.
//!
//! Strings are kept as written: `${NAME}` interpolation (Harbor's variables
//! such as `MAIN_IMAGE_NAME`, `CPUS`, then the host env) is the runner's job,
//! so no host value ever lands in a record. The one exception is a build
//! context, resolved here (`${CONTEXT_DIR}` is `environment/`) so it can be
//! checked to stay inside the task directory. Keys arbiter does not use (ports,
//! volumes, networks, …) are warnings, never errors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_yaml::Value as Yaml;

use super::error::{FileCtx, TaskError, TaskErrorKind, quote};

type Result<T> = std::result::Result<T, TaskError>;

/// Harbor's name for the agent's service.
pub const MAIN_SERVICE: &str = "main";

/// Compose file names, in the order they are looked for under `environment/`.
pub const COMPOSE_FILES: [&str; 4] = [
    "docker-compose.yaml",
    "docker-compose.yml",
    "compose.yaml",
    "compose.yml",
];

/// Placeholders Harbor fills with the main image: a `main` service whose
/// `image` is one of these does not name an image of its own.
const MAIN_IMAGE_PLACEHOLDERS: [&str; 2] = ["${MAIN_IMAGE_NAME}", "${PREBUILT_IMAGE_NAME}"];

const TOP_KEYS: &[&str] = &["services", "version", "name", "networks", "volumes"];
const SERVICE_KEYS: &[&str] = &[
    "build",
    "image",
    "environment",
    "command",
    "entrypoint",
    "healthcheck",
    "depends_on",
    "working_dir",
    "user",
];
const BUILD_KEYS: &[&str] = &["context", "dockerfile", "args"];
const HEALTHCHECK_KEYS: &[&str] = &[
    "test",
    "interval",
    "timeout",
    "retries",
    "start_period",
    "start_interval",
    "disable",
];

/// A parsed compose file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compose {
    /// The compose file, canonical.
    pub file: PathBuf,
    /// The agent's service: always [`MAIN_SERVICE`]; present in `services`
    /// (as an empty service when the file does not declare it).
    pub main: String,
    /// Every service by name, `main` included.
    pub services: BTreeMap<String, Service>,
}

impl Compose {
    /// The main service.
    pub fn main_service(&self) -> Option<&Service> {
        self.services.get(&self.main)
    }

    /// Every service but `main`, by name.
    pub fn sidecars(&self) -> impl Iterator<Item = (&String, &Service)> {
        self.services.iter().filter(|(name, _)| **name != self.main)
    }

    /// Service names in start order: every service after the ones it depends
    /// on, otherwise by name (the file is checked to have no cycle).
    pub fn start_order(&self) -> Vec<&str> {
        let mut order: Vec<&str> = Vec::with_capacity(self.services.len());
        let mut placed: BTreeSet<&str> = BTreeSet::new();
        while order.len() < self.services.len() {
            let before = order.len();
            for (name, service) in &self.services {
                if placed.contains(name.as_str()) {
                    continue;
                }
                if service
                    .depends_on
                    .iter()
                    .all(|d| placed.contains(d.service.as_str()))
                {
                    placed.insert(name);
                    order.push(name);
                }
            }
            if order.len() == before {
                break; // unreachable for a checked file; never loop forever
            }
        }
        order
    }
}

/// One service.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Service {
    pub build: Option<Build>,
    /// As written (may hold `${NAME}`); for `main`, Harbor's image placeholders
    /// are dropped (`None`: the task's own image).
    pub image: Option<String>,
    /// `environment`, list (`K=V`) or map form. `None`: `K` alone, passed
    /// through from the host environment when set there (compose semantics).
    pub environment: BTreeMap<String, Option<String>>,
    /// `command`; a string is split into words like compose does (no shell).
    pub command: Option<Vec<String>>,
    /// `entrypoint`, same forms as `command`.
    pub entrypoint: Option<Vec<String>>,
    pub healthcheck: Option<ServiceHealthcheck>,
    /// In the order written.
    pub depends_on: Vec<Dependency>,
    pub working_dir: Option<String>,
    pub user: Option<String>,
}

/// `build`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    /// Canonical directory inside the task.
    pub context: PathBuf,
    /// Canonical Dockerfile inside the task (`dockerfile` relative to the
    /// context; default `Dockerfile`).
    pub dockerfile: PathBuf,
    /// `args`, as written.
    pub args: BTreeMap<String, String>,
}

/// `healthcheck`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceHealthcheck {
    pub test: HealthTest,
    /// Seconds; `None` leaves the engine default.
    pub interval_sec: Option<f64>,
    pub timeout_sec: Option<f64>,
    pub start_period_sec: Option<f64>,
    pub start_interval_sec: Option<f64>,
    pub retries: Option<u32>,
}

/// `healthcheck.test`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthTest {
    /// `["CMD", prog, args...]`: exec form.
    Exec(Vec<String>),
    /// `["CMD-SHELL", cmd]` or a plain string: run by the image's shell.
    Shell(String),
    /// `["NONE"]` or `disable: true`: the image's own healthcheck is turned off.
    Disabled,
}

/// One `depends_on` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub service: String,
    pub condition: DependsCondition,
}

/// `depends_on.<service>.condition`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DependsCondition {
    /// `service_started` (also the list form).
    Started,
    /// `service_healthy`: its healthcheck must pass first.
    Healthy,
    /// `service_completed_successfully`: it must exit 0 first.
    CompletedSuccessfully,
}

impl DependsCondition {
    pub const ALL: [DependsCondition; 3] =
        [Self::Started, Self::Healthy, Self::CompletedSuccessfully];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "service_started",
            Self::Healthy => "service_healthy",
            Self::CompletedSuccessfully => "service_completed_successfully",
        }
    }
}

/// The compose file under `environment_dir`, when there is one (file name only).
pub(crate) fn find(environment_dir: &Path) -> Option<&'static str> {
    COMPOSE_FILES
        .into_iter()
        .find(|f| environment_dir.join(f).is_file())
}

/// Parses the compose file `text`. `ctx` names the file as the user spelled
/// it; `environment_dir` (canonical) is where relative paths start and
/// `root` (canonical) the task directory every build path must stay in.
pub(crate) fn parse(
    ctx: &FileCtx,
    text: &str,
    file: PathBuf,
    environment_dir: &Path,
    root: &Path,
) -> Result<(Compose, Vec<String>)> {
    let mut doc: Yaml = serde_yaml::from_str(text).map_err(|e| {
        let message = e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        TaskError::new(
            TaskErrorKind::Syntax,
            ctx.file(),
            None,
            format!("invalid YAML: {message}"),
        )
    })?;
    doc.apply_merge().map_err(|e| {
        TaskError::new(
            TaskErrorKind::Syntax,
            ctx.file(),
            None,
            format!("invalid YAML merge key: {e}"),
        )
    })?;
    let mut reader = Reader {
        ctx,
        environment_dir,
        root,
        warnings: Vec::new(),
    };
    let compose = reader.document(&doc, file)?;
    Ok((compose, reader.warnings))
}

struct Reader<'a> {
    ctx: &'a FileCtx,
    environment_dir: &'a Path,
    root: &'a Path,
    warnings: Vec<String>,
}

impl Reader<'_> {
    fn warn(&mut self, field: &str, message: &str) {
        self.warnings.push(self.ctx.warning(field, message));
    }

    fn document(&mut self, doc: &Yaml, file: PathBuf) -> Result<Compose> {
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
        Ok(Compose {
            file,
            main: MAIN_SERVICE.to_string(),
            services,
        })
    }

    fn service(&mut self, field: &str, name: &str, body: &Yaml) -> Result<Service> {
        let map = match body {
            Yaml::Null => return Ok(Service::default()),
            Yaml::Mapping(m) => m,
            other => return Err(type_error(self.ctx, field, "a mapping", other)),
        };
        for (key, _) in map {
            let key = key_text(self.ctx, field, key)?;
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
        let get = |key: &str| map.get(key);
        let build = match get("build") {
            Some(v) => Some(self.build(&format!("{field}.build"), v)?),
            None => None,
        };
        let mut image = match get("image") {
            Some(v) => Some(scalar(self.ctx, &format!("{field}.image"), v)?),
            None => None,
        };
        if let Some(img) = &image
            && (img.trim().is_empty() || img.chars().any(char::is_whitespace))
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

fn valid_service_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

fn key_text(ctx: &FileCtx, field: &str, key: &Yaml) -> Result<String> {
    match key {
        Yaml::String(s) => Ok(s.clone()),
        other => Err(type_error(ctx, field, "string keys", other)),
    }
}

fn yaml_type(v: &Yaml) -> &'static str {
    match v {
        Yaml::Null => "null",
        Yaml::Bool(_) => "boolean",
        Yaml::Number(_) => "number",
        Yaml::String(_) => "string",
        Yaml::Sequence(_) => "list",
        Yaml::Mapping(_) => "mapping",
        Yaml::Tagged(_) => "tagged value",
    }
}

fn type_error(ctx: &FileCtx, field: &str, expected: &str, found: &Yaml) -> TaskError {
    ctx.err(
        TaskErrorKind::Type,
        field,
        format!("expected {expected}, found {}", yaml_type(found)),
    )
}

/// A string, number or boolean as text (compose accepts all three for strings).
fn scalar(ctx: &FileCtx, field: &str, v: &Yaml) -> Result<String> {
    match v {
        Yaml::String(s) => Ok(s.clone()),
        Yaml::Number(n) => Ok(n.to_string()),
        Yaml::Bool(b) => Ok(b.to_string()),
        other => Err(type_error(ctx, field, "a string", other)),
    }
}

/// `environment` / `args`: `["K=V", "K"]` or `{K: V}` (`null`: pass-through).
fn environment(ctx: &FileCtx, field: &str, v: &Yaml) -> Result<BTreeMap<String, Option<String>>> {
    let mut out = BTreeMap::new();
    match v {
        Yaml::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                let entry = scalar(ctx, &format!("{field}[{i}]"), item)?;
                let (key, value) = match entry.split_once('=') {
                    Some((k, v)) => (k.to_string(), Some(v.to_string())),
                    None => (entry.clone(), None),
                };
                if key.is_empty() {
                    return Err(ctx.value(
                        &format!("{field}[{i}]"),
                        format!("no variable name in {}", quote(&entry)),
                    ));
                }
                out.insert(key, value);
            }
        }
        Yaml::Mapping(m) => {
            for (k, value) in m {
                let key = key_text(ctx, field, k)?;
                let value = match value {
                    Yaml::Null => None,
                    other => Some(scalar(ctx, &format!("{field}.{key}"), other)?),
                };
                out.insert(key, value);
            }
        }
        Yaml::Null => {}
        other => return Err(type_error(ctx, field, "a list or a mapping", other)),
    }
    Ok(out)
}

/// `command` / `entrypoint`: a list of words, or a string split like compose
/// does (quotes and backslashes, no shell). `null` means "not set".
fn words(ctx: &FileCtx, field: &str, v: &Yaml) -> Result<Option<Vec<String>>> {
    match v {
        Yaml::Null => Ok(None),
        Yaml::Sequence(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| scalar(ctx, &format!("{field}[{i}]"), item))
            .collect::<Result<Vec<_>>>()
            .map(Some),
        Yaml::String(s) => split_words(s)
            .map(Some)
            .ok_or_else(|| ctx.value(field, format!("unterminated quote in {}", quote(s)))),
        other => Err(type_error(ctx, field, "a string or a list", other)),
    }
}

fn health_test(ctx: &FileCtx, field: &str, v: &Yaml) -> Result<HealthTest> {
    match v {
        Yaml::String(s) => Ok(HealthTest::Shell(s.clone())),
        Yaml::Sequence(items) => {
            let words: Vec<String> = items
                .iter()
                .enumerate()
                .map(|(i, item)| scalar(ctx, &format!("{field}[{i}]"), item))
                .collect::<Result<_>>()?;
            match words.split_first() {
                Some((kind, rest)) if kind == "CMD" && !rest.is_empty() => Ok(HealthTest::Exec(rest.to_vec())),
                Some((kind, rest)) if kind == "CMD-SHELL" && rest.len() == 1 => {
                    Ok(HealthTest::Shell(rest[0].clone()))
                }
                Some((kind, rest)) if kind == "NONE" && rest.is_empty() => Ok(HealthTest::Disabled),
                _ => Err(ctx.value(
                    field,
                    "must be [\"CMD\", prog, args...], [\"CMD-SHELL\", command], [\"NONE\"] or a command string",
                )),
            }
        }
        other => Err(type_error(ctx, field, "a string or a list", other)),
    }
}

fn depends_on(ctx: &FileCtx, field: &str, v: &Yaml) -> Result<Vec<Dependency>> {
    let mut out: Vec<Dependency> = Vec::new();
    match v {
        Yaml::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                out.push(Dependency {
                    service: scalar(ctx, &format!("{field}[{i}]"), item)?,
                    condition: DependsCondition::Started,
                });
            }
        }
        Yaml::Mapping(m) => {
            for (k, body) in m {
                let service = key_text(ctx, field, k)?;
                let entry = format!("{field}.{service}");
                let condition = match body {
                    Yaml::Null => DependsCondition::Started,
                    Yaml::Mapping(b) => match b.get("condition") {
                        None => DependsCondition::Started,
                        Some(c) => {
                            let text = scalar(ctx, &format!("{entry}.condition"), c)?;
                            DependsCondition::ALL
                                .into_iter()
                                .find(|d| d.as_str() == text)
                                .ok_or_else(|| {
                                    ctx.value(
                                        &format!("{entry}.condition"),
                                        format!(
                                            "unknown value {} (expected one of: {})",
                                            quote(&text),
                                            DependsCondition::ALL.map(|d| d.as_str()).join(", ")
                                        ),
                                    )
                                })?
                        }
                    },
                    other => return Err(type_error(ctx, &entry, "a mapping", other)),
                };
                out.push(Dependency { service, condition });
            }
        }
        other => return Err(type_error(ctx, field, "a list or a mapping", other)),
    }
    Ok(out)
}

/// Compose durations: `1h2m3s`, `1.5s`, `500ms`, `10us`; a bare number is seconds.
fn parse_duration(text: &str) -> Option<f64> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then_some(secs);
    }
    let mut total = 0.0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * factor;
    }
    total.is_finite().then_some(total)
}

/// Splits a command string into words: whitespace separates, `'…'` is
/// literal, `"…"` allows `\"` and `\\`, a backslash outside quotes escapes
/// the next character. `None` on an unterminated quote.
fn split_words(text: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            c @ ('"' | '\\' | '$' | '`') => word.push(c),
                            c => {
                                word.push('\\');
                                word.push(c);
                            }
                        },
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next()?);
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push(word);
    }
    Some(out)
}

/// Resolves `.` and `..` without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases: &[(&str, Option<f64>)] = &[
            ("5s", Some(5.0)),
            ("1m30s", Some(90.0)),
            ("1h", Some(3600.0)),
            ("500ms", Some(0.5)),
            ("1.5s", Some(1.5)),
            ("10", Some(10.0)),
            ("", None),
            ("5x", None),
            ("s", None),
            ("-1s", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), *expected, "{text:?}");
        }
    }

    #[test]
    fn command_strings_split_like_compose() {
        let cases: &[(&str, Option<&[&str]>)] = &[
            ("sleep infinity", Some(&["sleep", "infinity"])),
            ("sh -c 'echo a b'", Some(&["sh", "-c", "echo a b"])),
            (r#"echo "a \"b\"" c\ d"#, Some(&["echo", "a \"b\"", "c d"])),
            ("  ", Some(&[])),
            ("''", Some(&[""])),
            ("echo 'open", None),
        ];
        for (text, expected) in cases {
            let expected = expected.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(split_words(text), expected, "{text:?}");
        }
    }
}
