//! `arbiter import harbor DIR --out JOB_DIR`: a Harbor job folder as a read-only arbiter job
//! directory, so `arbiter report`, `compare`, `check` and `index` read it like any job.
//!
//! Each record holds what Harbor recorded, in arbiter's terms: the rewards and the pass rule,
//! how the agent run ended (from Harbor's exception and its error policy), phase times. What
//! Harbor does not record (the agent's claim, integrity, the change set, gateway usage, limits)
//! is `unknown` or absent, never made up; a folder arbiter exported itself carries arbiter's
//! facts in `agent_result.metadata.arbiter`, and those are taken back. The job dir gets an
//! `imported.json` marker: `run`, `resume` and `verify` refuse it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::HarborError;
use super::export::copy_tree;
use super::mapping::reward_valid;
use super::model::{JobConfig, TrialResult};
use super::policy;

/// The marker of an imported job dir (its presence makes the dir read-only for arbiter).
pub const IMPORTED_MARKER: &str = crate::job::IMPORTED_MARKER;

#[derive(Debug, Clone)]
pub struct Imported {
    pub job_dir: PathBuf,
    pub trials: usize,
}

/// A Harbor trial, read.
struct HarborTrial {
    dir: PathBuf,
    result: TrialResult,
    /// `agent_result.metadata.arbiter`, when arbiter exported it.
    arbiter: Option<Value>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, HarborError> {
    let bytes = std::fs::read(path).map_err(HarborError::io(path))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        let field = e
            .to_string()
            .split(" at line")
            .next()
            .unwrap_or_default()
            .to_string();
        HarborError::input(
            path.display(),
            "file",
            format!("not a Harbor 0.26 document: {field}"),
        )
    })
}

fn read_trials(dir: &Path) -> Result<Vec<HarborTrial>, HarborError> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(HarborError::io(dir))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.join("result.json").is_file())
        .collect();
    entries.sort();
    for path in entries {
        let result: TrialResult = read_json(&path.join("result.json"))?;
        let arbiter = result
            .agent_result
            .as_ref()
            .and_then(|a| a.metadata.as_ref())
            .and_then(|m| m.get("arbiter"))
            .filter(|v| v.get("schema").and_then(Value::as_str) == Some("arbiter.trial.v1"))
            .cloned();
        out.push(HarborTrial {
            dir: path,
            result,
            arbiter,
        });
    }
    Ok(out)
}

pub fn import(harbor_dir: &Path, out: &Path) -> Result<Imported, HarborError> {
    let config_path = harbor_dir.join("config.json");
    let config: JobConfig = read_json(&config_path)?;
    // The job's result.json is read to be sure this is a Harbor job folder (its stats are
    // recomputed from the trials by `arbiter report`).
    let _: super::model::JobResult = read_json(&harbor_dir.join("result.json"))?;
    let trials = read_trials(harbor_dir)?;
    if trials.is_empty() {
        return Err(HarborError::input(
            harbor_dir.display(),
            "trials",
            "no trial dir with a result.json: not a Harbor job folder",
        ));
    }
    if out.exists() {
        return Err(HarborError::input(
            out.display(),
            "--out",
            "exists; the import writes a new job directory",
        ));
    }
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(HarborError::io(&parent))?;
    let tmp = tempfile::Builder::new()
        .prefix(".arbiter-import-")
        .tempdir_in(&parent)
        .map_err(HarborError::io(&parent))?;
    let n = write_job(harbor_dir, &config, &trials, tmp.path())?;
    let staged = tmp.keep();
    if let Err(e) = std::fs::rename(&staged, out) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(HarborError::io(out)(e));
    }
    Ok(Imported {
        job_dir: out.to_path_buf(),
        trials: n,
    })
}

/// The pass threshold of a trial with no arbiter metadata: arbiter's default, which is Harbor's
/// binary reward's pass.
const PASS_THRESHOLD: f64 = 1.0;

/// The pass threshold the trial was judged with: arbiter's, when arbiter exported it.
fn threshold_of(t: &HarborTrial) -> f64 {
    t.arbiter
        .as_ref()
        .and_then(|a| a.get("pass_threshold"))
        .and_then(Value::as_f64)
        .unwrap_or(PASS_THRESHOLD)
}

