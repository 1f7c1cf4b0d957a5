//! Regrades on the in-memory backend, under paused time: the record and `trials.jsonl` after a
//! regrade, the journal across an interrupted regrade (each trial regraded exactly once), and
//! trials that cannot be regraded.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use crate::job::{self, JobSpec};
use crate::sandbox::{FakeExec, FakeSandbox, Op};
use crate::testing::{job_spec, task_dir};
use crate::trial::TrialRecord;
use crate::trial::content::{CHANGES_TAR, after_scrub, discard_content};
use crate::trial::history::ChangeContent;
use crate::trial::history::{RegradeStatus, VerifierSource};
use crate::verifier::VerifierStatus;

use super::*;

const TEST_SH: &str = "/tests/test.sh";

/// The oracle writes /app/out.txt; the verifier rewards 1.
fn solving() -> Arc<FakeSandbox> {
    let fake = FakeSandbox::new();
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0).writes("/app/out.txt", b"hi\n"),
    );
    fake.on_exec(
        TEST_SH,
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1"),
    );
    Arc::new(fake)
}

async fn run_job(spec: &JobSpec, fake: &Arc<FakeSandbox>) {
    let (tx, _rx) = mpsc::unbounded_channel();
    let (_cancel_tx, cancel) = watch::channel(None);
    let outcome = job::run(spec, fake.clone(), tx, cancel)
        .await
        .expect("job runs");
    assert!(!outcome.interrupted);
}

/// A finished job: the oracle on one task per `(name, task.toml addition)` (task dirs
/// `<root>/<name>`), run on [`solving`]. The temp dir holds the tasks and the job dir.
async fn ran(tasks: &[(&str, &str)]) -> (tempfile::TempDir, JobSpec, Arc<FakeSandbox>) {
    let root = tempfile::tempdir().expect("tmp");
    let tasks: Vec<_> = tasks
        .iter()
        .map(|(name, toml)| task_dir(root.path(), name, toml))
        .collect();
    let spec = job_spec(root.path(), &tasks, &["oracle"], 1);
    let fake = solving();
    run_job(&spec, &fake).await;
    (root, spec, fake)
}

fn args(tests: Option<std::path::PathBuf>) -> RegradeArgs {
    RegradeArgs {
        tests,
        trials: Vec::new(),
        repeat: 1,
        concurrency: 2,
    }
}

async fn regrade_on(spec: &JobSpec, fake: &Arc<FakeSandbox>, a: &RegradeArgs) -> RegradeOutcome {
    let (_tx, cancel) = watch::channel(false);
    regrade(spec, a, fake.clone(), cancel)
        .await
        .expect("regrade runs")
}

/// How many rows of `out` have a status that `f` accepts.
fn rows_where(out: &RegradeOutcome, f: impl Fn(&RowStatus) -> bool) -> usize {
    out.rows.iter().filter(|r| f(&r.status)).count()
}

fn load(spec: &JobSpec, id: &str) -> TrialRecord {
    let bytes = std::fs::read(spec.dir.join("trials").join(id).join("result.json")).expect("read");
    serde_json::from_slice(&bytes).expect("record")
}

fn jsonl(spec: &JobSpec) -> Vec<TrialRecord> {
    std::fs::read_to_string(spec.dir.join("trials.jsonl"))
        .expect("trials.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("line"))
        .collect()
}

/// A replacement tests dir.
fn fixed_tests(root: &std::path::Path) -> std::path::PathBuf {
    let dir = root.join("fixed-tests");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("test.sh"), "echo 0 > /logs/verifier/reward.txt\n").expect("write");
    dir
}

