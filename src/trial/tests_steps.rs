//! Harbor `[[steps]]` at run time on the in-memory backend, under paused time: steps in order
//! in one agent container, each verified (all but the last on a snapshot), Harbor's stop rules
//! (no reward, `min_reward`, a failed setup or healthcheck, a dead container) and the task's
//! reward from its steps'.

use std::sync::Arc;
use std::time::Duration;

use crate::sandbox::{FakeExec, FakeSandbox, Op};
use crate::testing::{job_spec, task_dir};

use super::test_support::finish;
use super::*;

/// An oracle trial of a two-step task (`one`, `two`): `one` and `two` go into each step's
/// table of `task.toml`, `top` before every table.
fn two_steps(root: &std::path::Path, one: &str, two: &str, top: &str) -> TrialPlan {
    let task = task_dir(root, "multi", "");
    std::fs::write(
        task.join("task.toml"),
        format!(
            "{top}\n[environment]\ndocker_image = \"fake/image\"\n[[steps]]\nname = \"one\"\n{one}\n[[steps]]\nname = \"two\"\n{two}\n"
        ),
    )
    .expect("task.toml");
    for name in ["one", "two"] {
        std::fs::create_dir_all(task.join("steps").join(name)).expect("step dir");
        std::fs::write(
            task.join("steps").join(name).join("instruction.md"),
            format!("Do step {name}.\n"),
        )
        .expect("instruction");
    }
    let spec = job_spec(root, &[task], &["oracle"], 1);
    let plan = spec.trials(Default::default(), "fake").remove(0);
    std::fs::create_dir_all(&plan.dir).expect("trial dir");
    plan
}

fn write(plan: &TrialPlan, rel: &str, content: &str) {
    let path = plan.task.dir.join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
    std::fs::write(path, content).expect("write");
}

fn rewarding(reward: &[u8]) -> Arc<FakeSandbox> {
    let fake = FakeSandbox::new();
    fake.on_exec("/solution/solve.sh", FakeExec::exits(0));
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", reward),
    );
    Arc::new(fake)
}

fn position(fake: &FakeSandbox, op: Op, pattern: &str, nth: usize) -> usize {
    fake.calls()
        .iter()
        .enumerate()
        .filter(|(_, (o, d))| *o == op && d.contains(pattern))
        .nth(nth)
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("no call {nth} of {op:?} {pattern}: {:?}", fake.calls()))
}

#[tokio::test(start_paused = true)]
async fn steps_run_in_order_in_one_container_each_verified_and_the_task_reward_is_their_mean() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = two_steps(root.path(), "", "", "");
    let fake = rewarding(b"1\n");
    let rec = finish(&fake, &plan).await;

    assert!(rec.infra_error.is_none(), "{rec:#?}");
    let names: Vec<&str> = rec.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["one", "two"]);
    assert!(rec.steps.iter().all(|s| s.passed && s.reward == Some(1.0)));
    assert!(rec.steps.iter().all(|s| s.stopped.is_none()));
    assert_eq!(rec.verifier.status, VerifierStatus::Passed);
    assert_eq!(
        rec.verifier.reward.as_ref().and_then(|r| r.get("reward")),
        Some(&1.0)
    );
    assert!(rec.passed());

    // One agent container for both steps: created once, stopped once (after the last step);
    // step one's verifier ran on a snapshot before step two's agent started.
    let agent_creates = fake
        .calls()
        .iter()
        .filter(|(op, d)| *op == Op::Create && d == "agent")
        .count();
    assert_eq!(agent_creates, 1);
    assert_eq!(fake.count(Op::Stop), 1);
    assert_eq!(fake.count(Op::Freeze), 2, "a snapshot per step");
    let first_verify = position(&fake, Op::Exec, "/tests/test.sh", 0);
    let second_solve = position(&fake, Op::Exec, "/solution/solve.sh", 1);
    assert!(position(&fake, Op::Freeze, "", 0) < first_verify);
    assert!(first_verify < second_solve);
    assert!(second_solve < position(&fake, Op::Stop, "", 0));
    // Step one's verifier output is its own; nothing is left behind.
    assert!(plan.dir.join("steps/one/verifier/reward.txt").is_file());
    assert!(!plan.dir.join(".step-tests").exists());
    assert!(fake.live().is_empty(), "left: {:?}", fake.live());
}

#[tokio::test(start_paused = true)]
async fn a_step_below_its_min_reward_stops_the_rest_and_only_the_steps_that_ran_count() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = two_steps(root.path(), "min_reward = 1.0", "", "");
    let fake = rewarding(b"0.5\n");
    let rec = finish(&fake, &plan).await;

    assert_eq!(rec.steps.len(), 1, "{:#?}", rec.steps);
    let stopped = rec.steps[0].stopped.as_deref().expect("stopped");
    assert!(
        stopped.contains("below the step's min_reward 1"),
        "{stopped}"
    );
    assert_eq!(
        fake.calls()
            .iter()
            .filter(|(op, d)| *op == Op::Exec && d.contains("/solution/solve.sh"))
            .count(),
        1,
        "step two's agent never ran"
    );
    // The mean over the one step that ran.
    assert_eq!(
        rec.verifier.reward.as_ref().and_then(|r| r.get("reward")),
        Some(&0.5)
    );
    assert_eq!(rec.verifier.status, VerifierStatus::Failed);
    assert!(fake.live().is_empty(), "left: {:?}", fake.live());
}

