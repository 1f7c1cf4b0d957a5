//! Terminal output for a running job: plain timestamped lines, and the final summary table.

use tokio::sync::mpsc;

use crate::job::{ArmSummary, JobEvent};
use crate::trial::{TerminationKind, TrialRecord, VerifierStatus};

/// Consume the job's events: progress bars on a terminal, plain timestamped lines otherwise,
/// nothing in quiet mode.
pub(crate) async fn consume(mut events: mpsc::UnboundedReceiver<JobEvent>, quiet: bool, tty: bool) {
    if quiet {
        while events.recv().await.is_some() {}
        return;
    }
    let mut sink: Box<dyn Sink + Send> = if tty {
        Box::new(Bars::new())
    } else {
        Box::new(Lines)
    };
    let mut tally = Tally::default();
    while let Some(event) = events.recv().await {
        tally.update(&event);
        sink.handle(&event, &tally);
    }
}

/// Running counts for progress displays.
#[derive(Debug, Default)]
struct Tally {
    total: usize,
    done: usize,
    passed: usize,
    scored: usize,
    infra: usize,
}

impl Tally {
    fn update(&mut self, event: &JobEvent) {
        match event {
            JobEvent::Started {
                total,
                already_done,
                ..
            } => {
                self.total = *total;
                self.done = *already_done;
            }
            JobEvent::TrialFinished { record } => {
                self.done += 1;
                if record.is_infra() {
                    self.infra += 1;
                } else {
                    self.scored += 1;
                    self.passed += usize::from(record.passed());
                }
            }
            JobEvent::TrialStarted { .. }
            | JobEvent::PhaseChanged { .. }
            | JobEvent::TrialCancelled { .. }
            | JobEvent::TrialRetrying { .. }
            | JobEvent::Interrupted
            | JobEvent::Finished => {}
        }
    }

    fn words(&self) -> String {
        let rate = if self.scored > 0 {
            format!("{:.1}%", 100.0 * self.passed as f64 / self.scored as f64)
        } else {
            "-".to_string()
        };
        format!("pass {rate} · infra {}", self.infra)
    }
}

trait Sink {
    fn handle(&mut self, event: &JobEvent, tally: &Tally);
}

/// Plain lines, for logs and CI.
struct Lines;

impl Sink for Lines {
    fn handle(&mut self, event: &JobEvent, tally: &Tally) {
        let line = match event {
            JobEvent::Started { job, dir, total, already_done } => {
                let resumed = if *already_done > 0 { format!(", {already_done} already finished") } else { String::new() };
                format!("job {job}: {total} trials{resumed} → {}", dir.display())
            }
            JobEvent::TrialStarted { id } => format!("start  {id}"),
            JobEvent::PhaseChanged { .. } => return,
            JobEvent::TrialFinished { record } => {
                format!("[{}/{}] {}  {}  ({})", tally.done, tally.total, outcome_word(record), record.id, tally.words())
            }
            JobEvent::TrialCancelled { id } => format!("cancelled {id}"),
            JobEvent::TrialRetrying { id, retry, wait, reason } => {
                format!("retry {retry} of {id} in {:.1}s after an infrastructure error: {reason}", wait.as_secs_f64())
            }
            JobEvent::Interrupted => "interrupt: no new trials start; stopping running trials and cleaning up (again to force)".to_string(),
            JobEvent::Finished => return,
        };
        eprintln!("{} {line}", clock());
    }
}

/// indicatif bars: one overall bar and a line per running trial.
struct Bars {
    multi: indicatif::MultiProgress,
    overall: indicatif::ProgressBar,
    running: std::collections::HashMap<String, indicatif::ProgressBar>,
}