#[tokio::test(start_paused = true)]
async fn a_regrade_appends_history_updates_the_verdict_and_rewrites_trials_jsonl() {
    let (root, spec, fake) = ran(&[("t0", ""), ("t1", "")]).await;
    let id = "t0__oracle__default__1";
    let before = load(&spec, id);
    assert_eq!(before.verifier.status, VerifierStatus::Passed);
    let content = before.change_content.clone().expect("change content");
    assert!(content.regradable, "{content:?}");
    // The oracle's solution is uploaded into the agent's container too.
    assert_eq!(content.roots, ["/app/out.txt", "/solution/solve.sh"]);
    assert!(spec.dir.join("trials").join(id).join(CHANGES_TAR).is_file());

    // The fixed verifier gives 0 (the fake decides by the exec, the replacement is recorded).
    fake.on_exec(
        TEST_SH,
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"0"),
    );
    let tests = fixed_tests(root.path());
    let out = regrade_on(&spec, &fake, &args(Some(tests.clone()))).await;
    assert!(!out.resumed);
    assert_eq!(out.rows.len(), 2);
    assert_eq!(out.infra(), 0);
    for row in &out.rows {
        assert!(
            matches!(
                row.status,
                RowStatus::Regraded {
                    before: VerifierStatus::Passed,
                    after: VerifierStatus::Failed,
                    ..
                }
            ),
            "{row:?}"
        );
    }
    let after = load(&spec, id);
    assert_eq!(after.verifier.status, VerifierStatus::Failed);
    assert_eq!(
        after.audit.as_ref().map(|a| a.verdict),
        Some(crate::outcome::Verdict::HonestFailure)
    );
    assert_eq!(after.verifier_history.len(), 2);
    let (original, new) = (&after.verifier_history[0], &after.verifier_history[1]);
    assert_eq!(original.source, VerifierSource::Original);
    assert_eq!(original.outcome.status, VerifierStatus::Passed);
    assert_eq!(
        original.verifier_checksum,
        crate::task::dir_checksum(&root.path().join("t0/tests")).expect("checksum")
    );
    assert_eq!(new.source, VerifierSource::ChangeSet);
    assert_eq!(new.regrade.as_deref(), Some(out.id.as_str()));
    assert_eq!(
        new.verifier_checksum,
        crate::task::dir_checksum(&tests.canonicalize().expect("canon")).expect("checksum")
    );
    assert_ne!(new.verifier_checksum, original.verifier_checksum);
    assert_eq!(new.outcome.status, VerifierStatus::Failed);
    assert!(new.arbiter_version.is_some());
    let mark = after.regrade.as_ref().expect("mark");
    assert_eq!(mark.status, RegradeStatus::Regraded);
    assert_eq!(mark.rewards, [Some(0.0)]);
    // The verifier container started from the original image with the change set uploaded
    // at `/`; the new logs are kept apart from the original ones.
    assert!(
        fake.calls()
            .iter()
            .any(|(op, arg)| *op == Op::Upload && arg == "/")
    );
    assert!(
        spec.dir
            .join("trials")
            .join(id)
            .join("regrade")
            .join(&out.id)
            .join("1/verifier/reward.txt")
            .is_file()
    );
    // trials.jsonl: one line per trial, the current verdict.
    let lines = jsonl(&spec);
    assert_eq!(lines.len(), 2);
    assert!(
        lines
            .iter()
            .all(|r| r.verifier.status == VerifierStatus::Failed)
    );
    // The journal is finished; nothing is left on the backend.
    let plans = journal::load_plans(&spec.dir);
    assert_eq!(plans.len(), 1);
    assert!(plans[0].finished_at.is_some());
    assert_eq!(
        plans[0].tests_checksum.as_deref(),
        Some(new.verifier_checksum.as_str())
    );
    assert!(fake.live().is_empty(), "left: {:?}", fake.live());

    // A second regrade (the task's own tests) keeps the whole history.
    fake.on_exec(
        TEST_SH,
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1"),
    );
    let again = regrade_on(&spec, &fake, &args(None)).await;
    assert_ne!(again.id, out.id);
    let last = load(&spec, id);
    assert_eq!(last.verifier_history.len(), 3);
    assert_eq!(last.verifier.status, VerifierStatus::Passed);
    assert_eq!(
        last.verifier_history[2].verifier_checksum,
        original.verifier_checksum
    );
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_regrade_regrades_every_trial_exactly_once_on_rerun() {
    let (_root, spec, fake) = ran(&[("t0", ""), ("t1", ""), ("t2", ""), ("t3", "")]).await;
    let verifier_runs = |fake: &FakeSandbox| {
        fake.calls()
            .iter()
            .filter(|(op, arg)| *op == Op::Exec && arg.contains(TEST_SH))
            .count()
    };
    let base = verifier_runs(&fake);
    // The third verifier run fails on the engine: that trial is not marked.
    let execs = fake.count(Op::Exec);
    fake.fail(Op::Exec, execs + 3 * 2);
    let mut a = args(None);
    a.concurrency = 1;
    let first = regrade_on(&spec, &fake, &a).await;
    assert_eq!(first.infra(), 1, "{:?}", first.rows);
    assert_eq!(
        rows_where(&first, |s| matches!(s, RowStatus::Regraded { .. })),
        3
    );
    assert!(journal::load_plans(&spec.dir)[0].finished_at.is_none());
    let runs_first = verifier_runs(&fake) - base;

    // The rerun continues the same regrade and regrades only the one left.
    let second = regrade_on(&spec, &fake, &a).await;
    assert!(second.resumed);
    assert_eq!(second.id, first.id);
    assert_eq!(second.infra(), 0);
    assert_eq!(
        rows_where(&second, |s| matches!(s, RowStatus::AlreadyDone { .. })),
        3
    );
    assert_eq!(verifier_runs(&fake) - base - runs_first, 1);
    for task in 0..4 {
        let rec = load(&spec, &format!("t{task}__oracle__default__1"));
        let entries = rec
            .verifier_history
            .iter()
            .filter(|h| h.regrade.as_deref() == Some(first.id.as_str()))
            .count();
        assert_eq!(entries, 1, "t{task}: regraded exactly once");
    }
    assert!(journal::load_plans(&spec.dir)[0].finished_at.is_some());
    assert_eq!(jsonl(&spec).len(), 4);
    assert!(fake.live().is_empty(), "left: {:?}", fake.live());
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_regrade_records_nothing_half_done() {
    let (_root, spec, fake) = ran(&[("t0", "")]).await;
    fake.on_exec(
        TEST_SH,
        FakeExec::exits(0)
            .writes("/logs/verifier/reward.txt", b"1")
            .takes(std::time::Duration::from_secs(30)),
    );
    let (tx, cancel) = watch::channel(false);
    let spec2 = spec.clone();
    let fake2 = fake.clone();
    let handle = tokio::spawn(async move { regrade(&spec2, &args(None), fake2, cancel).await });
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    tx.send(true).expect("cancel");
    let out = handle.await.expect("join").expect("regrade");
    assert!(out.interrupted);
    assert!(out.rows.is_empty(), "{:?}", out.rows);
    let rec = load(&spec, "t0__oracle__default__1");
    assert!(rec.regrade.is_none());
    assert!(rec.verifier_history.is_empty());
    assert!(fake.live().is_empty(), "left: {:?}", fake.live());
}

#[tokio::test(start_paused = true)]
async fn trials_that_cannot_be_regraded_say_why_and_the_others_are_regraded() {
    let (_root, spec, fake) = ran(&[
        ("ok", ""),
        ("live", "[verifier]\nenvironment_mode = \"live\"\n"),
        ("nokeep", ""),
    ])
    .await;
    // A trial whose content was not kept (over the cap).
    let nokeep = "nokeep__oracle__default__1";
    let mut rec = load(&spec, nokeep);
    discard_content(
        &spec.dir.join("trials").join(nokeep),
        rec.change_content.as_mut().expect("content"),
        "the agent's changed files exceed the cap of 256 MiB (change_content_cap_mb)",
    );
    crate::job::JobStore::open(&spec.dir)
        .expect("store")
        .update(&rec)
        .expect("update");
    let out = regrade_on(&spec, &fake, &args(None)).await;
    assert_eq!(out.infra(), 0);
    let status = |id: &str| {
        out.rows
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.status.clone())
            .expect("row")
    };
    assert!(matches!(
        status("ok__oracle__default__1"),
        RowStatus::Regraded { .. }
    ));
    match status("live__oracle__default__1") {
        RowStatus::NotRegradable(why) => assert!(why.starts_with("live mode"), "{why}"),
        other => panic!("{other:?}"),
    }
    match status(nokeep) {
        RowStatus::NotRegradable(why) => assert!(why.contains("exceed the cap"), "{why}"),
        other => panic!("{other:?}"),
    }
    let rec = load(&spec, nokeep);
    let mark = rec.regrade.expect("mark");
    assert_eq!(mark.status, RegradeStatus::NotRegradable);
    assert!(mark.reason.expect("reason").contains("exceed the cap"));
    // Its verdict is untouched.
    assert_eq!(rec.verifier.status, VerifierStatus::Passed);
    assert!(rec.verifier_history.is_empty());
}

