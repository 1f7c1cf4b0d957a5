//! The terminal table and `report.md` (GitHub-flavoured Markdown, fit for a CI job summary).
//!
//! Over 600 lines: the terminal table and report.md share column alignment and wording; with their tests.

use std::fmt::Write as _;

use super::compare::{ComparisonSet, pts};
use super::gate::CheckOutcome;
use super::model::{ArmStats, Cell, Report, tokens, usd};

pub(crate) fn pct(x: Option<f64>) -> String {
    x.map(|v| format!("{:.1}%", 100.0 * v))
        .unwrap_or_else(|| "–".to_string())
}

pub(crate) fn ci(x: Option<[f64; 2]>) -> String {
    x.map(|[l, h]| format!("[{:.1}, {:.1}]", 100.0 * l, 100.0 * h))
        .unwrap_or_default()
}

fn num(x: Option<f64>, digits: usize) -> String {
    x.map(|v| format!("{v:.digits$}"))
        .unwrap_or_else(|| "–".to_string())
}

fn secs(arm: &ArmStats) -> String {
    arm.agent_seconds
        .as_ref()
        .map(|t| format!("{:.1} / {:.1}", t.median, t.p90))
        .unwrap_or_else(|| "–".to_string())
}

fn k_value(arm: &ArmStats, k: u32, hat: bool) -> String {
    let list = if hat { &arm.pass_hat_k } else { &arm.pass_at_k };
    list.iter()
        .find(|s| s.k == k)
        .map(|s| pct(s.value))
        .unwrap_or_else(|| "–".to_string())
}

/// The cells both arm tables (terminal and report.md) start with: agent, variant, tasks,
/// trials, scored, infra, pass rate, its 95% CI, mean reward; `name` escapes agent and variant.
fn arm_cells(a: &ArmStats, name: &dyn Fn(&str) -> String) -> Vec<String> {
    vec![
        name(&a.agent),
        name(&a.variant),
        a.tasks.to_string(),
        a.trials.to_string(),
        a.scored.to_string(),
        a.infra.to_string(),
        pct(a.pass_rate),
        ci(a.pass_rate_ci),
        num(a.mean_reward, 3),
    ]
}

/// An arm's count of each audit verdict, in the order of the report's verdict columns.
fn verdict_counts(r: &Report, arm: &ArmStats) -> Vec<String> {
    r.verdict_columns()
        .into_iter()
        .map(|v| arm.verdicts.get(v).copied().unwrap_or(0).to_string())
        .collect()
}

/// Outcome glyphs of a cell by attempt: `✓✓✗`, `·` for a missing attempt.
pub(crate) fn glyphs(c: &Cell) -> String {
    (0..c.outcomes.len())
        .map(|i| c.outcome(i).map(|o| o.glyph()).unwrap_or('·'))
        .collect()
}

