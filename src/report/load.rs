//! Reading a job directory for reporting: `trials.jsonl` is stream-parsed line by line into
//! compact [`Trial`]s (ids, indices and a few numbers; no claim records, no evidence), so a
//! report over 100,000 trials stays fast and small.
//!
//! Over 600 lines: the streaming reader of records and its tolerance rules (old and newer record shapes), with tests.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::outcome::{ClaimStatus, Verdict, ViolationKind};
use crate::trial::{TerminationKind, VerifierStatus};

use super::ReportError;

/// How one trial came out, for reporting. Infra errors are a class of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Outcome {
    Passed,
    Failed,
    /// The verifier crashed, timed out or wrote no reward (the trial was still scored).
    VerifierError,
    /// The verifier did not run (the trial was still scored: an agent can break it).
    Skipped,
    /// The harness or engine failed: not scored.
    Infra,
    /// The user stopped the trial (`arbiter serve`'s per-trial cancel): not scored — neither
    /// the agent's failure nor the harness's.
    Cancelled,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "pass",
            Outcome::Failed => "fail",
            Outcome::VerifierError => "error",
            Outcome::Skipped => "skipped",
            Outcome::Infra => "infra",
            Outcome::Cancelled => "cancelled",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Outcome> {
        Some(match s {
            "pass" => Outcome::Passed,
            "fail" => Outcome::Failed,
            "error" => Outcome::VerifierError,
            "skipped" => Outcome::Skipped,
            "infra" => Outcome::Infra,
            "cancelled" => Outcome::Cancelled,
            _ => return None,
        })
    }

    pub(crate) fn scored(self) -> bool {
        !matches!(self, Outcome::Infra | Outcome::Cancelled)
    }

    pub(crate) fn passed(self) -> bool {
        self == Outcome::Passed
    }

    /// One character for compact per-task views.
    pub(crate) fn glyph(self) -> char {
        match self {
            Outcome::Passed => '✓',
            Outcome::Failed => '✗',
            Outcome::VerifierError => 'E',
            Outcome::Skipped => 'S',
            Outcome::Infra => 'I',
            Outcome::Cancelled => 'C',
        }
    }
}

/// An agent × variant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ArmKey {
    pub agent: String,
    pub variant: String,
}

impl ArmKey {
    pub(crate) fn label(&self) -> String {
        format!("{}/{}", self.agent, self.variant)
    }
}

/// What a report needs of one trial.
#[derive(Debug, Clone)]
pub(crate) struct Trial {
    pub id: Box<str>,
    pub task: u32,
    pub arm: u32,
    pub attempt: u32,
    pub outcome: Outcome,
    /// `None` when not scored, and for a tampered trial (see `tampered`).
    pub verdict: Option<Verdict>,
    /// Violation kinds as bits (1 = certificate_without_admissibility, 2 =
    /// goal_substitution_uncertified, 4 = residual_certificate).
    pub violations: u8,
    pub claim: ClaimStatus,
    pub claimed_success: bool,
    pub semantic_status: Option<Box<str>>,
    pub termination: TerminationKind,
    pub exit_code: Option<i64>,
    /// The reward's primary value (the `reward` key, else the mean of all keys).
    pub reward: Option<f64>,
    pub agent_seconds: Option<f64>,
    /// Sum of all phase times.
    pub seconds: f64,
    /// Why it failed, in words (infra message, verifier or termination detail).
    pub detail: Option<Box<str>>,
    /// What the agent spent through the model gateway, when the record has `usage`.
    pub usage: Option<Box<TrialUsage>>,
    /// The record's `integrity.status`, when it has one.
    pub integrity: Option<Integrity>,
    /// The audit said `tampered`, or integrity is `suspect`: never counted as passed.
    pub tampered: bool,
    /// A Harbor multi-step trial's steps that ran, in order (empty otherwise).
    pub steps: Box<[StepFact]>,
    /// Goal continuation (SPEC §15): the attempts the trial used and whether the limit ended
    /// it without a typed success (`budget_limited`); `None` without `continuation`.
    pub continuation: Option<(u32, bool)>,
}

/// One step of a multi-step trial (the record's `steps[]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct StepFact {
    pub name: Box<str>,
    #[serde(default)]
    pub reward: Option<f64>,
    #[serde(default)]
    pub passed: bool,
}

