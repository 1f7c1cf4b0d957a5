//! Paired comparison of arms on tasks (SPEC §8).
//!
//! Per task and arm the attempts are aggregated: the task *passes* for that arm when at least
//! half of its scored attempts passed, and its *pass fraction* is passed ÷ scored. Two arms are
//! paired on the tasks both scored. McNemar's exact test runs on the tasks whose pass/fail
//! differs; the interval is a seeded percentile bootstrap of the mean per-task difference in
//! pass fraction (tasks resampled with replacement). Several comparisons in one run get
//! Holm-adjusted p-values. A difference is called only when the adjusted p < α and the interval
//! excludes 0; otherwise the verdict says no difference was detected.
//!
//! With several arms in a group every arm is compared with the group's control (the first arm
//! in job order, or `--control NAME`), not all pairs: that is the ablation question ("does this
//! change help against the baseline?") and keeps the family small.

use serde::{Deserialize, Serialize};

use super::load::{ArmKey, natural_cmp};
use super::model::{Cell, Report};
pub(crate) use super::model::{ComparisonSet, PairComparison, Unpaired};
use super::stats;

pub(crate) const DEFAULT_RESAMPLES: usize = 10_000;
pub(crate) const DEFAULT_SEED: u64 = 0;
pub(crate) const ALPHA: f64 = 0.05;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Grouping {
    /// Compare variants of the same agent.
    Variant,
    /// Compare agents under the same variant.
    Agent,
}

impl Grouping {
    /// Variants when the job has several, else agents.
    pub(crate) fn default_for(arms: &[ArmKey]) -> Grouping {
        let first = arms.first().map(|a| a.variant.as_str());
        if arms.iter().any(|a| Some(a.variant.as_str()) != first) {
            Grouping::Variant
        } else {
            Grouping::Agent
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Grouping::Variant => "variant",
            Grouping::Agent => "agent",
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct CompareOptions {
    pub by: Option<Grouping>,
    /// The control arm's variant (`--by variant`) or agent (`--by agent`) name.
    pub control: Option<String>,
    pub seed: u64,
    pub resamples: usize,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            by: None,
            control: None,
            seed: DEFAULT_SEED,
            resamples: DEFAULT_RESAMPLES,
        }
    }
}

/// One side of a comparison: an arm's label and its cells by task name (sorted by
/// [`natural_cmp`], the order the merge in [`pair`] walks).
struct Side<'a> {
    label: String,
    cells: Vec<(&'a str, &'a Cell)>,
}

fn side<'a>(report: &'a Report, arm: usize, label: String) -> Side<'a> {
    let mut cells: Vec<(&str, &Cell)> = report
        .tasks
        .iter()
        .filter_map(|row| {
            let c = row.cells.get(arm)?;
            (!c.is_empty()).then_some((row.task.as_str(), c))
        })
        .collect();
    // a baseline report.json may list its tasks in another order (older versions: bytes)
    cells.sort_by(|x, y| natural_cmp(x.0, y.0));
    Side { label, cells }
}

/// Why a task is not paired, given each side's cell (`None`: no trial there) when at least
/// one side scored nothing. Each side is described by what it actually has, so "no trial in
/// A" and "only infra errors in B" are told apart.
fn unpaired_reason(a: Option<&Cell>, b: Option<&Cell>, la: &str, lb: &str) -> String {
    let what = |c: Option<&Cell>| match c {
        None => Some("no trial"),
        Some(c) if c.scored == 0 => Some("only infra errors"),
        Some(_) => None,
    };
    match (what(a), what(b)) {
        (Some(x), Some(y)) if x == y => format!("{x} in both"),
        (Some(x), Some(y)) => format!("{x} in {la}, {y} in {lb}"),
        (Some(x), None) => format!("{x} in {la}"),
        (None, Some(y)) => format!("{y} in {lb}"),
        (None, None) => "scored in both".to_string(),
    }
}

