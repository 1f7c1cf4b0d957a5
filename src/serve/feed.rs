//! The events of a job this server runs: every [`JobEvent`] the job emits (the same the
//! terminal reporter consumes), as a named JSON event, kept for late subscribers and sent to
//! the live ones. The last event of a job is `ended`.

use std::sync::Mutex;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::job::JobEvent;

/// One server-sent event: its name and its JSON data.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub name: &'static str,
    pub data: Value,
}

impl Event {
    pub(crate) fn ended(status: &str, error: Option<String>) -> Event {
        Event {
            name: "ended",
            data: json!({ "status": status, "error": error }),
        }
    }

    pub(crate) fn is_end(&self) -> bool {
        self.name == "ended"
    }
}

/// Every event of a job so far, and the live ones.
pub(crate) struct Feed {
    history: Mutex<Vec<Event>>,
    live: broadcast::Sender<Event>,
}

impl Feed {
    pub(crate) fn new() -> Feed {
        Feed {
            history: Mutex::new(Vec::new()),
            live: broadcast::channel(1024).0,
        }
    }

    pub(crate) fn push(&self, event: Event) {
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        history.push(event.clone());
        let _ = self.live.send(event);
    }

    /// The events so far and a receiver of the ones after them (no gap, no repeat).
    pub(crate) fn subscribe(&self) -> (Vec<Event>, broadcast::Receiver<Event>) {
        let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        (history.clone(), self.live.subscribe())
    }
}

/// A job event as the API sends it. Every variant is matched: a new event forces a decision.
pub(crate) fn of_job_event(event: &JobEvent) -> Event {
    let (name, data) = match event {
        JobEvent::Started {
            job,
            dir: _,
            total,
            already_done,
        } => (
            "started",
            json!({ "job": job, "total": total, "already_done": already_done }),
        ),
        JobEvent::TrialStarted { id } => ("trial_started", json!({ "trial": id })),
        JobEvent::PhaseChanged { id, phase } => {
            ("phase", json!({ "trial": id, "phase": phase.as_str() }))
        }
        JobEvent::TrialFinished { record } => ("trial_finished", finished(record)),
        JobEvent::TrialCancelled { id } => ("trial_cancelled", json!({ "trial": id })),
        JobEvent::TrialRetrying {
            id,
            retry,
            wait,
            reason,
        } => (
            "trial_retrying",
            json!({
                "trial": id,
                "retry": retry,
                "wait_sec": wait.as_secs_f64(),
                "reason": reason,
            }),
        ),
        JobEvent::Interrupted => ("interrupted", json!({})),
        JobEvent::Finished => ("finished", json!({})),
    };
    Event { name, data }
}

/// `trial_finished`: the trial's outcome in brief, and its record (scrubbed as written).
pub(crate) fn finished(record: &crate::trial::TrialRecord) -> Value {
    json!({
        "trial": record.id,
        "passed": record.passed(),
        "infra": record.is_infra(),
        "termination": record.termination.kind,
        "record": record,
    })
}
