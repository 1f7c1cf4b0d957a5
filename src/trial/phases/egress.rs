//! `network_mode = "allowlist"` for a trial's containers (SPEC §2, §11): the container runs
//! with network `none`, and arbiter serves the egress allowlist proxy
//! ([`crate::gateway::serve_allowlist`]) on a listener inside its network namespace, so the
//! only way out is the proxy, which admits the phase's `allowed_hosts` and nothing else.
//!
//! The agent phase's proxy is started by the environment phase (after the container runs,
//! before any agent process) and stopped when the agent phase ends; its attempts go into the
//! record's `network.egress`. The verifier's is served by `verifier::verify` around its run.
//! Where no listener can be opened in the container (remote `DOCKER_HOST`, rootless) the
//! phase fails as an infrastructure error, like the model gateway.

use crate::agent::{AgentNetwork, HarnessOverride};
use crate::gateway::{
    Allowlist, EgressEvent, PROXY_PORT, ProxyHandle, proxy_env_bypassing, serve_allowlist,
};
use crate::sandbox::{ContainerId, Sandbox};
use crate::task::NetworkMode;
use crate::trial::plan::{Phase, TrialPlan};
use crate::trial::record::TrialRecord;

use super::Infra;

/// The agent phase's network: the agent's `network:` override, else the task's.
pub(crate) fn agent_network(plan: &TrialPlan) -> (NetworkMode, Vec<String>) {
    match plan.agent.network {
        Some(network) => {
            let hosts = if network == AgentNetwork::Allowlist {
                plan.agent.allowed_hosts.clone()
            } else {
                Vec::new()
            };
            (network.mode(), hosts)
        }
        None => {
            let env = &plan.task.environment;
            (env.network, env.allowed_hosts.clone())
        }
    }
}

/// The agent's network override as recorded in `harness_overrides` (empty without one).
pub(crate) fn network_overrides(plan: &TrialPlan) -> Vec<HarnessOverride> {
    let Some(network) = plan.agent.network else {
        return Vec::new();
    };
    let mut out = vec![HarnessOverride {
        key: "network".to_string(),
        value: network.as_str().to_string(),
        source: "agent_config".to_string(),
    }];
    if network == AgentNetwork::Allowlist {
        out.push(HarnessOverride {
            key: "allowed_hosts".to_string(),
            value: plan.agent.allowed_hosts.join(","),
            source: "agent_config".to_string(),
        });
    }
    out
}

/// A running egress proxy for one container.
#[derive(Debug)]
pub(crate) struct Egress {
    handle: ProxyHandle,
    /// Hosts on the container's own loopback (compose services), which bypass the proxy.
    local: Vec<String>,
}

impl Egress {
    /// The env pointing the container's HTTP clients at the proxy.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        proxy_env_bypassing(self.handle.addr.port(), &self.local)
    }

    /// Stop the proxy and add its attempts to the record as `phase`'s.
    pub(crate) async fn finish(self, rec: &mut TrialRecord, phase: Phase) {
        let events = self.handle.shutdown().await;
        record(rec, phase, events);
    }
}

/// Add `phase`'s attempts to the record's `network`.
pub(crate) fn record(rec: &mut TrialRecord, phase: Phase, events: Vec<EgressEvent>) {
    if events.is_empty() && rec.network.is_some() {
        return;
    }
    rec.network
        .get_or_insert_with(Default::default)
        .add(phase, events);
}

/// Serve the proxy for `hosts` on [`PROXY_PORT`] of `container`'s own loopback. `phase` and
/// `who` only shape the error ("the agent's container").
pub(crate) async fn start<S: Sandbox + ?Sized>(
    sb: &S,
    container: &ContainerId,
    hosts: &[String],
    local: Vec<String>,
    phase: Phase,
    who: &str,
) -> Result<Egress, Infra> {
    let fail = |message: String| Infra { phase, message };
    let allowlist = Allowlist::parse(hosts).map_err(|e| fail(e.to_string()))?;
    let listener = sb
        .loopback_listener(container, PROXY_PORT)
        .await
        .map_err(|e| {
            fail(format!(
                "cannot serve the egress allowlist proxy in {who}: {e}"
            ))
        })?;
    let handle = serve_allowlist(listener, allowlist)
        .map_err(|e| fail(format!("egress allowlist proxy: {e}")))?;
    tracing::debug!(addr = %handle.addr, hosts = ?hosts, "egress allowlist proxy serving");
    Ok(Egress { handle, local })
}