fn pair(group: String, a: &Side<'_>, b: &Side<'_>, opts: &CompareOptions) -> PairComparison {
    let mut unpaired = Vec::new();
    let mut unequal = Vec::new();
    let mut flipped_to_fail = Vec::new();
    let mut flipped_to_pass = Vec::new();
    let (mut both_pass, mut both_fail) = (0, 0);
    let mut d = Vec::new();
    let (mut sum_a, mut sum_b) = (0.0, 0.0);
    let (mut i, mut j) = (0, 0);
    while i < a.cells.len() || j < b.cells.len() {
        let ta = a.cells.get(i).map(|x| x.0);
        let tb = b.cells.get(j).map(|x| x.0);
        let (ca, cb, task) = match (ta, tb) {
            (Some(x), Some(y)) if x == y => {
                i += 1;
                j += 1;
                (Some(a.cells[i - 1].1), Some(b.cells[j - 1].1), x)
            }
            (Some(x), Some(y)) if natural_cmp(x, y).is_lt() => {
                i += 1;
                (Some(a.cells[i - 1].1), None, x)
            }
            (Some(x), None) => {
                i += 1;
                (Some(a.cells[i - 1].1), None, x)
            }
            (_, Some(y)) => {
                j += 1;
                (None, Some(b.cells[j - 1].1), y)
            }
            (None, None) => break,
        };
        let sa = ca.filter(|c| c.scored > 0);
        let sb = cb.filter(|c| c.scored > 0);
        match (sa, sb) {
            (Some(x), Some(y)) => {
                if x.scored != y.scored {
                    unequal.push(format!(
                        "{task} ({} vs {} scored attempts)",
                        x.scored, y.scored
                    ));
                }
                let (fa, fb) = (
                    x.passed as f64 / x.scored as f64,
                    y.passed as f64 / y.scored as f64,
                );
                sum_a += fa;
                sum_b += fb;
                d.push(fb - fa);
                match (x.task_passes(), y.task_passes()) {
                    (true, true) => both_pass += 1,
                    (false, false) => both_fail += 1,
                    (true, false) => flipped_to_fail.push(task.to_string()),
                    (false, true) => flipped_to_pass.push(task.to_string()),
                }
            }
            _ => unpaired.push(Unpaired {
                task: task.to_string(),
                reason: unpaired_reason(ca, cb, &a.label, &b.label),
            }),
        }
    }
    let n = d.len();
    let ci = stats::paired_bootstrap_ci(&d, opts.resamples, opts.seed)
        .map(|(l, h)| [100.0 * l, 100.0 * h]);
    let (a_only, b_only) = (flipped_to_fail.len(), flipped_to_pass.len());
    PairComparison {
        group,
        a: a.label.clone(),
        b: b.label.clone(),
        tasks_paired: n,
        a_rate: (n > 0).then(|| sum_a / n as f64),
        b_rate: (n > 0).then(|| sum_b / n as f64),
        diff_pts: (n > 0).then(|| 100.0 * (sum_b - sum_a) / n as f64),
        ci_pts: ci,
        both_pass,
        both_fail,
        a_only,
        b_only,
        p: stats::mcnemar_exact(a_only, b_only),
        p_adjusted: 1.0,
        significant: false,
        verdict: String::new(),
        flipped_to_fail,
        flipped_to_pass,
        unpaired,
        unequal_attempts: unequal,
    }
}

/// Compare `a` with each of `others`, spread over the machine's cores. Each comparison has its
/// own RNG seeded with the same seed, so results do not depend on the thread count.
fn pair_all(
    group: &str,
    a: &Side<'_>,
    others: &[Side<'_>],
    opts: &CompareOptions,
) -> Vec<PairComparison> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(others.len())
        .max(1);
    if threads == 1 {
        return others
            .iter()
            .map(|b| pair(group.to_string(), a, b, opts))
            .collect();
    }
    let chunk = others.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = others
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|b| pair(group.to_string(), a, b, opts))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

