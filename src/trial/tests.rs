//! The trial's phases on the in-memory backend, under paused time: phase order, a failure
//! injected into every backend call, cancellation at every phase, timeout, OOM, storage.
//!
//! Over 600 lines on purpose: one test per behaviour of a trial on the fake backend, sharing the plan and backend helpers at the top.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::sandbox::{FakeExec, FakeSandbox, Lost, Op};
use crate::testing::{job_spec, task_dir};

use super::test_support::plan_in;
use super::*;

const REWARD_1: &[u8] = b"1\n";

/// A backend on which the oracle solves the task and the verifier rewards it.
fn solving() -> FakeSandbox {
    let fake = FakeSandbox::new();
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0).writes("/app/out.txt", b"hi\n"),
    );
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", REWARD_1),
    );
    fake
}

/// A trial of `task_toml` (see `plan_in`) in a fresh directory, on [`solving`]'s backend.
fn solving_in(task_toml: &str) -> (tempfile::TempDir, TrialPlan, Arc<FakeSandbox>) {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(root.path(), task_toml);
    (root, plan, Arc::new(solving()))
}

struct Run {
    run: TrialRun,
    /// The phases announced, each with the number of backend calls made before it.
    phases: Vec<(Phase, usize)>,
}

async fn run_on(fake: &Arc<FakeSandbox>, plan: &TrialPlan, cancel_at: Option<Phase>) -> Run {
    let (tx, rx) = watch::channel(false);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let on_phase = {
        let seen = seen.clone();
        let fake = fake.clone();
        move |phase: Phase| {
            seen.lock()
                .expect("phases")
                .push((phase, fake.calls().len()));
            if Some(phase) == cancel_at {
                let _ = tx.send(true);
            }
        }
    };
    let run = run(fake.clone(), plan, rx, &on_phase).await;
    let phases = seen.lock().expect("phases").clone();
    Run { run, phases }
}

fn record(run: TrialRun) -> TrialRecord {
    match run {
        TrialRun::Finished(record) => *record,
        TrialRun::Cancelled => panic!("the trial was cancelled"),
    }
}

#[tokio::test(start_paused = true)]
async fn phases_run_in_order_and_leave_nothing() {
    let (_root, plan, fake) = solving_in("");
    let out = run_on(&fake, &plan, None).await;
    let order: Vec<Phase> = out.phases.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        order,
        [
            Phase::Environment,
            Phase::Agent,
            Phase::Collect,
            Phase::Verify,
            Phase::Cleanup
        ]
    );
    let rec = record(out.run);
    assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{rec:#?}");
    assert_eq!(rec.termination.kind, TerminationKind::Exited);
    assert!(rec.infra_error.is_none());
    for phase in [
        Phase::Environment,
        Phase::Agent,
        Phase::Collect,
        Phase::Verify,
    ] {
        assert!(rec.phases.contains_key(&phase), "{phase} timed");
    }
    // The agent's and the verifier's containers would be alike (same network, no mounts): the
    // verifier ran in the agent's own container, started again once every process in it was
    // stopped; nothing was frozen and no second container created.
    let calls = fake.calls();
    let ops: Vec<Op> = calls.iter().map(|(op, _)| *op).collect();
    let at = |op: Op| ops.iter().position(|o| *o == op).expect("called");
    let restart = ops.iter().rposition(|o| *o == Op::Start).expect("start");
    assert!(at(Op::Stop) < restart && restart > at(Op::Start), "{ops:?}");
    assert_eq!(
        calls[restart].1,
        calls[at(Op::Start)].1,
        "the same container"
    );
    assert_eq!(fake.count(Op::Freeze), 0, "{ops:?}");
    // The verifier's container is halted once its tests exit, before their logs are read.
    let nth = |op: Op, pattern: &str| {
        calls
            .iter()
            .position(|(o, d)| *o == op && d.contains(pattern))
            .unwrap_or_else(|| panic!("no {op:?} {pattern}: {calls:?}"))
    };
    let (tests, halt) = (nth(Op::Exec, "/tests/test.sh"), nth(Op::Halt, ""));
    assert!(
        tests < halt && halt < nth(Op::Download, "/logs/verifier"),
        "{ops:?}"
    );
    assert_eq!(fake.count(Op::Halt), 1, "{ops:?}");
    assert!(
        fake.specs()
            .iter()
            .all(|spec| spec.owner.role.as_str() != "verifier"),
        "no verifier container: {ops:?}"
    );
    assert!(fake.live().is_empty(), "left: {:?}", fake.live());
    assert!(!plan.dir.join(".control").exists());
}

