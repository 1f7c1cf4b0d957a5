//! The trial record (`arbiter.trial.v1`): the three facts of a trial kept apart.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::agent::HarnessOverride;
use crate::outcome::{Audit, Claim, CompletionSummary, FileCheck, Receipt};
use crate::task::NetworkMode;
use crate::verifier::integrity::{ChangeSummary, Integrity, IntegrityStatus};
pub(crate) use crate::verifier::{VerifierOutcome, VerifierStatus};

use super::plan::Phase;

pub(crate) const TRIAL_SCHEMA: &str = "arbiter.trial.v1";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TerminationKind {
    Exited,
    Timeout,
    Oom,
    Killed,
    Cancelled,
    InfraError,
}

/// How the agent process ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Termination {
    pub kind: TerminationKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PhaseTime {
    pub seconds: f64,
    /// When the phase started (RFC 3339, UTC, microseconds); absent in records written before
    /// arbiter kept it (their phases ran back to back from the trial's `started_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ArtifactStatus {
    Ok,
    Missing,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ArtifactEntry {
    pub path: String,
    pub status: ArtifactStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A failure of the harness or the engine (never the agent's doing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct InfraError {
    pub phase: Phase,
    pub message: String,
}

/// Resource limits the trial ran under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Limits {
    pub cpus: f64,
    pub memory_mb: u64,
    pub pids_limit: i64,
    pub network: NetworkMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage_mb: Option<u64>,
    /// Whether a disk limit was enforced: arbiter's watchdog enforces `storage_limit_mb` when
    /// the engine reports the container's writable-layer size (Docker does).
    pub storage_enforced: bool,
    /// What the agent may write to its container's filesystem: `storage_mb`, or arbiter's
    /// default ceiling when the task sets none. Over it, the container is killed.
    #[serde(default)]
    pub storage_limit_mb: u64,
    /// The largest size of the agent's writes the watchdog measured (MiB, rounded up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_used_mb: Option<u64>,
    /// `[environment] max_files`, when the task sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_files: Option<u64>,
    /// Paths the agent may create, change or delete in its container's filesystem:
    /// `max_files`, or arbiter's default bound. Over it, its filesystem is not verified.
    #[serde(default)]
    pub files_limit: u64,
    /// The most paths counted in the agent's writable layer (a count stops just above the
    /// limit), or the paths its change set listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_used: Option<u64>,
    /// Where `files_used` comes from; absent when nothing was counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_counted: Option<FilesCounted>,
}

/// How the file bound was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FilesCounted {
    /// Counted in the writable layer while the agent ran (and once after): over the bound,
    /// the agent was stopped.
    Watchdog,
    /// The backend cannot count while the agent runs: the change list, once the agent was
    /// done, was held to the bound.
    ChangeSet,
}

/// Output captured from the agent's run step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct OutputStats {
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub truncated: bool,
}

/// The backend of a trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SandboxInfo {
    /// `docker` or `kubernetes`.
    pub backend: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TrialRecord {
    pub schema: String,
    pub id: String,
    pub job: String,
    pub task: String,
    pub agent: String,
    pub variant: String,
    pub attempt: u32,
    pub task_checksum: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    pub termination: Termination,
    pub claim: Claim,
    pub verifier: VerifierOutcome,
    /// `None` when the trial was not scored (infra error).
    pub audit: Option<Audit>,
    pub phases: BTreeMap<Phase, PhaseTime>,
    pub retries: u32,
    /// Infrastructure failures of the earlier tries of this trial (one per retry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_errors: Vec<InfraError>,
    pub artifacts: Vec<ArtifactEntry>,
    pub overrides: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infra_error: Option<InfraError>,
    pub limits: Limits,
    pub output: OutputStats,
    /// `AWORLD_*` settings that are not the preset's defaults (the `aworld` kind), labelled by
    /// where they came from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub harness_overrides: Vec<HarnessOverride>,
    /// The agent phase's deadline as passed to the agent (Unix seconds), when it was passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_deadline_epoch: Option<u64>,
    /// The per-trial control root, when the agent had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_root: Option<ControlRootInfo>,
    /// The agent's trajectory file, when its kind names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<ArtifactEntry>,
    /// The task's declared deliverables (`[completion]`), as arbiter found them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deliverables: Vec<FileCheck>,
    /// Other paths arbiter checked because the agent's completion record names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed_files: Vec<FileCheck>,
    /// Receipts of the validation commands arbiter ran itself after the agent phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation: Vec<Receipt>,
    /// The agent's typed completion record (`/logs/agent/completion.json`), when it wrote one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<CompletionSummary>,
    /// What the agent changed in its filesystem (summary; the list is `agent/changes.json`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangeSummary>,
    /// Whether any change could alter how the verifier runs (SPEC §5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<Integrity>,
    /// What the agent spent on model calls, as counted by arbiter's gateway (SPEC §7), when the
    /// agent has a `model:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::gateway::Usage>,
    /// Whether the agent's changed files were kept for regrading (`arbiter verify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_content: Option<super::history::ChangeContent>,
    /// Every verifier outcome of this trial, oldest first, once it has been regraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verifier_history: Vec<super::history::VerifierRun>,
    /// The last regrade that reached this trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regrade: Option<super::history::RegradeMark>,
    /// Harbor `[[steps]]`: each step's own result, in run order (steps that did not run are
    /// absent). `verifier` then holds the task's reward per `multi_step_reward_strategy`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
    /// Goal continuation (SPEC §15): the attempt limit, attempts used and how the goal ended,
    /// when the arm has `continuation:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<ContinuationRecord>,
    /// Each attempt of a continued goal, in order (empty without `continuation:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptRecord>,
    /// Which backend ran the trial (SPEC §14: the only field besides ids and times that
    /// differs between the same job on Docker and on Kubernetes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxInfo>,
    /// What went through the egress allowlist proxy (`network_mode = "allowlist"`), when a
    /// phase of the trial had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkRecord>,
    pub started_at: String,
    pub finished_at: String,
}

