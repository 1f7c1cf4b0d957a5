//! The events of a job another process runs (`arbiter run` into a dir under the root): the
//! job store appends one fsynced `trials.jsonl` line per finished trial, so following that file
//! gives a `trial_finished` per trial; the job dir's lock says when the run ended.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;

use super::dirs;
use super::feed::{self, Event};

/// How often the job dir is looked at.
const POLL: Duration = Duration::from_millis(500);

/// Send the job's finished trials (those already finished first), then each new one, then
/// `ended` once no process holds the job dir. Stops when the receiver is gone.
pub(crate) async fn follow(dir: PathBuf, events: mpsc::Sender<Event>) {
    let mut seen: HashSet<String> = HashSet::new();
    loop {
        // Whether it ran before the records were read: a run ending in between is seen next time.
        let running = dirs::busy(&dir);
        let records = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || dirs::records(&dir))
                .await
                .unwrap_or_default()
        };
        for (_, record) in &records {
            if seen.insert(record.id.clone()) {
                let event = Event {
                    name: "trial_finished",
                    data: feed::finished(record),
                };
                if events.send(event).await.is_err() {
                    return;
                }
            }
        }
        if !running {
            let counts = dirs::counts(&dir, &records);
            let status = match counts.planned {
                Some(planned) if counts.trials < planned => "interrupted",
                _ => "finished",
            };
            let _ = events.send(Event::ended(status, None)).await;
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = events.closed() => return,
        }
    }
}