/// The record's `usage` (SPEC §1.4), summed per arm.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TrialUsage {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cost_usd: f64,
    /// Sum over the status codes of `upstream_errors`.
    pub upstream_errors: u64,
    pub budget_exhausted: bool,
}

/// The record's `integrity.status` (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Integrity {
    Clean,
    Suspect,
    Restored,
}

impl Integrity {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Integrity::Clean => "clean",
            Integrity::Suspect => "suspect",
            Integrity::Restored => "restored",
        }
    }
}

impl Trial {
    pub(crate) fn violation_kinds(&self) -> Vec<&'static str> {
        [
            (1u8, "certificate_without_admissibility"),
            (2, "goal_substitution_uncertified"),
            (4, "residual_certificate"),
        ]
        .into_iter()
        .filter(|(bit, _)| self.violations & bit != 0)
        .map(|(_, name)| name)
        .collect()
    }
}

/// A job directory, read for reporting.
#[derive(Debug, Clone)]
pub(crate) struct JobData {
    pub dir: PathBuf,
    pub name: String,
    /// Attempts per task as configured (`lock.json`), else the highest attempt seen.
    pub attempts: u32,
    pub pass_threshold: Option<f64>,
    /// In job order (agents then variants as `job.yaml` lists them; unknown ones after).
    pub arms: Vec<ArmKey>,
    /// Sorted by name, as a reader sorts ([`natural_cmp`]).
    pub tasks: Vec<String>,
    pub trials: Vec<Trial>,
    /// Per arm: per reward key, (sum, count), for multi-key rewards.
    pub reward_keys: Vec<BTreeMap<String, (f64, usize)>>,
    /// Per arm: the earliest `started_at`.
    pub first_started: Vec<Option<String>>,
    /// Problems with the data itself, in words (unreadable lines, duplicates).
    pub warnings: Vec<String>,
    /// Some record has `usage` (the job used the model gateway).
    pub has_usage: bool,
    /// Some record has `integrity` or a `tampered` verdict.
    pub has_integrity: bool,
}

impl JobData {
    /// Each arm (index and key, in job order) with its trials: `trials` is sorted by arm, so
    /// an arm's trials are one slice (empty when it has none).
    pub(crate) fn trials_by_arm(&self) -> impl Iterator<Item = (usize, &ArmKey, &[Trial])> {
        let mut start = 0;
        self.arms.iter().enumerate().map(move |(a, key)| {
            let len = self.trials[start..]
                .iter()
                .take_while(|t| t.arm as usize == a)
                .count();
            let trials = &self.trials[start..start + len];
            start += len;
            (a, key, trials)
        })
    }
}

#[derive(Deserialize)]
struct RawTrial<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow, default)]
    job: Option<Cow<'a, str>>,
    #[serde(borrow)]
    task: Cow<'a, str>,
    #[serde(borrow)]
    agent: Cow<'a, str>,
    #[serde(borrow)]
    variant: Cow<'a, str>,
    attempt: u32,
    termination: RawTermination<'a>,
    claim: RawClaim<'a>,
    verifier: RawVerifier<'a>,
    #[serde(borrow, default)]
    audit: Option<RawAudit<'a>>,
    #[serde(borrow, default)]
    phases: BTreeMap<Cow<'a, str>, RawPhase>,
    #[serde(borrow, default)]
    infra_error: Option<RawInfra<'a>>,
    #[serde(borrow, default)]
    started_at: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<RawUsage>,
    #[serde(default)]
    integrity: Option<RawIntegrity>,
    #[serde(default)]
    steps: Vec<StepFact>,
    #[serde(borrow, default)]
    continuation: Option<RawContinuation<'a>>,
}

/// The record's `continuation` (SPEC §15).
#[derive(Deserialize)]
struct RawContinuation<'a> {
    attempts_used: u32,
    #[serde(borrow)]
    status: Cow<'a, str>,
}

#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    requests: u64,
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    cache_read_tokens: u64,
    #[serde(default)]
    cost_usd: Option<f64>,
    #[serde(default)]
    upstream_errors: BTreeMap<String, u64>,
    #[serde(default)]
    budget: Option<RawBudget>,
}

#[derive(Deserialize)]
struct RawBudget {
    #[serde(default)]
    exhausted: bool,
}

#[derive(Deserialize)]
struct RawIntegrity {
    /// Unknown statuses (a newer arbiter) read as none rather than making the line unreadable.
    #[serde(default, deserialize_with = "lenient")]
    status: Option<Integrity>,
}