impl Bars {
    fn new() -> Self {
        let multi = indicatif::MultiProgress::new();
        let style = indicatif::ProgressStyle::with_template(
            "{bar:30.cyan/blue} {pos}/{len} trials · ETA {eta} · {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        let overall = multi.add(indicatif::ProgressBar::new(0).with_style(style));
        Bars {
            multi,
            overall,
            running: std::collections::HashMap::new(),
        }
    }

    fn trial_bar(&mut self, id: &str) -> &indicatif::ProgressBar {
        let multi = &self.multi;
        self.running.entry(id.to_string()).or_insert_with(|| {
            let style =
                indicatif::ProgressStyle::with_template("  {spinner} {prefix} {msg} {elapsed}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
            let bar = multi.add(
                indicatif::ProgressBar::new_spinner()
                    .with_style(style)
                    .with_prefix(id.to_string()),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(250));
            bar
        })
    }

    fn finish_trial(&mut self, id: &str) {
        if let Some(bar) = self.running.remove(id) {
            bar.finish_and_clear();
            self.multi.remove(&bar);
        }
    }
}

impl Sink for Bars {
    fn handle(&mut self, event: &JobEvent, tally: &Tally) {
        match event {
            JobEvent::Started {
                job,
                dir,
                total,
                already_done,
            } => {
                let _ = self.multi.println(format!(
                    "job {job}: {total} trials ({already_done} already finished) → {}",
                    dir.display()
                ));
                self.overall.set_length(*total as u64);
                self.overall.set_position(*already_done as u64);
                self.overall.reset_eta();
            }
            JobEvent::TrialStarted { id } => {
                self.trial_bar(id).set_message("starting");
            }
            JobEvent::PhaseChanged { id, phase } => {
                self.trial_bar(id).set_message(phase.as_str());
            }
            JobEvent::TrialFinished { record } => {
                self.finish_trial(&record.id);
                if !record.passed() {
                    let _ = self
                        .multi
                        .println(format!("{}  {}", outcome_word(record), record.id));
                }
                self.overall.set_position(tally.done as u64);
            }
            JobEvent::TrialCancelled { id } => self.finish_trial(id),
            JobEvent::TrialRetrying {
                id,
                retry,
                wait,
                reason,
            } => {
                self.finish_trial(id);
                let _ = self.multi.println(format!(
                    "retry {retry} of {id} in {:.1}s: {reason}",
                    wait.as_secs_f64()
                ));
            }
            JobEvent::Interrupted => {
                let _ = self
                    .multi
                    .println("interrupt: no new trials start; cleaning up (again to force)");
            }
            JobEvent::Finished => {
                for (_, bar) in self.running.drain() {
                    bar.finish_and_clear();
                }
                self.overall.finish_and_clear();
                return;
            }
        }
        self.overall.set_message(tally.words());
    }
}

fn clock() -> String {
    let now = crate::timefmt::now_rfc3339();
    now.get(11..19).unwrap_or(&now).to_string()
}

/// One word for how a trial came out, with the termination when it is notable.
pub(crate) fn outcome_word(r: &TrialRecord) -> String {
    if r.is_infra() {
        let why = r
            .infra_error
            .as_ref()
            .map(|e| format!("{}: {}", e.phase, e.message))
            .unwrap_or_default();
        return format!("INFRA ({why})");
    }
    let verdict = match r.verifier.status {
        VerifierStatus::Passed => "PASS",
        VerifierStatus::Failed => "FAIL",
        VerifierStatus::Error => "ERROR",
        VerifierStatus::Skipped => "SKIP",
    };
    match r.termination.kind {
        TerminationKind::Exited => verdict.to_string(),
        TerminationKind::Timeout => format!("{verdict} (agent timeout)"),
        TerminationKind::Oom => format!("{verdict} (agent OOM-killed)"),
        TerminationKind::Killed => format!("{verdict} (agent killed)"),
        TerminationKind::Cancelled => format!("{verdict} (cancelled)"),
        TerminationKind::InfraError => format!("{verdict} (infra)"),
    }
}

/// The per-agent summary table.
pub(crate) fn summary_table(arms: &[ArmSummary]) -> String {
    let header = [
        "agent",
        "variant",
        "trials",
        "passed",
        "failed",
        "infra",
        "pass rate",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    rows.extend(arms.iter().map(|a| {
        let failed = if a.unverified > 0 {
            format!("{} ({} unverified)", a.failed, a.unverified)
        } else {
            a.failed.to_string()
        };
        vec![
            a.agent.clone(),
            a.variant.clone(),
            a.trials.to_string(),
            a.passed.to_string(),
            failed,
            a.infra.to_string(),
            a.pass_rate()
                .map(|r| format!("{:.1}%", r * 100.0))
                .unwrap_or_else(|| "-".to_string()),
        ]
    }));
    let mut out = crate::report::text::align(&rows, 2);
    if arms.iter().any(|a| a.infra > 0) {
        out.push_str("infra errors are harness/engine failures: excluded from pass rates, not counted as failures\n");
    }
    out.trim_end().to_string()
}