#[tokio::test(start_paused = true)]
async fn a_verifier_unlike_the_agents_container_runs_in_a_fresh_container_of_the_frozen_filesystem()
{
    // Each of these makes the verifier's container differ from the agent's (or needs the
    // frozen filesystem): the verifier runs in a fresh container of it, after the agent's was
    // stopped and removed.
    for (why, toml) in [
        (
            "another network",
            "[verifier]\nnetwork_mode = \"no-network\"\n",
        ),
        ("agent network", "[agent]\nnetwork_mode = \"host\"\n"),
        (
            "validation",
            "[[completion.validation]]\nid = \"v\"\nshell = \"true\"\n",
        ),
    ] {
        let (_root, plan, fake) = solving_in(toml);
        let rec = record(run_on(&fake, &plan, None).await.run);
        assert_eq!(
            rec.verifier.status,
            VerifierStatus::Passed,
            "{why}: {rec:#?}"
        );
        let ops: Vec<Op> = fake.calls().iter().map(|(op, _)| *op).collect();
        let at = |op: Op| ops.iter().position(|o| *o == op).expect("called");
        assert!(at(Op::Stop) < at(Op::Freeze), "{why}: {ops:?}");
        let verifier_create = ops.iter().rposition(|o| *o == Op::Create).expect("create");
        assert!(at(Op::Freeze) < verifier_create, "{why}: {ops:?}");
        assert!(fake.live().is_empty(), "{why}: left: {:?}", fake.live());
    }
}

#[tokio::test(start_paused = true)]
async fn a_failure_of_any_backend_call_is_a_typed_infra_error_and_leaves_nothing() {
    let root = tempfile::tempdir().expect("tmp");
    let clean_plan = plan_in(root.path(), "");
    let clean = Arc::new(solving());
    let baseline = run_on(&clean, &clean_plan, None).await;
    let calls = clean.calls();
    let phase_of = |index: usize| {
        baseline
            .phases
            .iter()
            .rev()
            .find(|(_, at)| *at <= index)
            .map(|(p, _)| *p)
            .expect("a phase")
    };
    let mut tried = 0;
    for (index, (op, detail)) in calls.iter().enumerate() {
        let nth = calls[..=index].iter().filter(|(o, _)| o == op).count();
        let fake = Arc::new(solving());
        fake.fail(*op, nth);
        let dir = tempfile::tempdir().expect("tmp");
        let plan = plan_in(dir.path(), "");
        let rec = record(run_on(&fake, &plan, None).await.run);
        let phase = phase_of(index);
        let what = format!("{op:?} #{nth} ({detail}) in {phase}");
        match (phase, op) {
            // The watchdog's measurements are best effort.
            (_, Op::DiskUsage) => {
                assert!(rec.infra_error.is_none(), "{what}: {rec:#?}");
                assert!(fake.live().is_empty(), "{what}: left {:?}", fake.live());
            }
            // Reading the agent's filesystem is the agent's business: a path it made unreadable
            // is its result (abstention), never an infrastructure error. (`/` is the index of
            // the original image: the harness's own read.)
            (Phase::Collect, Op::Download) if detail != "/" => {
                assert!(rec.infra_error.is_none(), "{what}: {rec:#?}");
                assert!(fake.live().is_empty(), "{what}: left {:?}", fake.live());
            }
            (Phase::Verify, Op::Download) => {
                assert!(rec.infra_error.is_none(), "{what}: {rec:#?}");
                assert_eq!(
                    rec.verifier.status,
                    VerifierStatus::Error,
                    "{what}: no reward read"
                );
                assert!(fake.live().is_empty(), "{what}: left {:?}", fake.live());
            }
            // A failed removal during cleanup is logged; the result stands.
            (Phase::Cleanup, _) => {
                assert!(rec.infra_error.is_none(), "{what}: {rec:#?}");
                assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{what}");
                assert!(fake.live().len() <= 1, "{what}: left {:?}", fake.live());
            }
            _ => {
                let infra = rec
                    .infra_error
                    .as_ref()
                    .unwrap_or_else(|| panic!("{what}: no infra error"));
                assert_eq!(infra.phase, phase, "{what}: {rec:#?}");
                assert!(rec.is_infra());
                assert!(rec.audit.is_none(), "{what}: an infra error is not scored");
                assert!(fake.live().is_empty(), "{what}: left {:?}", fake.live());
                if matches!(phase, Phase::Environment | Phase::Agent) {
                    assert_eq!(rec.termination.kind, TerminationKind::InfraError, "{what}");
                }
            }
        }
        tried += 1;
    }
    assert!(tried >= 15, "only {tried} calls in a trial?");
}

