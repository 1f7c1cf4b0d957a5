//! One arbiter trial record → Harbor's trial `config.json` and `result.json` (pure: no I/O).
//!
//! Harbor's fields get only what means the same in arbiter's record: rewards are the verifier's
//! rewards, exceptions follow [`super::policy`], token counts follow Harbor's definitions
//! (`n_input_tokens` includes cached input). arbiter's own facts (termination, claim,
//! continuation, gateway usage) go into `agent_result.metadata.arbiter`; the whole record is
//! also kept as `arbiter/record.json` in the trial dir, so nothing is lost.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::model::{
    AgentConfig, AgentContext, AgentInfo, EnvironmentConfig, ExceptionInfo, ModelInfo, StepResult,
    TaskConfig, TaskId, TimingInfo, TrialConfig, TrialResult, VerifierConfig, VerifierResult,
};
use super::policy;
use super::source::{AgentDef, ArbiterJob};
use crate::task::VerifierMode;
use crate::trial::{Phase, TrialRecord, VerifierStatus};

/// The Harbor agent name of an arm: the agent's name, with the variant after a `+` when it is
/// not `default` (Harbor has no variants: each variant is a differently configured agent).
pub(crate) fn agent_name(agent: &str, variant: &str) -> String {
    if variant == "default" {
        agent.to_string()
    } else {
        format!("{agent}+{variant}")
    }
}

/// A UUID (RFC 9562 version 8, name-based) derived from `name`: the same trial exports to the
/// same id every time.
pub(crate) fn uuid_of(name: &str) -> String {
    let h = crate::digest::sha256_hex(name.as_bytes());
    let mut b: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect();
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let x = crate::digest::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &x[0..8],
        &x[8..12],
        &x[12..16],
        &x[16..20],
        &x[20..32]
    )
}

/// Harbor's name for where the verifier ran: `shared` (the agent's environment, as it was
/// left) or `separate`; `None` for `clean`, which Harbor has no value for (the record keeps it).
pub(crate) fn verifier_environment_mode(mode: VerifierMode) -> Option<&'static str> {
    match mode {
        VerifierMode::Snapshot | VerifierMode::Live => Some("shared"),
        VerifierMode::Separate => Some("separate"),
        VerifierMode::Clean => None,
    }
}

/// What the exported trial config says about the job's timeouts (arbiter's multipliers).
pub(crate) fn timeout_fields(job: &ArbiterJob) -> [Option<f64>; 4] {
    job.timeouts.map(|m| if m == 1.0 { None } else { Some(m) })
}

/// The trial's `config.json`.
pub(crate) fn trial_config(
    job: &ArbiterJob,
    rec: &TrialRecord,
    trials_dir: &str,
    job_uuid: &str,
    source: Option<&str>,
) -> TrialConfig {
    let def = job.agents.get(&rec.agent).cloned().unwrap_or_default();
    let [agent_t, verifier_t, build_t, install_t] = timeout_fields(job);
    TrialConfig {
        schema_version: 1,
        task: TaskConfig::local(task_path(job, &rec.task), source.map(str::to_string)),
        trial_name: rec.id.clone(),
        trials_dir: trials_dir.to_string(),
        timeout_multiplier: 1.0,
        agent_timeout_multiplier: agent_t,
        verifier_timeout_multiplier: verifier_t,
        agent_setup_timeout_multiplier: install_t,
        environment_build_timeout_multiplier: build_t,
        agent: agent_config(&rec.agent, &rec.variant, &def),
        environment: environment_config(rec.sandbox.as_ref().map(|s| s.backend.as_str())),
        verifier: VerifierConfig {
            override_timeout_sec: None,
            max_timeout_sec: None,
            disable: false,
        },
        job_id: Some(job_uuid.to_string()),
    }
}

pub(crate) fn agent_config(agent: &str, variant: &str, def: &AgentDef) -> AgentConfig {
    AgentConfig {
        name: Some(agent_name(agent, variant)),
        import_path: None,
        model_name: def.model.as_ref().map(|(p, n)| format!("{p}/{n}")),
        override_timeout_sec: None,
        override_setup_timeout_sec: None,
        max_timeout_sec: None,
        kwargs: BTreeMap::new(),
    }
}