#[tokio::test(start_paused = true)]
async fn a_step_without_a_reward_stops_the_rest_and_no_reward_is_an_error_not_a_zero() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = two_steps(root.path(), "", "", "");
    let fake = FakeSandbox::new();
    fake.on_exec("/solution/solve.sh", FakeExec::exits(0));
    fake.on_exec("/tests/test.sh", FakeExec::exits(1));
    let fake = Arc::new(fake);
    let rec = finish(&fake, &plan).await;

    assert_eq!(rec.steps.len(), 1);
    assert_eq!(rec.steps[0].verifier.status, VerifierStatus::Error);
    assert!(rec.steps[0].stopped.is_some());
    assert_eq!(rec.verifier.status, VerifierStatus::Error);
    assert!(rec.verifier.reward.is_none());
    assert!(
        rec.infra_error.is_none(),
        "the agent's result, not the harness's"
    );
}

#[tokio::test(start_paused = true)]
async fn final_strategy_takes_the_last_step_and_a_failed_later_setup_stops_there() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = two_steps(
        root.path(),
        "",
        "",
        "multi_step_reward_strategy = \"final\"\n[environment.env]\nX = \"1\"",
    );
    write(&plan, "steps/two/workdir/setup.sh", "exit 3\n");
    // The plan's task was loaded before the file existed: reload it.
    let mut plan = plan;
    plan.task = Arc::new(crate::task::load(&plan.task.dir).expect("task"));
    let fake = rewarding(b"1\n");
    fake.on_exec("setup.sh", FakeExec::exits(3));
    let rec = finish(&fake, &plan).await;

    assert_eq!(rec.steps.len(), 2, "{:#?}", rec.steps);
    let two = &rec.steps[1];
    assert!(two.termination.is_none(), "step two's agent never ran");
    assert_eq!(two.verifier.status, VerifierStatus::Skipped);
    assert!(
        two.stopped
            .as_deref()
            .is_some_and(|s| s.contains("setup.sh exited with 3")),
        "{two:#?}"
    );
    // `final`: the last step's result, here a step that did not run.
    assert_eq!(rec.verifier.status, VerifierStatus::Skipped);
    assert!(rec.infra_error.is_none());
    // The setup ran with the task's env, in the working directory.
    let setup = fake
        .exec_envs()
        .into_iter()
        .find(|(argv, _)| argv.contains("setup.sh"))
        .expect("setup exec");
    assert!(setup.0.starts_with("bash /"), "{}", setup.0);
    assert!(setup.1.contains(&("X".to_string(), "1".to_string())));
}

#[tokio::test(start_paused = true)]
async fn a_failed_first_setup_is_the_tasks_fault_an_infrastructure_error() {
    let root = tempfile::tempdir().expect("tmp");
    let mut plan = two_steps(root.path(), "", "", "");
    write(&plan, "steps/one/workdir/setup.sh", "exit 1\n");
    plan.task = Arc::new(crate::task::load(&plan.task.dir).expect("task"));
    let fake = rewarding(b"1\n");
    fake.on_exec("setup.sh", FakeExec::exits(1));
    let rec = finish(&fake, &plan).await;
    assert!(rec.is_infra(), "{rec:#?}");
    let infra = rec.infra_error.expect("infra error");
    assert!(
        infra.message.contains("step one's setup.sh exited with 1"),
        "{}",
        infra.message
    );
    assert!(fake.live().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_step_healthcheck_is_retried_then_fails_the_step() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = two_steps(
        root.path(),
        "",
        "[steps.healthcheck]\ncommand = \"probe-ready\"\ninterval_sec = 2\nretries = 3",
        "",
    );
    let fake = rewarding(b"1\n");
    fake.on_exec("probe-ready", FakeExec::exits(1));
    let started = tokio::time::Instant::now();
    let rec = finish(&fake, &plan).await;
    let probes = fake
        .calls()
        .iter()
        .filter(|(op, d)| *op == Op::Exec && d.contains("probe-ready"))
        .count();
    assert_eq!(probes, 3);
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "two waits of 2 s"
    );
    assert_eq!(rec.steps.len(), 2);
    assert!(
        rec.steps[1]
            .stopped
            .as_deref()
            .is_some_and(|s| s.contains("healthcheck failed: `probe-ready` failed 3 times")),
        "{:#?}",
        rec.steps[1]
    );
    // The mean over step one only (step two never ran its agent).
    assert_eq!(rec.verifier.status, VerifierStatus::Passed);
}

#[tokio::test(start_paused = true)]
async fn an_agent_timeout_ends_the_container_so_the_step_is_verified_and_the_rest_not_run() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = two_steps(root.path(), "[steps.agent]\ntimeout_sec = 5", "", "");
    let fake = rewarding(b"1\n");
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0).takes(Duration::from_secs(60)),
    );
    let rec = finish(&fake, &plan).await;
    assert_eq!(rec.termination.kind, TerminationKind::Timeout);
    assert_eq!(rec.steps.len(), 1, "{:#?}", rec.steps);
    assert!(
        rec.steps[0]
            .stopped
            .as_deref()
            .is_some_and(|s| s.contains("deadline in step one")),
        "{:#?}",
        rec.steps[0]
    );
    assert_eq!(rec.steps[0].reward, Some(1.0));
    assert!(rec.verifier.status == VerifierStatus::Passed);
    assert!(fake.live().is_empty());
}