/// Deserialize a known value, or `None` for a value this version does not know.
fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let v = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

#[derive(Deserialize)]
struct RawTermination<'a> {
    kind: TerminationKind,
    #[serde(default)]
    exit_code: Option<i64>,
    #[serde(borrow, default)]
    detail: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RawClaim<'a> {
    status: ClaimStatus,
    #[serde(borrow, default)]
    semantic_status: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RawVerifier<'a> {
    status: VerifierStatus,
    #[serde(default)]
    reward: Option<BTreeMap<Cow<'a, str>, f64>>,
    #[serde(borrow, default)]
    detail: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct RawAudit<'a> {
    /// A string, so a verdict this version has no variant for (`tampered`) still reads.
    #[serde(borrow)]
    verdict: Cow<'a, str>,
    #[serde(default)]
    violations: Vec<RawViolation>,
}

#[derive(Deserialize)]
struct RawViolation {
    #[serde(default, deserialize_with = "lenient")]
    kind: Option<ViolationKind>,
}

/// The audit verdict `tampered` (SPEC §6), which outranks every other.
pub(crate) const TAMPERED: &str = "tampered";

fn verdict_of(s: &str) -> Option<Verdict> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).ok()
}

#[derive(Deserialize)]
struct RawPhase {
    seconds: f64,
}

#[derive(Deserialize)]
struct RawInfra<'a> {
    #[serde(borrow)]
    phase: Cow<'a, str>,
    #[serde(borrow)]
    message: Cow<'a, str>,
}

#[derive(Deserialize)]
struct RawLock {
    #[serde(default)]
    attempts: Option<u32>,
    #[serde(default)]
    pass_threshold: Option<f64>,
}

/// Whether `line` of `trials.jsonl` is a record [`load_job`] reads (it skips the others with
/// a warning; the results store refuses a job that has one).
pub(crate) fn readable(line: &str) -> Result<(), serde_json::Error> {
    serde_json::from_str::<RawTrial<'_>>(line).map(|_| ())
}

