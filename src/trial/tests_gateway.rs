//! A `command` agent with a `model:` on the in-memory backend, under paused time: the job's
//! gateway admits the trial, the run's env carries the gateway's URLs and the trial's token
//! (never the provider's key), the record has `usage`, the ledger exists, and no file of the
//! trial holds the token.

use std::sync::Arc;

use tokio::sync::watch;

use crate::job::{RunArgs, resolve};
use crate::sandbox::{FakeExec, FakeSandbox};
use crate::testing::task_dir;

use super::*;

/// A job with one task and a `command` agent on the scripted provider.
fn plan_with_model(root: &std::path::Path) -> TrialPlan {
    let task = task_dir(root, "hello", "");
    std::fs::write(root.join("script.json"), r#"{"turns": [{"say": "Done."}]}"#).expect("script");
    let job = root.join("job.yaml");
    std::fs::write(
        &job,
        format!(
            "tasks: [{}]\nmodels:\n  - {{name: fake, api: scripted, script: script.json}}\nagents:\n  - name: caller\n    kind: command\n    run: [python3, /agent.py]\n    model: {{provider: fake, name: scripted-model}}\n    budget: {{max_requests: 3}}\n",
            task.display()
        ),
    )
    .expect("job.yaml");
    let spec = resolve(&RunArgs {
        config: Some(job),
        job_dir: Some(root.join("out")),
        ..RunArgs::default()
    })
    .expect("job resolves");
    assert!(spec.config_yaml.contains("scripted-model"));
    let gateway = spec.start_gateway().expect("gateway").expect("a gateway");
    let plan = spec
        .trials_with(Default::default(), Some(gateway), "fake")
        .remove(0);
    std::fs::create_dir_all(&plan.dir).expect("trial dir");
    plan
}

fn finished(run: TrialRun) -> TrialRecord {
    match run {
        TrialRun::Finished(record) => *record,
        TrialRun::Cancelled => panic!("the trial was cancelled"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_command_agent_with_a_model_gets_the_gateway_and_its_token_and_usage_is_recorded() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_with_model(root.path());
    let fake = Arc::new(FakeSandbox::new());
    fake.on_exec(
        "/agent.py",
        FakeExec::exits(0).writes("/app/out.txt", b"hi\n"),
    );
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1\n"),
    );
    let (_tx, rx) = watch::channel(false);
    let rec = finished(run(fake.clone(), &plan, rx, &|_| {}).await);
    assert_eq!(rec.infra_error, None, "{:?}", rec.termination);

    let envs = fake.exec_envs();
    let (_, env) = envs
        .iter()
        .find(|(argv, _)| argv.contains("/agent.py"))
        .expect("the agent ran");
    let get = |k: &str| {
        env.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{k} not in the agent's env"))
    };
    let token = get("OPENAI_API_KEY");
    assert!(token.starts_with("arb-"), "a per-trial token, got {token}");
    assert_eq!(get("ANTHROPIC_API_KEY"), token);
    assert_eq!(get("ARBITER_MODEL"), "scripted-model");
    let openai = get("OPENAI_BASE_URL");
    let anthropic = get("ANTHROPIC_BASE_URL");
    assert!(openai.starts_with("http://127.0.0.1:") && openai.ends_with("/v1"));
    assert_eq!(format!("{anthropic}/v1"), openai);

    let usage = rec.usage.as_ref().expect("usage in the record");
    assert_eq!(usage.requests, 0);
    assert_eq!(usage.unavailable, None);
    assert_eq!(usage.budget.as_ref().and_then(|b| b.max_requests), Some(3));
    assert!(plan.dir.join("agent/model-calls.jsonl").is_file());
    // The token is refused once the trial is finished.
    let gateway = plan.settings.gateway.as_ref().expect("gateway");
    assert!(gateway.usage_by_str(&token).is_none());
    // No file of the trial (nor the record) holds the token.
    let record = serde_json::to_string(&rec).expect("json");
    assert!(!record.contains(&token));
    for entry in walk(&plan.dir) {
        let bytes = std::fs::read(&entry).expect("read");
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&token),
            "{} holds the token",
            entry.display()
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_trial_with_a_model_but_no_gateway_is_an_environment_infra_error() {
    let root = tempfile::tempdir().expect("tmp");
    let mut plan = plan_with_model(root.path());
    // A job whose gateway was not started: the trial cannot reach a model.
    let mut settings = (*plan.settings).clone();
    settings.gateway = None;
    plan.settings = Arc::new(settings);
    let fake = Arc::new(FakeSandbox::new());
    let (_tx, rx) = watch::channel(false);
    let rec = finished(run(fake.clone(), &plan, rx, &|_| {}).await);
    let infra = rec.infra_error.expect("an infra error");
    assert_eq!(infra.phase, Phase::Environment);
    assert!(
        infra.message.contains("no model gateway"),
        "{}",
        infra.message
    );
    assert!(
        !fake
            .exec_envs()
            .iter()
            .any(|(argv, _)| argv.contains("/agent.py")),
        "the agent never ran"
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn a_claimed_call_count_that_disagrees_with_the_gateway_is_audit_evidence() {
    let claim = |n: u64| crate::outcome::Claim {
        record: Some(serde_json::json!({ "llm_call_count": n })),
        ..crate::outcome::Claim::missing()
    };
    let usage = crate::gateway::Usage {
        requests: 2,
        ..crate::gateway::Usage::default()
    };
    assert_eq!(
        super::close::call_count_note(&claim(5), Some(&usage)).as_deref(),
        Some("the claim counts 5 model calls; the gateway counted 2")
    );
    assert_eq!(super::close::call_count_note(&claim(2), Some(&usage)), None);
    assert_eq!(super::close::call_count_note(&claim(5), None), None);
}
