//! Compose's interpolation at load: which variables are set (Harbor's, then arbiter's
//! environment), one warning per key for the unset ones, and the main service's
//! `environment` as `[environment] env` templates.

use std::collections::BTreeMap;

use super::super::error::quote;
use super::interpolate::{Interpolated, interpolate, to_env_template};
use super::read::Reader;
use super::{
    HARBOR_FIXED_VARIABLES, HARBOR_HOST_VARIABLES, HARBOR_TRIAL_VARIABLES, HealthTest,
    MAIN_SERVICE, Service,
};

type Result<T> = std::result::Result<T, super::super::error::TaskError>;

impl Reader<'_> {
    /// A variable as compose would see it here: Harbor's (fixed, per trial — `trial`: set
    /// later — or the environment directory), else arbiter's environment. Harbor's host
    /// variables and, outside `trial`, its per-trial ones have no value.
    pub(super) fn lookup(&self, name: &str, trial: bool) -> Option<String> {
        if let Some((_, value)) = HARBOR_FIXED_VARIABLES.iter().find(|(n, _)| *n == name) {
            return Some(value.to_string());
        }
        if name == "CONTEXT_DIR" {
            return Some(self.environment_dir.display().to_string());
        }
        if HARBOR_TRIAL_VARIABLES.contains(&name) {
            return trial.then(|| "set when the trial runs".to_string());
        }
        if HARBOR_HOST_VARIABLES.contains(&name) {
            return None;
        }
        std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
    }

    /// One warning for `field` naming the variables that were unset (compose: empty).
    pub(super) fn warn_unset(&mut self, field: &str, unset: &[String]) {
        if unset.is_empty() {
            return;
        }
        let (harbor, host): (Vec<&String>, Vec<&String>) = unset.iter().partition(|n| {
            HARBOR_HOST_VARIABLES.contains(&n.as_str())
                || HARBOR_TRIAL_VARIABLES.contains(&n.as_str())
        });
        let names = |names: &[&String]| {
            names
                .iter()
                .map(|n| format!("${{{n}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !host.is_empty() {
            parts.push(format!(
                "{} {} not set; using an empty string",
                names(&host),
                if host.len() == 1 { "is" } else { "are" }
            ));
        }
        if !harbor.is_empty() {
            parts.push(format!(
                "{} {} Harbor's, with no value in arbiter here; using an empty string",
                names(&harbor),
                if harbor.len() == 1 { "is" } else { "are" }
            ));
        }
        self.warn(field, &parts.join("; "));
    }

    /// Compose's interpolation of every sidecar value arbiter uses (they are interpolated
    /// again when the trial starts the sidecars): unset
    /// variables warned once per key, `${VAR:?message}` and malformed references refused.
    pub(super) fn check_interpolation(
        &mut self,
        services: &BTreeMap<String, Service>,
    ) -> Result<()> {
        for (name, service) in services {
            let field = format!("services.{name}");
            let mut values: Vec<(String, &str)> = Vec::new();
            if name != MAIN_SERVICE {
                if let Some(image) = &service.image {
                    values.push((format!("{field}.image"), image));
                }
                for (key, value) in &service.environment {
                    if let Some(value) = value {
                        values.push((format!("{field}.environment.{key}"), value));
                    }
                }
                for (key, words) in [
                    ("command", &service.command),
                    ("entrypoint", &service.entrypoint),
                ] {
                    for word in words.iter().flatten() {
                        values.push((format!("{field}.{key}"), word));
                    }
                }
                for (key, value) in [
                    ("working_dir", &service.working_dir),
                    ("user", &service.user),
                ] {
                    if let Some(value) = value {
                        values.push((format!("{field}.{key}"), value));
                    }
                }
                match service.healthcheck.as_ref().map(|h| &h.test) {
                    Some(HealthTest::Exec(words)) => values.extend(
                        words
                            .iter()
                            .map(|w| (format!("{field}.healthcheck.test"), w.as_str())),
                    ),
                    Some(HealthTest::Shell(cmd)) => {
                        values.push((format!("{field}.healthcheck.test"), cmd));
                    }
                    Some(HealthTest::Disabled) | None => {}
                }
            }
            let mut unset: Vec<(String, Vec<String>)> = Vec::new();
            for (key, text) in values {
                let Interpolated { unset: names, .. } =
                    interpolate(text, &|n| self.lookup(n, true))
                        .map_err(|e| self.ctx.value(&key, e.to_string()))?;
                match unset.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, all)) => {
                        for n in names {
                            if !all.contains(&n) {
                                all.push(n);
                            }
                        }
                    }
                    None => unset.push((key, names)),
                }
            }
            for (key, names) in unset {
                self.warn_unset(&key, &names);
            }
        }
        Ok(())
    }

    /// The main service's `environment` as `[environment] env` values, interpolated now as
    /// compose would (unset: empty, one warning per key), with every value that comes from
    /// arbiter's environment left a `${NAME}` reference.
    pub(super) fn main_env(
        &mut self,
        services: &BTreeMap<String, Service>,
    ) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        let Some(main) = services.get(MAIN_SERVICE) else {
            return Ok(out);
        };
        let is_host = |n: &str| {
            !HARBOR_FIXED_VARIABLES.iter().any(|(h, _)| *h == n)
                && n != "CONTEXT_DIR"
                && !HARBOR_TRIAL_VARIABLES.contains(&n)
                && !HARBOR_HOST_VARIABLES.contains(&n)
        };
        for (key, value) in &main.environment {
            let field = format!("services.{MAIN_SERVICE}.environment.{key}");
            let Some(value) = value else {
                // `NAME` alone: compose passes the variable through when it is set.
                match self.lookup(key, false) {
                    Some(v) if v.is_empty() || !is_host(key) => {
                        out.insert(key.clone(), v);
                    }
                    Some(_) => {
                        out.insert(key.clone(), format!("${{{key}}}"));
                    }
                    None => {}
                }
                continue;
            };
            let (template, unset) = to_env_template(value, &|n| self.lookup(n, false), &is_host)
                .map_err(|e| self.ctx.value(&field, e.to_string()))?;
            let Some(template) = template else {
                return Err(self.ctx.value(
                    &field,
                    format!(
                        "{} leaves a literal \"${{\" in the value, which arbiter's [environment] env cannot hold",
                        quote(value)
                    ),
                ));
            };
            self.warn_unset(&field, &unset);
            out.insert(key.clone(), template);
        }
        Ok(out)
    }
}
