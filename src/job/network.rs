//! The job's network override (SPEC §2): `arbiter run … --network MODE` and `network:` in the
//! job config — one mode for every phase, or `{agent: …, verifier: …}` — replacing what the
//! tasks ask for, so a user can run a benchmark offline or stricter than its authors meant.
//! It is applied to the tasks when the job is resolved (the trial never learns where a
//! network came from), recorded in every trial's `harness_overrides`, and kept in the job's
//! lock, so resuming with another value is refused.
//!
//! An agent's own `network:` (its definition in the config) still decides that agent's phase.

use serde::{Deserialize, Serialize};

use crate::agent::HarnessOverride;
use crate::sandbox::Availability;
use crate::task::{NetworkMode, Task};

/// A phase's network as a job may set it. Allowlists stay per task or per agent: they need
/// their hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PhaseNetwork {
    /// No network (`none`, also spelled `no-network`).
    None,
    /// Harbor's `public` (the engine's default bridge; also spelled `bridge`).
    Public,
    /// The host's network namespace.
    Host,
}

impl PhaseNetwork {
    pub const NAMES: &str = "none, public or host";

    pub fn parse(raw: &str) -> Option<PhaseNetwork> {
        match raw {
            "none" | "no-network" => Some(PhaseNetwork::None),
            "public" | "bridge" => Some(PhaseNetwork::Public),
            "host" => Some(PhaseNetwork::Host),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PhaseNetwork::None => "none",
            PhaseNetwork::Public => "public",
            PhaseNetwork::Host => "host",
        }
    }

    pub fn mode(self) -> NetworkMode {
        match self {
            PhaseNetwork::None => NetworkMode::NoNetwork,
            PhaseNetwork::Public => NetworkMode::Bridge,
            PhaseNetwork::Host => NetworkMode::Host,
        }
    }
}

impl Serialize for PhaseNetwork {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for PhaseNetwork {
    /// By hand, so a bad value names the choices in one line.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        PhaseNetwork::parse(&raw).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown network {raw:?} (expected {})",
                PhaseNetwork::NAMES
            ))
        })
    }
}

/// The job's override: per phase, `None` leaves the tasks' own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct NetworkOverride {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<PhaseNetwork>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verifier: Option<PhaseNetwork>,
}

impl<'de> Deserialize<'de> for NetworkOverride {
    /// `network: none` (every phase) or `network: {agent: none, verifier: public}`.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct PerPhase {
            #[serde(default)]
            agent: Option<PhaseNetwork>,
            #[serde(default)]
            verifier: Option<PhaseNetwork>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            All(String),
            PerPhase(PerPhase),
        }
        match Raw::deserialize(deserializer).map_err(|_| {
            serde::de::Error::custom(format!(
                "expected a mode ({}) or {{agent: MODE, verifier: MODE}}",
                PhaseNetwork::NAMES
            ))
        })? {
            Raw::All(raw) => {
                let mode = PhaseNetwork::parse(&raw).ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "unknown network {raw:?} (expected {})",
                        PhaseNetwork::NAMES
                    ))
                })?;
                Ok(NetworkOverride::every_phase(mode))
            }
            Raw::PerPhase(p) => Ok(NetworkOverride {
                agent: p.agent,
                verifier: p.verifier,
            }),
        }
    }
}

impl NetworkOverride {
    pub fn every_phase(mode: PhaseNetwork) -> NetworkOverride {
        NetworkOverride {
            agent: Some(mode),
            verifier: Some(mode),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.agent.is_none() && self.verifier.is_none()
    }

    /// The task as the job runs it: every agent phase (the task's, its steps') and every
    /// verifier (the task's, a separate verifier's environment, the steps') on the override.
    pub(crate) fn apply(&self, task: &mut Task) {
        if let Some(n) = self.agent {
            task.environment.network = n.mode();
            task.environment.allowed_hosts.clear();
            for step in &mut task.steps {
                step.network = n.mode();
                step.allowed_hosts.clear();
            }
        }
        if let Some(n) = self.verifier {
            let verifiers = std::iter::once(&mut task.verifier)
                .chain(task.steps.iter_mut().map(|s| &mut s.verifier));
            for verifier in verifiers {
                verifier.network = n.mode();
                verifier.allowed_hosts.clear();
                if let Some(env) = verifier.environment.as_mut() {
                    env.network = n.mode();
                    env.allowed_hosts.clear();
                }
            }
        }
    }

    /// What every trial's `harness_overrides` says of it; `source` is `cli` or `job_config`.
    pub(crate) fn recorded(&self, source: &str) -> Vec<HarnessOverride> {
        [
            ("network.agent", self.agent),
            ("network.verifier", self.verifier),
        ]
        .into_iter()
        .filter_map(|(key, n)| {
            n.map(|n| HarnessOverride {
                key: key.to_string(),
                value: n.as_str().to_string(),
                source: source.to_string(),
            })
        })
        .collect()
    }
}

/// One phase of one task whose container network the backend must be able to give.
#[derive(Debug)]
pub(crate) struct PhaseNeed<'a> {
    pub task: &'a Task,
    /// `agent` or `verifier` (a step's: `steps[i].verifier`), for the message.
    pub phase: String,
    pub network: crate::sandbox::Network,
    /// The mode as task.toml spells it (`public`, `host`) and where it came from.
    pub why: String,
}