/// Signed points with one decimal: `+7.9`, `−3.0`, `+0.0`.
pub(crate) fn pts(x: f64) -> String {
    let s = format!("{:+.1}", x);
    if s == "-0.0" {
        "+0.0".to_string()
    } else {
        s.replacen('-', "−", 1)
    }
}

pub(crate) fn fmt_p(p: f64) -> String {
    if p < 0.001 {
        "p < 0.001".to_string()
    } else {
        format!("p = {p:.3}")
    }
}

/// Apply Holm over the set and write each verdict.
fn finish(results: &mut [PairComparison]) {
    let p: Vec<f64> = results.iter().map(|r| r.p).collect();
    let adjusted = stats::holm(&p);
    let holm = results.len() > 1;
    for (r, adj) in results.iter_mut().zip(adjusted) {
        r.p_adjusted = adj;
        let p_words = if holm {
            format!("{} (Holm-adjusted)", fmt_p(adj))
        } else {
            fmt_p(adj)
        };
        let (Some(diff), Some([lo, hi])) = (r.diff_pts, r.ci_pts) else {
            r.verdict = format!(
                "not comparable: no task was scored in both {} and {}",
                r.a, r.b
            );
            continue;
        };
        let excludes_zero = lo > 0.0 || hi < 0.0;
        r.significant = adj < ALPHA && excludes_zero;
        let interval = format!("{} pts [{}, {}]", pts(diff), pts(lo), pts(hi));
        r.verdict = if r.significant && diff > 0.0 {
            format!("{} better than {} by {interval}, {p_words}", r.b, r.a)
        } else if r.significant && diff < 0.0 {
            format!("{} worse than {} by {interval}, {p_words}", r.b, r.a)
        } else {
            format!(
                "no detectable difference between {} and {}: {interval}, {p_words}",
                r.b, r.a
            )
        };
    }
}

/// Compare the arms of one report, grouped by the shared agent (`Variant`) or variant
/// (`Agent`). `None` when no group has two arms.
pub(crate) fn compare_within(
    report: &Report,
    by: Grouping,
    opts: &CompareOptions,
) -> Option<ComparisonSet> {
    // groups in first-seen (job) order
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, arm) in report.arms.iter().enumerate() {
        let key = match by {
            Grouping::Variant => &arm.agent,
            Grouping::Agent => &arm.variant,
        };
        match groups.iter_mut().find(|(k, _)| k == key) {
            Some((_, members)) => members.push(i),
            None => groups.push((key.clone(), vec![i])),
        }
    }
    let mut results = Vec::new();
    let mut notes = Vec::new();
    for (key, members) in &groups {
        if members.len() < 2 {
            continue;
        }
        let name_of = |i: usize| match by {
            Grouping::Variant => &report.arms[i].variant,
            Grouping::Agent => &report.arms[i].agent,
        };
        let control = match &opts.control {
            Some(c) => match members.iter().find(|i| name_of(**i) == c) {
                Some(i) => *i,
                None => {
                    notes.push(format!(
                        "{} {key}: no {} named {c}; not compared",
                        group_word(by),
                        by.as_str()
                    ));
                    continue;
                }
            },
            None => members[0],
        };
        let a = side(report, control, report.arms[control].arm.clone());
        let others: Vec<Side<'_>> = members
            .iter()
            .filter(|m| **m != control)
            .map(|&m| side(report, m, report.arms[m].arm.clone()))
            .collect();
        let group = format!("{} {key}", group_word(by));
        results.extend(pair_all(&group, &a, &others, opts));
    }
    if results.is_empty() && notes.is_empty() {
        return None;
    }
    finish(&mut results);
    Some(ComparisonSet {
        by: by.as_str().to_string(),
        seed: opts.seed,
        resamples: opts.resamples,
        alpha: ALPHA,
        results,
        notes,
    })
}