fn write_job(
    harbor_dir: &Path,
    config: &JobConfig,
    trials: &[HarborTrial],
    to: &Path,
) -> Result<usize, HarborError> {
    let job_name = config.job_name.clone();
    // Attempt numbers: arbiter's own when it exported the trial, else by start time within
    // each task × agent.
    let mut order: Vec<usize> = (0..trials.len()).collect();
    order.sort_by(|a, b| {
        let (x, y) = (&trials[*a].result, &trials[*b].result);
        (x.started_at.as_deref(), &x.trial_name).cmp(&(y.started_at.as_deref(), &y.trial_name))
    });
    let mut seen: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut attempt_of = vec![0u32; trials.len()];
    for i in order {
        let r = &trials[i].result;
        let n = seen
            .entry((r.task_name.clone(), r.agent_info.name.clone()))
            .or_default();
        *n += 1;
        attempt_of[i] = *n;
    }
    let mut lines = String::new();
    let mut agents: Vec<String> = Vec::new();
    let mut variants: Vec<String> = Vec::new();
    let mut max_attempt = 1;
    for (i, t) in trials.iter().enumerate() {
        let record = record_of(&job_name, t, attempt_of[i]);
        let id = record["id"].as_str().unwrap_or_default().to_string();
        let agent = record["agent"].as_str().unwrap_or_default().to_string();
        let variant = record["variant"].as_str().unwrap_or_default().to_string();
        max_attempt = max_attempt.max(record["attempt"].as_u64().unwrap_or(1) as u32);
        if !agents.contains(&agent) {
            agents.push(agent);
        }
        if variant != "default" && !variants.contains(&variant) {
            variants.push(variant);
        }
        let dir = to.join("trials").join(&id);
        copy_trial_files(&t.dir, &dir)?;
        let text = serde_json::to_string(&record).expect("a record is JSON");
        let path = dir.join("result.json");
        std::fs::write(&path, format!("{text}\n")).map_err(HarborError::io(&path))?;
        lines.push_str(&text);
        lines.push('\n');
    }
    // Agents in the Harbor job's order (its config lists one per agent configuration).
    let harbor_rank = |harbor_name: &str| {
        config
            .agents
            .iter()
            .position(|a| a.name.as_deref() == Some(harbor_name))
            .unwrap_or(usize::MAX)
    };
    let rank_of: BTreeMap<String, usize> = trials
        .iter()
        .map(|t| {
            let agent = t
                .arbiter
                .as_ref()
                .and_then(|a| a.get("agent"))
                .and_then(Value::as_str)
                .unwrap_or(&t.result.agent_info.name)
                .to_string();
            (agent, harbor_rank(&t.result.agent_info.name))
        })
        .collect();
    agents.sort_by_key(|a| rank_of.get(a).copied().unwrap_or(usize::MAX));
    let path = to.join("trials.jsonl");
    std::fs::write(&path, lines).map_err(HarborError::io(&path))?;
    let attempts = config.n_attempts.max(max_attempt);
    let threshold = trials.first().map_or(PASS_THRESHOLD, threshold_of);
    let tasks: Vec<String> = config.tasks.iter().filter_map(|t| t.path.clone()).collect();
    let yaml = serde_yaml::to_string(&json!({
        "name": job_name,
        "tasks": tasks,
        "agents": agents,
        "variants": variants.iter().map(|v| json!({"name": v})).collect::<Vec<_>>(),
        "attempts": attempts,
        "pass_threshold": threshold,
    }))
    .expect("YAML");
    let path = to.join("job.yaml");
    let header =
        "# Imported from a Harbor job folder (see imported.json): read-only, not runnable.\n";
    std::fs::write(&path, format!("{header}{yaml}")).map_err(HarborError::io(&path))?;
    let lock = json!({
        "schema": "arbiter.lock.v1",
        "imported": true,
        "attempts": attempts,
        "pass_threshold": threshold,
    });
    let path = to.join("lock.json");
    std::fs::write(&path, format!("{lock:#}\n")).map_err(HarborError::io(&path))?;
    let source = harbor_dir
        .canonicalize()
        .unwrap_or_else(|_| harbor_dir.to_path_buf());
    let marker = json!({
        "schema": "arbiter.import.v1",
        "from": "harbor",
        "harbor_models": super::model::HARBOR_VERSION,
        "source": source.display().to_string(),
        "job_name": config.job_name,
        "read_only": true,
    });
    let path = to.join(IMPORTED_MARKER);
    std::fs::write(&path, format!("{marker:#}\n")).map_err(HarborError::io(&path))?;
    if let Ok(bytes) = std::fs::read(harbor_dir.join("result.json"))
        && let Ok(v) = serde_json::from_slice::<Value>(&bytes)
        && let Some(id) = v.get("id").and_then(Value::as_str)
    {
        let path = to.join(crate::job::JOB_ID_FILE);
        std::fs::write(&path, format!("{}\n", id.replace('-', "")))
            .map_err(HarborError::io(&path))?;
    }
    Ok(trials.len())
}

