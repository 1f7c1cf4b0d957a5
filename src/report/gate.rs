//! CI gates: `run --fail-under RATE` (any arm's pass rate below RATE) and `check` against a
//! baseline report.
//!
//! `check` works per arm (matched by agent/variant) on tasks. A task is *solved* when the
//! unbiased pass@K of its scored attempts is at least ½ (K = `--pass-k`, capped at the
//! attempts there are): with K = 1 that is "at least half the attempts pass", with K = the
//! attempts it is "some attempt passes". The arm's solved rate is taken over the baseline's
//! scored tasks; a task the current job did not run counts as not solved (it is listed as
//! missing), a task with only infra errors now is left out and listed as unchecked. The arm
//! regresses when its solved rate drops by more than `--max-drop` points (default 0: any net
//! loss); every task that went from solved to not solved is listed.

use serde::Serialize;

use super::model::{Cell, Report};
use super::stats;

#[derive(Debug, Clone, Serialize)]
pub(crate) struct CheckOutcome {
    pub pass_k: u32,
    pub max_drop_pts: f64,
    pub arms: Vec<ArmCheck>,
    /// Baseline arms the current job does not have.
    pub missing_arms: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ArmCheck {
    pub arm: String,
    pub tasks: usize,
    pub baseline_solved: usize,
    pub solved: usize,
    pub drop_pts: f64,
    pub regressed: bool,
    /// Solved in the baseline, not solved now (with the counts).
    pub regressed_tasks: Vec<String>,
    pub fixed_tasks: Vec<String>,
    /// In the baseline, not in this job.
    pub missing_tasks: Vec<String>,
    /// Only infra errors now: not judged.
    pub unchecked_tasks: Vec<String>,
}

impl CheckOutcome {
    pub(crate) fn failed(&self) -> bool {
        !self.missing_arms.is_empty() || self.arms.iter().any(|a| a.regressed)
    }

    pub(crate) fn unchecked(&self) -> usize {
        self.arms.iter().map(|a| a.unchecked_tasks.len()).sum()
    }
}

fn solved(c: &Cell, k: u32) -> Option<bool> {
    if c.scored == 0 {
        return None;
    }
    let k = (k as usize).min(c.scored);
    stats::pass_at_k(c.scored, c.passed, k).map(|p| p >= 0.5)
}

fn counts(c: &Cell) -> String {
    format!("{}/{}", c.passed, c.scored)
}

/// Check `current` against `baseline`.
pub(crate) fn check(
    current: &Report,
    baseline: &Report,
    pass_k: u32,
    max_drop_pts: f64,
) -> CheckOutcome {
    let mut arms = Vec::new();
    let mut missing_arms = Vec::new();
    let single = baseline.arms.len() == 1 && current.arms.len() == 1;
    // by name: the two reports need not list tasks in the same order
    let index: std::collections::HashMap<&str, usize> = current
        .tasks
        .iter()
        .enumerate()
        .map(|(i, r)| (r.task.as_str(), i))
        .collect();
    for (bi, barm) in baseline.arms.iter().enumerate() {
        let ci = if single {
            Some(0)
        } else {
            current.arms.iter().position(|a| a.arm == barm.arm)
        };
        let Some(ci) = ci else {
            missing_arms.push(barm.arm.clone());
            continue;
        };
        let mut out = ArmCheck {
            arm: current.arms[ci].arm.clone(),
            tasks: 0,
            baseline_solved: 0,
            solved: 0,
            drop_pts: 0.0,
            regressed: false,
            regressed_tasks: Vec::new(),
            fixed_tasks: Vec::new(),
            missing_tasks: Vec::new(),
            unchecked_tasks: Vec::new(),
        };
        for row in &baseline.tasks {
            let Some(bcell) = row.cells.get(bi) else {
                continue;
            };
            let Some(was) = solved(bcell, pass_k) else {
                continue;
            };
            let now_cell = index
                .get(row.task.as_str())
                .and_then(|i| current.tasks[*i].cells.get(ci))
                .filter(|c| !c.is_empty());
            let now = match now_cell {
                None => {
                    out.missing_tasks.push(row.task.clone());
                    if was {
                        out.regressed_tasks.push(format!(
                            "{} (baseline {} passed, now missing)",
                            row.task,
                            counts(bcell)
                        ));
                    }
                    false
                }
                Some(c) => match solved(c, pass_k) {
                    None => {
                        out.unchecked_tasks.push(row.task.clone());
                        continue;
                    }
                    Some(now) => {
                        if was && !now {
                            out.regressed_tasks.push(format!(
                                "{} (baseline {} passed, now {})",
                                row.task,
                                counts(bcell),
                                counts(c)
                            ));
                        } else if !was && now {
                            out.fixed_tasks.push(row.task.clone());
                        }
                        now
                    }
                },
            };
            out.tasks += 1;
            out.baseline_solved += usize::from(was);
            out.solved += usize::from(now);
        }
        if out.tasks > 0 {
            out.drop_pts =
                100.0 * (out.baseline_solved as f64 - out.solved as f64) / out.tasks as f64;
        }
        out.regressed = out.drop_pts > max_drop_pts + 1e-9;
        arms.push(out);
    }
    CheckOutcome {
        pass_k,
        max_drop_pts,
        arms,
        missing_arms,
    }
}

/// One arm under a `--fail-under` gate.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UnderGate {
    pub arm: String,
    pub rate: f64,
}

/// Arms whose pass rate is below `threshold` (arms with nothing scored are not judged).
pub(crate) fn fail_under<'a>(
    rates: impl IntoIterator<Item = (String, Option<f64>)> + 'a,
    threshold: f64,
) -> Vec<UnderGate> {
    rates
        .into_iter()
        .filter_map(|(arm, rate)| {
            let rate = rate?;
            (rate < threshold).then_some(UnderGate { arm, rate })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(scored: usize, passed: usize) -> Cell {
        Cell {
            outcomes: Vec::new(),
            scored,
            passed,
        }
    }

    #[test]
    fn pass_k_decides_what_solved_means() {
        // 1 of 3 attempts passed
        let c = cell(3, 1);
        assert_eq!(solved(&c, 1), Some(false), "pass@1 = 1/3 < 1/2");
        assert_eq!(solved(&c, 2), Some(true), "pass@2 = 2/3");
        assert_eq!(solved(&c, 3), Some(true), "pass@3: some attempt passed");
        assert_eq!(
            solved(&c, 9),
            Some(true),
            "K is capped at the attempts there are"
        );
        // half the attempts: solved at K = 1 (ties pass, as in compare)
        assert_eq!(solved(&cell(2, 1), 1), Some(true));
        assert_eq!(solved(&cell(3, 0), 3), Some(false));
        assert_eq!(solved(&cell(0, 0), 1), None, "nothing scored: not judged");
    }

    #[test]
    fn fail_under_names_only_arms_below_and_skips_unscored_ones() {
        let under = fail_under(
            vec![
                ("a/x".to_string(), Some(0.79)),
                ("b/x".to_string(), Some(0.8)),
                ("c/x".to_string(), None),
            ],
            0.8,
        );
        assert_eq!(
            under,
            vec![UnderGate {
                arm: "a/x".to_string(),
                rate: 0.79
            }]
        );
    }
}
