//! `arbiter tasks …`: task QA. `tasks check` runs the checking job (`crate::taskcheck`) and
//! prints a table per task (or the `arbiter.taskcheck.v1` JSON); `tasks load` only loads
//! (`tasks_load.rs`).

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use crate::sandbox::choose::{self, BackendConfig};
use crate::taskcheck::{self, CheckError, CheckOptions, CheckOutcome, CheckReport, CheckResult};

use super::exit;
use super::packet::{Counts, Packet, Phase};

#[derive(Debug, Args)]
pub(super) struct TasksCmd {
    #[command(subcommand)]
    command: TasksCommand,
}

#[derive(Debug, Subcommand)]
enum TasksCommand {
    /// Check tasks: layout loads, oracle passes, nop fails, the verifier is deterministic,
    /// and no built-in exploit passes it. Exit 4 when a task fails a check.
    #[command(
        after_help = "Examples:\n  arbiter tasks check tasks/ -n 4\n  arbiter tasks check tasks/hello --repeat 5 --format json > check.json\n  arbiter tasks check tasks/ --job-dir jobs/check   # again: resumes, reuses finished trials"
    )]
    Check(CheckCmd),
    /// Load tasks with arbiter's loader only (no Docker): loaded or refused, with warnings.
    /// Exit 4 when a task is refused.
    #[command(
        after_help = "Examples:\n  arbiter tasks load tasks/\n  arbiter tasks load -r corpus/ --format jsonl > load.jsonl   # what scripts/corpus counts"
    )]
    Load(super::tasks_load::LoadCmd),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

#[derive(Debug, Args)]
struct CheckCmd {
    /// Task directories or dataset directories (a directory of tasks).
    #[arg(required = true)]
    tasks: Vec<PathBuf>,
    /// Trials run at the same time.
    #[arg(
        short = 'n',
        long = "concurrency",
        value_name = "N",
        default_value_t = 1
    )]
    concurrency: usize,
    /// Verifier runs on the oracle's frozen result, the oracle's own run included.
    #[arg(long, value_name = "N", default_value_t = taskcheck::DEFAULT_REPEAT)]
    repeat: u32,
    /// Job directory (default: jobs/check-<UTC timestamp>). An existing one is continued.
    #[arg(long = "job-dir", value_name = "DIR")]
    job_dir: Option<PathBuf>,
    /// Output on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// No progress lines.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// End with one JSON packet on stdout (docs/json-packet.md; counts are per task); the
    /// table or report goes to stderr (the report is also in `<job>/check/result.json`).
    #[arg(long)]
    json: bool,
}

/// Run a `tasks` subcommand; errors are printed here, one line each.
pub(super) async fn main(cmd: TasksCmd) -> u8 {
    match cmd.command {
        TasksCommand::Load(cmd) => match super::tasks_load::run(cmd) {
            Ok(code) => code,
            Err((code, message)) => {
                eprintln!("error: {message}");
                code
            }
        },
        TasksCommand::Check(cmd) => {
            let json = cmd.json;
            match check(cmd).await {
                Ok(code) => code,
                Err((code, message)) => {
                    eprintln!("error: {message}");
                    if json {
                        let (phase, kind) = match code {
                            exit::USAGE => (Phase::Configuration, "invalid_value"),
                            _ => (Phase::Run, "failed"),
                        };
                        Packet::refused(Some("tasks check"), phase, kind, code, None).print();
                    }
                    code
                }
            }
        }
    }
}

async fn check(cmd: CheckCmd) -> Result<u8, (u8, String)> {
    let usage = |m: String| (exit::USAGE, m);
    if cmd.concurrency == 0 {
        return Err(usage("-n: concurrency: must be at least 1".to_string()));
    }
    if cmd.repeat == 0 {
        return Err(usage("--repeat: must be at least 1".to_string()));
    }
    let opts = CheckOptions {
        paths: cmd.tasks,
        concurrency: cmd.concurrency,
        repeat: cmd.repeat,
        job_dir: cmd.job_dir,
    };
    let plan = taskcheck::plan(&opts).map_err(|e| match e {
        CheckError::Io { .. } => (exit::FAILURE, e.to_string()),
        _ => usage(e.to_string()),
    })?;
    let toolbox = crate::sandbox::toolbox::locate_toolbox().map_err(|e| usage(e.to_string()))?;
    let sandbox = choose::connect(&BackendConfig::default(), Some(&toolbox))
        .await
        .map_err(|e| usage(e.to_string()))?;
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(None);
    tokio::spawn(super::watch_signals(cancel_tx));
    let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
    let tty = std::io::stderr().is_terminal();
    let reporter = tokio::spawn(super::report::consume(events_rx, cmd.quiet, tty));
    let outcome = taskcheck::run(&plan, sandbox, events_tx, cancel_rx)
        .await
        .map_err(|e| match e {
            CheckError::Run(crate::job::RunError::Busy { .. }) => usage(e.to_string()),
            _ => (exit::FAILURE, e.to_string()),
        })?;
    let _ = reporter.await;
    match outcome {
        CheckOutcome::Interrupted { reaped } => {
            if let Some(removed) = reaped {
                eprintln!(
                    "second interrupt: killed and removed {removed} container(s)/image(s) of this job"
                );
            }
            let line = format!(
                "interrupted; continue with: arbiter tasks check … --job-dir {}",
                plan.spec.dir.display()
            );
            let dir = Some(plan.spec.dir.display().to_string());
            if cmd.json {
                eprintln!("{line}");
                let counts = Counts {
                    planned: plan.spec.tasks.len(),
                    not_run: plan.spec.tasks.len(),
                    ..Counts::default()
                };
                Packet::finished("tasks check", exit::INTERRUPTED, counts, dir).print();
            } else {
                println!("{line}");
            }
            Ok(exit::INTERRUPTED)
        }
        CheckOutcome::Done(report) => {
            let text = match cmd.format {
                Format::Table => table(&report),
                Format::Json => match serde_json::to_string_pretty(&report) {
                    Ok(json) => format!("{json}\n"),
                    Err(e) => return Err((exit::FAILURE, format!("encoding the report: {e}"))),
                },
            };
            if cmd.json {
                eprint!("{text}");
                let dir = Some(report.job_dir.display().to_string());
                Packet::finished("tasks check", report.exit_code, task_counts(&report), dir)
                    .print();
            } else {
                print!("{text}");
            }
            Ok(report.exit_code)
        }
    }
}

