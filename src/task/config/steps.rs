//! Harbor `[[steps]]`: the keys of each step, as written. The loader checks
//! each step's files and applies Harbor's fallbacks to the task's tables.

use std::collections::{BTreeMap, BTreeSet};

use toml::Value;

use super::super::error::{TaskErrorKind, quote};
use super::super::model::{Healthcheck, MinReward};
use super::super::toml_read::{expect_array, number, type_error};
use super::{Parser, Policy, Result, Unknown, VerifierConfig};

const STEP_KEYS: &[&str] = &[
    "name",
    "agent",
    "verifier",
    "min_reward",
    "healthcheck",
    "artifacts",
];

/// One `[[steps]]` entry as written.
#[derive(Debug, Clone)]
pub(crate) struct StepConfig {
    /// Valid as a directory name (checked).
    pub name: String,
    /// `[steps.agent]`: `timeout_sec`, `user`, network override.
    pub agent_timeout_sec: Option<f64>,
    pub agent_user: Option<String>,
    pub agent_network: Option<Policy>,
    pub verifier: VerifierConfig,
    pub min_reward: Option<MinReward>,
    pub healthcheck: Option<Healthcheck>,
    pub artifacts: Vec<String>,
}

impl Parser<'_> {
    pub(super) fn steps(&mut self, value: &Value) -> Result<Vec<StepConfig>> {
        let ctx = self.ctx.clone();
        let items = expect_array(&ctx, "steps", value)?;
        let mut out: Vec<StepConfig> = Vec::with_capacity(items.len());
        let mut seen: BTreeSet<String> = BTreeSet::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("steps[{i}]");
            let t = self.table(&path, item, STEP_KEYS, &[], Unknown::Keep)?;
            let Some(name) = t.string("name")? else {
                return Err(t.ctx.value(
                    &t.key("name"),
                    "missing (every step needs a name: its directory under steps/)",
                ));
            };
            check_step_name(&name).map_err(|what| t.ctx.value(&t.key("name"), what))?;
            // Case-insensitive file systems would merge two such directories.
            if !seen.insert(name.to_lowercase()) {
                return Err(t.ctx.err(
                    TaskErrorKind::Duplicate,
                    &t.key("name"),
                    format!(
                        "duplicate step name {} (names must differ in more than case)",
                        quote(&name)
                    ),
                ));
            }
            let (agent_timeout_sec, agent_user, agent_network) = match t.get("agent") {
                Some(v) => self.agent_table(&t.key("agent"), v)?,
                None => (None, None, None),
            };
            let verifier = match t.get("verifier") {
                Some(v) => self.verifier_table(&t.key("verifier"), v)?,
                None => VerifierConfig::default(),
            };
            let min_reward = match t.get("min_reward") {
                Some(v) => Some(min_reward(&t.ctx, &t.key("min_reward"), v)?),
                None => None,
            };
            let healthcheck = match t.get("healthcheck") {
                Some(v) => Some(self.healthcheck(&t.key("healthcheck"), v)?),
                None => None,
            };
            let artifacts = match t.get("artifacts") {
                Some(v) => self.artifacts(&t.key("artifacts"), v)?,
                None => Vec::new(),
            };
            out.push(StepConfig {
                name,
                agent_timeout_sec,
                agent_user,
                agent_network,
                verifier,
                min_reward,
                healthcheck,
                artifacts,
            });
        }
        Ok(out)
    }
}

fn min_reward(ctx: &super::super::error::FileCtx, field: &str, v: &Value) -> Result<MinReward> {
    let finite = |field: &str, v: &Value| -> Result<f64> {
        let n = number(ctx, field, v)?;
        if n.is_finite() {
            Ok(n)
        } else {
            Err(ctx.value(field, format!("must be a finite number (got {v})")))
        }
    };
    match v {
        Value::Integer(_) | Value::Float(_) => Ok(MinReward::Reward(finite(field, v)?)),
        Value::Table(t) => {
            let mut keys = BTreeMap::new();
            for (k, v) in t {
                keys.insert(k.clone(), finite(&format!("{field}.{k}"), v)?);
            }
            Ok(MinReward::PerKey(keys))
        }
        other => Err(type_error(
            ctx,
            field,
            "a number or a table of numbers",
            other,
        )),
    }
}

/// Harbor's rule: a step name is one portable directory name. Returns what is wrong.
pub(crate) fn check_step_name(name: &str) -> std::result::Result<(), String> {
    const DEVICES: [&str; 4] = ["CON", "PRN", "AUX", "NUL"];
    let stem = name.split('.').next().unwrap_or("").trim_end();
    let device = DEVICES.iter().any(|d| stem.eq_ignore_ascii_case(d))
        || ["COM", "LPT"].iter().any(|p| {
            stem.len() == 4
                && stem
                    .get(..3)
                    .is_some_and(|head| head.eq_ignore_ascii_case(p))
                && stem
                    .get(3..)
                    .is_some_and(|n| n.chars().all(|c| ('1'..='9').contains(&c)))
        });
    let bad_char = name
        .chars()
        .find(|c| c.is_control() || "<>:\"/\\|?*".contains(*c));
    if name.trim().is_empty() {
        Err("must not be empty".to_string())
    } else if let Some(c) = bad_char {
        Err(format!(
            "invalid character {} in {} (a step name is one directory name)",
            quote(&c.to_string()),
            quote(name)
        ))
    } else if name == "." || name == ".." || name.ends_with('.') || name.ends_with(' ') {
        Err(format!(
            "must not be \".\" or \"..\" or end with a dot or space (got {})",
            quote(name)
        ))
    } else if device {
        Err(format!("{} is a reserved device name", quote(name)))
    } else if name.len() > 255 {
        Err("must be at most 255 bytes".to_string())
    } else {
        Ok(())
    }
}
