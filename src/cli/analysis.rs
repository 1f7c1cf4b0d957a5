//! `arbiter report`, `arbiter compare`, `arbiter check`, and the `--fail-under` gate of
//! `arbiter run`: argument types and printing; the work is in `crate::report`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::report::{
    self, CompareOptions, Grouping, ReportError, compare::DEFAULT_RESAMPLES, compare::DEFAULT_SEED,
    gate, text,
};

use super::exit;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Table,
    Md,
    Json,
    Html,
    Junit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum By {
    Agent,
    Variant,
}

impl From<By> for Grouping {
    fn from(b: By) -> Grouping {
        match b {
            By::Agent => Grouping::Agent,
            By::Variant => Grouping::Variant,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ReportCmd {
    /// The job directory.
    job_dir: PathBuf,
    /// What to print (all four files are written into the job dir either way).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// How to group arms for the report's comparisons (default: variant when the job has
    /// several, else agent).
    #[arg(long, value_enum)]
    by: Option<By>,
    /// Seed of the bootstrap intervals.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Bootstrap resamples.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_RESAMPLES)]
    resamples: usize,
    /// Trial pages to write: those whose trial changed since they were written (and missing
    /// ones), all, or none.
    #[arg(long, value_enum, value_name = "WHICH", default_value_t = Pages::Changed)]
    pages: Pages,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Pages {
    Changed,
    All,
    None,
}

impl From<Pages> for report::PageMode {
    fn from(p: Pages) -> report::PageMode {
        match p {
            Pages::Changed => report::PageMode::Changed,
            Pages::All => report::PageMode::All,
            Pages::None => report::PageMode::None,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct CompareCmd {
    /// One job directory (arms compared within it), or two (the first is the control).
    #[arg(required = true, num_args = 1..=2, value_name = "JOB_DIR")]
    job_dirs: Vec<PathBuf>,
    /// With one job: compare variants of each agent, or agents under each variant (default:
    /// variant when the job has several, else agent).
    #[arg(long, value_enum)]
    by: Option<By>,
    /// The control each arm is compared with: a variant name (--by variant) or an agent name
    /// (--by agent). Default: the first in job order.
    #[arg(long, value_name = "NAME")]
    control: Option<String>,
    /// Seed of the bootstrap intervals.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Bootstrap resamples.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_RESAMPLES)]
    resamples: usize,
    /// What to print.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Debug, Args)]
pub(crate) struct CheckCmd {
    /// The job directory to check.
    job_dir: PathBuf,
    /// A report.json (`arbiter report --format json`) or a job directory.
    #[arg(long, value_name = "FILE|JOB_DIR")]
    baseline: PathBuf,
    /// Largest tolerated drop of an arm's solved-task rate, in percentage points.
    #[arg(long = "max-drop", value_name = "PTS", default_value_t = 0.0)]
    max_drop: f64,
    /// A task is solved when pass@K of its attempts is at least 50% (K=1: at least half the
    /// attempts pass; K=attempts: any attempt passes).
    #[arg(long = "pass-k", value_name = "K", default_value_t = 1)]
    pass_k: u32,
}

/// `--fail-under RATE`: a fraction (0.8) or a percentage (80%).
pub(crate) fn parse_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 100.0),
        None => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| {
        format!("not a rate: {s:?} (use a fraction like 0.8 or a percentage like 80%)")
    })?;
    let v = v / scale;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("{s:?} is outside 0..1 (or 0%..100%)"));
    }
    Ok(v)
}

fn args_error(what: &str, message: &str) -> ReportError {
    ReportError::Args {
        what: what.to_string(),
        message: message.to_string(),
    }
}

pub(crate) fn report(cmd: ReportCmd) -> Result<u8, ReportError> {
    if cmd.resamples == 0 {
        return Err(args_error("--resamples", "must be at least 1"));
    }
    let job = report::load_job(&cmd.job_dir)?;
    let opts = CompareOptions {
        by: cmd.by.map(Into::into),
        control: None,
        seed: cmd.seed,
        resamples: cmd.resamples,
    };
    let (r, pages) = report::write_report(&job, &opts, cmd.pages.into())?;
    let body = match cmd.format {
        Format::Table => report::text::table(&r),
        Format::Md => report::text::markdown(&r),
        Format::Json => report::to_json(&r),
        Format::Html => report::html::html_linked(&r, &job),
        Format::Junit => {
            // stream the written file: it can be large
            let path = job.dir.join("junit.xml");
            let mut f = std::fs::File::open(&path).map_err(|e| ReportError::Io {
                path: path.clone(),
                source: e,
            })?;
            let mut stdout = std::io::stdout().lock();
            if let Err(e) = std::io::copy(&mut f, &mut stdout) {
                tracing::debug!(error = %e, "stdout closed");
            }
            String::new()
        }
    };
    if !body.is_empty() {
        println!("{}", body.trim_end());
    }
    let unchanged = if pages.unchanged > 0 {
        format!(" ({} unchanged left as they were)", pages.unchanged)
    } else {
        String::new()
    };
    eprintln!(
        "wrote {} and {} trial page(s){unchanged} (trials/<id>/trial.html) in {}",
        report::FILES.join(", "),
        pages.written,
        job.dir.display()
    );
    for s in pages.skipped.iter().take(5) {
        eprintln!("warning: no trial page for {s}");
    }
    Ok(exit::OK)
}

pub(crate) fn compare(cmd: CompareCmd) -> Result<u8, ReportError> {
    if cmd.resamples == 0 {
        return Err(args_error("--resamples", "must be at least 1"));
    }
    if matches!(cmd.format, Format::Html | Format::Junit) {
        return Err(args_error("--format", "compare prints table, md or json"));
    }
    let opts = CompareOptions {
        by: cmd.by.map(Into::into),
        control: cmd.control.clone(),
        seed: cmd.seed,
        resamples: cmd.resamples,
    };
    let set = match cmd.job_dirs.as_slice() {
        [one] => {
            let job = report::load_job(one)?;
            let r = report::build(&job, None);
            let by = opts.by.unwrap_or_else(|| Grouping::default_for(&job.arms));
            let set = report::compare::compare_within(&r, by, &opts).ok_or_else(|| {
                args_error(
                    &one.display().to_string(),
                    &format!(
                        "nothing to compare by {}: no two arms share {} (arms: {})",
                        by.as_str(),
                        match by {
                            Grouping::Variant => "an agent",
                            Grouping::Agent => "a variant",
                        },
                        r.arms
                            .iter()
                            .map(|a| a.arm.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?;
            if let Some(c) = &cmd.control
                && set.results.is_empty()
            {
                return Err(args_error("--control", &format!("no arm is named {c}")));
            }
            set
        }
        [a, b] => {
            if cmd.by.is_some() {
                return Err(args_error(
                    "--by",
                    "applies to one job; two jobs are compared arm by arm",
                ));
            }
            let ja = report::load_job(a)?;
            let jb = report::load_job(b)?;
            report::compare::compare_jobs(
                &report::build(&ja, None),
                &report::build(&jb, None),
                &opts,
            )
        }
        _ => return Err(args_error("JOB_DIR", "give one or two job directories")),
    };
    let out = match cmd.format {
        Format::Json => serde_json::to_string_pretty(&set).unwrap_or_default(),
        Format::Md => {
            let mut s = String::from("## Comparisons\n\n");
            for line in text::comparison_text(&set, usize::MAX).lines() {
                s.push_str(&text::md(line));
                s.push_str("  \n");
            }
            s
        }
        _ => text::comparison_text(&set, 20),
    };
    println!("{}", out.trim_end());
    Ok(exit::OK)
}

pub(crate) fn check(cmd: CheckCmd) -> Result<u8, ReportError> {
    if !cmd.max_drop.is_finite() || cmd.max_drop < 0.0 {
        return Err(args_error("--max-drop", "must be a number of points ≥ 0"));
    }
    if cmd.pass_k == 0 {
        return Err(args_error("--pass-k", "must be at least 1"));
    }
    let baseline = report::load_baseline(&cmd.baseline)?;
    let job = report::load_job(&cmd.job_dir)?;
    let current = report::build(&job, None);
    let outcome = gate::check(&current, &baseline, cmd.pass_k, cmd.max_drop);
    println!("{}", text::check_text(&outcome, 20));
    Ok(if outcome.failed() {
        println!(
            "check failed: regression against {}",
            cmd.baseline.display()
        );
        exit::GATE
    } else if outcome.unchecked() > 0 {
        println!(
            "check passed for what could be judged; {} task(s) had only infra errors",
            outcome.unchecked()
        );
        exit::INFRA
    } else {
        println!(
            "check passed: no regression against {}",
            cmd.baseline.display()
        );
        exit::OK
    })
}

/// The `--fail-under` gate over a finished run's arms: lines to print, and whether it failed.
pub(crate) fn fail_under_lines(
    arms: &[crate::job::ArmSummary],
    threshold: f64,
) -> (Vec<String>, bool) {
    let under = gate::fail_under(
        arms.iter()
            .map(|a| (format!("{}/{}", a.agent, a.variant), a.pass_rate())),
        threshold,
    );
    let mut lines: Vec<String> = under
        .iter()
        .map(|u| {
            format!(
                "gate failed: {} pass rate {:.1}% is under --fail-under {:.1}%",
                u.arm,
                100.0 * u.rate,
                100.0 * threshold
            )
        })
        .collect();
    if under.is_empty() {
        lines.push(format!(
            "gate passed: every scored arm's pass rate is at least {:.1}%",
            100.0 * threshold
        ));
    }
    (lines, !under.is_empty())
}
