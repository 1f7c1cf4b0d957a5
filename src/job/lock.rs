//! `lock.json`: what a job's trials depend on (task checksums, images, agent and variant
//! definitions, threshold, timeouts), so a resumed job can tell whether its config changed in
//! a way that would alter trials.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::sandbox::ImageSpec;
use crate::task::Task;

use super::config::{AgentEntry, JobConfig, TimeoutMultipliers};

pub(crate) const LOCK_SCHEMA: &str = "arbiter.lock.v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Lock {
    pub schema: String,
    pub arbiter_version: String,
    pub tasks: BTreeMap<String, LockTask>,
    /// Agent definitions (secrets redacted) by name.
    pub agents: BTreeMap<String, serde_json::Value>,
    /// Variant definitions (secrets redacted) by name.
    pub variants: BTreeMap<String, serde_json::Value>,
    pub attempts: u32,
    pub pass_threshold: f64,
    pub timeouts: TimeoutMultipliers,
    /// Model providers (`models:`, keys as written, literals redacted) by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, serde_json::Value>,
    /// The job-level `integrity:` override, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<crate::task::IntegrityMode>,
    /// The job-level `network:` override (`--network`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<super::NetworkOverride>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LockTask {
    pub checksum: String,
    pub image: String,
}

impl Lock {
    pub(crate) fn new(
        tasks: &[Task],
        images: &[ImageSpec],
        saved: &JobConfig,
        attempts: u32,
        pass_threshold: f64,
        timeouts: TimeoutMultipliers,
    ) -> Self {
        let agents = saved
            .agents
            .iter()
            .filter_map(|entry| match entry {
                AgentEntry::Def(agent) => Some((
                    agent.name.clone(),
                    serde_json::to_value(agent).unwrap_or_default(),
                )),
                AgentEntry::Name(_) => None,
            })
            .collect();
        let mut variants: BTreeMap<String, serde_json::Value> = saved
            .variants
            .iter()
            .map(|v| (v.name.clone(), serde_json::to_value(v).unwrap_or_default()))
            .collect();
        if variants.is_empty() {
            variants.insert(
                "default".to_string(),
                serde_json::json!({ "name": "default" }),
            );
        }
        Lock {
            schema: LOCK_SCHEMA.to_string(),
            arbiter_version: env!("CARGO_PKG_VERSION").to_string(),
            tasks: tasks
                .iter()
                .zip(images)
                .map(|(t, i)| {
                    (
                        t.name.clone(),
                        LockTask {
                            checksum: t.checksum.clone(),
                            image: i.reference().to_string(),
                        },
                    )
                })
                .collect(),
            agents,
            variants,
            attempts,
            pass_threshold,
            timeouts,
            models: saved
                .models
                .iter()
                .map(|m| (m.name.clone(), serde_json::to_value(m).unwrap_or_default()))
                .collect(),
            integrity: saved.integrity,
            network: saved.network,
        }
    }

