//! The report (`arbiter.report.v1`): what `report.json` holds and every other format renders.
//! It is also the baseline format `arbiter check` reads, so it keeps per-task counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::outcome::Verdict;

use super::load::Outcome;

pub(crate) const REPORT_SCHEMA: &str = "arbiter.report.v1";

/// The conventions every rendering states, so a reader knows what the numbers mean.
/// Stated when the job has usage records.
pub(crate) const USAGE_CONVENTION: &str = "Usage is what the model gateway counted for scored trials (never what an agent reports); cost per solved task = the arm's cost ÷ the tasks it solved (at least half the scored attempts passed).";

/// Stated when the job has integrity records.
pub(crate) const TAMPERED_CONVENTION: &str = "A tampered trial (integrity suspect: the agent changed what the verifier runs) never counts as passed, whatever the verifier said.";

pub(crate) const CONVENTIONS: &[&str] = &[
    "Infra errors (harness or engine failures) are not scored: they are excluded from every rate and counted apart.",
    "A scored trial passes only when the verifier passed; a verifier error or a skipped verifier counts as not passed (an agent can break its verifier).",
    "Pass rate = passed ÷ scored trials, with a 95% Wilson score interval. The interval treats trials as independent; attempts of one task are correlated, so with several attempts per task it is optimistic.",
    "pass@k and pass^k use the unbiased estimators 1 − C(n−c,k)/C(n,k) and C(c,k)/C(n,k) per task (n scored attempts, c passed), averaged over the tasks with at least k scored attempts.",
    "False-completion rate = false_completion ÷ scored trials whose agent claimed success, with a 95% Wilson interval.",
    "Agent time is the agent phase of scored trials; quantiles interpolate between order statistics (type 7).",
    "Comparisons pair arms on tasks: a task passes for an arm when at least half its scored attempts pass; McNemar's exact two-sided test on the discordant tasks; 95% percentile-bootstrap interval (tasks resampled with replacement, seeded) of the difference in mean per-task pass fraction; Holm-adjusted p-values when there is more than one comparison. A difference is called only when the adjusted p < 0.05 and the interval excludes 0.",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Report {
    pub schema: String,
    pub job: String,
    pub arbiter_version: String,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_threshold: Option<f64>,
    pub conventions: Vec<String>,
    /// Problems with the data (unreadable lines, duplicates, unequal task sets).
    #[serde(default)]
    pub warnings: Vec<String>,
    pub totals: Totals,
    pub arms: Vec<ArmStats>,
    pub tasks: Vec<TaskRow>,
    /// Harbor multi-step tasks: one row per task, step and arm (empty when no task has steps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparisons: Option<ComparisonSet>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Totals {
    pub trials: usize,
    pub scored: usize,
    pub infra: usize,
    /// Stopped by the user: not scored, and not infra errors.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cancelled: usize,
    pub passed: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ArmStats {
    pub arm: String,
    pub agent: String,
    pub variant: String,
    pub tasks: usize,
    pub trials: usize,
    pub scored: usize,
    /// Harness or engine failures: not scored, excluded from every rate.
    pub infra: usize,
    /// Stopped by the user (`arbiter serve`'s per-trial cancel): not scored either.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cancelled: usize,
    pub passed: usize,
    /// Scored, not passed, with a reward below the threshold.
    pub failed: usize,
    /// Scored, not passed, without a reward (verifier error or skipped).
    pub unverified: usize,
    pub pass_rate: Option<f64>,
    pub pass_rate_ci: Option<[f64; 2]>,
    /// Mean primary reward over scored trials that have a reward.
    pub mean_reward: Option<f64>,
    pub rewarded: usize,
    /// Per-key means, when the verifier writes more than the single `reward` key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reward_keys: BTreeMap<String, KeyMean>,
    pub pass_at_k: Vec<KStat>,
    pub pass_hat_k: Vec<KStat>,
    /// Audit verdicts of scored trials (every verdict listed, zeros included).
    pub verdicts: BTreeMap<String, usize>,
    pub claimed_success: usize,
    pub false_completion: usize,
    pub false_completion_rate: Option<f64>,
    pub false_completion_ci: Option<[f64; 2]>,
    pub agent_seconds: Option<TimeStats>,
    /// What the arm spent through the model gateway; absent when no trial of the job has a
    /// usage record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageStats>,
    /// Scored trials the audit called `tampered` (integrity `suspect`); absent when no trial of
    /// the job has an integrity record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tampered: Option<usize>,
    /// Goal continuation (SPEC §15): attempts used and the pass rate by attempts used, over
    /// the arm's scored trials that ran with `continuation`; absent when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation: Option<ContinuationStats>,
}

/// An arm's continued goals: each trial counted once, whatever its attempts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct ContinuationStats {
    /// Scored trials with a continuation record.
    pub trials: usize,
    pub mean_attempts: f64,
    /// Trials the attempt limit ended without a typed success.
    pub budget_limited: usize,
    /// Per number of attempts used, ascending.
    pub by_attempts: Vec<AttemptsRow>,
}

/// Scored trials that used `attempts` attempts, and how many passed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AttemptsRow {
    pub attempts: u32,
    pub trials: usize,
    pub passed: usize,
    pub pass_rate: Option<f64>,
}