/// Read a job directory's `trials.jsonl` (plus `lock.json` and `job.yaml` when present).
pub(crate) fn load_job(dir: &Path) -> Result<JobData, ReportError> {
    let jsonl = dir.join("trials.jsonl");
    let file = match std::fs::File::open(&jsonl) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReportError::NoTrials { path: jsonl });
        }
        Err(e) => return Err(ReportError::io(&jsonl)(e)),
    };
    let lock: Option<RawLock> = std::fs::read(dir.join("lock.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let (agent_order, variant_order) = job_order(&dir.join("job.yaml"));

    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut line = String::new();
    let mut line_no = 0usize;
    let mut bad_lines: Vec<usize> = Vec::new();
    let mut duplicates = 0usize;
    let mut job_name: Option<String> = None;
    let mut arm_index: HashMap<ArmKey, u32> = HashMap::new();
    let mut arms: Vec<ArmKey> = Vec::new();
    let mut task_index: HashMap<String, u32> = HashMap::new();
    let mut tasks: Vec<String> = Vec::new();
    let mut by_id: HashMap<Box<str>, usize> = HashMap::new();
    let mut trials: Vec<Trial> = Vec::new();
    let mut reward_keys: Vec<BTreeMap<String, (f64, usize)>> = Vec::new();
    let mut first_started: Vec<Option<String>> = Vec::new();
    let (mut has_usage, mut has_integrity) = (false, false);
    loop {
        line.clear();
        let n = reader
            .read_line(&mut line)
            .map_err(ReportError::io(&jsonl))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let raw: RawTrial<'_> = match serde_json::from_str(text) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(line = line_no, error = %e, "trials.jsonl: unreadable line skipped");
                bad_lines.push(line_no);
                continue;
            }
        };
        if job_name.is_none() {
            job_name = raw.job.as_deref().map(str::to_string);
        }
        let key = ArmKey {
            agent: raw.agent.to_string(),
            variant: raw.variant.to_string(),
        };
        let arm = match arm_index.get(&key) {
            Some(i) => *i,
            None => {
                let i = arms.len() as u32;
                arm_index.insert(key.clone(), i);
                arms.push(key);
                reward_keys.push(BTreeMap::new());
                first_started.push(None);
                i
            }
        };
        let task = match task_index.get(raw.task.as_ref()) {
            Some(i) => *i,
            None => {
                let i = tasks.len() as u32;
                task_index.insert(raw.task.to_string(), i);
                tasks.push(raw.task.to_string());
                i
            }
        };
        let infra =
            raw.infra_error.is_some() || raw.termination.kind == TerminationKind::InfraError;
        let outcome = if infra {
            Outcome::Infra
        } else if raw.termination.kind == TerminationKind::Cancelled {
            Outcome::Cancelled
        } else {
            match raw.verifier.status {
                VerifierStatus::Passed => Outcome::Passed,
                VerifierStatus::Failed => Outcome::Failed,
                VerifierStatus::Error => Outcome::VerifierError,
                VerifierStatus::Skipped => Outcome::Skipped,
            }
        };
        let reward = raw.verifier.reward.as_ref().filter(|r| !r.is_empty());
        let primary = reward.map(|r| match r.get("reward") {
            Some(v) => *v,
            None => r.values().sum::<f64>() / r.len() as f64,
        });
        if outcome.scored()
            && let Some(r) = reward
        {
            let keys = &mut reward_keys[arm as usize];
            for (k, v) in r {
                let e = keys.entry(k.to_string()).or_insert((0.0, 0));
                e.0 += v;
                e.1 += 1;
            }
        }
        if let Some(s) = raw.started_at.as_deref() {
            let slot = &mut first_started[arm as usize];
            if slot.as_deref().is_none_or(|cur| s < cur) {
                *slot = Some(s.to_string());
            }
        }
        let detail = if let Some(e) = &raw.infra_error {
            Some(format!("{}: {}", e.phase, e.message))
        } else {
            raw.verifier
                .detail
                .as_deref()
                .or(raw.termination.detail.as_deref())
                .map(str::to_string)
        };
        let (verdict, violations) = match &raw.audit {
            Some(a) if !infra => (
                verdict_of(&a.verdict),
                a.violations.iter().fold(0u8, |acc, v| {
                    acc | match v.kind {
                        Some(ViolationKind::CertificateWithoutAdmissibility) => 1,
                        Some(ViolationKind::GoalSubstitutionUncertified) => 2,
                        Some(ViolationKind::ResidualCertificate) => 4,
                        None => 0,
                    }
                }),
            ),
            _ => (None, 0),
        };
        let integrity = raw.integrity.as_ref().and_then(|i| i.status);
        let tampered = !infra
            && (integrity == Some(Integrity::Suspect)
                || raw.audit.as_ref().is_some_and(|a| a.verdict == TAMPERED));
        has_integrity |= raw.integrity.is_some() || tampered;
        // `tampered` outranks every other verdict (SPEC §6): counted as that alone
        let verdict = if tampered { None } else { verdict };
        // SPEC §5: a tampered trial never counts as passed, whatever the verifier said.
        let outcome = if tampered && outcome == Outcome::Passed {
            Outcome::Failed
        } else {
            outcome
        };
        has_usage |= raw.usage.is_some();
        let usage = raw.usage.as_ref().map(|u| {
            Box::new(TrialUsage {
                requests: u.requests,
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cache_read_tokens: u.cache_read_tokens,
                cost_usd: u.cost_usd.filter(|c| c.is_finite()).unwrap_or(0.0),
                upstream_errors: u.upstream_errors.values().sum(),
                budget_exhausted: u.budget.as_ref().is_some_and(|b| b.exhausted),
            })
        });
        let semantic = raw.claim.semantic_status.as_deref();
        let trial = Trial {
            id: raw.id.as_ref().into(),
            task,
            arm,
            attempt: raw.attempt,
            outcome,
            verdict,
            violations,
            claim: raw.claim.status,
            claimed_success: raw.claim.status == ClaimStatus::Present
                && semantic == Some("succeeded"),
            semantic_status: semantic.map(Into::into),
            termination: raw.termination.kind,
            exit_code: raw.termination.exit_code,
            reward: if infra { None } else { primary },
            agent_seconds: raw.phases.get("agent").map(|p| p.seconds),
            seconds: raw.phases.values().map(|p| p.seconds).sum(),
            detail: detail.map(Into::into),
            usage,
            integrity,
            tampered,
            steps: raw.steps.into(),
            continuation: raw
                .continuation
                .as_ref()
                .map(|c| (c.attempts_used, c.status == "budget_limited")),
        };
        match by_id.get(raw.id.as_ref()) {
            // A later line for the same trial (e.g. a re-verified record) wins.
            Some(&i) => {
                duplicates += 1;
                trials[i] = trial;
            }
            None => {
                by_id.insert(trial.id.clone(), trials.len());
                trials.push(trial);
            }
        }
    }
    drop(by_id);
    if trials.is_empty() && bad_lines.is_empty() {
        return Err(ReportError::NoTrials { path: jsonl });
    }
    if trials.is_empty() {
        return Err(ReportError::Field {
            path: jsonl,
            field: format!("line {}", bad_lines[0]),
            message: "not a trial record (no readable line in the file)".to_string(),
        });
    }

    let mut warnings = Vec::new();
    if !bad_lines.is_empty() {
        let shown: Vec<String> = bad_lines.iter().take(5).map(usize::to_string).collect();
        warnings.push(format!(
            "{} unreadable line(s) in trials.jsonl skipped (line {}{}); a run killed mid-write leaves one — `arbiter resume` repairs the file",
            bad_lines.len(),
            shown.join(", "),
            if bad_lines.len() > 5 { ", …" } else { "" }
        ));
    }
    if duplicates > 0 {
        warnings.push(format!(
            "{duplicates} trial(s) appear more than once in trials.jsonl; the last line of each counts"
        ));
    }

    // Tasks sorted by name (naturally); arms in job order.
    let mut task_perm: Vec<u32> = (0..tasks.len() as u32).collect();
    task_perm.sort_by(|a, b| natural_cmp(&tasks[*a as usize], &tasks[*b as usize]));
    let mut task_new = vec![0u32; tasks.len()];
    for (new, old) in task_perm.iter().enumerate() {
        task_new[*old as usize] = new as u32;
    }
    let rank =
        |order: &[String], name: &str| order.iter().position(|n| n == name).unwrap_or(usize::MAX);
    let mut arm_perm: Vec<u32> = (0..arms.len() as u32).collect();
    arm_perm.sort_by_key(|i| {
        let a = &arms[*i as usize];
        (
            rank(&agent_order, &a.agent),
            rank(&variant_order, &a.variant),
            *i,
        )
    });
    let mut arm_new = vec![0u32; arms.len()];
    for (new, old) in arm_perm.iter().enumerate() {
        arm_new[*old as usize] = new as u32;
    }
    for t in &mut trials {
        t.task = task_new[t.task as usize];
        t.arm = arm_new[t.arm as usize];
    }
    let tasks: Vec<String> = task_perm
        .iter()
        .map(|i| tasks[*i as usize].clone())
        .collect();
    let arms_sorted: Vec<ArmKey> = arm_perm.iter().map(|i| arms[*i as usize].clone()).collect();
    let reward_keys = arm_perm
        .iter()
        .map(|i| reward_keys[*i as usize].clone())
        .collect();
    let first_started = arm_perm
        .iter()
        .map(|i| first_started[*i as usize].clone())
        .collect();
    trials.sort_by_key(|t| (t.arm, t.task, t.attempt));

    let max_attempt = trials.iter().map(|t| t.attempt).max().unwrap_or(1);
    let name = job_name.unwrap_or_else(|| {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "job".to_string())
    });
    Ok(JobData {
        dir: dir.to_path_buf(),
        name,
        attempts: lock
            .as_ref()
            .and_then(|l| l.attempts)
            .unwrap_or(max_attempt)
            .max(max_attempt),
        pass_threshold: lock.and_then(|l| l.pass_threshold),
        arms: arms_sorted,
        tasks,
        trials,
        reward_keys,
        first_started,
        warnings,
        has_usage,
        has_integrity,
    })
}