/// Harbor's environment type of arbiter's backend: `docker`; none for a Kubernetes cluster,
/// which Harbor has no type for (the record's `sandbox.backend` says which).
pub(crate) fn environment_config(backend: Option<&str>) -> EnvironmentConfig {
    EnvironmentConfig {
        kind: match backend {
            None | Some("docker") => Some("docker".into()),
            Some(_) => None,
        },
        import_path: None,
        force_build: false,
        delete: true,
        override_cpus: None,
        override_memory_mb: None,
        override_storage_mb: None,
        override_gpus: None,
        kwargs: BTreeMap::new(),
    }
}

fn task_path(job: &ArbiterJob, task: &str) -> String {
    job.task_dir_of
        .get(task)
        .map(|d| d.display().to_string())
        .unwrap_or_else(|| task.to_string())
}

/// Start and end of each phase that ran, in run order: the phases of a trial run back to back
/// from its start, so each starts where the one before ended (their measured durations).
fn phase_times(rec: &TrialRecord) -> BTreeMap<Phase, TimingInfo> {
    let mut out = BTreeMap::new();
    let Some(mut at) = crate::timefmt::parse_rfc3339(&rec.started_at) else {
        return out;
    };
    // The record's map is ordered as `Phase` is: the order a trial runs them.
    for (&phase, t) in &rec.phases {
        let end = at + t.seconds;
        out.insert(
            phase,
            TimingInfo {
                started_at: Some(crate::timefmt::rfc3339_micros(at)),
                finished_at: Some(crate::timefmt::rfc3339_micros(end)),
            },
        );
        at = end;
    }
    out
}

/// arbiter's facts of the agent run that Harbor has no field for.
fn arbiter_metadata(rec: &TrialRecord, pass_threshold: f64) -> Value {
    let mut m = json!({
        "schema": rec.schema,
        "id": rec.id,
        "task": rec.task,
        "agent": rec.agent,
        "variant": rec.variant,
        "attempt": rec.attempt,
        "termination": rec.termination,
        "claim": {
            "status": rec.claim.status,
            "source": rec.claim.source,
            "semantic_status": rec.claim.semantic_status,
        },
        "verifier": {
            "status": rec.verifier.status,
            "mode": rec.verifier.mode,
            "exit_code": rec.verifier.exit_code,
            "detail": rec.verifier.detail,
        },
        "retries": rec.retries,
        "pass_threshold": pass_threshold,
        "record": "arbiter/record.json",
    });
    let obj = m.as_object_mut().expect("an object");
    if let Some(u) = &rec.usage {
        obj.insert("usage".into(), json!(u));
    }
    if let Some(c) = &rec.continuation {
        obj.insert("continuation".into(), json!(c));
    }
    if let Some(i) = &rec.integrity {
        obj.insert("integrity".into(), json!(i));
    }
    if let Some(a) = &rec.audit {
        obj.insert("audit".into(), json!(a));
    }
    if let Some(e) = &rec.infra_error {
        obj.insert("infra_error".into(), json!(e));
    }
    m
}

/// The agent's spend as Harbor counts it: input including cached input (read and written),
/// cached input read, output, cost. `None` when the gateway counted nothing.
fn agent_context(rec: &TrialRecord, model: Option<&str>, pass_threshold: f64) -> AgentContext {
    let mut ctx = AgentContext::default();
    if let Some(u) = &rec.usage {
        ctx.n_input_tokens = Some(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens);
        ctx.n_cache_tokens = Some(u.cache_read_tokens);
        ctx.n_output_tokens = Some(u.output_tokens);
        ctx.cost_usd = u.cost_usd;
        if let Some(model) = model {
            ctx.model_usage = Some(json!({ model: {
                "n_input_tokens": u.input_tokens + u.cache_read_tokens + u.cache_write_tokens,
                "n_cache_tokens": u.cache_read_tokens,
                "n_output_tokens": u.output_tokens,
                "cost_usd": u.cost_usd,
            }}));
        }
    }
    ctx.metadata = Some(BTreeMap::from([(
        "arbiter".into(),
        arbiter_metadata(rec, pass_threshold),
    )]));
    ctx
}