/// Copy a Harbor trial's files under arbiter's names: `verifier/test-stdout.txt` →
/// `verifier/stdout.log`, the ATIF `agent/trajectory.json` → `agent/trajectory.atif.json`
/// (and an agent's own `trajectory.agent.json` back to `trajectory.json`); Harbor's own
/// `config.json` and `result.json` are kept under `harbor/`.
fn copy_trial_files(from: &Path, to: &Path) -> Result<(), HarborError> {
    for sub in ["agent", "verifier", "artifacts", "steps"] {
        let src = from.join(sub);
        if src.is_dir() {
            copy_tree(&src, &to.join(sub))?;
        }
    }
    std::fs::create_dir_all(to.join("harbor")).map_err(HarborError::io(to))?;
    for f in ["config.json", "result.json"] {
        let src = from.join(f);
        if src.is_file() {
            let dst = to.join("harbor").join(f);
            std::fs::copy(&src, &dst).map_err(HarborError::io(&src))?;
        }
    }
    let verifier = to.join("verifier");
    for (ours, theirs) in [
        ("stdout.log", "test-stdout.txt"),
        ("stderr.log", "test-stderr.txt"),
    ] {
        let p = verifier.join(theirs);
        if p.is_file() && !verifier.join(ours).exists() {
            std::fs::rename(&p, verifier.join(ours)).map_err(HarborError::io(&p))?;
        }
    }
    for name in super::export::HARNESS_FILES {
        let p = from.join("arbiter").join(name);
        if p.is_file() {
            std::fs::create_dir_all(to.join("agent")).map_err(HarborError::io(to))?;
            std::fs::copy(&p, to.join("agent").join(name)).map_err(HarborError::io(&p))?;
        }
    }
    let agent = to.join("agent");
    let atif = agent.join("trajectory.json");
    if atif.is_file() {
        std::fs::rename(&atif, agent.join("trajectory.atif.json"))
            .map_err(HarborError::io(&atif))?;
    }
    let native = agent.join("trajectory.agent.json");
    if native.is_file() {
        std::fs::rename(&native, &atif).map_err(HarborError::io(&native))?;
    }
    Ok(())
}

/// Seconds between a timing's start and end, when both are known.
fn seconds(t: Option<&super::model::TimingInfo>) -> Option<f64> {
    let t = t?;
    let a = crate::timefmt::parse_rfc3339(t.started_at.as_deref()?)?;
    let b = crate::timefmt::parse_rfc3339(t.finished_at.as_deref()?)?;
    Some((b - a).max(0.0))
}

/// The phase of arbiter's trial an exception of Harbor's belongs to.
fn phase_of(exception_type: &str) -> &'static str {
    let t = exception_type;
    if t.contains("Verifier") || t.contains("Tests") || t.contains("Reward") {
        "verify"
    } else if t.contains("Environment")
        || t.contains("Sandbox")
        || t.contains("Healthcheck")
        || t.contains("Runtime")
        || t.contains("SSH")
        || t.contains("GKE")
        || t.contains("Memory")
    {
        "environment"
    } else {
        "agent"
    }
}