#[tokio::test(start_paused = true)]
async fn repeat_records_the_rewards_seen_and_whether_they_agree() {
    let (_root, spec, fake) = ran(&[("t0", "")]).await;
    let mut a = args(None);
    a.repeat = 3;
    let out = regrade_on(&spec, &fake, &a).await;
    match &out.rows[0].status {
        RowStatus::Regraded {
            rewards,
            deterministic,
            ..
        } => {
            assert_eq!(rewards, &[Some(1.0), Some(1.0), Some(1.0)]);
            assert_eq!(*deterministic, Some(true));
        }
        other => panic!("{other:?}"),
    }
    let rec = load(&spec, "t0__oracle__default__1");
    assert_eq!(rec.verifier_history.len(), 4);
    assert_eq!(rec.regrade.expect("mark").runs, 3);
}

#[tokio::test(start_paused = true)]
async fn bad_arguments_name_the_flag() {
    let (root, spec, fake) = ran(&[("t0", "")]).await;
    let (_tx, cancel) = watch::channel(false);
    let mut a = args(Some(root.path().join("nope")));
    let e = regrade(&spec, &a, fake.clone(), cancel.clone())
        .await
        .expect_err("no such dir");
    assert!(
        e.to_string().ends_with("nope: --tests: not a directory"),
        "{e}"
    );
    a.tests = None;
    a.trials = vec!["missing__x__default__1".to_string()];
    let e = regrade(&spec, &a, fake.clone(), cancel.clone())
        .await
        .expect_err("no such trial");
    assert!(
        e.to_string().ends_with(
            "missing__x__default__1: --trial: no finished trial with this id in the job"
        ),
        "{e}"
    );
    a.trials.clear();
    a.repeat = 0;
    let e = regrade(&spec, &a, fake, cancel)
        .await
        .expect_err("repeat 0");
    assert_eq!(e.to_string(), "--repeat: repeat: must be at least 1");
}

#[test]
fn a_scrubbed_archive_is_dropped_and_the_record_says_why() {
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::create_dir_all(tmp.path().join("agent")).expect("dir");
    let archive = tmp.path().join(CHANGES_TAR);
    std::fs::write(&archive, b"tar").expect("write");
    let kept = ChangeContent {
        regradable: true,
        file: Some(CHANGES_TAR.to_string()),
        bytes: 3,
        cap_bytes: 1024,
        roots: vec!["/app/out.txt".to_string()],
        reason: None,
    };
    let mut content = kept.clone();
    after_scrub(
        tmp.path(),
        &mut content,
        &[tmp.path().join("agent/stdout.log").display().to_string()],
    );
    assert_eq!(content, kept, "another file scrubbed: the archive stays");
    assert!(archive.exists());
    after_scrub(tmp.path(), &mut content, &[archive.display().to_string()]);
    assert!(!content.regradable);
    assert!(
        content
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("secret"))
    );
    assert!(!archive.exists());
}