/// Owned column names, for a table's header row.
fn cols(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// Align columns: the first `left` columns left-aligned, the rest right-aligned.
pub(crate) fn align(rows: &[Vec<String>], left: usize) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; cols];
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, c) in row.iter().enumerate() {
            let pad = widths[i] - c.chars().count();
            if i > 0 {
                line.push_str("  ");
            }
            if i < left {
                line.push_str(c);
                line.extend(std::iter::repeat_n(' ', pad));
            } else {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(c);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn totals_line(r: &Report) -> String {
    format!(
        "job {} · {} trials · {} scored · {} infra error(s) excluded from rates · {} attempt(s) per task",
        r.job, r.totals.trials, r.totals.scored, r.totals.infra, r.attempts
    )
}

/// "N scored trial(s) without a reward … count as not passed", when there are any: every
/// rendering states it, so a reader of any of them knows why passed + failed < scored.
pub(crate) fn unverified_line(r: &Report) -> Option<String> {
    let unverified: usize = r.arms.iter().map(|a| a.unverified).sum();
    (unverified > 0).then(|| {
        format!(
            "{unverified} scored trial(s) without a reward (verifier error or skipped) count as not passed"
        )
    })
}

/// The usage table (header first), one row per arm with a usage record; `name` escapes the
/// arm's label for the target format.
pub(crate) fn usage_rows(r: &Report, name: &dyn Fn(&str) -> String) -> Vec<Vec<String>> {
    let mut rows = vec![cols(&[
        "arm",
        "trials w/ usage",
        "requests",
        "input tokens",
        "output tokens",
        "cache read",
        "cost",
        "cost / solved task",
        "upstream errors",
        "budget exhausted",
    ])];
    for a in &r.arms {
        let Some(u) = &a.usage else { continue };
        rows.push(vec![
            name(&a.arm),
            u.trials.to_string(),
            u.requests.to_string(),
            tokens(u.input_tokens),
            tokens(u.output_tokens),
            tokens(u.cache_read_tokens),
            usd(u.cost_usd),
            u.cost_per_solved_task_usd
                .map(usd)
                .unwrap_or_else(|| "–".to_string()),
            u.upstream_errors.to_string(),
            u.budget_exhausted.to_string(),
        ]);
    }
    rows
}

/// The pass rate by attempts used, one `attempts: passed/trials (rate)` per row.
pub(crate) fn by_attempts(rows: &[super::model::AttemptsRow]) -> String {
    rows.iter()
        .map(|row| {
            format!(
                "{}: {}/{} ({})",
                row.attempts,
                row.passed,
                row.trials,
                pct(row.pass_rate)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The goal-continuation table (header first), one row per arm with continued trials:
/// attempts used (mean), trials the limit ended, and the pass rate by attempts used.
pub(crate) fn continuation_rows(r: &Report, name: &dyn Fn(&str) -> String) -> Vec<Vec<String>> {
    let mut rows = vec![cols(&[
        "arm",
        "continued trials",
        "mean attempts",
        "budget limited",
        "pass rate by attempts used",
    ])];
    for a in &r.arms {
        let Some(c) = &a.continuation else { continue };
        rows.push(vec![
            name(&a.arm),
            c.trials.to_string(),
            format!("{:.2}", c.mean_attempts),
            c.budget_limited.to_string(),
            by_attempts(&c.by_attempts),
        ]);
    }
    rows
}

/// Each arm with a multi-key reward: its label and its keys as `key = mean (n=…)`, joined
/// with commas; `name` escapes each key for the target format (the label is left as it is).
pub(crate) fn reward_key_lines<'a>(
    r: &'a Report,
    name: &dyn Fn(&str) -> String,
) -> Vec<(&'a str, String)> {
    r.arms
        .iter()
        .filter(|a| !a.reward_keys.is_empty())
        .map(|a| {
            let keys: Vec<String> = a
                .reward_keys
                .iter()
                .map(|(k, m)| format!("{} = {:.3} (n={})", name(k), m.mean, m.n))
                .collect();
            (a.arm.as_str(), keys.join(", "))
        })
        .collect()
}

/// The per-step table of a job with Harbor multi-step tasks (header first); `None` without.
pub(crate) fn step_rows(r: &Report, name: &dyn Fn(&str) -> String) -> Option<Vec<Vec<String>>> {
    if r.steps.is_empty() {
        return None;
    }
    let mut rows = vec![cols(&[
        "task",
        "step",
        "arm",
        "ran",
        "passed",
        "mean reward",
    ])];
    for s in &r.steps {
        rows.push(vec![
            name(&s.task),
            name(&s.step),
            name(&s.arm),
            s.ran.to_string(),
            s.passed.to_string(),
            num(s.mean_reward, 3),
        ]);
    }
    Some(rows)
}

/// The terminal table.
pub(crate) fn table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}\n", totals_line(r));
    let kmax = r.attempts;
    let mut header = cols(&[
        "agent",
        "variant",
        "tasks",
        "trials",
        "scored",
        "infra",
        "pass rate",
        "95% CI",
        "reward",
    ]);
    if kmax > 1 {
        header.push(format!("pass@{kmax}"));
        header.push(format!("pass^{kmax}"));
    }
    header.extend(["false compl.", "agent s med/p90"].map(String::from));
    let mut rows = vec![header];
    for a in &r.arms {
        let mut row = arm_cells(a, &|s| s.to_string());
        if kmax > 1 {
            row.push(k_value(a, kmax, false));
            row.push(k_value(a, kmax, true));
        }
        row.push(format!("{}/{}", a.false_completion, a.claimed_success));
        row.push(secs(a));
        rows.push(row);
    }
    out.push_str(&align(&rows, 2));
    if r.totals.infra > 0 {
        let _ = writeln!(
            out,
            "{} infra error(s) (harness/engine failures) are excluded from every rate, not counted as failures",
            r.totals.infra
        );
    }
    if r.totals.cancelled > 0 {
        let _ = writeln!(
            out,
            "{} trial(s) cancelled by the user are excluded from every rate, not counted as failures",
            r.totals.cancelled
        );
    }
    if let Some(line) = unverified_line(r) {
        let _ = writeln!(out, "{line}");
    }
    // audit verdicts
    let mut rows = vec![
        std::iter::once("arm".to_string())
            .chain(r.verdict_columns().into_iter().map(String::from))
            .chain(["false-completion rate".to_string()])
            .collect::<Vec<_>>(),
    ];
    for a in &r.arms {
        let mut row = vec![a.arm.clone()];
        row.extend(verdict_counts(r, a));
        row.push(format!(
            "{} {}",
            pct(a.false_completion_rate),
            ci(a.false_completion_ci)
        ));
        rows.push(row);
    }
    out.push('\n');
    out.push_str(&align(&rows, 1));
    if r.has_usage() {
        out.push('\n');
        out.push_str(&align(&usage_rows(r, &|s| s.to_string()), 1));
    }
    if r.has_continuation() {
        out.push('\n');
        out.push_str(&align(&continuation_rows(r, &|s| s.to_string()), 1));
    }
    for w in &r.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    if r.tasks.len() <= 40 && r.arms.len() <= 8 {
        out.push('\n');
        let mut rows = vec![
            std::iter::once("task".to_string())
                .chain(r.arms.iter().map(|a| a.arm.clone()))
                .collect::<Vec<_>>(),
        ];
        for t in &r.tasks {
            let mut row = vec![t.task.clone()];
            row.extend(t.cells.iter().map(glyphs));
            rows.push(row);
        }
        out.push_str(&align(&rows, 1));
        out.push_str(
            "✓ pass  ✗ fail  E verifier error  S verifier skipped  I infra error  · no record\n",
        );
    } else {
        let _ = writeln!(
            out,
            "\nper-task outcomes ({} tasks × {} arms): see report.md or report.html",
            r.tasks.len(),
            r.arms.len()
        );
    }
    if let Some(rows) = step_rows(r, &|s: &str| s.to_string()) {
        out.push_str(
            "\nper-step results (multi-step tasks; the task's reward is from its steps'):\n",
        );
        out.push_str(&align(&rows, 3));
    }
    if let Some(c) = &r.comparisons {
        out.push('\n');
        out.push_str(&comparison_text(c, 10));
    }
    out.trim_end().to_string()
}

/// `v` joined with commas, at most `max` of them, then how many more there are.
fn at_most(v: &[String], max: usize) -> String {
    let mut s = v.iter().take(max).cloned().collect::<Vec<_>>().join(", ");
    if v.len() > max {
        let _ = write!(s, ", … ({} more)", v.len() - max);
    }
    s
}

/// Comparison verdicts in plain words, listing at most `max_tasks` tasks per list.
pub(crate) fn comparison_text(c: &ComparisonSet, max_tasks: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "comparisons (by {}; paired on tasks; {} bootstrap resamples, seed {}):",
        c.by, c.resamples, c.seed
    );
    let list = |v: &[String]| at_most(v, max_tasks);
    for r in &c.results {
        let _ = writeln!(out, "- {}", r.verdict);
        let _ = writeln!(
            out,
            "  {} paired tasks: both pass {}, both fail {}, {} only {}, {} only {}",
            r.tasks_paired, r.both_pass, r.both_fail, r.a, r.a_only, r.b, r.b_only
        );
        if !r.flipped_to_fail.is_empty() {
            let _ = writeln!(out, "  pass → fail: {}", list(&r.flipped_to_fail));
        }
        if !r.flipped_to_pass.is_empty() {
            let _ = writeln!(out, "  fail → pass: {}", list(&r.flipped_to_pass));
        }
        if !r.unpaired.is_empty() {
            let v: Vec<String> = r
                .unpaired
                .iter()
                .map(|u| format!("{} ({})", u.task, u.reason))
                .collect();
            let _ = writeln!(out, "  not paired: {}", list(&v));
        }
        if !r.unequal_attempts.is_empty() {
            let _ = writeln!(out, "  unequal attempts: {}", list(&r.unequal_attempts));
        }
    }
    for n in &c.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

/// Escape text for a Markdown table cell.
pub(crate) fn md(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' | '|' | '*' | '_' | '`' | '[' | ']' | '#' | '~' => {
                out.push('\\');
                out.push(ch);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn md_table(header: &[String], right_from: usize, rows: &[Vec<String>]) -> String {
    md_table_tail(header, right_from, 0, rows)
}

fn md_row(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
}

/// A table whose columns from `right_from` on are right-aligned, except the last `left_tail`.
fn md_table_tail(
    header: &[String],
    right_from: usize,
    left_tail: usize,
    rows: &[Vec<String>],
) -> String {
    let mut out = md_row(header);
    let n = header.len();
    let sep: Vec<String> = (0..n)
        .map(|i| {
            if i >= right_from && i + left_tail < n {
                "---:".into()
            } else {
                "---".into()
            }
        })
        .collect();
    out.push_str(&md_row(&sep));
    for r in rows {
        out.push_str(&md_row(r));
    }
    out
}

/// `report.md`.
pub(crate) fn markdown(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# arbiter report: {}\n", md(&r.job));
    let _ = writeln!(out, "{}\n", md(&totals_line(r)));
    out.push_str("## Arms\n\n");
    let header = cols(&[
        "agent",
        "variant",
        "tasks",
        "trials",
        "scored",
        "infra (excluded)",
        "pass rate",
        "95% CI",
        "mean reward",
        "agent s median",
        "agent s p90",
    ]);
    let rows: Vec<Vec<String>> = r
        .arms
        .iter()
        .map(|a| {
            let mut row = arm_cells(a, &md);
            row.push(num(a.agent_seconds.as_ref().map(|t| t.median), 1));
            row.push(num(a.agent_seconds.as_ref().map(|t| t.p90), 1));
            row
        })
        .collect();
    out.push_str(&md_table(&header, 2, &rows));
    if r.totals.infra > 0 {
        let _ = writeln!(
            out,
            "\n{} infra error(s) are excluded from every rate and not counted as failures.",
            r.totals.infra
        );
    }
    if r.totals.cancelled > 0 {
        let _ = writeln!(
            out,
            "\n{} trial(s) cancelled by the user are excluded from every rate and not counted as failures.",
            r.totals.cancelled
        );
    }
    if let Some(line) = unverified_line(r) {
        let _ = writeln!(out, "\n{}.", md(&line));
    }
    for w in &r.warnings {
        let _ = writeln!(out, "\n> **Warning:** {}", md(w));
    }

    let keyed = reward_key_lines(r, &md);
    if !keyed.is_empty() {
        out.push_str("\n### Reward keys (mean over trials with that key)\n\n");
        for (arm, keys) in keyed {
            let _ = writeln!(out, "- {}: {keys}", md(arm));
        }
    }

    out.push_str("\n## pass@k and pass^k\n\n");
    let mut header = vec!["arm".to_string()];
    header.extend((1..=r.attempts).map(|k| format!("pass@{k}")));
    header.extend((2..=r.attempts).map(|k| format!("pass^{k}")));
    let rows: Vec<Vec<String>> = r
        .arms
        .iter()
        .map(|a| {
            let mut row = vec![md(&a.arm)];
            row.extend((1..=r.attempts).map(|k| k_value(a, k, false)));
            row.extend((2..=r.attempts).map(|k| k_value(a, k, true)));
            row
        })
        .collect();
    out.push_str(&md_table(&header, 1, &rows));

    out.push_str("\n## Audit verdicts\n\n");
    let mut header = vec!["arm".to_string()];
    header.extend(r.verdict_columns().into_iter().map(String::from));
    header.extend(["claimed success", "false-completion rate", "95% CI"].map(String::from));
    let rows: Vec<Vec<String>> = r
        .arms
        .iter()
        .map(|a| {
            let mut row = vec![md(&a.arm)];
            row.extend(verdict_counts(r, a));
            row.push(a.claimed_success.to_string());
            row.push(pct(a.false_completion_rate));
            row.push(ci(a.false_completion_ci));
            row
        })
        .collect();
    out.push_str(&md_table(&header, 1, &rows));

    if r.has_usage() {
        out.push_str("\n## Usage (counted by the model gateway)\n\n");
        let rows = usage_rows(r, &md);
        out.push_str(&md_table(&rows[0], 1, &rows[1..]));
    }

    if r.has_continuation() {
        out.push_str("\n## Goal continuation (each trial counted once)\n\n");
        let rows = continuation_rows(r, &md);
        out.push_str(&md_table(&rows[0], 1, &rows[1..]));
    }

    if let Some(rows) = step_rows(r, &md) {
        out.push_str("\n## Steps (multi-step tasks)\n\n");
        out.push_str(&md_table(&rows[0], 3, &rows[1..]));
    }

    if let Some(c) = &r.comparisons {
        let _ = writeln!(
            out,
            "\n## Comparisons (by {}, paired on tasks)\n\n{} bootstrap resamples, seed {}.\n",
            c.by, c.resamples, c.seed
        );
        let header = cols(&[
            "control",
            "arm",
            "paired tasks",
            "difference",
            "95% CI",
            "p",
            "p (Holm)",
            "pass→fail",
            "fail→pass",
            "verdict",
        ]);
        let rows: Vec<Vec<String>> = c
            .results
            .iter()
            .map(|p| {
                vec![
                    md(&p.a),
                    md(&p.b),
                    p.tasks_paired.to_string(),
                    p.diff_pts
                        .map(|d| format!("{} pts", pts(d)))
                        .unwrap_or_default(),
                    p.ci_pts
                        .map(|[l, h]| format!("[{}, {}]", pts(l), pts(h)))
                        .unwrap_or_default(),
                    format!("{:.3}", p.p),
                    format!("{:.3}", p.p_adjusted),
                    p.a_only.to_string(),
                    p.b_only.to_string(),
                    md(&p.verdict),
                ]
            })
            .collect();
        out.push_str(&md_table_tail(&header, 2, 1, &rows));
        for p in &c.results {
            let mut lines = Vec::new();
            if !p.flipped_to_fail.is_empty() {
                lines.push(format!(
                    "pass → fail: {}",
                    md(&p.flipped_to_fail.join(", "))
                ));
            }
            if !p.flipped_to_pass.is_empty() {
                lines.push(format!(
                    "fail → pass: {}",
                    md(&p.flipped_to_pass.join(", "))
                ));
            }
            if !p.unpaired.is_empty() {
                let v: Vec<String> = p
                    .unpaired
                    .iter()
                    .map(|u| format!("{} ({})", u.task, u.reason))
                    .collect();
                lines.push(format!("not paired: {}", md(&v.join(", "))));
            }
            if !p.unequal_attempts.is_empty() {
                lines.push(format!(
                    "unequal attempts: {}",
                    md(&p.unequal_attempts.join(", "))
                ));
            }
            if !lines.is_empty() {
                let _ = writeln!(out, "\n**{} vs {}**\n", md(&p.b), md(&p.a));
                for l in lines {
                    let _ = writeln!(out, "- {l}");
                }
            }
        }
        for n in &c.notes {
            let _ = writeln!(out, "\n> {}", md(n));
        }
    }

    out.push_str("\n## Per task\n\n");
    out.push_str("One glyph per attempt: ✓ pass, ✗ fail, E verifier error, S verifier skipped, I infra error, · no record.\n\n");
    let mut header = vec!["task".to_string()];
    header.extend(r.arms.iter().map(|a| md(&a.arm)));
    let rows: Vec<Vec<String>> = r
        .tasks
        .iter()
        .map(|t| {
            let mut row = vec![md(&t.task)];
            row.extend(t.cells.iter().map(glyphs));
            row
        })
        .collect();
    out.push_str(&md_table(&header, usize::MAX, &rows));

    out.push_str("\n## Conventions\n\n");
    for c in &r.conventions {
        let _ = writeln!(out, "- {}", md(c));
    }
    out
}

/// `arbiter check` in words.
pub(crate) fn check_text(c: &CheckOutcome, max_tasks: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "check: a task is solved when pass@{} ≥ 50%; an arm regresses when its solved rate drops more than {:.1} pts",
        c.pass_k, c.max_drop_pts
    );
    let list = |v: &[String]| at_most(v, max_tasks);
    for a in &c.arms {
        let _ = writeln!(
            out,
            "{} {}: {}/{} tasks solved (baseline {}/{}), {} pts",
            if a.regressed { "REGRESSED" } else { "ok" },
            a.arm,
            a.solved,
            a.tasks,
            a.baseline_solved,
            a.tasks,
            pts(-a.drop_pts)
        );
        for t in &a.regressed_tasks {
            let _ = writeln!(out, "  regressed: {t}");
        }
        if !a.fixed_tasks.is_empty() {
            let _ = writeln!(out, "  fixed: {}", list(&a.fixed_tasks));
        }
        if !a.missing_tasks.is_empty() {
            let _ = writeln!(out, "  missing in this job: {}", list(&a.missing_tasks));
        }
        if !a.unchecked_tasks.is_empty() {
            let _ = writeln!(
                out,
                "  not checked (only infra errors): {}",
                list(&a.unchecked_tasks)
            );
        }
    }
    for m in &c.missing_arms {
        let _ = writeln!(out, "REGRESSED {m}: in the baseline, not in this job");
    }
    out.trim_end().to_string()
}