/// The exit code in a non-zero exit message: Harbor's `Command failed (exit N): …`, or a
/// number ending the message (arbiter's `the agent exited with code N`).
fn exit_code_in(message: &str) -> Option<i64> {
    if let Some(rest) = message.split("(exit ").nth(1)
        && let Some(code) = rest.split(')').next()
        && let Ok(code) = code.trim().parse()
    {
        return Some(code);
    }
    let digits: String = message
        .trim_end()
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect::<String>()
        .chars()
        .rev()
        .collect();
    digits.parse().ok()
}

/// How the trial ended and whether it was the harness's fault, from Harbor's exception.
/// Returns (termination, infra_error).
pub(crate) fn termination_of(r: &TrialResult) -> (Value, Option<Value>) {
    let ended = || {
        json!({
            "kind": "exited",
            "detail": "imported from Harbor: the agent run ended without an exception; Harbor does not record its exit code",
        })
    };
    let Some(e) = &r.exception_info else {
        return (ended(), None);
    };
    let p = policy::policy_for(&e.exception_type, e.policy_override.as_ref());
    let detail = format!("{}: {}", e.exception_type, e.exception_message);
    let verifier_side = phase_of(&e.exception_type) == "verify";
    if !p.should_grade || (!p.has_valid_reward && !verifier_side) {
        let infra = json!({"phase": phase_of(&e.exception_type), "message": detail});
        return (
            json!({"kind": "infra_error", "detail": detail}),
            Some(infra),
        );
    }
    if verifier_side {
        // The verifier's failure, not the agent's: the verifier outcome says it.
        return (ended(), None);
    }
    let t = match e.exception_type.as_str() {
        "AgentTimeoutError" => json!({"kind": "timeout", "detail": detail}),
        "MemoryLimitExceededError" | "SandboxLikelyOutOfMemoryError" => {
            json!({"kind": "oom", "detail": detail})
        }
        policy::ARBITER_KILLED => json!({"kind": "killed", "detail": detail}),
        "CancelledError" => json!({"kind": "cancelled", "detail": detail}),
        "NonZeroAgentExitCodeError" => match exit_code_in(&e.exception_message) {
            Some(code) => json!({"kind": "exited", "exit_code": code, "detail": detail}),
            None => json!({"kind": "exited", "detail": detail}),
        },
        _ => json!({"kind": "exited", "detail": detail}),
    };
    (t, None)
}

/// The verifier's outcome in arbiter's terms: its rewards judged by the pass rule; no reward
/// is an error (or `skipped` when Harbor's verifier was disabled), never a zero.
pub(crate) fn verifier_of(r: &TrialResult, infra: bool, threshold: f64) -> Value {
    let mode = match r.verifier_environment_mode.as_deref() {
        Some("shared") => "live",
        Some("separate") => "separate",
        _ => "unknown",
    };
    let rewards = r
        .verifier_result
        .as_ref()
        .and_then(|v| v.rewards.clone())
        .filter(|m| !m.is_empty());
    if infra {
        return json!({"status": "skipped", "mode": mode, "detail": "the harness failed before a verdict"});
    }
    if r.config.verifier.disable {
        return json!({"status": "skipped", "mode": mode, "detail": "Harbor's verifier was disabled"});
    }
    match rewards {
        Some(reward) if reward_valid(r) => {
            let primary = reward
                .get("reward")
                .copied()
                .unwrap_or_else(|| reward.values().sum::<f64>() / reward.len() as f64);
            let status = if primary >= threshold {
                "passed"
            } else {
                "failed"
            };
            json!({"status": status, "mode": mode, "reward": reward})
        }
        _ => {
            let detail = r
                .exception_info
                .as_ref()
                .map(|e| format!("{}: {}", e.exception_type, e.exception_message))
                .unwrap_or_else(|| "Harbor recorded no reward".into());
            json!({"status": "error", "mode": mode, "detail": detail})
        }
    }
}