    /// The first change from `self` (the job as started) to `new` that would alter trials:
    /// `(field, what changed)`. Additions (tasks, agents, variants, attempts) are allowed.
    pub(crate) fn changes_to(&self, new: &Lock) -> Option<(String, String)> {
        for (name, old) in &self.tasks {
            match new.tasks.get(name) {
                None => {
                    return Some((
                        format!("tasks.{name}"),
                        "task removed from the job".to_string(),
                    ));
                }
                Some(t) if t.checksum != old.checksum => {
                    return Some((
                        format!("tasks.{name}"),
                        format!(
                            "task content changed ({} → {})",
                            short(&old.checksum),
                            short(&t.checksum)
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        for (kind, old_map, new_map) in [
            ("agents", &self.agents, &new.agents),
            ("variants", &self.variants, &new.variants),
            ("models", &self.models, &new.models),
        ] {
            for (name, old) in old_map {
                match new_map.get(name) {
                    None => {
                        return Some((
                            format!("{kind}.{name}"),
                            "removed from the job".to_string(),
                        ));
                    }
                    Some(v) if v != old => {
                        return Some((format!("{kind}.{name}"), "definition changed".to_string()));
                    }
                    Some(_) => {}
                }
            }
        }
        if new.integrity != self.integrity {
            return Some((
                "integrity".to_string(),
                format!(
                    "changed ({:?} → {:?}): trials already verified would be judged differently",
                    self.integrity, new.integrity
                ),
            ));
        }
        if new.network != self.network {
            return Some((
                "network".to_string(),
                format!(
                    "changed ({} → {}): trials already run had another network",
                    shown_network(self.network),
                    shown_network(new.network)
                ),
            ));
        }
        if new.attempts < self.attempts {
            return Some((
                "attempts".to_string(),
                format!("lowered from {} to {}", self.attempts, new.attempts),
            ));
        }
        if new.pass_threshold != self.pass_threshold {
            return Some((
                "pass_threshold".to_string(),
                format!(
                    "changed from {} to {}",
                    self.pass_threshold, new.pass_threshold
                ),
            ));
        }
        if new.timeouts != self.timeouts {
            return Some((
                "timeouts".to_string(),
                "timeout multipliers changed".to_string(),
            ));
        }
        None
    }
}

/// A network override as `resume` names it.
fn shown_network(n: Option<super::NetworkOverride>) -> String {
    match n {
        None => "the tasks' own".to_string(),
        Some(n) => {
            let phase = |p: Option<super::PhaseNetwork>| p.map_or("the task's", |p| p.as_str());
            format!("agent {}, verifier {}", phase(n.agent), phase(n.verifier))
        }
    }
}

fn short(checksum: &str) -> String {
    let hex = checksum.trim_start_matches("sha256:");
    format!("sha256:{}…", &hex[..hex.len().min(12)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock() -> Lock {
        Lock {
            schema: LOCK_SCHEMA.into(),
            arbiter_version: "0".into(),
            tasks: BTreeMap::from([(
                "a".into(),
                LockTask {
                    checksum: "sha256:aaaa".into(),
                    image: "i".into(),
                },
            )]),
            agents: BTreeMap::from([("x".into(), serde_json::json!({"run": ["x"]}))]),
            variants: BTreeMap::from([("default".into(), serde_json::json!({"name": "default"}))]),
            attempts: 2,
            pass_threshold: 1.0,
            timeouts: TimeoutMultipliers::default(),
            models: BTreeMap::from([("p".into(), serde_json::json!({"api": "scripted"}))]),
            integrity: None,
            network: None,
        }
    }

    #[test]
    fn additions_are_compatible() {
        let old = lock();
        let mut new = lock();
        new.attempts = 5;
        new.tasks.insert(
            "b".into(),
            LockTask {
                checksum: "sha256:bb".into(),
                image: "j".into(),
            },
        );
        new.variants
            .insert("v2".into(), serde_json::json!({"name": "v2"}));
        assert_eq!(old.changes_to(&new), None);
    }

    #[test]
    fn changes_are_named() {
        let old = lock();
        let mut new = lock();
        new.tasks.get_mut("a").expect("a").checksum = "sha256:cccc".into();
        assert_eq!(old.changes_to(&new).expect("change").0, "tasks.a");
        let mut new = lock();
        new.agents
            .insert("x".into(), serde_json::json!({"run": ["y"]}));
        assert_eq!(
            old.changes_to(&new),
            Some(("agents.x".into(), "definition changed".into()))
        );
        let mut new = lock();
        new.attempts = 1;
        assert_eq!(old.changes_to(&new).expect("change").0, "attempts");
        let mut new = lock();
        new.pass_threshold = 0.5;
        assert_eq!(old.changes_to(&new).expect("change").0, "pass_threshold");
    }

    #[test]
    fn a_changed_model_provider_changes_trials() {
        let old = lock();
        let mut new = lock();
        new.models
            .insert("p".into(), serde_json::json!({"api": "openai"}));
        let (what, change) = old.changes_to(&new).expect("a change");
        assert_eq!(what, "models.p");
        assert_eq!(change, "definition changed");
        assert_eq!(old.changes_to(&lock()), None);
    }

    #[test]
    fn a_changed_integrity_override_changes_trials() {
        let old = lock();
        let mut new = lock();
        new.integrity = Some(crate::task::IntegrityMode::Enforce);
        assert_eq!(old.changes_to(&new).expect("a change").0, "integrity");
    }
}