fn group_word(by: Grouping) -> &'static str {
    match by {
        Grouping::Variant => "agent",
        Grouping::Agent => "variant",
    }
}

/// Compare two jobs arm by arm (matched by agent/variant; two single-arm jobs are paired
/// whatever their names). A is the first job (the control).
pub(crate) fn compare_jobs(a: &Report, b: &Report, opts: &CompareOptions) -> ComparisonSet {
    let label = |r: &Report, arm: &str, other: &Report| {
        if r.job == other.job {
            arm.to_string()
        } else {
            format!("{}:{arm}", r.job)
        }
    };
    let mut results = Vec::new();
    let mut notes = Vec::new();
    if a.arms.len() == 1 && b.arms.len() == 1 {
        let (la, lb) = if a.arms[0].arm == b.arms[0].arm && a.job == b.job {
            (
                format!("{} (first)", a.arms[0].arm),
                format!("{} (second)", b.arms[0].arm),
            )
        } else {
            (label(a, &a.arms[0].arm, b), label(b, &b.arms[0].arm, a))
        };
        results.push(pair(String::new(), &side(a, 0, la), &side(b, 0, lb), opts));
    } else {
        for (i, arm) in a.arms.iter().enumerate() {
            match b.arms.iter().position(|x| x.arm == arm.arm) {
                Some(j) => {
                    let (la, lb) = if a.job == b.job {
                        (
                            format!("{} (first)", arm.arm),
                            format!("{} (second)", arm.arm),
                        )
                    } else {
                        (label(a, &arm.arm, b), label(b, &arm.arm, a))
                    };
                    results.push(pair(
                        arm.arm.clone(),
                        &side(a, i, la),
                        &side(b, j, lb),
                        opts,
                    ));
                }
                None => notes.push(format!("{} is only in {}: not compared", arm.arm, a.job)),
            }
        }
        for arm in &b.arms {
            if !a.arms.iter().any(|x| x.arm == arm.arm) {
                notes.push(format!("{} is only in {}: not compared", arm.arm, b.job));
            }
        }
    }
    finish(&mut results);
    ComparisonSet {
        by: "jobs".to_string(),
        seed: opts.seed,
        resamples: opts.resamples,
        alpha: ALPHA,
        results,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(outcomes: &[&str]) -> Cell {
        let scored = outcomes.iter().filter(|o| **o != "infra").count();
        Cell {
            outcomes: outcomes.iter().map(|o| Some(o.to_string())).collect(),
            scored,
            passed: outcomes.iter().filter(|o| **o == "pass").count(),
        }
    }

    #[test]
    fn not_paired_reasons_describe_each_side_as_it_is() {
        let infra = cell(&["infra", "infra"]);
        let scored = cell(&["pass", "infra"]);
        let pass = cell(&["pass"]);
        let a = Side {
            label: "x/a".into(),
            cells: vec![
                ("t1", &scored),
                ("t3", &infra),
                ("t4", &infra),
                ("t5", &pass),
            ],
        };
        let b = Side {
            label: "x/b".into(),
            cells: vec![
                ("t1", &infra),
                ("t2", &infra),
                ("t4", &infra),
                ("t6", &pass),
            ],
        };
        let r = pair(String::new(), &a, &b, &CompareOptions::default());
        let reasons: Vec<(&str, &str)> = r
            .unpaired
            .iter()
            .map(|u| (u.task.as_str(), u.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            vec![
                ("t1", "only infra errors in x/b"),
                // no trial in A, only infra errors in B: not "only infra errors in both"
                ("t2", "no trial in x/a, only infra errors in x/b"),
                ("t3", "only infra errors in x/a, no trial in x/b"),
                ("t4", "only infra errors in both"),
                ("t5", "no trial in x/b"),
                ("t6", "no trial in x/a"),
            ]
        );
        assert_eq!(r.tasks_paired, 0);
    }
}