/// Usage summed over an arm's scored trials (SPEC §8).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct UsageStats {
    /// Scored trials with a usage record.
    pub trials: usize,
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cost_usd: f64,
    /// `cost_usd` ÷ tasks solved (a task is solved when at least half its scored attempts
    /// passed, as in comparisons); `None` when no task was solved.
    pub cost_per_solved_task_usd: Option<f64>,
    pub solved_tasks: usize,
    /// Upstream errors (429, 5xx, …) the gateway saw, all status codes summed.
    pub upstream_errors: u64,
    /// Trials whose budget ran out.
    pub budget_exhausted: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeyMean {
    pub mean: f64,
    pub n: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct KStat {
    pub k: u32,
    pub value: Option<f64>,
    /// Tasks with at least k scored attempts (the ones averaged).
    pub tasks: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TimeStats {
    pub n: usize,
    pub min: f64,
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
    pub p90: f64,
    pub max: f64,
}

/// One step of a multi-step task for one arm, over the scored trials that ran it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StepRow {
    pub task: String,
    pub step: String,
    pub arm: String,
    /// Scored trials of the arm in which this step ran.
    pub ran: usize,
    /// Of those, how many passed the step's verifier.
    pub passed: usize,
    /// Mean of the step's reward (primary value) over the runs that gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_reward: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskRow {
    pub task: String,
    /// One cell per arm, in the order of `arms`.
    pub cells: Vec<Cell>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Cell {
    /// Outcome by attempt (index 0 = attempt 1); `null` where that attempt has no record.
    pub outcomes: Vec<Option<String>>,
    pub scored: usize,
    pub passed: usize,
}

impl Cell {
    pub(crate) fn outcome(&self, i: usize) -> Option<Outcome> {
        self.outcomes
            .get(i)
            .and_then(|o| o.as_deref())
            .and_then(Outcome::parse)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.outcomes.iter().all(Option::is_none)
    }

    /// The task counts as passed for this arm (comparisons, heat-map colours, cost per solved
    /// task): at least half its scored attempts passed, and something was scored.
    pub(crate) fn task_passes(&self) -> bool {
        self.scored > 0 && 2 * self.passed >= self.scored
    }
}

const ALL_VERDICTS: [Verdict; 5] = [
    Verdict::Certified,
    Verdict::UnclaimedSuccess,
    Verdict::HonestFailure,
    Verdict::FalseCompletion,
    Verdict::Unverifiable,
];

pub(crate) fn verdict_names() -> impl Iterator<Item = &'static str> {
    ALL_VERDICTS.iter().map(|v| v.as_str())
}

impl Report {
    /// The verdicts a rendering lists: every one, plus `tampered` when the job has integrity
    /// records.
    pub(crate) fn verdict_columns(&self) -> Vec<&'static str> {
        let tampered = self.arms.iter().any(|a| a.tampered.is_some());
        verdict_names()
            .chain(tampered.then_some(super::load::TAMPERED))
            .collect()
    }

    pub(crate) fn has_usage(&self) -> bool {
        self.arms.iter().any(|a| a.usage.is_some())
    }

    pub(crate) fn has_continuation(&self) -> bool {
        self.arms.iter().any(|a| a.continuation.is_some())
    }
}

/// Whole dollars with two decimals, fractions of a cent with four: `$12.30`, `$0.0042`.
pub(crate) fn usd(x: f64) -> String {
    if x.abs() >= 1.0 || x == 0.0 {
        format!("${x:.2}")
    } else {
        format!("${x:.4}")
    }
}

/// Token counts the way people read them: `812`, `51.2k`, `3.40M`.
pub(crate) fn tokens(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.2}M", n as f64 / 1e6),
    }
}

// What `compare` computes; kept here so the report model depends on nothing that computes.

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ComparisonSet {
    /// `variant`, `agent`, or `jobs` (two job directories).
    pub by: String,
    pub seed: u64,
    pub resamples: usize,
    pub alpha: f64,
    pub results: Vec<PairComparison>,
    /// What could not be compared, in words (arms without a counterpart, groups of one).
    #[serde(default)]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PairComparison {
    /// What the two arms share (e.g. `agent oracle`), empty for two jobs.
    pub group: String,
    /// The control.
    pub a: String,
    /// The arm compared with it.
    pub b: String,
    /// Tasks scored in both arms.
    pub tasks_paired: usize,
    /// Mean per-task pass fraction over the paired tasks.
    pub a_rate: Option<f64>,
    pub b_rate: Option<f64>,
    /// (b − a) in percentage points.
    pub diff_pts: Option<f64>,
    pub ci_pts: Option<[f64; 2]>,
    pub both_pass: usize,
    pub both_fail: usize,
    /// Discordant: A passed, B failed.
    pub a_only: usize,
    /// Discordant: B passed, A failed.
    pub b_only: usize,
    pub p: f64,
    /// Holm-adjusted over all comparisons of the set (equal to `p` for a single one).
    pub p_adjusted: f64,
    pub significant: bool,
    pub verdict: String,
    /// Tasks that passed in A and fail in B.
    pub flipped_to_fail: Vec<String>,
    /// Tasks that failed in A and pass in B.
    pub flipped_to_pass: Vec<String>,
    /// Tasks left out of the pairing, with why.
    pub unpaired: Vec<Unpaired>,
    /// Paired tasks whose scored attempt counts differ between the arms.
    pub unequal_attempts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Unpaired {
    pub task: String,
    pub reason: String,
}