/// A read with its bytes lost on the way (seen under a burst of execs: the archive command
/// exited 0, nothing arrived): the connection's failure, not the filesystem's — an
/// infrastructure error of its phase, never "the verifier wrote no reward" or a missing
/// artifact. An engine refusal of the same read stays the agent's result (above).
#[tokio::test(start_paused = true)]
async fn bytes_lost_in_transport_are_an_infra_error_not_the_agents_result() {
    let (_root, plan, fake) = solving_in("");
    fake.lose_download("/logs/verifier");
    let rec = record(run_on(&fake, &plan, None).await.run);
    let infra = rec
        .infra_error
        .as_ref()
        .unwrap_or_else(|| panic!("no infra error: {rec:#?}"));
    assert_eq!(infra.phase, Phase::Verify, "{rec:#?}");
    assert!(infra.message.contains("received 0 bytes"), "{infra:?}");
    assert!(rec.is_infra());
    assert!(rec.audit.is_none(), "an infra error is not scored");
    assert!(fake.live().is_empty(), "left {:?}", fake.live());
    // The agent's artifacts and logs read the same way: the collect phase's infra error.
    for path in ["/logs/agent", "/app/out.txt"] {
        let (_root, plan, fake) = solving_in("[[artifacts]]\nsource = \"/app/out.txt\"\n");
        fake.lose_download(path);
        let rec = record(run_on(&fake, &plan, None).await.run);
        let infra = rec
            .infra_error
            .as_ref()
            .unwrap_or_else(|| panic!("{path}: no infra error: {rec:#?}"));
        assert!(
            infra.message.contains("received 0 bytes"),
            "{path}: {infra:?}"
        );
        assert!(fake.live().is_empty(), "{path}: left {:?}", fake.live());
    }
    // The same trial with the read intact passes: only the lost bytes made the difference.
    let (_root, plan, fake) = solving_in("");
    let rec = record(run_on(&fake, &plan, None).await.run);
    assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{rec:#?}");
}

#[tokio::test(start_paused = true)]
async fn cancellation_at_any_phase_records_nothing_and_removes_everything() {
    for phase in [
        Phase::Environment,
        Phase::Agent,
        Phase::Collect,
        Phase::Verify,
    ] {
        let (_root, plan, fake) = solving_in("");
        let out = run_on(&fake, &plan, Some(phase)).await;
        assert!(
            matches!(out.run, TrialRun::Cancelled),
            "cancelled at {phase}: {:?}",
            out.run
        );
        assert!(
            fake.live().is_empty(),
            "cancelled at {phase}: left {:?}",
            fake.live()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancel_during_a_long_agent_run_stops_it_at_once() {
    let (_root, plan, fake) = solving_in("[agent]\ntimeout_sec = 3600\n");
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0).takes(Duration::from_secs(3000)),
    );
    let (tx, rx) = watch::channel(false);
    let started = tokio::time::Instant::now();
    let trial = tokio::spawn({
        let fake = fake.clone();
        let plan = plan.clone();
        async move { run(fake, &plan, rx, &|_| {}).await }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    let _ = tx.send(true);
    let out = trial.await.expect("trial task");
    assert!(matches!(out, TrialRun::Cancelled));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert!(fake.live().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_agent_past_its_deadline_is_a_timeout_and_still_verified() {
    let (_root, plan, fake) = solving_in("[agent]\ntimeout_sec = 10\n");
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec {
            ignores_term: true,
            ..FakeExec::exits(0).takes(Duration::from_secs(3600))
        },
    );
    let started = tokio::time::Instant::now();
    let rec = record(run_on(&fake, &plan, None).await.run);
    assert_eq!(rec.termination.kind, TerminationKind::Timeout, "{rec:#?}");
    let detail = rec.termination.detail.clone().unwrap_or_default();
    assert!(
        detail.starts_with("agent phase exceeded 10s; SIGTERM, then SIGKILL after"),
        "{detail}"
    );
    // The deadline and the grace period, not the agent's hour.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(rec.verifier.status, VerifierStatus::Passed);
    assert!(fake.live().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_oom_killed_agent_is_oom() {
    let (_root, plan, fake) = solving_in("memory_mb = 64\n");
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec {
            oom: true,
            ..FakeExec::exits(0)
        },
    );
    let rec = record(run_on(&fake, &plan, None).await.run);
    assert_eq!(rec.termination.kind, TerminationKind::Oom, "{rec:#?}");
    assert_eq!(
        rec.termination.detail.as_deref(),
        Some("killed by the kernel OOM killer (memory limit 64 MiB)")
    );
    // OOM is the agent's result: still verified, never retried as infra.
    assert!(rec.infra_error.is_none());
    assert_eq!(rec.verifier.status, VerifierStatus::Passed);
}

/// A container whose filesystem the agent's own doing ended (a pod evicted for its
/// ephemeral storage, an OOM kill of the whole container, its first process gone): the
/// agent's result, with the verifier `error` — never an infra error that would be retried.
#[tokio::test(start_paused = true)]
async fn a_container_lost_through_the_agent_is_the_agents_result() {
    for (lost, kind, detail) in [
        (
            Lost::Storage,
            TerminationKind::Killed,
            "its container was evicted for writing more than its ephemeral-storage limit while the agent ran",
        ),
        (
            Lost::Exited(2),
            TerminationKind::Killed,
            "its container's first process exited (2) while the agent ran",
        ),
        (
            Lost::Oom,
            TerminationKind::Oom,
            "killed by the kernel OOM killer (memory limit 2048 MiB)",
        ),
    ] {
        let (_root, plan, fake) = solving_in("");
        fake.on_exec(
            "/solution/solve.sh",
            FakeExec {
                lost: Some(lost),
                ..FakeExec::exits(0)
            },
        );
        let rec = record(run_on(&fake, &plan, None).await.run);
        assert!(rec.infra_error.is_none(), "{lost:?}: {rec:#?}");
        assert_eq!(rec.termination.kind, kind, "{lost:?}");
        assert_eq!(rec.termination.detail.as_deref(), Some(detail), "{lost:?}");
        assert_eq!(rec.verifier.status, VerifierStatus::Error, "{lost:?}");
        assert_eq!(
            rec.verifier.detail,
            Some(format!(
                "not run: {lost} while the agent ran, so its filesystem could not be read"
            )),
            "{lost:?}"
        );
        assert_eq!(fake.count(Op::Freeze), 0);
        assert_eq!(fake.count(Op::Download), 0, "nothing is read from it");
        assert!(fake.live().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn an_agent_over_its_storage_limit_is_stopped_and_never_frozen() {
    let (_root, plan, fake) = solving_in("storage_mb = 10\n");
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec {
            disk_bytes: Some(50 * 1024 * 1024),
            ..FakeExec::exits(0).takes(Duration::from_secs(600))
        },
    );
    let started = tokio::time::Instant::now();
    let rec = record(run_on(&fake, &plan, None).await.run);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the watchdog stops it within a poll"
    );
    assert_eq!(rec.termination.kind, TerminationKind::Killed, "{rec:#?}");
    assert_eq!(rec.verifier.status, VerifierStatus::Error);
    assert_eq!(
        rec.verifier.detail.as_deref(),
        Some(
            "not run: the agent wrote 50 MiB to its container's filesystem, over the storage limit of 10 MiB, so its filesystem was not snapshotted"
        )
    );
    assert_eq!(fake.count(Op::Freeze), 0);
    assert!(rec.limits.storage_enforced);
    assert!(fake.live().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_container_that_vanishes_is_an_infra_error() {
    let (_root, plan, fake) = solving_in("");
    fake.vanish_at(Op::Download, 1);
    let rec = record(run_on(&fake, &plan, None).await.run);
    let infra = rec.infra_error.expect("infra");
    assert_eq!(infra.phase, Phase::Collect);
    assert!(
        infra.message.contains("no such container"),
        "{}",
        infra.message
    );
    assert!(fake.live().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_verifier_that_writes_no_reward_is_an_error_and_a_failed_one_fails() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(root.path(), "");
    let fake = Arc::new(FakeSandbox::new());
    fake.on_exec("/tests/test.sh", FakeExec::exits(3));
    let rec = record(run_on(&fake, &plan, None).await.run);
    assert_eq!(rec.verifier.status, VerifierStatus::Error);
    assert_eq!(rec.verifier.reward, None);
    assert_eq!(rec.verifier.exit_code, Some(3));

    let dir = tempfile::tempdir().expect("tmp");
    let failing = plan_in(dir.path(), "");
    let fake = Arc::new(FakeSandbox::new());
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(1).writes("/logs/verifier/reward.txt", b"0"),
    );
    let rec = record(run_on(&fake, &failing, None).await.run);
    assert_eq!(rec.verifier.status, VerifierStatus::Failed);
    assert_eq!(
        rec.audit.map(|a| a.verdict),
        Some(crate::outcome::Verdict::HonestFailure)
    );
}

#[tokio::test(start_paused = true)]
async fn a_shadowed_interpreter_is_tampered_and_never_passes() {
    let (_root, plan, fake) = solving_in("");
    fake.image_files("fake/image", &[("/usr/bin/python3", b"\x7fELF")]);
    // The verifier still "passes": what it ran was the agent's python3.
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0).writes("/usr/local/bin/python3", b"#!/bin/sh\necho OK\n"),
    );
    let rec = record(run_on(&fake, &plan, None).await.run);
    assert_eq!(rec.verifier.status, VerifierStatus::Passed);
    let integrity = rec.integrity.clone().expect("integrity recorded");
    assert_eq!(
        integrity.status,
        crate::verifier::integrity::IntegrityStatus::Suspect,
        "{integrity:#?}"
    );
    assert!(
        integrity
            .findings
            .iter()
            .any(|f| f.path == "/usr/local/bin/python3"),
        "{integrity:#?}"
    );
    assert!(!rec.passed(), "a suspect trial never counts as passed");
    assert_eq!(
        rec.audit.as_ref().map(|a| a.verdict),
        Some(crate::outcome::Verdict::Tampered)
    );
    let changes = rec.changes.expect("changes summary");
    assert_eq!(changes.added, 2, "python3 and the oracle's own solve.sh");
    let saved: serde_json::Value = serde_json::from_slice(
        &std::fs::read(plan.dir.join("agent/changes.json")).expect("changes.json"),
    )
    .expect("json");
    assert_eq!(saved["schema"], "arbiter.changes.v1");
    let entries = saved["entries"].as_array().expect("entries");
    let planted = entries
        .iter()
        .find(|e| e["path"] == "/usr/local/bin/python3")
        .expect("the planted file is listed");
    assert_eq!(planted["kind"], "added");
    assert_eq!(planted["file_type"], "file");
    assert!(planted["sha256"].is_string(), "{saved:#}");
}

#[tokio::test(start_paused = true)]
async fn an_honest_solve_is_clean() {
    let (_root, plan, fake) = solving_in("workdir = \"/app\"\n");
    fake.image_files(
        "fake/image",
        &[
            ("/usr/bin/python3", b"\x7fELF"),
            ("/app/main.py", b"print(1)\n"),
        ],
    );
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0)
            .writes("/app/out.txt", b"hi\n")
            .writes("/app/main.py", b"print(2)\n")
            .writes("/usr/local/bin/newtool", b"#!/bin/sh\n")
            .writes(
                "/usr/local/lib/python3.11/site-packages/requests/__init__.py",
                b"",
            ),
    );
    let rec = record(run_on(&fake, &plan, None).await.run);
    let integrity = rec.integrity.clone().expect("integrity recorded");
    assert_eq!(
        integrity.status,
        crate::verifier::integrity::IntegrityStatus::Clean,
        "{integrity:#?}"
    );
    assert!(rec.passed());
    let changes = rec.changes.expect("changes");
    // out.txt, newtool, the package, and the oracle's own /solution/solve.sh.
    assert_eq!((changes.added, changes.modified), (4, 1), "{changes:?}");
}

#[tokio::test(start_paused = true)]
async fn enforce_verifies_a_tampered_trial_on_the_pristine_toolchain() {
    let (_root, plan, fake) = solving_in("[verifier]\nintegrity = \"enforce\"\n");
    fake.image_files("fake/image", &[("/usr/bin/python3", b"\x7fELF")]);
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0)
            .writes("/usr/local/bin/python3", b"#!/bin/sh\necho OK\n")
            .writes("/app/out.txt", b"hi\n"),
    );
    let rec = record(run_on(&fake, &plan, None).await.run);
    let integrity = rec.integrity.clone().expect("integrity");
    assert_eq!(
        integrity.status,
        crate::verifier::integrity::IntegrityStatus::Restored,
        "{integrity:#?}"
    );
    assert_eq!(rec.verifier.mode, crate::task::VerifierMode::Clean);
    assert!(
        rec.passed(),
        "findings neutralised: the verifier's verdict stands"
    );
    let uploads: Vec<String> = fake
        .calls()
        .into_iter()
        .filter(|(op, _)| *op == Op::Upload)
        .map(|(_, dest)| dest)
        .collect();
    assert!(
        uploads.iter().any(|d| d == "/app"),
        "the agent's work replayed: {uploads:?}"
    );
    assert!(
        !uploads.iter().any(|d| d == "/usr/local/bin"),
        "the finding never reached the verifier: {uploads:?}"
    );
    assert!(fake.live().is_empty(), "left: {:?}", fake.live());
}

#[tokio::test(start_paused = true)]
async fn clean_mode_replays_the_agents_work_onto_the_original_image() {
    let (_root, plan, fake) = solving_in("[verifier]\nenvironment_mode = \"clean\"\n");
    let rec = record(run_on(&fake, &plan, None).await.run);
    assert_eq!(rec.verifier.mode, crate::task::VerifierMode::Clean);
    assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{rec:#?}");
    assert_eq!(
        rec.integrity.map(|i| i.status),
        Some(crate::verifier::integrity::IntegrityStatus::Clean)
    );
    assert!(
        fake.calls()
            .iter()
            .any(|(op, dest)| *op == Op::Upload && dest == "/app")
    );
    assert!(fake.live().is_empty());
}

/// A trial of the oracle on a task whose whole task.toml is `toml`.
fn plan_with_toml(root: &std::path::Path, toml: &str) -> TrialPlan {
    let task = task_dir(root, "hello", "");
    std::fs::write(task.join("task.toml"), toml).expect("task.toml");
    let spec = job_spec(root, &[task], &["oracle"], 1);
    let plan = spec.trials(Default::default(), "fake").remove(0);
    std::fs::create_dir_all(&plan.dir).expect("trial dir");
    plan
}

#[tokio::test(start_paused = true)]
async fn separate_mode_verifies_only_the_artifacts_in_the_verifiers_own_image() {
    let root = tempfile::tempdir().expect("tmp");
    // A task in `separate` mode whose verifier has its own image, `fake/verifier`.
    let plan = plan_with_toml(
        root.path(),
        "artifacts = [\"/app/out.txt\"]\n[environment]\ndocker_image = \"fake/image\"\n\
         [verifier]\nenvironment_mode = \"separate\"\n\
         [verifier.environment]\ndocker_image = \"fake/verifier\"\n",
    );
    let fake = Arc::new(solving());
    fake.image_files("fake/image", &[("/usr/bin/python3", b"\x7fELF")]);
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0)
            .writes("/usr/local/bin/python3", b"#!/bin/sh\necho OK\n")
            .writes("/app/out.txt", b"hi\n")
            .writes("/app/notes.txt", b"not an artifact\n"),
    );
    let rec = record(run_on(&fake, &plan, None).await.run);
    assert_eq!(rec.verifier.mode, crate::task::VerifierMode::Separate);
    assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{rec:#?}");
    let integrity = rec.integrity.clone().expect("integrity");
    assert_eq!(
        integrity.status,
        crate::verifier::integrity::IntegrityStatus::Restored,
        "the planted interpreter never reached the verifier: {integrity:#?}"
    );
    let calls = fake.calls();
    assert!(
        calls
            .iter()
            .any(|(op, what)| *op == Op::PrepareImage && what == "fake/verifier"),
        "{calls:?}"
    );
    let uploads: Vec<&str> = calls
        .iter()
        .filter(|(op, _)| *op == Op::Upload)
        .map(|(_, dest)| dest.as_str())
        .collect();
    // The artifact into its parent dir (`/app/notes.txt` would land there too), tests/ at the
    // root; nothing else.
    assert_eq!(
        uploads.iter().filter(|d| **d == "/app").count(),
        1,
        "{uploads:?}"
    );
    assert!(
        !uploads.iter().any(|d| d.starts_with("/usr")),
        "{uploads:?}"
    );
    let downloads: Vec<&str> = calls
        .iter()
        .filter(|(op, _)| *op == Op::Download)
        .map(|(_, path)| path.as_str())
        .collect();
    // Read for the change set, then copied for the verifier: never a subtree above it.
    assert!(downloads.contains(&"/app/out.txt"), "{downloads:?}");
    assert!(!downloads.contains(&"/app"), "{downloads:?}");
    assert!(fake.live().is_empty(), "left: {:?}", fake.live());
}

#[tokio::test(start_paused = true)]
async fn a_finding_inside_an_artifact_keeps_a_separate_trial_suspect() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_with_toml(
        root.path(),
        "artifacts = [\"/app\"]\n[environment]\ndocker_image = \"fake/image\"\nworkdir = \"/app\"\n\
         [verifier]\nenvironment_mode = \"separate\"\n",
    );
    let fake = Arc::new(solving());
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0)
            .writes("/app/out.txt", b"hi\n")
            .writes("/app/sitecustomize.py", b"import os\n"),
    );
    let rec = record(run_on(&fake, &plan, None).await.run);
    let integrity = rec.integrity.clone().expect("integrity");
    assert_eq!(
        integrity.status,
        crate::verifier::integrity::IntegrityStatus::Suspect,
        "a start-up hook inside an imported artifact can act: {integrity:#?}"
    );
    assert!(!rec.passed(), "a suspect trial never passes");
}

