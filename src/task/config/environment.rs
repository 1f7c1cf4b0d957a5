//! `[environment]` (and `[verifier.environment]`): image, limits, network, env.

use toml::Value;

use super::super::error::{TaskErrorKind, quote};
use super::super::model::{
    DEFAULT_BUILD_TIMEOUT_SEC, DEFAULT_HEALTHCHECK_INTERVAL_SEC, DEFAULT_HEALTHCHECK_RETRIES,
    DEFAULT_HEALTHCHECK_START_INTERVAL_SEC, DEFAULT_HEALTHCHECK_TIMEOUT_SEC, Healthcheck,
    MIN_MEMORY_MB, NetworkMode,
};
use super::super::toml_read::{container_path, integer, number, string_list};
use super::{
    ENVIRONMENT_KEYS, EnvConfig, HARBOR_ENVIRONMENT_KEYS, HEALTHCHECK_KEYS, MAX_CPUS, MAX_GPUS,
    Parser, Result, Unknown,
};

impl Parser<'_> {
    pub(super) fn environment_table(&mut self, path: &str, value: &Value) -> Result<EnvConfig> {
        let t = self.table(
            path,
            value,
            ENVIRONMENT_KEYS,
            HARBOR_ENVIRONMENT_KEYS,
            Unknown::Keep,
        )?;
        let d = EnvConfig::default();

        // First: a Windows task's other values (`workdir = 'C:\app'`) are Windows values.
        if let Some(os) = t.string("os")?
            && !os.eq_ignore_ascii_case("linux")
        {
            return Err(t.ctx.value(
                &t.key("os"),
                format!(
                    "{} is not supported (arbiter runs Linux containers only)",
                    quote(&os)
                ),
            ));
        }

        let docker_image = match t.string("docker_image")? {
            Some(image) if image.trim().is_empty() || image.chars().any(char::is_whitespace) => {
                return Err(t.ctx.value(
                    &t.key("docker_image"),
                    format!("not a valid image reference (got {})", quote(&image)),
                ));
            }
            other => other,
        };

        let cpus = match t.get("cpus") {
            Some(v) => {
                let cpus = number(&t.ctx, &t.key("cpus"), v)?;
                if !cpus.is_finite() || cpus <= 0.0 {
                    return Err(t
                        .ctx
                        .value(&t.key("cpus"), format!("must be greater than 0 (got {v})")));
                }
                if cpus > MAX_CPUS {
                    return Err(t.ctx.value(
                        &t.key("cpus"),
                        format!("must be at most {MAX_CPUS} (got {v})"),
                    ));
                }
                cpus
            }
            None => d.cpus,
        };

        let memory_mb = t.memory_mb(
            "memory_mb",
            "memory",
            MIN_MEMORY_MB as i64,
            "Docker's minimum",
        )?;
        let storage_mb = t.memory_mb("storage_mb", "storage", 1, "")?;

        let max_files = match t.get("max_files") {
            Some(v) => {
                let n = integer(&t.ctx, &t.key("max_files"), v)?;
                if n <= 0 {
                    return Err(t.ctx.value(
                        &t.key("max_files"),
                        format!("must be greater than 0 (got {v})"),
                    ));
                }
                Some(n as u64)
            }
            None => None,
        };

        let pids_limit = match t.get("pids_limit") {
            Some(v) => {
                let n = integer(&t.ctx, &t.key("pids_limit"), v)?;
                if n <= 0 {
                    return Err(t.ctx.value(
                        &t.key("pids_limit"),
                        format!("must be greater than 0 (got {v})"),
                    ));
                }
                n
            }
            None => d.pids_limit,
        };

        let policy = self.network_policy(&t)?;
        let network_mode = policy.as_ref().map(|(mode, _)| *mode);
        let allowed_hosts = policy.map(|(_, hosts)| hosts).unwrap_or_default();
        let allow_internet = t.boolean("allow_internet")?;
        let network = match (network_mode, allow_internet) {
            (Some(mode), Some(allow)) if mode.has_network() != allow => {
                return Err(t.ctx.err(
                    TaskErrorKind::Conflict,
                    &t.key("allow_internet"),
                    format!(
                        "conflicts with network_mode = \"{}\" (allow_internet = {allow} means {}; remove one of them)",
                        mode.as_str(),
                        if allow { "bridge" } else { "no-network" },
                    ),
                ));
            }
            (Some(mode), _) => Some(mode),
            (None, Some(true)) => Some(NetworkMode::Bridge),
            (None, Some(false)) => Some(NetworkMode::NoNetwork),
            (None, None) => None,
        };

        let workdir = match t.string("workdir")? {
            Some(w) => Some(container_path(&t.ctx, &t.key("workdir"), &w)?),
            None => None,
        };

        let env = t.string_map("env")?.unwrap_or_default();

        let gpus = match t.get("gpus") {
            Some(v) => {
                let n = integer(&t.ctx, &t.key("gpus"), v)?;
                if !(0..=MAX_GPUS).contains(&n) {
                    return Err(t.ctx.value(
                        &t.key("gpus"),
                        format!("must be between 0 and {MAX_GPUS} (got {v})"),
                    ));
                }
                n as u32
            }
            None => 0,
        };
        let gpu_types = match t.get("gpu_types") {
            Some(v) => {
                let types = string_list(&t.ctx, &t.key("gpu_types"), v)?;
                if let Some(i) = types.iter().position(|g| g.trim().is_empty()) {
                    return Err(t
                        .ctx
                        .value(&format!("{}[{i}]", t.key("gpu_types")), "must not be empty"));
                }
                types
            }
            None => Vec::new(),
        };
        if !gpu_types.is_empty() && gpus == 0 {
            self.warn(
                &t.key("gpu_types"),
                "has no effect with gpus = 0 (no GPU is requested)",
            );
        }
        let healthcheck = match t.get("healthcheck") {
            Some(v) => Some(self.healthcheck(&t.key("healthcheck"), v)?),
            None => None,
        };
        if healthcheck.is_some() && path != "environment" {
            // The trial runs `[environment.healthcheck]` in the agent's container only.
            self.warn(
                &t.key("healthcheck"),
                "not run by arbiter, ignored: only [environment.healthcheck] is run (in the agent's container, before the agent)",
            );
        }

        // Harbor keys that ask for something arbiter cannot give: say so.
        let unsupported: Vec<String> = HARBOR_ENVIRONMENT_KEYS
            .iter()
            .filter(|key| match t.get(key) {
                None => false,
                Some(Value::Integer(n)) => *n > 0,
                Some(Value::Array(a)) => !a.is_empty(),
                Some(Value::String(s)) => !s.is_empty(),
                Some(_) => true,
            })
            .map(|key| t.key(key))
            .collect();
        for key in unsupported {
            self.warn(&key, "not supported by arbiter, ignored (kept as metadata)");
        }

        Ok(EnvConfig {
            docker_image,
            build_timeout_sec: t
                .duration("build_timeout_sec")?
                .unwrap_or(DEFAULT_BUILD_TIMEOUT_SEC),
            cpus,
            memory_mb: memory_mb.unwrap_or(d.memory_mb),
            pids_limit,
            network,
            allowed_hosts,
            workdir,
            storage_mb,
            max_files,
            env,
            gpus,
            gpu_types,
            healthcheck,
        })
    }

    /// `[environment.healthcheck]` / `[steps.healthcheck]` (Harbor's
    /// `HealthcheckConfig`, with its defaults; intervals may be 0).
    pub(super) fn healthcheck(&mut self, path: &str, value: &Value) -> Result<Healthcheck> {
        let t = self.table(path, value, HEALTHCHECK_KEYS, &[], Unknown::Keep)?;
        let Some(command) = t.string("command")? else {
            return Err(t.ctx.value(
                &t.key("command"),
                "missing (a healthcheck needs the shell command to run)",
            ));
        };
        if command.trim().is_empty() {
            return Err(t.ctx.value(&t.key("command"), "must not be empty"));
        }
        let retries = match t.get("retries") {
            Some(v) => {
                let n = integer(&t.ctx, &t.key("retries"), v)?;
                if !(0..=i64::from(u32::MAX)).contains(&n) {
                    return Err(t
                        .ctx
                        .value(&t.key("retries"), format!("must not be negative (got {v})")));
                }
                n as u32
            }
            None => DEFAULT_HEALTHCHECK_RETRIES,
        };
        Ok(Healthcheck {
            command,
            interval_sec: t
                .seconds("interval_sec")?
                .unwrap_or(DEFAULT_HEALTHCHECK_INTERVAL_SEC),
            timeout_sec: t
                .duration("timeout_sec")?
                .unwrap_or(DEFAULT_HEALTHCHECK_TIMEOUT_SEC),
            start_period_sec: t.seconds("start_period_sec")?.unwrap_or(0.0),
            start_interval_sec: t
                .seconds("start_interval_sec")?
                .unwrap_or(DEFAULT_HEALTHCHECK_START_INTERVAL_SEC),
            retries,
        })
    }
}
