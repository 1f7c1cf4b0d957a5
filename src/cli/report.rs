//! Terminal output for a running job: plain timestamped lines, and the final summary table.

use tokio::sync::mpsc;

use crate::job::{ArmSummary, JobEvent};
use crate::trial::{TerminationKind, TrialRecord, VerifierStatus};

/// Print one line per notable event to stderr (nothing in quiet mode).
pub async fn plain(mut events: mpsc::UnboundedReceiver<JobEvent>, quiet: bool, _tty: bool) {
    let mut done = 0usize;
    let mut total = 0usize;
    while let Some(event) = events.recv().await {
        if quiet {
            continue;
        }
        let line = match event {
            JobEvent::Started {
                job,
                dir,
                total: t,
                already_done,
            } => {
                total = t;
                done = already_done;
                let resumed = if already_done > 0 {
                    format!(", {already_done} already finished")
                } else {
                    String::new()
                };
                format!("job {job}: {t} trials{resumed} → {}", dir.display())
            }
            JobEvent::TrialStarted { id } => format!("start  {id}"),
            JobEvent::PhaseChanged { .. } => continue,
            JobEvent::TrialFinished { record } => {
                done += 1;
                format!("[{done}/{total}] {}  {}", outcome_word(&record), record.id)
            }
            JobEvent::TrialCancelled { id } => format!("cancelled {id}"),
            JobEvent::Interrupted => {
                "interrupt: no new trials start; stopping running trials and cleaning up"
                    .to_string()
            }
            JobEvent::Finished => continue,
        };
        eprintln!("{} {line}", clock());
    }
}

fn clock() -> String {
    let now = crate::timefmt::now_rfc3339();
    now.get(11..19).unwrap_or(&now).to_string()
}

/// One word for how a trial came out, with the termination when it is notable.
pub fn outcome_word(r: &TrialRecord) -> String {
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
pub fn summary_table(arms: &[ArmSummary]) -> String {
    let header = [
        "agent",
        "variant",
        "trials",
        "passed",
        "failed",
        "infra",
        "pass rate",
    ];
    let rows: Vec<[String; 7]> = arms
        .iter()
        .map(|a| {
            let failed = if a.unverified > 0 {
                format!("{} ({} unverified)", a.failed, a.unverified)
            } else {
                a.failed.to_string()
            };
            [
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
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let parts: Vec<String> = cells
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i < 2 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for row in &rows {
        line(row.iter().map(String::as_str).collect(), &mut out);
    }
    if arms.iter().any(|a| a.infra > 0) {
        out.push_str("infra errors are harness/engine failures: excluded from pass rates, not counted as failures\n");
    }
    out.trim_end().to_string()
}
