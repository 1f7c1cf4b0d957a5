//! A job directory read into the store's rows, with nothing written anywhere: every record is
//! checked first (a truncated `result.json` or `trials.jsonl` line refuses the job whole), and
//! each trial's outcome is the one `arbiter report` counts ([`crate::report::load_job`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::ResultsError;
use super::schema::{self, Table};
use crate::report::load::Outcome;

/// One value of a row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

/// Everything the store holds of one job: rows per table, in [`schema::TABLES`] order.
#[derive(Debug, Clone)]
pub(crate) struct JobRows {
    pub dir: PathBuf,
    pub job_id: String,
    pub name: String,
    pub trials: usize,
    pub tables: Vec<(&'static Table, Vec<Vec<Val>>)>,
}

impl JobRows {
    pub(crate) fn rows(&self, table: &str) -> &[Vec<Val>] {
        self.tables
            .iter()
            .find(|(t, _)| t.name == table)
            .map_or(&[], |(_, rows)| rows.as_slice())
    }
}

/// The job dirs among `paths`: each a job dir (it has `job.yaml`) or a folder holding job dirs
/// (searched three levels down, not into a job dir).
pub(crate) fn find_jobs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ResultsError> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(ResultsError::io(path))?;
        if !meta.is_dir() {
            return Err(ResultsError::NoJobs { path: path.clone() });
        }
        let before = out.len();
        walk(path, 0, &mut out).map_err(ResultsError::io(path))?;
        if out.len() == before {
            return Err(ResultsError::NoJobs { path: path.clone() });
        }
    }
    out.dedup();
    Ok(out)
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if dir.join("job.yaml").is_file() {
        out.push(dir.to_path_buf());
        return Ok(());
    }
    if depth >= 3 {
        return Ok(());
    }
    let mut children: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    children.sort();
    for child in children {
        walk(&child, depth + 1, out)?;
    }
    Ok(())
}