/// Replace `env`'s proxy variables by `proxy`'s.
pub(crate) fn set_env(env: &mut Vec<(String, String)>, proxy: Vec<(String, String)>) {
    env.retain(|(k, _)| !proxy.iter().any(|(p, _)| p == k));
    env.extend(proxy);
}

/// The proxies of one trial: the agent phase's, and the attempts of its verifiers'
/// (`[verifier] network_mode = "allowlist"`, each verifier run serving its own).
#[derive(Debug, Default)]
pub(crate) struct Proxies {
    pub agent: Option<Egress>,
    pub verifier: std::sync::Mutex<Vec<EgressEvent>>,
}

impl Proxies {
    /// Stop what still runs and record every attempt (agent's first, then the verifiers').
    pub(crate) async fn finish(&mut self, rec: &mut TrialRecord) {
        if let Some(proxy) = self.agent.take() {
            proxy.finish(rec, Phase::Agent).await;
        }
        let verifier =
            std::mem::take(&mut *self.verifier.lock().unwrap_or_else(|p| p.into_inner()));
        if !verifier.is_empty() {
            record(rec, Phase::Verify, verifier);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::watch;

    use crate::job::{RunArgs, resolve};
    use crate::sandbox::{FakeExec, FakeSandbox, Network};
    use crate::testing::task_dir;
    use crate::trial::{TrialRun, run};

    use super::*;

    /// One trial of a `command` agent (`agent_yaml` adds to its definition) on a task with
    /// `task_toml` appended, on the fake: the record and the fake's env of each exec.
    async fn trial(
        task_toml: &str,
        agent_yaml: &str,
    ) -> (TrialRecord, Arc<FakeSandbox>, tempfile::TempDir) {
        let root = tempfile::tempdir().expect("tmp");
        let task = task_dir(root.path(), "t", task_toml);
        let yaml = format!(
            "tasks: [{}]\nagents:\n  - name: fetch\n    kind: command\n    run: [python3, /agent.py]\n{agent_yaml}",
            task.display()
        );
        let (rec, fake) = run_job(root.path(), &yaml).await;
        (rec, fake, root)
    }

    /// The first trial of the job `yaml` (written in `root`), with the job's model gateway
    /// when it names models, on the fake where `/agent.py` exits 0 and the tests reward 1.
    async fn run_job(root: &std::path::Path, yaml: &str) -> (TrialRecord, Arc<FakeSandbox>) {
        let job = root.join("job.yaml");
        std::fs::write(&job, yaml).expect("job.yaml");
        let spec = resolve(&RunArgs {
            config: Some(job),
            job_dir: Some(root.join("out")),
            ..RunArgs::default()
        })
        .expect("job resolves");
        let gateway = spec.start_gateway().expect("gateway");
        let plan = spec
            .trials_with(Default::default(), gateway, "fake")
            .remove(0);
        std::fs::create_dir_all(&plan.dir).expect("trial dir");
        let fake = Arc::new(FakeSandbox::new());
        fake.on_exec("/agent.py", FakeExec::exits(0));
        fake.on_exec(
            "/tests/test.sh",
            FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1\n"),
        );
        let (_tx, rx) = watch::channel(false);
        let rec = match run(fake.clone(), &plan, rx, &|_| {}).await {
            TrialRun::Finished(rec) => *rec,
            TrialRun::Cancelled => panic!("cancelled"),
        };
        (rec, fake)
    }

    fn env_of(fake: &FakeSandbox, needle: &str) -> Vec<(String, String)> {
        fake.exec_envs()
            .into_iter()
            .find(|(argv, _)| argv.contains(needle))
            .map(|(_, env)| env)
            .unwrap_or_else(|| panic!("no exec of {needle}"))
    }

    fn get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[tokio::test(start_paused = true)]
    async fn an_allowlist_task_runs_its_agent_with_no_network_and_the_proxy_in_its_env() {
        let (rec, fake, _dir) = trial(
            "network_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n",
            "",
        )
        .await;
        assert_eq!(rec.infra_error, None, "{:?}", rec.termination);
        let agent = fake
            .specs()
            .into_iter()
            .find(|s| s.owner.role == crate::sandbox::Role::Agent)
            .expect("the agent's container");
        assert_eq!(agent.network, Network::None);
        let env = env_of(&fake, "/agent.py");
        let proxy = get(&env, "HTTPS_PROXY").expect("HTTPS_PROXY").to_string();
        assert!(proxy.starts_with("http://127.0.0.1:"), "{proxy}");
        for key in ["HTTP_PROXY", "https_proxy", "http_proxy"] {
            assert_eq!(get(&env, key), Some(proxy.as_str()), "{key}");
        }
        assert_eq!(get(&env, "NO_PROXY"), Some("127.0.0.1,localhost"));
        // Stopped with the agent phase: nothing listens there any more.
        let addr = proxy.trim_start_matches("http://");
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "{addr} still served"
        );
        // The record says a proxy was in place, and nothing went through it.
        let network = rec.network.expect("network in the record");
        assert!(network.egress.is_empty());
        assert_eq!(rec.limits.network, NetworkMode::Allowlist);
        // The verifier follows the task's network (Harbor): its own proxy, not the agent's.
        let verifier_proxy = get(&env_of(&fake, "/tests/test.sh"), "HTTPS_PROXY")
            .expect("the verifier's proxy")
            .to_string();
        assert_ne!(verifier_proxy, proxy);
        assert!(rec.harness_overrides.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_agents_network_override_is_applied_and_recorded_as_a_harness_override() {
        let (rec, fake, _dir) = trial(
            "",
            "    network: allowlist\n    allowed_hosts: [PyPI.org, \"*.example.com\"]\n",
        )
        .await;
        assert_eq!(rec.infra_error, None, "{:?}", rec.termination);
        let env = env_of(&fake, "/agent.py");
        assert!(get(&env, "HTTP_PROXY").is_some(), "the proxy is wired");
        assert_eq!(rec.limits.network, NetworkMode::Allowlist);
        let shown: Vec<(&str, &str, &str)> = rec
            .harness_overrides
            .iter()
            .map(|o| (o.key.as_str(), o.value.as_str(), o.source.as_str()))
            .collect();
        assert_eq!(
            shown,
            [
                ("network", "allowlist", "agent_config"),
                ("allowed_hosts", "pypi.org,*.example.com", "agent_config"),
            ]
        );

        // And the other way: `none` over an allowlist task takes the proxy away.
        let (rec, fake, _dir) = trial(
            "network_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n",
            "    network: none\n",
        )
        .await;
        assert_eq!(get(&env_of(&fake, "/agent.py"), "HTTP_PROXY"), None);
        assert_eq!(rec.limits.network, NetworkMode::NoNetwork);
        assert_eq!(rec.network, None);
        assert_eq!(rec.harness_overrides[0].key, "network");
        assert_eq!(rec.harness_overrides[0].value, "none");
    }

    #[tokio::test(start_paused = true)]
    async fn an_allowlist_verifier_gets_its_own_proxy_and_the_agent_none() {
        let (rec, fake, _dir) = trial(
            "[verifier]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n",
            "",
        )
        .await;
        assert_eq!(rec.infra_error, None, "{:?}", rec.termination);
        assert_eq!(get(&env_of(&fake, "/agent.py"), "HTTP_PROXY"), None);
        let env = env_of(&fake, "/tests/test.sh");
        let proxy = get(&env, "HTTP_PROXY").expect("the verifier's proxy");
        assert!(proxy.starts_with("http://127.0.0.1:"), "{proxy}");
        let verifier = fake
            .specs()
            .into_iter()
            .find(|s| s.owner.role == crate::sandbox::Role::Verifier)
            .expect("the verifier's container");
        assert_eq!(verifier.network, Network::None);
        assert_eq!(rec.network, None, "no attempt was made");
    }

    #[tokio::test(start_paused = true)]
    async fn an_offline_verifier_gets_a_proxy_that_admits_nothing_and_keeps_network_none() {
        // A task offline in both phases, as `--network none` makes every task.
        let (rec, fake, _dir) = trial("network_mode = \"no-network\"\n", "").await;
        assert_eq!(rec.infra_error, None, "{:?}", rec.termination);
        assert_eq!(get(&env_of(&fake, "/agent.py"), "HTTP_PROXY"), None);
        let env = env_of(&fake, "/tests/test.sh");
        let proxy = get(&env, "HTTPS_PROXY").expect("the offline verifier's proxy");
        assert!(proxy.starts_with("http://127.0.0.1:"), "{proxy}");
        assert_eq!(get(&env, "NO_PROXY"), Some("127.0.0.1,localhost"));
        // The verifier runs in the agent's stopped container or a fresh one: none either way.
        let specs = fake.specs();
        assert!(!specs.is_empty());
        assert!(
            specs.iter().all(|s| s.network == Network::None),
            "{specs:?}"
        );
        // No attempt: nothing recorded, and the verdict is the tests' own.
        assert_eq!(rec.network, None);
        assert_eq!(rec.verifier.status, crate::verifier::VerifierStatus::Passed);
    }

    #[test]
    fn the_offline_proxy_refuses_everything_and_records_it() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let handle = serve_allowlist(listener, crate::gateway::Allowlist::default())
                .expect("serve");
            for request in [
                "CONNECT astral.sh:443 HTTP/1.1\r\nHost: astral.sh:443\r\n\r\n",
                "GET http://deb.debian.org/debian/dists/bookworm/InRelease HTTP/1.1\r\nHost: deb.debian.org\r\n\r\n",
            ] {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut c = tokio::net::TcpStream::connect(handle.addr)
                    .await
                    .expect("connect");
                c.write_all(request.as_bytes()).await.expect("write");
                let mut reply = String::new();
                c.read_to_string(&mut reply).await.expect("read");
                assert!(reply.starts_with("HTTP/1.1 403 Forbidden"), "{reply}");
                assert!(reply.contains("refused: there is no network here"), "{reply}");
            }
            let seen: Vec<(String, u16, bool, Option<String>)> = handle
                .shutdown()
                .await
                .into_iter()
                .map(|e| (e.host, e.port, e.allowed, e.error))
                .collect();
            assert_eq!(
                seen,
                [
                    ("astral.sh".to_string(), 443, false, None),
                    ("deb.debian.org".to_string(), 80, false, None),
                ]
            );
        });
    }

