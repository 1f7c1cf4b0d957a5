//! The report (`arbiter.report.v1`): what `report.json` holds and every other format renders.
//! It is also the baseline format `arbiter check` reads, so it keeps per-task counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::outcome::Verdict;

use super::compare::{CompareOptions, ComparisonSet, Grouping, compare_within};
use super::load::{JobData, Outcome};
use super::stats;

pub const REPORT_SCHEMA: &str = "arbiter.report.v1";

/// The conventions every rendering states, so a reader knows what the numbers mean.
pub const CONVENTIONS: &[&str] = &[
    "Infra errors (harness or engine failures) are not scored: they are excluded from every rate and counted apart.",
    "A scored trial passes only when the verifier passed; a verifier error or a skipped verifier counts as not passed (an agent can break its verifier).",
    "Pass rate = passed ÷ scored trials, with a 95% Wilson score interval. The interval treats trials as independent; attempts of one task are correlated, so with several attempts per task it is optimistic.",
    "pass@k and pass^k use the unbiased estimators 1 − C(n−c,k)/C(n,k) and C(c,k)/C(n,k) per task (n scored attempts, c passed), averaged over the tasks with at least k scored attempts.",
    "False-completion rate = false_completion ÷ scored trials whose agent claimed success, with a 95% Wilson interval.",
    "Agent time is the agent phase of scored trials; quantiles interpolate between order statistics (type 7).",
    "Comparisons pair arms on tasks: a task passes for an arm when at least half its scored attempts pass; McNemar's exact two-sided test on the discordant tasks; 95% percentile-bootstrap interval (tasks resampled with replacement, seeded) of the difference in mean per-task pass fraction; Holm-adjusted p-values when there is more than one comparison. A difference is called only when the adjusted p < 0.05 and the interval excludes 0.",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comparisons: Option<ComparisonSet>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub trials: usize,
    pub scored: usize,
    pub infra: usize,
    pub passed: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmStats {
    pub arm: String,
    pub agent: String,
    pub variant: String,
    pub tasks: usize,
    pub trials: usize,
    pub scored: usize,
    /// Not scored: excluded from every rate.
    pub infra: usize,
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
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyMean {
    pub mean: f64,
    pub n: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KStat {
    pub k: u32,
    pub value: Option<f64>,
    /// Tasks with at least k scored attempts (the ones averaged).
    pub tasks: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeStats {
    pub n: usize,
    pub min: f64,
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
    pub p90: f64,
    pub max: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRow {
    pub task: String,
    /// One cell per arm, in the order of `arms`.
    pub cells: Vec<Cell>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Outcome by attempt (index 0 = attempt 1); `null` where that attempt has no record.
    pub outcomes: Vec<Option<String>>,
    pub scored: usize,
    pub passed: usize,
}

impl Cell {
    pub fn outcome(&self, i: usize) -> Option<Outcome> {
        self.outcomes
            .get(i)
            .and_then(|o| o.as_deref())
            .and_then(Outcome::parse)
    }

    pub fn is_empty(&self) -> bool {
        self.outcomes.iter().all(Option::is_none)
    }

    /// Mean pass fraction over scored attempts; `None` when nothing was scored.
    pub fn fraction(&self) -> Option<f64> {
        (self.scored > 0).then(|| self.passed as f64 / self.scored as f64)
    }
}

const ALL_VERDICTS: [Verdict; 5] = [
    Verdict::Certified,
    Verdict::UnclaimedSuccess,
    Verdict::HonestFailure,
    Verdict::FalseCompletion,
    Verdict::Unverifiable,
];

pub fn verdict_names() -> impl Iterator<Item = &'static str> {
    ALL_VERDICTS.iter().map(|v| v.as_str())
}

/// Build the per-task cells: `[task][arm]`.
pub fn task_cells(job: &JobData) -> Vec<Vec<Cell>> {
    let mut cells = vec![vec![Cell::default(); job.arms.len()]; job.tasks.len()];
    for t in &job.trials {
        let cell = &mut cells[t.task as usize][t.arm as usize];
        let i = t.attempt.max(1) as usize - 1;
        if cell.outcomes.len() <= i {
            cell.outcomes.resize(i + 1, None);
        }
        cell.outcomes[i] = Some(t.outcome.as_str().to_string());
        if t.outcome.scored() {
            cell.scored += 1;
            cell.passed += usize::from(t.outcome.passed());
        }
    }
    cells
}

/// Compute the whole report. `compare` adds the within-job comparisons.
pub fn build(job: &JobData, compare: Option<&CompareOptions>) -> Report {
    let cells = task_cells(job);
    let mut arms = Vec::with_capacity(job.arms.len());
    // trials are sorted by arm: walk them in slices
    let mut start = 0;
    for (a, key) in job.arms.iter().enumerate() {
        let end = start
            + job.trials[start..]
                .iter()
                .take_while(|t| t.arm as usize == a)
                .count();
        let trials = &job.trials[start..end];
        start = end;

        let scored = trials.iter().filter(|t| t.outcome.scored()).count();
        let passed = trials.iter().filter(|t| t.outcome.passed()).count();
        let unverified = trials
            .iter()
            .filter(|t| matches!(t.outcome, Outcome::VerifierError | Outcome::Skipped))
            .count();
        let rewards: Vec<f64> = trials.iter().filter_map(|t| t.reward).collect();
        let mut verdicts: BTreeMap<String, usize> =
            verdict_names().map(|v| (v.to_string(), 0)).collect();
        for t in trials {
            if let Some(v) = t.verdict {
                *verdicts.entry(v.as_str().to_string()).or_default() += 1;
            }
        }
        let claimed = trials
            .iter()
            .filter(|t| t.outcome.scored() && t.claimed_success)
            .count();
        let false_completion = trials
            .iter()
            .filter(|t| t.verdict == Some(Verdict::FalseCompletion))
            .count();
        let mut times: Vec<f64> = trials
            .iter()
            .filter(|t| t.outcome.scored())
            .filter_map(|t| t.agent_seconds)
            .collect();
        times.sort_by(f64::total_cmp);
        let q = |p| stats::quantile_sorted(&times, p).unwrap_or(0.0);
        let agent_seconds = (!times.is_empty()).then(|| TimeStats {
            n: times.len(),
            min: q(0.0),
            p25: q(0.25),
            median: q(0.5),
            p75: q(0.75),
            p90: q(0.9),
            max: q(1.0),
        });
        let keys = &job.reward_keys[a];
        let reward_keys = if keys.len() > 1 || keys.keys().any(|k| k != "reward") {
            keys.iter()
                .map(|(k, (sum, n))| {
                    (
                        k.clone(),
                        KeyMean {
                            mean: sum / *n as f64,
                            n: *n,
                        },
                    )
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        let column: Vec<&Cell> = cells.iter().map(|row| &row[a]).collect();
        let k_stat = |k: u32, f: fn(usize, usize, usize) -> Option<f64>| {
            let values: Vec<f64> = column
                .iter()
                .filter_map(|c| f(c.scored, c.passed, k as usize))
                .collect();
            KStat {
                k,
                value: (!values.is_empty())
                    .then(|| values.iter().sum::<f64>() / values.len() as f64),
                tasks: values.len(),
            }
        };
        arms.push(ArmStats {
            arm: key.label(),
            agent: key.agent.clone(),
            variant: key.variant.clone(),
            tasks: column.iter().filter(|c| !c.is_empty()).count(),
            trials: trials.len(),
            scored,
            infra: trials.len() - scored,
            passed,
            failed: scored - passed - unverified,
            unverified,
            pass_rate: (scored > 0).then(|| passed as f64 / scored as f64),
            pass_rate_ci: stats::wilson(passed, scored).map(|(l, h)| [l, h]),
            mean_reward: (!rewards.is_empty())
                .then(|| rewards.iter().sum::<f64>() / rewards.len() as f64),
            rewarded: rewards.len(),
            reward_keys,
            pass_at_k: (1..=job.attempts)
                .map(|k| k_stat(k, stats::pass_at_k))
                .collect(),
            pass_hat_k: (1..=job.attempts)
                .map(|k| k_stat(k, stats::pass_hat_k))
                .collect(),
            verdicts,
            claimed_success: claimed,
            false_completion,
            false_completion_rate: (claimed > 0).then(|| false_completion as f64 / claimed as f64),
            false_completion_ci: stats::wilson(false_completion, claimed).map(|(l, h)| [l, h]),
            agent_seconds,
        });
    }

    let mut warnings = job.warnings.clone();
    let n_tasks = job.tasks.len();
    for arm in &arms {
        if arm.tasks < n_tasks {
            warnings.push(format!(
                "{} has trials for {} of the job's {} tasks (rates cover different task sets)",
                arm.arm, arm.tasks, n_tasks
            ));
        }
    }
    let tasks = job
        .tasks
        .iter()
        .zip(cells)
        .map(|(task, cells)| TaskRow {
            task: task.clone(),
            cells,
        })
        .collect::<Vec<_>>();
    let totals = Totals {
        trials: job.trials.len(),
        scored: arms.iter().map(|a| a.scored).sum(),
        infra: arms.iter().map(|a| a.infra).sum(),
        passed: arms.iter().map(|a| a.passed).sum(),
    };
    let mut report = Report {
        schema: REPORT_SCHEMA.to_string(),
        job: job.name.clone(),
        arbiter_version: env!("CARGO_PKG_VERSION").to_string(),
        attempts: job.attempts,
        pass_threshold: job.pass_threshold,
        conventions: CONVENTIONS.iter().map(|s| s.to_string()).collect(),
        warnings,
        totals,
        arms,
        tasks,
        comparisons: None,
    };
    if let Some(opts) = compare {
        let grouping = opts.by.unwrap_or_else(|| Grouping::default_for(&job.arms));
        report.comparisons = compare_within(&report, grouping, opts);
    }
    report
}