/// Read a job dir into rows. Nothing is written (the job's id, when it has no `job-id`
/// file, is derived from its contents: [`job_id`]).
pub(crate) fn read_job(dir: &Path) -> Result<JobRows, ResultsError> {
    let config_path = dir.join("job.yaml");
    let config = std::fs::read_to_string(&config_path).map_err(ResultsError::io(&config_path))?;
    let lock_path = dir.join("lock.json");
    let lock: Option<Value> = match std::fs::read(&lock_path) {
        Ok(bytes) => Some(
            serde_json::from_slice(&bytes).map_err(|e| ResultsError::Field {
                path: lock_path.clone(),
                field: "file".into(),
                message: format!("not JSON ({e})"),
            })?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(ResultsError::io(&lock_path)(e)),
    };
    let records = read_records(dir)?;
    check_results(dir)?;

    // The outcome of each trial as `arbiter report` counts it.
    let report = if records.is_empty() {
        None
    } else {
        Some(
            crate::report::load_job(dir).map_err(|e| ResultsError::Field {
                path: dir.join("trials.jsonl"),
                field: "file".into(),
                message: e.to_string(),
            })?,
        )
    };
    let facts: HashMap<&str, &crate::report::load::Trial> = report
        .iter()
        .flat_map(|r| r.trials.iter().map(|t| (&*t.id, t)))
        .collect();

    let started = records
        .iter()
        .filter_map(|(_, r)| r.get("started_at").and_then(Value::as_str))
        .min()
        .map(str::to_string);
    let finished = records
        .iter()
        .filter_map(|(_, r)| r.get("finished_at").and_then(Value::as_str))
        .max()
        .map(str::to_string);
    let job_id = job_id(dir, &config, lock.as_ref(), started.as_deref())?;
    let name = match &report {
        Some(r) => r.name.clone(),
        None => dir
            .file_name()
            .map_or_else(|| "job".to_string(), |n| n.to_string_lossy().into_owned()),
    };

    let mut tables: BTreeMap<&'static str, Vec<Vec<Val>>> = BTreeMap::new();
    let mut push = |t: &'static Table, row: Vec<Val>| tables.entry(t.name).or_default().push(row);
    let (mut scored, mut passed, mut infra) = (0i64, 0i64, 0i64);
    let jsonl = dir.join("trials.jsonl");
    for (id, rec) in &records {
        let fact = facts.get(id.as_str()).ok_or_else(|| ResultsError::Field {
            path: jsonl.clone(),
            field: id.to_string(),
            message: "a record `arbiter report` does not read".into(),
        })?;
        scored += i64::from(fact.outcome.scored());
        passed += i64::from(fact.outcome.passed());
        infra += i64::from(fact.outcome == Outcome::Infra);
        trial_rows(&job_id, id, rec, fact, &mut push);
    }

    // Arms in job order, counted from the report's facts.
    if let Some(r) = &report {
        for (position, key, trials) in r.trials_by_arm() {
            let count = |f: &dyn Fn(&crate::report::load::Trial) -> bool| {
                Val::Int(trials.iter().filter(|t| f(t)).count() as i64)
            };
            push(
                &schema::ARMS,
                row(
                    &schema::ARMS,
                    [
                        ("job_id", text(&job_id)),
                        ("agent", text(&key.agent)),
                        ("variant", text(&key.variant)),
                        ("arm_order", Val::Int(position as i64)),
                        ("trials", Val::Int(trials.len() as i64)),
                        ("scored", count(&|t| t.outcome.scored())),
                        ("passed", count(&|t| t.outcome.passed())),
                        ("infra", count(&|t| t.outcome == Outcome::Infra)),
                    ],
                ),
            );
        }
    }

    let backend = records
        .iter()
        .find_map(|(_, r)| r.pointer("/sandbox/backend").and_then(Value::as_str))
        .map(str::to_string);
    let abs = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    push(
        &schema::JOBS,
        row(
            &schema::JOBS,
            [
                ("job_id", text(&job_id)),
                ("name", text(&name)),
                ("dir", text(&abs.to_string_lossy())),
                ("host", opt_text(hostname())),
                ("arbiter_version", str_at(lock.as_ref(), "/arbiter_version")),
                ("backend", opt_text(backend)),
                (
                    "attempts",
                    report
                        .as_ref()
                        .map_or(Val::Null, |r| Val::Int(i64::from(r.attempts))),
                ),
                (
                    "pass_threshold",
                    report
                        .as_ref()
                        .and_then(|r| r.pass_threshold)
                        .map_or(Val::Null, Val::Real),
                ),
                ("trials", Val::Int(records.len() as i64)),
                ("scored", Val::Int(scored)),
                ("passed", Val::Int(passed)),
                ("infra", Val::Int(infra)),
                ("started_at", opt_text(started)),
                ("finished_at", opt_text(finished)),
                ("config", text(&config)),
                ("indexed_at", text(&crate::timefmt::now_rfc3339())),
            ],
        ),
    );

    let tables = schema::TABLES
        .iter()
        .map(|t| (*t, tables.remove(t.name).unwrap_or_default()))
        .collect();
    Ok(JobRows {
        dir: abs,
        job_id,
        name,
        trials: records.len(),
        tables,
    })
}

/// The finished records of `trials.jsonl`, by trial id in file order (a later line for the
/// same trial replaces an earlier one, as for `arbiter report`). A line that is not a whole
/// record — truncated, not JSON, or one the report would skip — refuses the job.
fn read_records(dir: &Path) -> Result<Vec<(String, Value)>, ResultsError> {
    let path = dir.join("trials.jsonl");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ResultsError::io(&path)(e)),
    };
    let mut order: Vec<String> = Vec::new();
    let mut by_id: HashMap<String, Value> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |message: String| ResultsError::Field {
            path: path.clone(),
            field: format!("line {}", i + 1),
            message,
        };
        let value: Value = serde_json::from_str(line).map_err(|e| {
            bad(format!(
                "not a whole record ({e}); nothing of this job was indexed"
            ))
        })?;
        crate::report::load::readable(line).map_err(|e| {
            bad(format!(
                "not a trial record ({e}); nothing of this job was indexed"
            ))
        })?;
        let id = value
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("id: missing".into()))?
            .to_string();
        if by_id.insert(id.clone(), value).is_none() {
            order.push(id);
        }
    }
    Ok(order
        .into_iter()
        .filter_map(|id| by_id.remove(&id).map(|v| (id, v)))
        .collect())
}

/// Every `trials/*/result.json` must be a whole JSON record.
fn check_results(dir: &Path) -> Result<(), ResultsError> {
    let trials = dir.join("trials");
    let Ok(entries) = std::fs::read_dir(&trials) else {
        return Ok(());
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path().join("result.json");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ResultsError::io(&path)(e)),
        };
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
            return Err(ResultsError::Field {
                path,
                field: "file".into(),
                message: format!("not a whole record ({e}); nothing of this job was indexed"),
            });
        }
    }
    Ok(())
}

