//! `arbiter verify`: regrade a job's saved agent work (SPEC §13; the logic is `crate::regrade`).

use std::path::PathBuf;

use clap::Args;

use crate::job::{self, ConfigError, RunArgs};
use crate::regrade::{RegradeArgs, RegradeOutcome, RowStatus};
use crate::verifier::VerifierStatus;

use super::packet::{Counts, Packet};
use super::{CliError, exit};

#[derive(Debug, Args)]
pub(super) struct VerifyCmd {
    /// The job directory whose trials to regrade.
    job_dir: PathBuf,
    /// A replacement tests dir (with test.sh) for every regraded trial; its checksum is recorded.
    #[arg(long, value_name = "DIR")]
    tests: Option<PathBuf>,
    /// Regrade only this trial (repeatable; default: every finished trial).
    #[arg(long = "trial", value_name = "ID")]
    trials: Vec<String>,
    /// Run the verifier N times per trial and record whether the rewards agree.
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: u32,
    /// Trials regraded at the same time (default: the job's concurrency).
    #[arg(short = 'n', long = "concurrency", value_name = "N")]
    concurrency: Option<usize>,
    /// Print only the final line.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// End with one JSON packet on stdout (docs/json-packet.md; counts are per trial); the
    /// table goes to stderr.
    #[arg(long)]
    pub(super) json: bool,
}

pub(super) async fn main(cmd: VerifyCmd) -> Result<u8, CliError> {
    let config = cmd.job_dir.join("job.yaml");
    if !config.is_file() {
        return Err(CliError::Config(ConfigError::Field {
            source_name: cmd.job_dir.display().to_string(),
            field: "job.yaml".to_string(),
            message: "missing: not a job directory".to_string(),
        }));
    }
    let spec = job::resolve(&RunArgs {
        config: Some(config),
        job_dir: Some(cmd.job_dir.clone()),
        ..RunArgs::default()
    })?;
    let args = RegradeArgs {
        tests: cmd.tests,
        trials: cmd.trials,
        repeat: cmd.repeat,
        concurrency: cmd.concurrency.unwrap_or(spec.concurrency),
    };
    let sandbox = super::engine_with_toolbox().await?;
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    // Ctrl-C or SIGTERM: no new trial starts, running ones stop and clean up, nothing
    // half-done is recorded (the same command continues the regrade).
    tokio::spawn(async move {
        if let Some(mut interrupts) = super::Interrupts::install() {
            interrupts.next().await;
            let _ = cancel_tx.send(true);
        }
    });
    let outcome = crate::regrade::regrade(&spec, &args, sandbox, cancel_rx).await?;
    // The regraded records into the results store (a warning when it fails).
    super::results::after_job(&spec.dir).await;
    let mut text = String::new();
    if !cmd.quiet {
        text.push_str(&table(&outcome));
    }
    text.push_str(&format!("{}\n", summary_line(&outcome, &spec.dir)));
    let code = if outcome.interrupted {
        exit::INTERRUPTED
    } else if outcome.infra() > 0 {
        exit::INFRA
    } else {
        exit::OK
    };
    if cmd.json {
        eprint!("{text}");
        let dir = Some(spec.dir.display().to_string());
        Packet::finished("verify", code, trial_counts(&outcome), dir).print();
    } else {
        print!("{text}");
    }
    Ok(code)
}

/// The packet's counts for `verify`: one per selected trial (`not_run`: not regradable, or
/// left by an interrupt).
fn trial_counts(outcome: &RegradeOutcome) -> Counts {
    let mut c = Counts {
        planned: outcome.rows.len(),
        ..Counts::default()
    };
    for row in &outcome.rows {
        let after = match &row.status {
            RowStatus::Regraded { after, .. } | RowStatus::AlreadyDone { after, .. } => *after,
            RowStatus::InfraError(_) => {
                c.infra_error += 1;
                continue;
            }
            RowStatus::NotRegradable(_) => continue,
        };
        match after {
            VerifierStatus::Passed => c.passed += 1,
            VerifierStatus::Failed => c.failed += 1,
            VerifierStatus::Error | VerifierStatus::Skipped => {
                c.failed += 1;
                c.unverified += 1;
            }
        }
    }
    c.finished = c.passed + c.failed + c.infra_error;
    c.not_run = c.planned - c.finished;
    c
}

fn verdict(status: VerifierStatus, reward: Option<f64>) -> String {
    let status = match status {
        VerifierStatus::Passed => "passed",
        VerifierStatus::Failed => "failed",
        VerifierStatus::Error => "error",
        VerifierStatus::Skipped => "skipped",
    };
    match reward {
        Some(r) => format!("{status} ({r})"),
        None => status.to_string(),
    }
}

/// One line per trial: before → after, or why it was not regraded.
fn table(outcome: &RegradeOutcome) -> String {
    let width = outcome
        .rows
        .iter()
        .map(|r| r.id.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut out = format!(
        "{:width$}  {:16}  {:16}  note\n",
        "trial", "before", "after"
    );
    for row in &outcome.rows {
        let (before, after, note) = match &row.status {
            RowStatus::Regraded {
                before,
                before_reward,
                after,
                after_reward,
                rewards,
                deterministic,
            } => {
                let note = match deterministic {
                    Some(true) => format!("{} runs agree", rewards.len()),
                    Some(false) => format!(
                        "flaky: rewards {}",
                        rewards
                            .iter()
                            .map(|r| r.map_or("none".to_string(), |r| r.to_string()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    None => String::new(),
                };
                (
                    verdict(*before, *before_reward),
                    verdict(*after, *after_reward),
                    note,
                )
            }
            RowStatus::AlreadyDone {
                after,
                after_reward,
            } => (
                "-".to_string(),
                verdict(*after, *after_reward),
                "regraded before the interruption".to_string(),
            ),
            RowStatus::NotRegradable(why) => (
                "-".to_string(),
                "-".to_string(),
                format!("not regradable: {why}"),
            ),
            RowStatus::InfraError(why) => (
                "-".to_string(),
                "-".to_string(),
                format!("infra error: {why}"),
            ),
        };
        out.push_str(&format!(
            "{:width$}  {before:16}  {after:16}  {note}\n",
            row.id
        ));
    }
    out
}

fn summary_line(outcome: &RegradeOutcome, dir: &std::path::Path) -> String {
    let count = |f: fn(&RowStatus) -> bool| outcome.rows.iter().filter(|r| f(&r.status)).count();
    let regraded = count(|s| {
        matches!(
            s,
            RowStatus::Regraded { .. } | RowStatus::AlreadyDone { .. }
        )
    });
    let not = count(|s| matches!(s, RowStatus::NotRegradable(_)));
    let mut line = format!(
        "regrade {}{}: {regraded} regraded, {not} not regradable, {} infra error(s) in {:.1}s; job dir: {}",
        outcome.id,
        if outcome.resumed { " (continued)" } else { "" },
        outcome.infra(),
        outcome.seconds,
        dir.display()
    );
    if outcome.interrupted {
        line.push_str(&format!(
            "\ninterrupted; continue with the same command: arbiter verify {}",
            dir.display()
        ));
    }
    line
}
