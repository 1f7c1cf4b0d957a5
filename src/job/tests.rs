//! Whole jobs on the in-memory backend, under paused time: resume decisions, retries of
//! failed engine calls, and the second interrupt.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::sandbox::{FakeExec, FakeSandbox, Op};
use crate::testing::{job_spec, task_dir};

use super::runner::JobOutcome;
use super::*;

fn solving() -> Arc<FakeSandbox> {
    let fake = FakeSandbox::new();
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1"),
    );
    Arc::new(fake)
}

async fn run_job(spec: &JobSpec, fake: &Arc<FakeSandbox>) -> (JobOutcome, Vec<JobEvent>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_cancel_tx, cancel) = watch::channel(None);
    let outcome = run(spec, fake.clone(), tx, cancel).await.expect("job runs");
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    (outcome, events)
}

fn jsonl_ids(spec: &JobSpec) -> Vec<String> {
    let text = std::fs::read_to_string(spec.dir.join("trials.jsonl")).expect("trials.jsonl");
    let mut ids: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json line")["id"]
                .as_str()
                .expect("id")
                .to_string()
        })
        .collect();
    ids.sort();
    ids
}

#[tokio::test(start_paused = true)]
async fn resume_runs_only_unfinished_trials_and_keeps_one_line_each() {
    let root = tempfile::tempdir().expect("tmp");
    let tasks: Vec<_> = (0..3)
        .map(|i| task_dir(root.path(), &format!("t{i}"), ""))
        .collect();
    let spec = job_spec(root.path(), &tasks, &["oracle"], 1);
    let fake = solving();
    let (outcome, _) = run_job(&spec, &fake).await;
    assert_eq!(outcome.records.len(), 3);
    assert_eq!(fake.count(Op::PrepareImage), 3);

    // One record lost (a killed run), one half-written trial dir left behind.
    let lost = spec.dir.join("trials/t1__oracle__default__1");
    std::fs::remove_file(lost.join("result.json")).expect("rm");
    std::fs::write(lost.join("junk"), "half written").expect("junk");
    let again = solving();
    let (outcome, events) = run_job(&spec, &again).await;
    assert_eq!(
        again.count(Op::PrepareImage),
        1,
        "only the unfinished trial runs"
    );
    let started: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            JobEvent::TrialStarted { id } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(started, ["t1__oracle__default__1"]);
    assert_eq!(outcome.records.len(), 3);
    assert!(!lost.join("junk").exists(), "a torn trial dir is discarded");
    assert_eq!(
        jsonl_ids(&spec),
        [
            "t0__oracle__default__1",
            "t1__oracle__default__1",
            "t2__oracle__default__1"
        ]
    );
    assert!(again.live().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_failed_engine_call_is_retried_and_the_record_counts_it() {
    let root = tempfile::tempdir().expect("tmp");
    let task = task_dir(root.path(), "t", "");
    let spec = job_spec(root.path(), &[task], &["oracle"], 1);
    let fake = solving();
    fake.fail(Op::Create, 1);
    let (outcome, events) = run_job(&spec, &fake).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, JobEvent::TrialRetrying { retry: 1, .. }))
    );
    assert_eq!(outcome.records.len(), 1);
    let text = std::fs::read_to_string(spec.dir.join("trials/t__oracle__default__1/result.json"))
        .expect("result.json");
    let rec: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(rec["retries"], 1);
    assert_eq!(rec["previous_errors"][0]["phase"], "environment");
    assert_eq!(rec["verifier"]["status"], "passed");
    assert!(fake.live().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_second_interrupt_removes_everything_of_the_job_at_once() {
    let root = tempfile::tempdir().expect("tmp");
    let tasks: Vec<_> = (0..2)
        .map(|i| {
            task_dir(
                root.path(),
                &format!("t{i}"),
                "[agent]\ntimeout_sec = 3600\n",
            )
        })
        .collect();
    let mut spec = job_spec(root.path(), &tasks, &["oracle"], 1);
    spec.concurrency = 2;
    let fake = solving();
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0).takes(Duration::from_secs(3000)),
    );
    // The agents' containers take long to die: a graceful stop would wait on them.
    fake.delay(Op::Stop, Duration::from_secs(600));
    let (tx, _rx) = mpsc::unbounded_channel();
    let (cancel_tx, cancel) = watch::channel(None);
    let job = tokio::spawn({
        let spec = spec.clone();
        let fake = fake.clone();
        async move { run(&spec, fake, tx, cancel).await }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(fake.live().len(), 2, "both agents run");
    let started = tokio::time::Instant::now();
    cancel_tx.send_replace(Some(CancelReason::Interrupt));
    tokio::time::sleep(Duration::from_secs(1)).await;
    cancel_tx.send_replace(Some(CancelReason::HardInterrupt));
    let outcome = job.await.expect("job task").expect("job");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert!(outcome.interrupted);
    assert_eq!(outcome.reaped, Some(2));
    assert!(outcome.records.is_empty(), "nothing half-done is recorded");
    assert!(fake.live().is_empty(), "left: {:?}", fake.live());
}

#[test]
fn a_job_level_integrity_override_applies_to_every_task_and_is_saved() {
    let root = tempfile::tempdir().expect("tmp");
    let task = crate::testing::task_dir(root.path(), "hello", "");
    let config = root.path().join("job.yaml");
    std::fs::write(
        &config,
        format!(
            "tasks: [{}]\nagents: [oracle]\nintegrity: enforce\n",
            task.display()
        ),
    )
    .expect("job.yaml");
    let args = crate::job::RunArgs {
        config: Some(config),
        job_dir: Some(root.path().join("job")),
        ..crate::job::RunArgs::default()
    };
    let spec = crate::job::resolve(&args).expect("resolves");
    assert_eq!(
        spec.tasks[0].verifier.integrity,
        crate::task::IntegrityMode::Enforce
    );
    assert!(
        spec.config_yaml.contains("integrity: enforce"),
        "{}",
        spec.config_yaml
    );
    assert_eq!(
        spec.lock.integrity,
        Some(crate::task::IntegrityMode::Enforce)
    );
}

#[tokio::test(start_paused = true)]
async fn retry_infra_reruns_only_trials_that_ended_as_infra_errors_and_keeps_their_errors() {
    let root = tempfile::tempdir().expect("tmp");
    let tasks: Vec<_> = (0..2)
        .map(|i| task_dir(root.path(), &format!("t{i}"), ""))
        .collect();
    let mut spec = job_spec(root.path(), &tasks, &["oracle"], 1);
    spec.retry.max = 0;
    let fake = solving();
    fake.fail(Op::Create, 1);
    let (outcome, _) = run_job(&spec, &fake).await;
    let infra: Vec<_> = outcome.records.iter().filter(|r| r.infra).collect();
    assert_eq!(
        infra.len(),
        1,
        "the outage cost one trial: {:?}",
        outcome.records
    );
    let lost = infra[0].id.clone();

    // A plain resume has nothing to do: the infra record is final.
    let again = solving();
    let (_, events) = run_job(&spec, &again).await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, JobEvent::TrialStarted { .. }))
    );

    // With --retry-infra only that trial runs again; its record keeps the earlier error.
    spec.retry_infra = true;
    let again = solving();
    let (outcome, events) = run_job(&spec, &again).await;
    let started: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            JobEvent::TrialStarted { id } => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        std::slice::from_ref(&lost),
        "nothing scored runs again"
    );
    assert_eq!(outcome.records.len(), 2);
    assert!(outcome.records.iter().all(|r| !r.infra));
    let text = std::fs::read_to_string(spec.dir.join("trials").join(&lost).join("result.json"))
        .expect("result.json");
    let rec: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(rec["verifier"]["status"], "passed");
    assert_eq!(rec["retries"], 1);
    assert_eq!(rec["previous_errors"][0]["phase"], "environment");
    assert_eq!(
        jsonl_ids(&spec),
        ["t0__oracle__default__1", "t1__oracle__default__1"],
        "one line per trial"
    );
    assert!(again.live().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_trial_cancelled_on_its_own_is_recorded_cancelled_and_the_job_goes_on() {
    let root = tempfile::tempdir().expect("tmp");
    let tasks: Vec<_> = (0..2)
        .map(|i| {
            task_dir(
                root.path(),
                &format!("t{i}"),
                "[agent]\ntimeout_sec = 3600\n",
            )
        })
        .collect();
    let mut spec = job_spec(root.path(), &tasks, &["oracle"], 1);
    spec.concurrency = 2;
    let fake = solving();
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0).takes(Duration::from_secs(3000)),
    );
    let (tx, _rx) = mpsc::unbounded_channel();
    let (_cancel_tx, cancel) = watch::channel(None);
    let (stop_tx, stop_rx) = mpsc::unbounded_channel();
    let job = tokio::spawn({
        let spec = spec.clone();
        let fake = fake.clone();
        async move { run_controlled(&spec, fake, tx, cancel, Some(stop_rx)).await }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(fake.live().len(), 2, "both agents run");
    let victim = trial_id("t0", "oracle", "default", 1);
    stop_tx.send(victim.clone()).expect("send");
    stop_tx.send("not-a-trial".to_string()).expect("send");
    let outcome = job.await.expect("job task").expect("job");
    assert!(!outcome.interrupted);
    assert_eq!(outcome.records.len(), 2);
    let store = JobStore::open(&spec.dir).expect("store");
    let stopped = store.load(&victim).expect("the cancelled trial's record");
    assert_eq!(
        stopped.termination.kind,
        crate::trial::TerminationKind::Cancelled
    );
    assert!(!stopped.passed());
    let other = store
        .load(&trial_id("t1", "oracle", "default", 1))
        .expect("the other trial's record");
    assert!(other.passed(), "{other:?}");
    assert_eq!(jsonl_ids(&spec).len(), 2);
    assert!(fake.live().is_empty(), "left: {:?}", fake.live());
}
