//! The endpoint through a job's resolution (flag, config, the saved job.yaml a resume reads)
//! and a whole job on the in-memory backend whose endpoint takes nothing: the job ends, its
//! trials are recorded, the report counts the trace as not sent. The real collector:
//! tests/otlp.rs.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use crate::job::{RunArgs, resolve};
use crate::sandbox::{FakeExec, FakeSandbox};
use crate::testing::task_dir;

fn args(root: &std::path::Path, config: &std::path::Path) -> RunArgs {
    RunArgs {
        config: Some(config.to_path_buf()),
        job_dir: Some(root.join("job")),
        ..RunArgs::default()
    }
}

#[test]
fn the_endpoint_comes_from_the_flag_over_the_config_and_a_resume_keeps_it() {
    let root = tempfile::tempdir().expect("tmp");
    let task = task_dir(root.path(), "hello", "");
    let config = root.path().join("job.yaml");
    std::fs::write(
        &config,
        format!(
            "tasks: [{}]\nagents: [oracle]\notlp: {{endpoint: 'http://127.0.0.1:4318'}}\n",
            task.display()
        ),
    )
    .expect("config");
    let spec = resolve(&args(root.path(), &config)).expect("resolves");
    assert_eq!(
        spec.otlp.as_deref(),
        Some("http://127.0.0.1:4318/v1/traces")
    );

    // The saved job.yaml (what `arbiter resume` reads) names the same endpoint.
    let saved = root.path().join("saved.yaml");
    std::fs::write(&saved, &spec.config_yaml).expect("saved");
    let resumed = resolve(&args(root.path(), &saved)).expect("resolves again");
    assert_eq!(resumed.otlp, spec.otlp);

    let flagged = resolve(&RunArgs {
        otlp: Some("https://otlp.example.com/otlp".to_string()),
        ..args(root.path(), &config)
    })
    .expect("resolves");
    assert_eq!(
        flagged.otlp.as_deref(),
        Some("https://otlp.example.com/otlp/v1/traces")
    );

    // Without either, nothing is sent and nothing is saved.
    std::fs::write(
        &config,
        format!("tasks: [{}]\nagents: [oracle]\n", task.display()),
    )
    .expect("config");
    let plain = resolve(&args(root.path(), &config)).expect("resolves");
    assert_eq!(plain.otlp, None);
    assert!(!plain.config_yaml.contains("otlp"), "{}", plain.config_yaml);
}

#[test]
fn a_bad_endpoint_in_the_config_names_the_file_and_field() {
    let root = tempfile::tempdir().expect("tmp");
    let task = task_dir(root.path(), "hello", "");
    let config = root.path().join("job.yaml");
    std::fs::write(
        &config,
        format!(
            "tasks: [{}]\nagents: [oracle]\notlp: {{endpoint: 'http://key:secret@collector'}}\n",
            task.display()
        ),
    )
    .expect("config");
    let err = resolve(&args(root.path(), &config))
        .expect_err("refused")
        .to_string();
    assert!(
        err.starts_with(&format!(
            "{}:otlp.endpoint: credentials in the URL are refused",
            config.display()
        )),
        "{err}"
    );
}

/// Real time: the exporter's connection attempt is real I/O on the loopback.
#[tokio::test]
async fn a_job_whose_endpoint_takes_nothing_still_ends_with_every_trial_recorded() {
    let root = tempfile::tempdir().expect("tmp");
    let tasks = vec![
        task_dir(root.path(), "a", ""),
        task_dir(root.path(), "b", ""),
    ];
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let mut spec = crate::testing::job_spec(root.path(), &tasks, &["oracle"], 1);
    spec.otlp = Some(format!("http://127.0.0.1:{port}/v1/traces"));
    let fake = FakeSandbox::new();
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1"),
    );
    let (tx, _rx) = mpsc::unbounded_channel();
    let (_cancel_tx, cancel) = watch::channel(None);
    let outcome = crate::job::run(&spec, Arc::new(fake), tx, cancel)
        .await
        .expect("the job runs");
    assert_eq!(outcome.records.len(), 2);
    assert!(
        outcome.records.iter().all(|b| !b.infra),
        "{:?}",
        outcome.records
    );
    let traces = outcome.traces.expect("a trace report");
    assert_eq!((traces.sent, traces.failed), (0, 2), "{traces:?}");
    assert_eq!(traces.last_error.as_deref(), Some("connection refused"));
    let line = traces.line(&spec.dir);
    assert!(
        line.starts_with("traces: 2 of 2 trials not sent to http://127.0.0.1:"),
        "{line}"
    );
}