/// One imported trial record.
fn record_of(job: &str, t: &HarborTrial, attempt: u32) -> Value {
    let r = &t.result;
    let (mut termination, mut infra) = termination_of(r);
    let verifier = verifier_of(r, infra.is_some(), threshold_of(t));
    let mut phases = serde_json::Map::new();
    for (name, timing) in [
        ("environment", r.environment_setup.as_ref()),
        ("verify", r.verifier.as_ref()),
    ] {
        if let Some(s) = seconds(timing) {
            phases.insert(name.into(), json!({"seconds": s}));
        }
    }
    let agent_s = [r.agent_setup.as_ref(), r.agent_execution.as_ref()]
        .into_iter()
        .filter_map(seconds)
        .reduce(|a, b| a + b);
    if let Some(s) = agent_s {
        phases.insert("agent".into(), json!({"seconds": s}));
    }
    let mut claim = json!({"status": "unknown"});
    let mut unknown = vec!["claim", "integrity", "changes", "usage", "limits", "audit"];
    let (mut id, mut agent, mut variant, mut attempt) = (
        r.trial_name.clone(),
        r.agent_info.name.clone(),
        "default".to_string(),
        attempt,
    );
    let mut extra = serde_json::Map::new();
    if let Some(a) = &t.arbiter {
        let text = |k: &str| a.get(k).and_then(Value::as_str).map(str::to_string);
        if let (Some(i), Some(ag), Some(v)) = (text("id"), text("agent"), text("variant")) {
            (id, agent, variant) = (i, ag, v);
        }
        if let Some(n) = a.get("attempt").and_then(Value::as_u64) {
            attempt = n as u32;
        }
        if let Some(c) = a.get("claim") {
            claim = c.clone();
        }
        // arbiter's own termination is finer than the exception it was mapped to.
        if let Some(term) = a.get("termination") {
            termination = term.clone();
        }
        if infra.is_some()
            && let Some(e) = a.get("infra_error")
        {
            infra = Some(e.clone());
        }
        for key in ["usage", "integrity", "continuation", "audit"] {
            if let Some(v) = a.get(key) {
                extra.insert(key.into(), v.clone());
                unknown.retain(|u| *u != key);
            }
        }
        unknown.retain(|u| *u != "claim");
    }
    let harbor_usage = r.agent_result.as_ref().and_then(|c| {
        c.n_input_tokens.or(c.n_output_tokens).map(|_| {
            json!({
                "n_input_tokens": c.n_input_tokens,
                "n_cache_tokens": c.n_cache_tokens,
                "n_output_tokens": c.n_output_tokens,
                "cost_usd": c.cost_usd,
            })
        })
    });
    let mut rec = json!({
        "schema": "arbiter.trial.v1",
        "id": id,
        "job": job,
        "task": r.task_name,
        "agent": agent,
        "variant": variant,
        "attempt": attempt,
        "task_checksum": r.task_checksum,
        "termination": termination,
        "claim": claim,
        "verifier": verifier,
        "audit": null,
        "phases": phases,
        "retries": 0,
        "artifacts": [],
        "overrides": {},
        "started_at": r.started_at.clone().unwrap_or_default(),
        "finished_at": r.finished_at.clone().unwrap_or_default(),
        "imported": {
            "from": "harbor",
            "trial_name": r.trial_name,
            "trial_id": r.id,
            "source": r.source,
            "agent_version": r.agent_info.version,
            "model": r.agent_info.model_info.as_ref().map(|m| json!({"name": m.name, "provider": m.provider})),
            "exception_type": r.exception_info.as_ref().map(|e| e.exception_type.clone()),
            "unknown": unknown,
        },
    });
    let obj = rec.as_object_mut().expect("an object");
    if let Some(i) = infra {
        obj.insert("infra_error".into(), i);
    }
    if let Some(u) = harbor_usage {
        obj.insert("harbor_usage".into(), u);
    }
    for (k, v) in extra {
        obj.insert(k, v);
    }
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_read_off_the_message_end() {
        assert_eq!(exit_code_in("the agent exited with code 3"), Some(3));
        assert_eq!(
            exit_code_in("Command failed (exit 2): claude -p ...\nstdout: 1\nstderr: "),
            Some(2)
        );
        assert_eq!(
            exit_code_in("Agent exited with non-zero exit code 127"),
            Some(127)
        );
        assert_eq!(exit_code_in("no code"), None);
    }

    #[test]
    fn phases_follow_the_exception_type() {
        assert_eq!(phase_of("SandboxBuildFailedError"), "environment");
        assert_eq!(phase_of("VerifierTimeoutError"), "verify");
        assert_eq!(phase_of("ApiConnectionError"), "agent");
    }
}