/// The connections the trial's phases tried through the egress allowlist proxy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct NetworkRecord {
    /// Each attempt, in order, up to [`EGRESS_CAP`].
    pub egress: Vec<EgressAttempt>,
    /// Attempts past the cap, counted but not listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub egress_dropped: u64,
}

/// At most this many egress attempts are listed in a record.
pub(crate) const EGRESS_CAP: usize = 200;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One connection attempt through the proxy, and the phase that made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EgressAttempt {
    /// `agent` or `verify`.
    pub phase: Phase,
    #[serde(flatten)]
    pub event: crate::gateway::EgressEvent,
}

impl NetworkRecord {
    /// One line for a report (the trial page can show it as an "egress" row:
    /// `serde_json::from_value::<NetworkRecord>(rec["network"].clone())?.summary()`):
    /// `3 attempts · admitted: 127.0.0.1:8080 (agent) · refused: example.invalid:80 (agent) ×2`.
    pub(crate) fn summary(&self) -> String {
        let total = self.egress.len() as u64 + self.egress_dropped;
        if total == 0 {
            return "proxy in place, no attempts".to_string();
        }
        let mut out = format!("{total} attempt{}", if total == 1 { "" } else { "s" });
        for (label, allowed) in [("admitted", true), ("refused", false)] {
            let mut seen: Vec<(String, usize)> = Vec::new();
            for a in self.egress.iter().filter(|a| a.event.allowed == allowed) {
                let mut key = format!("{}:{} ({})", a.event.host, a.event.port, a.phase);
                if let Some(e) = &a.event.error {
                    key.push_str(&format!(" unreachable: {e}"));
                }
                match seen.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, n)) => *n += 1,
                    None => seen.push((key, 1)),
                }
            }
            if !seen.is_empty() {
                let items: Vec<String> = seen
                    .into_iter()
                    .map(|(k, n)| if n > 1 { format!("{k} ×{n}") } else { k })
                    .collect();
                out.push_str(&format!(" · {label}: {}", items.join(", ")));
            }
        }
        if self.egress_dropped > 0 {
            out.push_str(&format!(" · {} not listed", self.egress_dropped));
        }
        out
    }

    /// Append `phase`'s attempts, listing up to the cap and counting the rest.
    pub(crate) fn add(&mut self, phase: Phase, events: Vec<crate::gateway::EgressEvent>) {
        for event in events {
            if self.egress.len() < EGRESS_CAP {
                self.egress.push(EgressAttempt { phase, event });
            } else {
                self.egress_dropped += 1;
            }
        }
    }
}

/// One Harbor step of a multi-step trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StepRecord {
    pub name: String,
    /// How the step's agent run ended; `None` when it did not run (its setup failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination: Option<Termination>,
    /// The step's own verifier, run on a snapshot of the agent's filesystem after the step.
    pub verifier: VerifierOutcome,
    /// The primary value of the step's reward (the `reward` key, else the mean), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<f64>,
    /// The step's verifier passed (reward at or above the job's pass threshold).
    pub passed: bool,
    /// Why the remaining steps were not run after this one, when they were not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The step's artifacts (task-level and the step's own), saved under `steps/<name>/artifacts/`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<ArtifactEntry>,
    pub seconds: f64,
}

/// What the trial's control root held after the run (saved under `agent/control/`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ControlRootInfo {
    /// Where the agent saw it.
    pub container_path: String,
    /// The template it was seeded from (host path), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Relative to the trial directory.
    pub saved_to: String,
    pub files: u64,
    pub bytes: u64,
    /// Entries not saved (special files, over the limits), with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// Why the lines of a `trials.jsonl` did not give [`final_records`].