    #[tokio::test(start_paused = true)]
    async fn the_proxy_and_the_model_gateway_serve_one_container_side_by_side() {
        let root = tempfile::tempdir().expect("tmp");
        let task = task_dir(
            root.path(),
            "t",
            "network_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n",
        );
        std::fs::write(root.path().join("script.json"), r#"{"turns": []}"#).expect("script");
        let yaml = format!(
            "tasks: [{}]\nmodels:\n  - {{name: fake, api: scripted, script: script.json}}\nagents:\n  - name: caller\n    kind: command\n    run: [python3, /agent.py]\n    model: {{provider: fake, name: m}}\n",
            task.display()
        );
        let (rec, fake) = run_job(root.path(), &yaml).await;
        assert_eq!(rec.infra_error, None, "{:?}", rec.termination);
        let env = env_of(&fake, "/agent.py");
        let base = get(&env, "OPENAI_BASE_URL").expect("the gateway's URL");
        let proxy = get(&env, "HTTP_PROXY").expect("the proxy's URL");
        let port = |url: &str| {
            url.trim_start_matches("http://127.0.0.1:")
                .split('/')
                .next()
                .and_then(|p| p.parse::<u16>().ok())
                .unwrap_or_else(|| panic!("no port in {url}"))
        };
        assert_ne!(port(base), port(proxy), "two listeners");
        // The gateway is on the container's loopback, which the proxy variables skip.
        assert_eq!(get(&env, "NO_PROXY"), Some("127.0.0.1,localhost"));
        assert!(rec.usage.is_some(), "the gateway served the trial");
        assert!(rec.network.is_some(), "the proxy served the trial");
    }

    #[test]
    fn attempts_past_the_cap_are_counted_not_listed() {
        let mut network = crate::trial::record::NetworkRecord::default();
        let event = |i: u16| EgressEvent {
            host: "example.invalid".into(),
            port: i,
            allowed: false,
            error: None,
        };
        let cap = crate::trial::record::EGRESS_CAP;
        network.add(Phase::Agent, (0..cap as u16).map(event).collect());
        network.add(Phase::Verify, (0..5).map(event).collect());
        assert_eq!(network.egress.len(), cap);
        assert_eq!(network.egress_dropped, 5);
        let mut small = crate::trial::record::NetworkRecord::default();
        assert_eq!(small.summary(), "proxy in place, no attempts");
        small.add(
            Phase::Agent,
            vec![
                EgressEvent {
                    host: "pypi.org".into(),
                    port: 443,
                    allowed: true,
                    error: None,
                },
                event(80),
                event(80),
            ],
        );
        assert_eq!(
            small.summary(),
            "3 attempts · admitted: pypi.org:443 (agent) · refused: example.invalid:80 (agent) ×2"
        );
        let json = serde_json::to_value(&network.egress[0]).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"phase": "agent", "host": "example.invalid", "port": 0, "allowed": false})
        );
    }
}