/// The verifier's rewards, when it gave any (an error or a skipped verifier gave none: no
/// zero is made up).
fn rewards(rec: &TrialRecord) -> Option<VerifierResult> {
    match rec.verifier.status {
        VerifierStatus::Passed | VerifierStatus::Failed => rec
            .verifier
            .reward
            .clone()
            .filter(|r| !r.is_empty())
            .map(|r| VerifierResult { rewards: Some(r) }),
        VerifierStatus::Error | VerifierStatus::Skipped => None,
    }
}

/// The exception of the trial: how it ended ([`policy::exception_of`]), else a verifier that
/// gave no reward (Harbor's `VerifierTimeoutError` / `RewardFileNotFoundError`).
fn exception(rec: &TrialRecord, occurred_at: &str) -> Option<ExceptionInfo> {
    let (ty, message, over) = policy::exception_of(&rec.termination, rec.infra_error.as_ref())
        .or_else(|| match rec.verifier.status {
            VerifierStatus::Error => {
                let detail = rec.verifier.detail.clone().unwrap_or_default();
                let ty = if detail.contains("timed out") || detail.contains("timeout") {
                    "VerifierTimeoutError"
                } else {
                    "RewardFileNotFoundError"
                };
                Some((ty.to_string(), detail, None))
            }
            _ => None,
        })?;
    let policy = policy::policy_for(&ty, over.as_ref());
    Some(ExceptionInfo {
        exception_type: ty,
        exception_message: message,
        exception_traceback: String::new(),
        occurred_at: occurred_at.to_string(),
        policy_override: over,
        policy: Some(policy),
    })
}

/// Harbor's `reward_valid`: rewards exist and no recorded exception says they do not count.
pub(crate) fn reward_valid(result: &TrialResult) -> bool {
    let has = result
        .verifier_result
        .as_ref()
        .and_then(|v| v.rewards.as_ref())
        .is_some_and(|r| !r.is_empty());
    has && result
        .exception_info
        .iter()
        .chain(
            result
                .step_results
                .iter()
                .flatten()
                .filter_map(|s| s.exception_info.as_ref()),
        )
        .all(|e| policy::policy_for(&e.exception_type, e.policy_override.as_ref()).has_valid_reward)
}

