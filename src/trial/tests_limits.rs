//! The storage watchdog's bounds on the in-memory backend, under paused time: the file-count
//! bound (counted while the agent runs, or held to the change list when the backend cannot
//! count) and how often the watchdog asks the backend.

use std::sync::Arc;
use std::time::Duration;

use crate::sandbox::{FakeExec, FakeSandbox, Op};

use super::record::FilesCounted;
use super::test_support::{finish, plan_in};
use super::*;

/// The oracle runs `agent`; the verifier rewards whatever it finds.
fn backend(agent: FakeExec) -> Arc<FakeSandbox> {
    let fake = FakeSandbox::new();
    fake.on_exec("/solution/solve.sh", agent);
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1\n"),
    );
    Arc::new(fake)
}

#[tokio::test(start_paused = true)]
async fn an_agent_over_its_file_bound_is_stopped_and_its_filesystem_never_frozen() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(root.path(), "max_files = 50000\n");
    let fake = backend(
        FakeExec::exits(0)
            .files(60_000)
            .takes(Duration::from_secs(600)),
    );
    let started = tokio::time::Instant::now();
    let rec = finish(&fake, &plan).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopped at the first measurement, not at the deadline: {:?}",
        started.elapsed()
    );
    assert_eq!(rec.termination.kind, TerminationKind::Killed, "{rec:#?}");
    assert_eq!(
        rec.termination.detail.as_deref(),
        Some(
            "the agent created, changed or deleted more than 50000 paths in its container's filesystem, over the file limit of 50000 (max_files); the container was killed"
        )
    );
    // The agent's result: no reward, not an infra error, not retried.
    assert!(rec.infra_error.is_none());
    assert_eq!(rec.retries, 0);
    assert_eq!(rec.verifier.status, VerifierStatus::Error);
    assert_eq!(
        rec.verifier.detail.as_deref(),
        Some(
            "not run: the agent created, changed or deleted more than 50000 paths in its container's filesystem, over the file limit of 50000 (max_files), so its filesystem was not snapshotted"
        )
    );
    assert!(rec.verifier.reward.is_none());
    // Neither the change list nor the freeze of a huge filesystem is paid for.
    assert_eq!(fake.count(Op::Freeze), 0);
    assert_eq!(fake.count(Op::Changes), 0);
    assert_eq!(rec.limits.max_files, Some(50_000));
    assert_eq!(rec.limits.files_limit, 50_000);
    assert_eq!(
        rec.limits.files_used,
        Some(50_001),
        "the count stops above the bound"
    );
    assert_eq!(rec.limits.files_counted, Some(FilesCounted::Watchdog));
    assert!(fake.live().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_agent_under_its_file_bound_is_verified_and_its_count_recorded() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(root.path(), "max_files = 50000\n");
    let fake = backend(
        FakeExec::exits(0)
            .files(49_999)
            .writes("/app/out.txt", b"hi\n")
            .takes(Duration::from_secs(5)),
    );
    let rec = finish(&fake, &plan).await;
    assert_eq!(rec.termination.kind, TerminationKind::Exited, "{rec:#?}");
    assert_eq!(rec.verifier.status, VerifierStatus::Passed);
    assert_eq!(rec.limits.files_used, Some(49_999));
    assert_eq!(rec.limits.files_counted, Some(FilesCounted::Watchdog));
    // Verified in the agent's own container, started again: nothing refused it.
    assert_eq!(fake.count(Op::Freeze), 0);
    assert_eq!(fake.count(Op::Start), 2);
}

#[tokio::test(start_paused = true)]
async fn without_a_count_the_change_list_is_held_to_the_file_bound() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(root.path(), "max_files = 3\n");
    let mut agent = FakeExec::exits(0);
    for i in 0..6 {
        agent = agent.writes(&format!("/app/f{i}"), b"x");
    }
    let fake = backend(agent);
    let rec = finish(&fake, &plan).await;
    // Not stopped (nothing counted while it ran): it exited; its filesystem is not verified.
    assert_eq!(rec.termination.kind, TerminationKind::Exited, "{rec:#?}");
    assert!(rec.infra_error.is_none());
    assert_eq!(rec.verifier.status, VerifierStatus::Error);
    let detail = rec.verifier.detail.clone().unwrap_or_default();
    assert!(
        detail.starts_with("not run: the agent changed ")
            && detail.ends_with(
                " paths in its container's filesystem, over the file limit of 3 (max_files), so its filesystem was not snapshotted"
            ),
        "{detail}"
    );
    assert_eq!(rec.limits.files_counted, Some(FilesCounted::ChangeSet));
    assert!(
        rec.limits.files_used.is_some_and(|n| n >= 6),
        "{:?}",
        rec.limits
    );
    assert_eq!(fake.count(Op::Freeze), 0);
}

#[tokio::test(start_paused = true)]
async fn the_default_file_bound_is_recorded() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(root.path(), "");
    let fake = backend(FakeExec::exits(0).writes("/app/out.txt", b"hi\n"));
    let rec = finish(&fake, &plan).await;
    assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{rec:#?}");
    assert_eq!(rec.limits.max_files, None);
    assert_eq!(rec.limits.files_limit, 1_000_000);
    // The fake counts no paths: the change list's length is recorded.
    assert_eq!(rec.limits.files_counted, Some(FilesCounted::ChangeSet));
}

#[tokio::test(start_paused = true)]
async fn a_quiet_20_s_agent_is_measured_five_times_not_21() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(root.path(), "");
    let fake = backend(
        FakeExec::exits(0)
            .files(3)
            .writes("/app/out.txt", b"hi\n")
            .takes(Duration::from_secs(20)),
    );
    let rec = finish(&fake, &plan).await;
    assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{rec:#?}");
    // At 1, 3, 7 and 15 s while it runs (backing off while far below both bounds), and once
    // after it is done.
    assert_eq!(fake.count(Op::DiskUsage), 5);
    assert!(rec.limits.storage_enforced);
}