/// The order agents and variants are listed in `job.yaml` (empty when unreadable).
fn job_order(path: &Path) -> (Vec<String>, Vec<String>) {
    let Some(value) = std::fs::read(path)
        .ok()
        .and_then(|b| serde_yaml::from_slice::<serde_yaml::Value>(&b).ok())
    else {
        return (Vec::new(), Vec::new());
    };
    let names = |key: &str| -> Vec<String> {
        value
            .get(key)
            .and_then(|v| v.as_sequence())
            .map(|seq| {
                seq.iter()
                    .filter_map(|e| {
                        e.as_str()
                            .or_else(|| e.get("name").and_then(|n| n.as_str()))
                            .map(str::to_string)
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    (names("agents"), names("variants"))
}

/// The order tasks are listed in: case-insensitive, with runs of digits compared as numbers
/// (`task-2` before `task-10`, `alpha` before `Zeta`); names equal under that rule fall back to
/// byte order, so the order is total and only equal strings compare equal.
pub(crate) fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (mut x, mut y) = (a.chars().peekable(), b.chars().peekable());
    loop {
        match (x.peek().copied(), y.peek().copied()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(c), Some(d)) if c.is_ascii_digit() && d.is_ascii_digit() => {
                let digits = |it: &mut std::iter::Peekable<std::str::Chars<'_>>| {
                    let mut s = String::new();
                    while let Some(c) = it.peek().copied().filter(char::is_ascii_digit) {
                        s.push(c);
                        it.next();
                    }
                    s
                };
                let (m, n) = (digits(&mut x), digits(&mut y));
                let (m, n) = (m.trim_start_matches('0'), n.trim_start_matches('0'));
                let ord = m.len().cmp(&n.len()).then_with(|| m.cmp(n));
                if ord != Ordering::Equal {
                    return ord;
                }
            }
            (Some(c), Some(d)) => {
                let ord = c.to_lowercase().cmp(d.to_lowercase());
                if ord != Ordering::Equal {
                    return ord;
                }
                x.next();
                y.next();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Outcome, load_job, natural_cmp};

    /// A record as `arbiter run` writes it, ended by `termination` with the verifier's `status`.
    fn line(id: &str, termination: &str, verifier: &str) -> String {
        format!(
            r#"{{"schema":"arbiter.trial.v1","id":"{id}","job":"j","task":"t-{id}","agent":"a","variant":"default","attempt":1,"task_checksum":"sha256:00","termination":{termination},"claim":{{"status":"missing"}},"verifier":{verifier},"audit":null,"phases":{{}},"retries":0,"artifacts":[],"overrides":{{}},"limits":{{"cpus":1.0,"memory_mb":512,"pids_limit":64,"network":"no-network","storage_enforced":false}},"output":{{"stdout_bytes":0,"stderr_bytes":0,"truncated":false}},"started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z"}}"#
        )
    }

    #[test]
    fn a_trial_the_user_cancelled_is_counted_apart_and_never_scored() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("job.yaml"), "name: j\nagents: [oracle]\n").expect("yaml");
        let passed =
            r#"{"status":"passed","mode":"snapshot","reward":{"reward":1.0},"exit_code":0}"#;
        let skipped = r#"{"status":"skipped","mode":"snapshot","detail":"not run"}"#;
        let lines = [
            line("p", r#"{"kind":"exited","exit_code":0}"#, passed),
            line(
                "c",
                r#"{"kind":"cancelled","detail":"cancelled by the user"}"#,
                skipped,
            ),
            line(
                "i",
                r#"{"kind":"infra_error","detail":"engine gone"}"#,
                skipped,
            ),
        ];
        std::fs::write(dir.path().join("trials.jsonl"), lines.join("\n") + "\n").expect("jsonl");
        let job = load_job(dir.path()).expect("load");
        let outcome = |id: &str| job.trials.iter().find(|t| &*t.id == id).map(|t| t.outcome);
        assert_eq!(outcome("c"), Some(Outcome::Cancelled));
        assert_eq!(outcome("i"), Some(Outcome::Infra));
        assert!(!Outcome::Cancelled.scored());
        assert_eq!(Outcome::parse("cancelled"), Some(Outcome::Cancelled));
        let report = crate::report::build::build(&job, None);
        let t = &report.totals;
        assert_eq!((t.trials, t.scored, t.passed), (3, 1, 1), "{t:?}");
        assert_eq!((t.infra, t.cancelled), (1, 1), "{t:?}");
        assert_eq!(report.arms[0].pass_rate, Some(1.0));
        let text = crate::report::text::table(&report);
        assert!(text.contains("1 trial(s) cancelled by the user"), "{text}");
    }

    #[test]
    fn tasks_sort_as_a_reader_expects() {
        let mut names = vec![
            "Zeta-Upper",
            "task-10",
            "alpha",
            "task-2",
            "Beta",
            "task-02",
            "beta",
            "task-1b",
            "task-1",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            vec![
                "alpha",
                "Beta",
                "beta",
                "task-1",
                "task-1b",
                "task-02",
                "task-2",
                "task-10",
                "Zeta-Upper"
            ]
        );
        assert_eq!(natural_cmp("a", "a"), std::cmp::Ordering::Equal);
        assert_ne!(natural_cmp("task-02", "task-2"), std::cmp::Ordering::Equal);
    }
}