/// Every phase of the job and the network its containers get (`allowlist` is `none` with
/// the egress proxy): the agent phase of each task under each agent that runs it (an agent's
/// own `network:` over the task's), and each verifier (the task's, its steps').
pub(crate) fn phase_networks<'a>(
    tasks: &'a [std::sync::Arc<Task>],
    agents: &[std::sync::Arc<crate::agent::Agent>],
    overridden: &NetworkOverride,
) -> Vec<PhaseNeed<'a>> {
    use crate::trial::sandbox_network;
    let why = |mode: NetworkMode, overridden: bool, set: bool| {
        let name = if mode == NetworkMode::Bridge {
            "public"
        } else {
            mode.as_str()
        };
        match (overridden, set) {
            (true, _) => format!("\"{name}\" (the job's network override)"),
            (false, true) => format!("\"{name}\""),
            (false, false) => format!("\"{name}\" (Harbor's default for a task that sets none)"),
        }
    };
    let mut out = Vec::new();
    for task in tasks {
        let set = task_sets_network(task);
        let mut agent_modes: Vec<(NetworkMode, String)> = Vec::new();
        for agent in agents {
            let (mode, text) = match agent.network {
                Some(n) => (
                    n.mode(),
                    format!("\"{}\" (agent {}'s network:)", n.as_str(), agent.name),
                ),
                None => {
                    let mode = task.environment.network;
                    (mode, why(mode, overridden.agent.is_some(), set))
                }
            };
            if !agent_modes.iter().any(|(m, _)| *m == mode) {
                agent_modes.push((mode, text));
            }
        }
        for (mode, text) in agent_modes {
            out.push(PhaseNeed {
                task,
                phase: "agent".to_string(),
                network: sandbox_network(mode),
                why: text,
            });
        }
        let verifiers = std::iter::once(("verifier".to_string(), &task.verifier)).chain(
            task.steps
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("steps[{i}].verifier"), &s.verifier)),
        );
        for (phase, verifier) in verifiers {
            out.push(PhaseNeed {
                task,
                phase,
                network: sandbox_network(verifier.network),
                why: why(verifier.network, overridden.verifier.is_some(), set),
            });
        }
    }
    out
}

/// Whether task.toml says anything of the network (else Harbor's default applies).
fn task_sets_network(task: &Task) -> bool {
    let text = std::fs::read_to_string(task.dir.join("task.toml")).unwrap_or_default();
    text.contains("network_mode")
        || text.contains("allow_internet")
        || text.contains("allowed_hosts")
}

