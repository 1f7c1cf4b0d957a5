//! Computing the report from a loaded job: per-arm statistics, per-task cells, warnings, and
//! (optionally) the within-job comparisons. The one place that joins [`stats`] and [`compare`]
//! into a [`Report`]; `model` holds only types, so the modules depend one way:
//! `build → compare → model`, `build → model`.

use std::collections::BTreeMap;

use crate::outcome::Verdict;

use super::compare::{CompareOptions, Grouping, compare_within};
use super::load::{JobData, Outcome, TAMPERED};
use super::model::*;
use super::stats;

/// Build the per-task cells: `[task][arm]`.
pub(crate) fn task_cells(job: &JobData) -> Vec<Vec<Cell>> {
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

/// Harbor multi-step tasks: per task, step (in run order) and arm, the scored trials that ran
/// the step, how many passed it and its mean reward. Empty when no trial has steps.
pub(crate) fn step_rows(job: &JobData) -> Vec<StepRow> {
    // (task, step order within the task, arm) → row
    let mut order: Vec<Vec<Box<str>>> = vec![Vec::new(); job.tasks.len()];
    // (ran, passed, reward sum, rewards)
    type Tally = (usize, usize, f64, usize);
    let mut acc: BTreeMap<(u32, usize, u32), Tally> = BTreeMap::new();
    for t in job.trials.iter().filter(|t| t.outcome.scored()) {
        for step in t.steps.iter() {
            let Some(names) = order.get_mut(t.task as usize) else {
                continue;
            };
            let i = match names.iter().position(|n| *n == step.name) {
                Some(i) => i,
                None => {
                    names.push(step.name.clone());
                    names.len() - 1
                }
            };
            let e = acc.entry((t.task, i, t.arm)).or_default();
            e.0 += 1;
            e.1 += usize::from(step.passed);
            if let Some(r) = step.reward.filter(|r| r.is_finite()) {
                e.2 += r;
                e.3 += 1;
            }
        }
    }
    acc.into_iter()
        .map(|((task, i, arm), (ran, passed, sum, n))| StepRow {
            task: job.tasks[task as usize].clone(),
            step: order[task as usize][i].to_string(),
            arm: job.arms[arm as usize].label(),
            ran,
            passed,
            mean_reward: (n > 0).then(|| sum / n as f64),
        })
        .collect()
}

/// Compute the whole report. `compare` adds the within-job comparisons.
pub(crate) fn build(job: &JobData, compare: Option<&CompareOptions>) -> Report {
    let cells = task_cells(job);
    let mut arms = Vec::with_capacity(job.arms.len());
    for (a, key, trials) in job.trials_by_arm() {
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
        let usage = job.has_usage.then(|| {
            let mut u = UsageStats::default();
            for t in trials.iter().filter(|t| t.outcome.scored()) {
                let Some(x) = &t.usage else { continue };
                u.trials += 1;
                u.requests += x.requests;
                u.input_tokens += x.input_tokens;
                u.output_tokens += x.output_tokens;
                u.cache_read_tokens += x.cache_read_tokens;
                u.cost_usd += x.cost_usd;
                u.upstream_errors += x.upstream_errors;
                u.budget_exhausted += usize::from(x.budget_exhausted);
            }
            u.solved_tasks = cells.iter().filter(|row| row[a].task_passes()).count();
            u.cost_per_solved_task_usd =
                (u.solved_tasks > 0).then(|| u.cost_usd / u.solved_tasks as f64);
            u
        });
        let tampered = job
            .has_integrity
            .then(|| trials.iter().filter(|t| t.tampered).count());
        if job.has_integrity {
            verdicts.insert(TAMPERED.to_string(), tampered.unwrap_or(0));
        }
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
            infra: trials
                .iter()
                .filter(|t| t.outcome == Outcome::Infra)
                .count(),
            cancelled: trials
                .iter()
                .filter(|t| t.outcome == Outcome::Cancelled)
                .count(),
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
            usage,
            tampered,
            continuation: continuation_stats(trials),
        });
    }

    let mut warnings = job.warnings.clone();
    let n_tasks = job.tasks.len();
    for (a, arm) in arms.iter().enumerate() {
        if arm.tasks < n_tasks {
            warnings.push(format!(
                "{} has trials for {} of the job's {} tasks (rates cover different task sets)",
                arm.arm, arm.tasks, n_tasks
            ));
        }
        let scored_tasks = cells.iter().filter(|row| row[a].scored > 0).count();
        if scored_tasks < arm.tasks {
            warnings.push(format!(
                "{} scored {} of the {} tasks it ran: {} had only infra errors (rates cover different task sets)",
                arm.arm,
                scored_tasks,
                arm.tasks,
                arm.tasks - scored_tasks
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
        cancelled: arms.iter().map(|a| a.cancelled).sum(),
        passed: arms.iter().map(|a| a.passed).sum(),
    };
    let mut report = Report {
        schema: REPORT_SCHEMA.to_string(),
        job: job.name.clone(),
        arbiter_version: env!("CARGO_PKG_VERSION").to_string(),
        attempts: job.attempts,
        pass_threshold: job.pass_threshold,
        conventions: CONVENTIONS
            .iter()
            .copied()
            .chain(job.has_usage.then_some(USAGE_CONVENTION))
            .chain(job.has_integrity.then_some(TAMPERED_CONVENTION))
            .map(str::to_string)
            .collect(),
        warnings,
        totals,
        steps: step_rows(job),
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

/// Attempts used and the pass rate by attempts used over an arm's scored trials that ran with
/// goal continuation (each trial once); `None` when none did.
fn continuation_stats(trials: &[crate::report::load::Trial]) -> Option<ContinuationStats> {
    let continued: Vec<(u32, bool, bool)> = trials
        .iter()
        .filter(|t| t.outcome.scored())
        .filter_map(|t| {
            t.continuation
                .map(|(n, limited)| (n, limited, t.outcome.passed()))
        })
        .collect();
    if continued.is_empty() {
        return None;
    }
    let mut by: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for &(n, _, passed) in &continued {
        let row = by.entry(n).or_default();
        row.0 += 1;
        row.1 += usize::from(passed);
    }
    Some(ContinuationStats {
        trials: continued.len(),
        mean_attempts: continued.iter().map(|c| f64::from(c.0)).sum::<f64>()
            / continued.len() as f64,
        budget_limited: continued.iter().filter(|c| c.1).count(),
        by_attempts: by
            .into_iter()
            .map(|(attempts, (trials, passed))| AttemptsRow {
                attempts,
                trials,
                passed,
                pass_rate: (trials > 0).then(|| passed as f64 / trials as f64),
            })
            .collect(),
    })
}