/// The job's identity: its `job-id` file (written at its first run), else — a job dir made
/// before there was one — a digest of its config, lock and first start, so the same dir
/// indexed twice is one job and a dir made anew in the same place is another.
fn job_id(
    dir: &Path,
    config: &str,
    lock: Option<&Value>,
    started: Option<&str>,
) -> Result<String, ResultsError> {
    let path = dir.join(crate::job::JOB_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            let ok = !id.is_empty()
                && id.len() <= 128
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if ok {
                Ok(id.to_string())
            } else {
                Err(ResultsError::Field {
                    path,
                    field: "file".into(),
                    message: "not a job id (1 to 128 letters, digits, '-', '_' or '.')".into(),
                })
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut seed = config.as_bytes().to_vec();
            seed.push(0);
            seed.extend(lock.map(Value::to_string).unwrap_or_default().bytes());
            seed.push(0);
            seed.extend(started.unwrap_or("").bytes());
            let digest = crate::digest::sha256_hex(&seed);
            Ok(format!("legacy-{}", &digest[..24.min(digest.len())]))
        }
        Err(e) => Err(ResultsError::io(&path)(e)),
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// A row of `table` from (column, value) pairs; columns not named are NULL.
fn row<const N: usize>(table: &Table, pairs: [(&str, Val); N]) -> Vec<Val> {
    let mut out = vec![Val::Null; table.columns.len()];
    for (name, val) in pairs {
        match table.column(name) {
            Some(i) => out[i] = val,
            None => debug_assert!(false, "{}: no column {name}", table.name),
        }
    }
    out
}

fn text(s: &str) -> Val {
    Val::Text(s.to_string())
}

fn opt_text(s: Option<String>) -> Val {
    s.map_or(Val::Null, Val::Text)
}

fn str_at(v: Option<&Value>, pointer: &str) -> Val {
    match v.and_then(|v| v.pointer(pointer)) {
        Some(Value::String(s)) => Val::Text(s.clone()),
        _ => Val::Null,
    }
}

fn int_at(v: &Value, pointer: &str) -> Val {
    match v.pointer(pointer) {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| i64::try_from(u).unwrap_or(i64::MAX)))
            .map_or(Val::Null, Val::Int),
        Some(Value::Bool(b)) => Val::Int(i64::from(*b)),
        _ => Val::Null,
    }
}

fn real_at(v: &Value, pointer: &str) -> Val {
    v.pointer(pointer)
        .and_then(Value::as_f64)
        .filter(|f| f.is_finite())
        .map_or(Val::Null, Val::Real)
}

/// A value as JSON text (NULL when absent or null).
fn json_at(v: &Value, pointer: &str) -> Val {
    match v.pointer(pointer) {
        None | Some(Value::Null) => Val::Null,
        Some(x) => Val::Text(x.to_string()),
    }
}

fn flag(b: bool) -> Val {
    Val::Int(i64::from(b))
}

/// The primary value of a reward map: the `reward` key, else the mean of all values.
fn primary(reward: Option<&Value>) -> Val {
    let Some(map) = reward.and_then(Value::as_object).filter(|m| !m.is_empty()) else {
        return Val::Null;
    };
    if let Some(v) = map.get("reward").and_then(Value::as_f64) {
        return Val::Real(v);
    }
    let values: Vec<f64> = map.values().filter_map(Value::as_f64).collect();
    if values.is_empty() {
        return Val::Null;
    }
    Val::Real(values.iter().sum::<f64>() / values.len() as f64)
}