/// The first phase whose network the backend cannot give (`available` answers per network,
/// in the backend's words), as one line naming the task, the phase and the network.
pub(crate) fn refuse_unavailable(
    needs: &[PhaseNeed<'_>],
    available: impl Fn(crate::sandbox::Network) -> Availability,
) -> Result<(), super::ConfigError> {
    let Some((need, reason)) = needs.iter().find_map(|n| match available(n.network) {
        Availability::Available => None,
        Availability::Unavailable(reason) => Some((n, reason)),
    }) else {
        return Ok(());
    };
    Err(super::config::field(
        need.task.dir.join("task.toml").display().to_string(),
        "environment.network_mode",
        format!(
            "the {} phase needs network {}, but {reason}",
            need.phase, need.why
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::task_dir;

    fn parsed(yaml: &str) -> Result<NetworkOverride, serde_yaml::Error> {
        serde_yaml::from_str(yaml)
    }

    #[test]
    fn one_mode_or_one_per_phase() {
        assert_eq!(
            parsed("none").expect("parses"),
            NetworkOverride::every_phase(PhaseNetwork::None)
        );
        assert_eq!(
            parsed("no-network").expect("parses"),
            NetworkOverride::every_phase(PhaseNetwork::None)
        );
        let per = parsed("{agent: public, verifier: none}").expect("parses");
        assert_eq!(per.agent, Some(PhaseNetwork::Public));
        assert_eq!(per.verifier, Some(PhaseNetwork::None));
        let only = parsed("{verifier: host}").expect("parses");
        assert_eq!(
            (only.agent, only.verifier),
            (None, Some(PhaseNetwork::Host))
        );
    }

    #[test]
    fn bad_values_say_what_is_allowed() {
        let e = parsed("allowlist").expect_err("refused").to_string();
        assert!(e.contains("none, public or host"), "{e}");
        let e = parsed("{agent: none, sidecars: none}")
            .expect_err("refused")
            .to_string();
        assert!(e.contains("agent: MODE"), "{e}");
    }

    #[test]
    fn applies_to_every_phase_of_a_task_and_is_recorded() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = task_dir(
            tmp.path(),
            "t",
            "[verifier]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n",
        );
        let mut task = crate::task::load(&dir).expect("loads");
        assert_eq!(
            task.environment.network,
            NetworkMode::Bridge,
            "Harbor's default"
        );
        assert_eq!(task.verifier.network, NetworkMode::Allowlist);
        let o = NetworkOverride::every_phase(PhaseNetwork::None);
        o.apply(&mut task);
        assert_eq!(task.environment.network, NetworkMode::NoNetwork);
        assert_eq!(task.verifier.network, NetworkMode::NoNetwork);
        assert!(task.verifier.allowed_hosts.is_empty());
        let rec = o.recorded("cli");
        assert_eq!(rec.len(), 2);
        assert_eq!(
            (
                rec[0].key.as_str(),
                rec[0].value.as_str(),
                rec[0].source.as_str()
            ),
            ("network.agent", "none", "cli")
        );
        assert!(NetworkOverride::default().recorded("cli").is_empty());
    }

    #[test]
    fn a_public_phase_on_an_engine_without_a_bridge_is_refused_naming_the_override() {
        use crate::sandbox::Network;
        use std::sync::Arc;
        let tmp = tempfile::tempdir().expect("tempdir");
        let silent =
            Arc::new(crate::task::load(&task_dir(tmp.path(), "silent", "")).expect("loads"));
        let offline = Arc::new(
            crate::task::load(&task_dir(
                tmp.path(),
                "offline",
                "network_mode = \"no-network\"\n",
            ))
            .expect("loads"),
        );
        let agents = vec![Arc::new(crate::agent::Agent::builtin("nop").expect("nop"))];
        let tasks = vec![offline.clone(), silent.clone()];
        let needs = phase_networks(&tasks, &agents, &NetworkOverride::default());
        let bridged: Vec<_> = needs
            .iter()
            .filter(|n| n.network != Network::None)
            .collect();
        assert_eq!(
            bridged.len(),
            2,
            "the silent task's agent and verifier: {needs:?}"
        );
        assert!(bridged.iter().all(|n| n.network == Network::Bridge));
        assert!(bridged.iter().all(|n| n.task.name == "silent"));
        let no_bridge = |n| {
            if n == Network::Bridge {
                Availability::Unavailable(
                    "this engine has no bridge; run with --network none".into(),
                )
            } else {
                Availability::Available
            }
        };
        let e = refuse_unavailable(&needs, no_bridge)
            .expect_err("refused")
            .to_string();
        assert!(e.contains("silent/task.toml"), "{e}");
        assert!(e.contains("Harbor's default"), "{e}");
        assert!(
            e.contains("this engine has no bridge; run with --network none"),
            "{e}"
        );
        assert!(!e.contains('\n'), "one line: {e}");
        assert!(refuse_unavailable(&needs, |_| Availability::Available).is_ok());

        // With the override applied, nothing needs the bridge.
        let mut t = (*silent).clone();
        NetworkOverride::every_phase(PhaseNetwork::None).apply(&mut t);
        let tasks = vec![Arc::new(t)];
        let o = NetworkOverride::every_phase(PhaseNetwork::None);
        let needs = phase_networks(&tasks, &agents, &o);
        assert!(
            needs.iter().all(|n| n.network == Network::None),
            "{needs:?}"
        );
        assert!(refuse_unavailable(&needs, no_bridge).is_ok());
    }
}