/// The classifier reads `PATH` from the image's own config: a new command in a dir only that
/// image puts first shadows the image's one there, and is nothing anywhere else.
#[tokio::test(start_paused = true)]
async fn the_images_own_path_decides_what_shadows_a_command() {
    for (env, shadows) in [
        (Some("PATH=/opt/tools/bin:/usr/bin:/bin"), true),
        (None, false),
    ] {
        let (_root, plan, fake) = solving_in("");
        fake.image_files("fake/image", &[("/usr/bin/python3", b"\x7fELF")]);
        if let Some(env) = env {
            fake.set_image_config(
                "fake/image",
                crate::sandbox::ImageConfig {
                    env: vec![env.to_string()],
                    ..Default::default()
                },
            );
        }
        fake.on_exec(
            "/solution/solve.sh",
            FakeExec::exits(0)
                .writes("/opt/tools/bin/python3", b"#!/bin/sh\nexit 0\n")
                .writes("/app/out.txt", b"hi\n"),
        );
        let rec = record(run_on(&fake, &plan, None).await.run);
        let integrity = rec.integrity.clone().expect("integrity");
        let found = integrity
            .findings
            .iter()
            .any(|f| f.path == "/opt/tools/bin/python3");
        assert_eq!(found, shadows, "image env {env:?}: {integrity:#?}");
    }
}