/// The rows of one trial record in every table but `jobs` and `arms`.
fn trial_rows(
    job: &str,
    id: &str,
    rec: &Value,
    fact: &crate::report::load::Trial,
    push: &mut impl FnMut(&'static Table, Vec<Val>),
) {
    let key = || [("job_id", text(job)), ("trial_id", text(id))];
    let infra = rec.get("infra_error").filter(|v| !v.is_null());
    push(
        &schema::TRIALS,
        row(
            &schema::TRIALS,
            [
                ("job_id", text(job)),
                ("trial_id", text(id)),
                ("task", str_at(Some(rec), "/task")),
                ("agent", str_at(Some(rec), "/agent")),
                ("variant", str_at(Some(rec), "/variant")),
                ("attempt", int_at(rec, "/attempt")),
                ("task_checksum", str_at(Some(rec), "/task_checksum")),
                ("image", str_at(Some(rec), "/image")),
                ("backend", str_at(Some(rec), "/sandbox/backend")),
                ("started_at", str_at(Some(rec), "/started_at")),
                ("finished_at", str_at(Some(rec), "/finished_at")),
                ("seconds", Val::Real(fact.seconds)),
                ("outcome", text(fact.outcome.as_str())),
                ("scored", flag(fact.outcome.scored())),
                ("passed", flag(fact.outcome.passed())),
                ("tampered", flag(fact.tampered)),
                ("reward", fact.reward.map_or(Val::Null, Val::Real)),
                ("termination_kind", str_at(Some(rec), "/termination/kind")),
                (
                    "termination_exit_code",
                    int_at(rec, "/termination/exit_code"),
                ),
                (
                    "termination_detail",
                    str_at(Some(rec), "/termination/detail"),
                ),
                ("claim_status", str_at(Some(rec), "/claim/status")),
                ("claim_source", str_at(Some(rec), "/claim/source")),
                (
                    "claim_semantic_status",
                    str_at(Some(rec), "/claim/semantic_status"),
                ),
                ("claimed_success", flag(fact.claimed_success)),
                ("claim_record", json_at(rec, "/claim/record")),
                ("verifier_status", str_at(Some(rec), "/verifier/status")),
                ("verifier_mode", str_at(Some(rec), "/verifier/mode")),
                ("verifier_exit_code", int_at(rec, "/verifier/exit_code")),
                ("verifier_detail", str_at(Some(rec), "/verifier/detail")),
                ("audit_verdict", str_at(Some(rec), "/audit/verdict")),
                ("audit_violations", json_at(rec, "/audit/violations")),
                ("integrity_status", str_at(Some(rec), "/integrity/status")),
                ("changes_added", int_at(rec, "/changes/added")),
                ("changes_modified", int_at(rec, "/changes/modified")),
                ("changes_deleted", int_at(rec, "/changes/deleted")),
                (
                    "changes_outside_workdir",
                    int_at(rec, "/changes/outside_workdir"),
                ),
                ("changes_file", str_at(Some(rec), "/changes/file")),
                ("infra_phase", str_at(infra, "/phase")),
                ("infra_message", str_at(infra, "/message")),
                ("retries", int_at(rec, "/retries")),
                ("regrade_id", str_at(Some(rec), "/regrade/id")),
                ("regrade_status", str_at(Some(rec), "/regrade/status")),
                ("record", Val::Text(rec.to_string())),
            ],
        ),
    );
    if let Some(map) = rec.pointer("/verifier/reward").and_then(Value::as_object) {
        for (name, value) in map {
            let [a, b] = key();
            let value = value.as_f64().filter(|f| f.is_finite());
            push(
                &schema::REWARDS,
                row(
                    &schema::REWARDS,
                    [
                        a,
                        b,
                        ("name", text(name)),
                        ("value", value.map_or(Val::Null, Val::Real)),
                    ],
                ),
            );
        }
    }
    if let Some(map) = rec.get("phases").and_then(Value::as_object) {
        for (phase, value) in map {
            let [a, b] = key();
            push(
                &schema::PHASES,
                row(
                    &schema::PHASES,
                    [
                        a,
                        b,
                        ("phase", text(phase)),
                        ("seconds", real_at(value, "/seconds")),
                    ],
                ),
            );
        }
    }
    if let Some(u) = rec.get("usage").filter(|v| v.is_object()) {
        let [a, b] = key();
        let upstream: i64 = u
            .get("upstream_errors")
            .and_then(Value::as_object)
            .map_or(0, |m| m.values().filter_map(Value::as_i64).sum());
        push(
            &schema::USAGE,
            row(
                &schema::USAGE,
                [
                    a,
                    b,
                    ("requests", int_at(u, "/requests")),
                    ("input_tokens", int_at(u, "/input_tokens")),
                    ("output_tokens", int_at(u, "/output_tokens")),
                    ("cache_read_tokens", int_at(u, "/cache_read_tokens")),
                    ("cache_write_tokens", int_at(u, "/cache_write_tokens")),
                    ("cost_usd", real_at(u, "/cost_usd")),
                    ("upstream_errors", Val::Int(upstream)),
                    ("upstream_errors_by_kind", json_at(u, "/upstream_errors")),
                    ("refused", int_at(u, "/refused")),
                    ("calls_without_usage", int_at(u, "/calls_without_usage")),
                    ("budget_max_cost_usd", real_at(u, "/budget/max_cost_usd")),
                    ("budget_exhausted", int_at(u, "/budget/exhausted")),
                    ("unavailable", str_at(Some(u), "/unavailable")),
                ],
            ),
        );
    }
    for a in rec
        .get("attempts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let [k1, k2] = key();
        push(
            &schema::ATTEMPTS,
            row(
                &schema::ATTEMPTS,
                [
                    k1,
                    k2,
                    ("attempt", int_at(a, "/attempt")),
                    ("attempt_id", str_at(Some(a), "/id")),
                    ("started_at", str_at(Some(a), "/started_at")),
                    ("finished_at", str_at(Some(a), "/finished_at")),
                    ("seconds", real_at(a, "/seconds")),
                    ("remaining_seconds", real_at(a, "/remaining_seconds")),
                    ("termination_kind", str_at(Some(a), "/termination/kind")),
                    ("termination_exit_code", int_at(a, "/termination/exit_code")),
                    ("termination_detail", str_at(Some(a), "/termination/detail")),
                    ("claim_status", str_at(Some(a), "/claim/status")),
                    (
                        "claim_semantic_status",
                        str_at(Some(a), "/claim/semantic_status"),
                    ),
                    ("requests", int_at(a, "/usage/requests")),
                    ("input_tokens", int_at(a, "/usage/input_tokens")),
                    ("output_tokens", int_at(a, "/usage/output_tokens")),
                    ("cost_usd", real_at(a, "/usage/cost_usd")),
                    ("continued_because", str_at(Some(a), "/continued_because")),
                    ("validation", json_at(a, "/validation")),
                    ("cleared", json_at(a, "/cleared")),
                ],
            ),
        );
    }
    if let Some(c) = rec.get("continuation").filter(|v| v.is_object()) {
        let [a, b] = key();
        push(
            &schema::CONTINUATION,
            row(
                &schema::CONTINUATION,
                [
                    a,
                    b,
                    ("max_attempts", int_at(c, "/max_attempts")),
                    ("attempts_used", int_at(c, "/attempts_used")),
                    ("status", str_at(Some(c), "/status")),
                    ("detail", str_at(Some(c), "/detail")),
                ],
            ),
        );
    }
    for (seq, r) in rec
        .get("verifier_history")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let [a, b] = key();
        push(
            &schema::VERIFIER_RUNS,
            row(
                &schema::VERIFIER_RUNS,
                [
                    a,
                    b,
                    ("seq", Val::Int(seq as i64 + 1)),
                    ("recorded_at", str_at(Some(r), "/at")),
                    ("regrade", str_at(Some(r), "/regrade")),
                    ("run", int_at(r, "/run")),
                    ("source", str_at(Some(r), "/source")),
                    ("verifier_checksum", str_at(Some(r), "/verifier_checksum")),
                    ("tests_dir", str_at(Some(r), "/tests_dir")),
                    ("arbiter_version", str_at(Some(r), "/arbiter_version")),
                    ("mode", str_at(Some(r), "/mode")),
                    ("image", str_at(Some(r), "/image")),
                    ("status", str_at(Some(r), "/outcome/status")),
                    ("reward", primary(r.pointer("/outcome/reward"))),
                    ("exit_code", int_at(r, "/outcome/exit_code")),
                    ("detail", str_at(Some(r), "/outcome/detail")),
                    ("verdict", str_at(Some(r), "/verdict")),
                ],
            ),
        );
    }
    for (seq, f) in rec
        .pointer("/integrity/findings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let [a, b] = key();
        push(
            &schema::FINDINGS,
            row(
                &schema::FINDINGS,
                [
                    a,
                    b,
                    ("seq", Val::Int(seq as i64 + 1)),
                    ("path", str_at(Some(f), "/path")),
                    ("class", str_at(Some(f), "/class")),
                    ("why", str_at(Some(f), "/why")),
                ],
            ),
        );
    }
    let earlier = rec
        .get("previous_errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| (e, false));
    for (seq, (e, last)) in earlier.chain(infra.map(|e| (e, true))).enumerate() {
        let [a, b] = key();
        push(
            &schema::INFRA_ERRORS,
            row(
                &schema::INFRA_ERRORS,
                [
                    a,
                    b,
                    ("seq", Val::Int(seq as i64 + 1)),
                    ("phase", str_at(Some(e), "/phase")),
                    ("message", str_at(Some(e), "/message")),
                    ("is_final", flag(last)),
                ],
            ),
        );
    }
}