#[derive(Debug)]
pub(crate) enum JsonlError<E> {
    /// The lines could not be read.
    Read(E),
    /// Line `line` (1-based) is not a trial record this arbiter reads.
    Invalid {
        line: usize,
        source: serde_json::Error,
    },
}

/// The final record of each trial of a `trials.jsonl`, in file order: a later line of the same
/// trial (a regrade, a retried infra error) replaces the earlier one; blank lines are skipped.
pub(crate) fn final_records<E>(
    lines: impl Iterator<Item = Result<String, E>>,
) -> Result<Vec<TrialRecord>, JsonlError<E>> {
    let mut out: Vec<TrialRecord> = Vec::new();
    let mut at: BTreeMap<String, usize> = BTreeMap::new();
    for (i, line) in lines.enumerate() {
        let line = line.map_err(JsonlError::Read)?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: TrialRecord =
            serde_json::from_str(&line).map_err(|source| JsonlError::Invalid {
                line: i + 1,
                source,
            })?;
        match at.get(&rec.id) {
            Some(&k) => out[k] = rec,
            None => {
                at.insert(rec.id.clone(), out.len());
                out.push(rec);
            }
        }
    }
    Ok(out)
}

impl TrialRecord {
    /// The trial failed because of the harness or engine, not the agent: excluded from rates.
    pub(crate) fn is_infra(&self) -> bool {
        self.infra_error.is_some() || self.termination.kind == TerminationKind::InfraError
    }

    /// The user stopped the trial (`arbiter serve`'s per-trial cancel): not scored, and not an
    /// infra error either.
    pub(crate) fn is_cancelled(&self) -> bool {
        !self.is_infra() && self.termination.kind == TerminationKind::Cancelled
    }

    /// The verifier passed, on a filesystem whose toolchain the agent did not alter.
    pub(crate) fn passed(&self) -> bool {
        !self.is_infra()
            && !self.is_cancelled()
            && self.verifier.status == VerifierStatus::Passed
            && !self.is_tampered()
    }

    /// Integrity findings the verifier ran on (integrity `suspect`).
    pub(crate) fn is_tampered(&self) -> bool {
        self.integrity
            .as_ref()
            .is_some_and(|i| i.status == IntegrityStatus::Suspect)
    }
}

/// How the goal's attempts ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum GoalStatus {
    /// The last attempt claimed success and every declared validation command passed.
    ClaimedSuccess,
    /// The attempt limit was reached without a typed success.
    BudgetLimited,
    /// An attempt's run ended in a way that leaves nothing to continue (the trial's deadline,
    /// a kill, the kernel's OOM killer, the storage bound; or an agent that runs nothing).
    Stopped,
}

/// `continuation` in the trial record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ContinuationRecord {
    pub max_attempts: u32,
    pub attempts_used: u32,
    pub status: GoalStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// What one attempt spent on model calls (the gateway's count between its start and end).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct AttemptUsage {
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

impl AttemptUsage {
    /// `after` less `before` (the trial's running totals at the attempt's end and start).
    pub(crate) fn between(
        before: Option<&crate::gateway::Usage>,
        after: &crate::gateway::Usage,
    ) -> Self {
        let zero = crate::gateway::Usage::default();
        let before = before.unwrap_or(&zero);
        AttemptUsage {
            requests: after.requests.saturating_sub(before.requests),
            input_tokens: after.input_tokens.saturating_sub(before.input_tokens),
            output_tokens: after.output_tokens.saturating_sub(before.output_tokens),
            cost_usd: after
                .cost_usd
                .map(|c| ((c - before.cost_usd.unwrap_or(0.0)) * 1e6).round() / 1e6),
        }
    }
}

/// One attempt in the trial record's `attempts[]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AttemptRecord {
    /// 1-based.
    pub attempt: u32,
    /// The attempt's own identity, as the agent saw it in `ARBITER_ATTEMPT_ID`.
    pub id: String,
    pub started_at: String,
    pub finished_at: String,
    pub seconds: f64,
    /// Seconds left before the trial's agent deadline when it started.
    pub remaining_seconds: f64,
    pub termination: Termination,
    /// Its claim (the last attempt's is the trial's `claim`).
    pub claim: Claim,
    /// arbiter's own receipts of the task's validation commands on this attempt's filesystem.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub validation: Vec<Receipt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<AttemptUsage>,
    /// Its trajectory, relative to the trial dir, when it wrote one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trajectory: Option<String>,
    /// Its logs and records, relative to the trial dir.
    pub saved_to: String,
    /// Why the next attempt started, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_because: Option<String>,
    /// The completion records and receipts arbiter removed before the next attempt started.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cleared: Vec<String>,
}