/// The packet's counts for `tasks check`: one per task (passed = every check passed).
fn task_counts(report: &CheckReport) -> Counts {
    let mut c = Counts {
        planned: report.tasks.len(),
        ..Counts::default()
    };
    for task in &report.tasks {
        match task.verdict {
            taskcheck::Verdict::Ok => c.passed += 1,
            taskcheck::Verdict::Failed => c.failed += 1,
            taskcheck::Verdict::Error => c.infra_error += 1,
        }
    }
    c.finished = c.passed + c.failed + c.infra_error;
    c
}

fn result_word(result: CheckResult, caught: bool) -> &'static str {
    match (result, caught) {
        (CheckResult::Pass, true) => "pass (caught)",
        (CheckResult::Pass, false) => "pass",
        (CheckResult::Fail, _) => "FAIL",
        (CheckResult::Error, _) => "error",
        (CheckResult::Skipped, _) => "skipped",
        (CheckResult::NotApplicable, _) => "n/a",
    }
}

/// A table per task (check, result, detail), then one line per task and the job dir.
fn table(report: &CheckReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for task in &report.tasks {
        let verdict = match task.verdict {
            taskcheck::Verdict::Ok => "ok".to_string(),
            taskcheck::Verdict::Error => "error (infrastructure)".to_string(),
            taskcheck::Verdict::Failed => task
                .problems
                .iter()
                .map(|p| problem_word(*p))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let _ = writeln!(out, "task {}: {verdict}", task.task);
        let width = task
            .checks
            .iter()
            .map(|c| c.label().len())
            .max()
            .unwrap_or(5)
            .max(5);
        let _ = writeln!(out, "  {:<width$}  {:<13}  detail", "check", "result");
        for c in &task.checks {
            let _ = writeln!(
                out,
                "  {:<width$}  {:<13}  {}",
                c.label(),
                result_word(c.result, c.caught),
                c.detail
            );
            if let Some(advice) = &c.advice {
                let _ = writeln!(out, "  {:<width$}  {:<13}  fix: {advice}", "", "");
            }
        }
        out.push('\n');
    }
    let failed = report
        .tasks
        .iter()
        .filter(|t| t.verdict == taskcheck::Verdict::Failed)
        .count();
    let _ = writeln!(
        out,
        "{} task(s) checked, {} ok, {failed} failed a check; \"pass (caught)\": the exploit fooled the verifier but integrity flagged it (tampered, never counted as passed); \"n/a\": nothing in the image for the exploit to attack",
        report.tasks.len(),
        report
            .tasks
            .iter()
            .filter(|t| t.verdict == taskcheck::Verdict::Ok)
            .count()
    );
    let _ = writeln!(out, "job dir: {}", report.job_dir.display());
    out
}

fn problem_word(p: taskcheck::Problem) -> &'static str {
    match p {
        taskcheck::Problem::Unloadable => "does not load",
        taskcheck::Problem::OracleFails => "oracle fails",
        taskcheck::Problem::NopPasses => "nop passes",
        taskcheck::Problem::Flaky => "flaky",
        taskcheck::Problem::Hackable => "hackable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::taskcheck::{Repeats, TaskInput, judge_task};

    #[test]
    fn the_table_names_the_problem_and_marks_caught_exploits() {
        let report = CheckReport {
            schema: taskcheck::CHECK_SCHEMA.to_string(),
            job_dir: PathBuf::from("jobs/check"),
            repeat: 3,
            exit_code: 4,
            exploits: Vec::new(),
            tasks: vec![judge_task(&TaskInput {
                task: "broken".to_string(),
                layout: Err(
                    "broken/task.toml:verifier.timeout_sec: must be greater than 0 (got -5)"
                        .to_string(),
                ),
                oracle: None,
                nop: None,
                repeats: Repeats::NotApplicable(String::new()),
                exploits: Vec::new(),
            })],
        };
        let text = table(&report);
        assert_eq!(
            text,
            "task broken: does not load\n  check   result         detail\n  layout  FAIL           broken/task.toml:verifier.timeout_sec: must be greater than 0 (got -5)\n\n1 task(s) checked, 0 ok, 1 failed a check; \"pass (caught)\": the exploit fooled the verifier but integrity flagged it (tampered, never counted as passed); \"n/a\": nothing in the image for the exploit to attack\njob dir: jobs/check\n"
        );
        assert_eq!(result_word(CheckResult::Pass, true), "pass (caught)");
        assert_eq!(result_word(CheckResult::NotApplicable, false), "n/a");
    }
}