/// The trial's `result.json`.
/// `harbor_checksum`: Harbor's checksum of the task as it ran, when it could be computed
/// (else the record's own checksum stands in, arbiter's `sha256:` digest of the same dir).
pub(crate) fn trial_result(
    job: &ArbiterJob,
    rec: &TrialRecord,
    config: TrialConfig,
    trial_uri: String,
    source: Option<&str>,
    harbor_checksum: Option<&str>,
) -> TrialResult {
    let def = job.agents.get(&rec.agent).cloned().unwrap_or_default();
    let times = phase_times(rec);
    let at = |p: Phase| times.get(&p).cloned();
    let started = crate::timefmt::parse_rfc3339(&rec.started_at)
        .map(crate::timefmt::rfc3339_micros)
        .or_else(|| Some(rec.started_at.clone()));
    let finished = crate::timefmt::parse_rfc3339(&rec.finished_at)
        .map(crate::timefmt::rfc3339_micros)
        .or_else(|| Some(rec.finished_at.clone()));
    let occurred = finished.clone().unwrap_or_default();
    let steps = (!rec.steps.is_empty()).then(|| {
        rec.steps
            .iter()
            .map(|s| StepResult {
                step_name: s.name.clone(),
                agent_result: None,
                verifier_result: s
                    .verifier
                    .reward
                    .clone()
                    .filter(|r| !r.is_empty())
                    .map(|r| VerifierResult { rewards: Some(r) }),
                exception_info: None,
                agent_execution: None,
                verifier: None,
            })
            .collect()
    });
    let model = def.model.as_ref().map(|(_, n)| n.as_str());
    let mut result = TrialResult {
        schema_version: 1,
        id: uuid_of(&format!(
            "{}/{}",
            job.job_id.as_deref().unwrap_or(&job.name),
            rec.id
        )),
        task_name: rec.task.clone(),
        trial_name: rec.id.clone(),
        trial_uri,
        task_id: TaskId {
            path: Some(task_path(job, &rec.task)),
            other: BTreeMap::new(),
        },
        source: source.map(str::to_string),
        task_checksum: harbor_checksum
            .map(str::to_string)
            .unwrap_or_else(|| rec.task_checksum.clone()),
        config,
        agent_info: AgentInfo {
            name: agent_name(&rec.agent, &rec.variant),
            version: def.version.clone().unwrap_or_else(|| "unknown".into()),
            model_info: def.model.as_ref().map(|(p, n)| ModelInfo {
                name: n.clone(),
                provider: Some(p.clone()),
            }),
        },
        agent_result: Some(agent_context(rec, model, job.pass_threshold)),
        verifier_result: rewards(rec),
        verifier_environment_mode: verifier_environment_mode(rec.verifier.mode).map(str::to_string),
        exception_info: exception(rec, &occurred),
        started_at: started,
        finished_at: finished,
        environment_setup: at(Phase::Environment),
        agent_setup: None,
        agent_execution: at(Phase::Agent),
        verifier: at(Phase::Verify),
        step_results: steps,
        reward_valid: false,
    };
    result.reward_valid = reward_valid(&result);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn job() -> ArbiterJob {
        ArbiterJob {
            dir: PathBuf::from("/jobs/j"),
            name: "j".into(),
            job_id: Some("abc".into()),
            attempts: 2,
            concurrency: 2,
            max_retries: 0,
            pass_threshold: 1.0,
            timeouts: [1.0, 2.0, 1.0, 1.0],
            task_dirs: vec![PathBuf::from("/tasks/hello")],
            task_dir_of: BTreeMap::from([("hello".into(), PathBuf::from("/tasks/hello"))]),
            checksums: BTreeMap::new(),
            agents: BTreeMap::from([(
                "claude".into(),
                AgentDef {
                    kind: Some("claude-code".into()),
                    version: Some("2.0.1".into()),
                    model: Some(("anthropic".into(), "claude-sonnet-4-5".into())),
                },
            )]),
            agent_order: vec!["claude".into()],
            records: vec![],
        }
    }

    fn record(termination: Value, verifier: Value, extra: Value) -> TrialRecord {
        let mut v = json!({
            "schema": "arbiter.trial.v1", "id": "hello__claude__fast__1", "job": "j",
            "task": "hello", "agent": "claude", "variant": "fast", "attempt": 1,
            "task_checksum": "sha256:00", "termination": termination,
            "claim": {"status": "present", "source": "file", "semantic_status": "succeeded"},
            "verifier": verifier, "audit": null,
            "phases": {"environment": {"seconds": 1.5}, "agent": {"seconds": 10.0},
                       "collect": {"seconds": 0.5}, "verify": {"seconds": 2.0}},
            "retries": 1, "artifacts": [], "overrides": {},
            "limits": {"cpus": 1.0, "memory_mb": 256, "pids_limit": 256, "network": "no-network",
                       "storage_enforced": true},
            "output": {"stdout_bytes": 0, "stderr_bytes": 0, "truncated": false},
            "usage": {"requests": 3, "input_tokens": 100, "output_tokens": 20,
                      "cache_read_tokens": 50, "cache_write_tokens": 10, "cost_usd": 0.5},
            "started_at": "2026-11-30T02:31:48Z", "finished_at": "2026-11-30T02:32:02Z"
        });
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        serde_json::from_value(v).expect("a record")
    }

    fn result_of(rec: &TrialRecord) -> TrialResult {
        let job = job();
        let config = trial_config(&job, rec, "/out", "job-uuid", None);
        trial_result(&job, rec, config, "file:///out/x".into(), None, None)
    }

    #[test]
    fn a_passed_trial_keeps_its_rewards_and_has_no_exception() {
        let rec = record(
            json!({"kind": "exited", "exit_code": 0}),
            json!({"status": "passed", "mode": "snapshot", "reward": {"reward": 1.0}}),
            json!({}),
        );
        let r = result_of(&rec);
        assert_eq!(r.agent_info.name, "claude+fast");
        assert_eq!(r.agent_info.version, "2.0.1");
        let model = r.agent_info.model_info.as_ref().expect("model");
        assert_eq!(
            (model.name.as_str(), model.provider.as_deref()),
            ("claude-sonnet-4-5", Some("anthropic"))
        );
        assert_eq!(
            r.config.agent.model_name.as_deref(),
            Some("anthropic/claude-sonnet-4-5")
        );
        assert_eq!(
            r.verifier_result.as_ref().and_then(|v| v.rewards.clone()),
            Some(BTreeMap::from([("reward".into(), 1.0)]))
        );
        assert!(r.exception_info.is_none());
        assert!(r.reward_valid);
        assert_eq!(r.verifier_environment_mode.as_deref(), Some("shared"));
        assert_eq!(r.task_id.path.as_deref(), Some("/tasks/hello"));
        // Harbor's n_input_tokens counts cached input; n_cache_tokens is the cache read.
        let ctx = r.agent_result.as_ref().expect("context");
        assert_eq!(
            (ctx.n_input_tokens, ctx.n_cache_tokens, ctx.n_output_tokens),
            (Some(160), Some(50), Some(20))
        );
        assert_eq!(ctx.cost_usd, Some(0.5));
        let meta = &ctx.metadata.as_ref().expect("metadata")["arbiter"];
        assert_eq!(meta["claim"]["semantic_status"], "succeeded");
        assert_eq!(meta["variant"], "fast");
        assert_eq!(meta["usage"]["requests"], 3);
        // Phases run back to back from the trial's start.
        let agent = r.agent_execution.as_ref().expect("agent timing");
        assert_eq!(
            agent.started_at.as_deref(),
            Some("2026-11-30T02:31:49.500000Z")
        );
        assert_eq!(
            agent.finished_at.as_deref(),
            Some("2026-11-30T02:31:59.500000Z")
        );
        // The verifier timeout multiplier is the job's; everything else at Harbor's defaults.
        assert_eq!(r.config.timeout_multiplier, 1.0);
        assert_eq!(r.config.verifier_timeout_multiplier, Some(2.0));
        assert_eq!(r.config.agent_timeout_multiplier, None);
        assert_eq!(r.id, uuid_of("abc/hello__claude__fast__1"));
    }

    #[test]
    fn a_timeout_keeps_a_valid_reward_and_an_infra_error_has_none() {
        let timeout = record(
            json!({"kind": "timeout", "detail": "agent phase exceeded 2s"}),
            json!({"status": "failed", "mode": "snapshot", "reward": {"reward": 0.0}}),
            json!({}),
        );
        let r = result_of(&timeout);
        assert_eq!(
            r.exception_info.as_ref().map(|e| e.exception_type.as_str()),
            Some("AgentTimeoutError")
        );
        assert!(r.reward_valid);
        let infra = record(
            json!({"kind": "infra_error", "detail": "engine gone"}),
            json!({"status": "skipped", "mode": "snapshot", "detail": "not run"}),
            json!({"infra_error": {"phase": "agent", "message": "engine gone"}}),
        );
        let r = result_of(&infra);
        let e = r.exception_info.as_ref().expect("an exception");
        assert_eq!(e.exception_type, policy::ARBITER_INFRA);
        let p = e.policy.expect("policy");
        assert!(!p.should_grade && !p.has_valid_reward);
        assert!(r.verifier_result.is_none());
        assert!(!r.reward_valid);
    }

    #[test]
    fn a_verifier_error_is_no_reward_never_a_zero() {
        let rec = record(
            json!({"kind": "exited", "exit_code": 0}),
            json!({"status": "error", "mode": "clean", "detail": "verifier timed out after 30s"}),
            json!({}),
        );
        let r = result_of(&rec);
        assert!(r.verifier_result.is_none());
        assert_eq!(
            r.exception_info.as_ref().map(|e| e.exception_type.as_str()),
            Some("VerifierTimeoutError")
        );
        // Harbor has no value for arbiter's clean verifier: none rather than a wrong one.
        assert_eq!(r.verifier_environment_mode, None);
    }

    #[test]
    fn uuids_are_stable_and_well_formed() {
        let u = uuid_of("x");
        assert_eq!(u, uuid_of("x"));
        assert_ne!(u, uuid_of("y"));
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "8");
    }
}
