//! What the trial's tests on the fake backend share: a one-task oracle plan, and running a
//! trial to its record.

use std::sync::Arc;

use tokio::sync::watch;

use crate::sandbox::FakeSandbox;
use crate::testing::{job_spec, task_dir};

use super::{TrialPlan, TrialRecord, TrialRun, run};

/// A trial of the oracle on a one-task job (`extra_toml` appended to its task.toml), with its
/// dir created.
pub(super) fn plan_in(root: &std::path::Path, extra_toml: &str) -> TrialPlan {
    let task = task_dir(root, "hello", extra_toml);
    let spec = job_spec(root, &[task], &["oracle"], 1);
    let plan = spec.trials(Default::default(), "fake").remove(0);
    std::fs::create_dir_all(&plan.dir).expect("trial dir");
    plan
}

/// Run `plan` on `fake` to its record (never cancelled).
pub(super) async fn finish(fake: &Arc<FakeSandbox>, plan: &TrialPlan) -> TrialRecord {
    let (_tx, rx) = watch::channel(false);
    match run(fake.clone(), plan, rx, &|_| {}).await {
        TrialRun::Finished(record) => *record,
        TrialRun::Cancelled => panic!("the trial was cancelled"),
    }
}