/// An environment image's index is kept on the host under the image's content id: the next
/// job on the same image reads the cached index instead of the image's whole filesystem, and
/// a cache file that does not parse is replaced.
#[tokio::test(start_paused = true)]
async fn an_image_index_is_kept_between_jobs_under_the_image_id() {
    let root = tempfile::tempdir().expect("tmp");
    let kept = root.path().join("index-cache");
    let id = format!("sha256:{}", "ab".repeat(32));
    let whole_image_reads = |fake: &FakeSandbox| {
        fake.calls()
            .iter()
            .filter(|(op, detail)| *op == Op::Download && detail == "/")
            .count()
    };
    let job = |n: usize| {
        let mut plan = plan_in(&root.path().join(format!("job{n}")), "");
        let mut settings = (*plan.settings).clone();
        settings.image_indexes = Arc::new(phases::image_index::ImageIndexes::kept_in(&kept));
        plan.settings = Arc::new(settings);
        plan
    };

    let plan = job(1);
    let fake = Arc::new(solving());
    fake.set_image_id(plan.image.reference(), &id);
    fake.image_files(plan.image.reference(), &[("/usr/bin/python3", b"elf")]);
    let rec = record(run_on(&fake, &plan, None).await.run);
    assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{rec:#?}");
    assert_eq!(whole_image_reads(&fake), 1, "the first job reads the image");
    let file = kept.join(format!("{}.json", "ab".repeat(32)));
    let text = std::fs::read_to_string(&file).expect("index kept");
    assert!(text.contains("arbiter.image-index.v1"), "{text}");
    assert!(text.contains("/usr/bin/python3"), "{text}");

    let plan = job(2);
    let fake = Arc::new(solving());
    fake.set_image_id(plan.image.reference(), &id);
    let rec = record(run_on(&fake, &plan, None).await.run);
    assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{rec:#?}");
    assert_eq!(
        whole_image_reads(&fake),
        0,
        "the second job uses the kept index"
    );

    std::fs::write(&file, "{not json").expect("corrupt");
    let plan = job(3);
    let fake = Arc::new(solving());
    fake.set_image_id(plan.image.reference(), &id);
    fake.image_files(plan.image.reference(), &[("/usr/bin/python3", b"elf")]);
    record(run_on(&fake, &plan, None).await.run);
    assert_eq!(whole_image_reads(&fake), 1, "a corrupt file is read again");
    let text = std::fs::read_to_string(&file).expect("index kept");
    assert!(text.contains("arbiter.image-index.v1"), "replaced: {text}");

    // Without an id (another backend, or an image the engine cannot name) nothing is kept.
    let plan = job(4);
    let fake = Arc::new(solving());
    record(run_on(&fake, &plan, None).await.run);
    assert_eq!(whole_image_reads(&fake), 1);
}
