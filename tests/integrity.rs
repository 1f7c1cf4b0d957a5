//! Integrity on the real engine (issue 10): agents that alter what the verifier runs are
//! `tampered` and never pass; honest work stays `clean`; an agent that makes collection
//! impossible gets its own result, not an infra error; an image with no shell at all runs.

mod common;

use std::process::Command;

use common::*;

/// Run `agents` (a YAML list of command agents) on `task` and return each trial's record.
fn run_agents(task: &str, agents: &str, names: &[&str]) -> Option<Vec<serde_json::Value>> {
    if !docker_available() {
        return None;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task_dir = repo().join("tests/fixtures/integrity").join(task);
    let yaml = format!(
        "name: integrity\ntasks: [{}]\nconcurrency: 3\nagents:\n{agents}",
        task_dir.display()
    );
    let config = write_job(tmp.path(), &yaml);
    let job_dir = tmp.path().join("job-integrity");
    let out = run_config(&config, &job_dir);
    assert_no_leftovers(&job_dir);
    let records = names
        .iter()
        .map(|name| {
            let trial = format!("{task}__{name}__default__1");
            assert!(
                has_record(&job_dir, &trial),
                "no record for {trial}; stdout: {} stderr: {}",
                stdout(&out),
                stderr(&out)
            );
            result(&job_dir, &trial)
        })
        .collect();
    Some(records)
}

fn agent(name: &str, script: &str) -> String {
    format!(
        "  - name: {name}\n    kind: command\n    run: [bash, -c, {}]\n",
        serde_json::to_string(script).expect("json")
    )
}

#[test]
fn toolchain_tampering_is_tampered_and_honest_work_is_clean() {
    let names = [
        "honest",
        "installs",
        "shadow-python",
        "wrap-bash",
        "shadow-sh",
        "abstain",
    ];
    let agents = [
        agent("honest", "echo 42 > /app/answer.txt"),
        // New commands, a package in dist-packages, a compiled-looking tool: not findings.
        agent(
            "installs",
            "mkdir -p /usr/local/lib/python3.11/dist-packages/mymod && echo 'X = 1' > /usr/local/lib/python3.11/dist-packages/mymod/__init__.py && printf '#!/bin/sh\\necho tool\\n' > /usr/local/bin/newtool && chmod +x /usr/local/bin/newtool && echo 42 > /app/answer.txt",
        ),
        // A python3 earlier on PATH that says yes to everything.
        agent(
            "shadow-python",
            "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3",
        ),
        // The image's bash replaced: the test launcher would run the agent's program.
        agent(
            "wrap-bash",
            "cp /bin/bash /tmp/realbash && printf '#!/tmp/realbash\\necho 1 > /logs/verifier/reward.txt\\n' > /tmp/fakebash && chmod +x /tmp/fakebash && mv -f /tmp/fakebash /bin/bash",
        ),
        // A sh earlier on PATH: arbiter's own commands never resolve sh through PATH.
        agent(
            "shadow-sh",
            "printf '#!/bin/dash\\nmkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; exec /bin/dash \"$@\"\\n' > /usr/local/bin/sh && chmod +x /usr/local/bin/sh",
        ),
        // Collection made impossible: the agent's log dir replaced by a file.
        agent("abstain", "rm -rf /logs/agent; echo x > /logs/agent"),
    ]
    .concat();
    let Some(records) = run_agents("pycheck", &agents, &names) else {
        return;
    };
    let by = |name: &str| &records[names.iter().position(|n| *n == name).expect("name")];
    for name in ["honest", "installs"] {
        let r = by(name);
        assert_eq!(r["verifier"]["status"], "passed", "{name}: {r:#}");
        assert_eq!(r["integrity"]["status"], "clean", "{name}: {r:#}");
        assert_ne!(r["audit"]["verdict"], "tampered", "{name}");
    }
    let installs = by("installs");
    assert!(
        installs["changes"]["added"].as_u64().expect("added") >= 3,
        "{installs:#}"
    );
    for name in ["shadow-python", "wrap-bash"] {
        let r = by(name);
        assert_eq!(r["integrity"]["status"], "suspect", "{name}: {r:#}");
        assert_eq!(r["audit"]["verdict"], "tampered", "{name}: {r:#}");
        assert!(
            !r["integrity"]["findings"]
                .as_array()
                .expect("findings")
                .is_empty(),
            "{name}"
        );
    }
    // The shadowed sh never ran with the harness's authority: the verifier failed the task.
    let sh = by("shadow-sh");
    assert_eq!(sh["verifier"]["status"], "failed", "{sh:#}");
    assert_ne!(sh["verifier"]["status"], "passed");
    let abstain = by("abstain");
    assert!(abstain["infra_error"].is_null(), "{abstain:#}");
    assert_eq!(abstain["retries"], 0);
    assert_ne!(abstain["verifier"]["status"], "passed", "{abstain:#}");
    // Every record has its change list on disk.
    for r in &records {
        assert_eq!(r["changes"]["file"], "agent/changes.json", "{r:#}");
    }
}

#[test]
fn an_image_without_a_shell_is_run_and_verified() {
    if !docker_available() {
        return;
    }
    let root = tempfile::tempdir().expect("tmp");
    std::fs::write(root.path().join("data.txt"), "hello\n").expect("data");
    let tar = Command::new("tar")
        .args([
            "-C",
            root.path().to_str().expect("utf8"),
            "-cf",
            "-",
            "data.txt",
        ])
        .output()
        .expect("tar");
    assert!(tar.status.success());
    let mut import = Command::new("docker")
        .args([
            "import",
            "-c",
            "LABEL arbiter.test=noshell",
            "-",
            "arbiter-test/noshell:1",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("docker import");
    {
        use std::io::Write;
        import
            .stdin
            .take()
            .expect("stdin")
            .write_all(&tar.stdout)
            .expect("write");
    }
    assert!(import.wait().expect("import").success());
    let agents = "  - name: copier\n    kind: command\n    run: [/.arbiter/toolbox/busybox, cp, /data.txt, /answer.txt]\n";
    let records = run_agents("noshell", agents, &["copier"]);
    let _ = Command::new("docker")
        .args(["rmi", "-f", "arbiter-test/noshell:1"])
        .output();
    let Some(records) = records else { return };
    let r = &records[0];
    assert_eq!(r["termination"]["kind"], "exited", "{r:#}");
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
}

#[test]
fn enforce_and_clean_modes_verify_on_the_original_toolchain() {
    let names = ["honest", "shadow-python", "installs"];
    let agents = [
        agent("honest", "echo 42 > /app/answer.txt"),
        agent(
            "shadow-python",
            "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3",
        ),
        agent(
            "installs",
            "mkdir -p /usr/local/lib/python3.11/dist-packages/mymod && echo 'X = 1' > /usr/local/lib/python3.11/dist-packages/mymod/__init__.py && echo 42 > /app/answer.txt",
        ),
    ]
    .concat();
    // enforce: the tampering agent is verified on the image's own python3 and fails.
    let Some(records) = run_agents("pycheck-enforce", &agents, &names) else {
        return;
    };
    let shadow = &records[1];
    assert_eq!(shadow["integrity"]["status"], "restored", "{shadow:#}");
    assert_eq!(shadow["verifier"]["mode"], "clean", "{shadow:#}");
    assert_eq!(shadow["verifier"]["status"], "failed", "{shadow:#}");
    for r in [&records[0], &records[2]] {
        assert_eq!(r["integrity"]["status"], "clean", "{r:#}");
        assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    }
    // clean: every trial is verified on the original image with its work replayed.
    let Some(records) = run_agents("pycheck-clean", &agents, &names) else {
        return;
    };
    for r in &records {
        assert_eq!(r["verifier"]["mode"], "clean", "{r:#}");
    }
    assert_eq!(
        records[0]["verifier"]["status"], "passed",
        "{:#}",
        records[0]
    );
    assert_eq!(
        records[2]["verifier"]["status"], "passed",
        "{:#}",
        records[2]
    );
    assert_ne!(
        records[1]["verifier"]["status"], "passed",
        "{:#}",
        records[1]
    );
}

#[test]
fn separate_mode_runs_the_verifiers_own_image_on_the_artifacts_only() {
    let names = ["oracle", "nop", "honest", "tamper"];
    let agents = [
        "  - name: oracle\n    kind: oracle\n  - name: nop\n    kind: nop\n".to_string(),
        agent("honest", "echo 42 > /app/answer.txt"),
        // Wraps the interpreter the check uses, plants a file and forges a reward: none of it
        // exists where the separate verifier runs.
        agent(
            "tamper",
            "echo 41 > /app/answer.txt && touch /app/planted && printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3 && mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt",
        ),
    ]
    .concat();
    let Some(records) = run_agents("pycheck-separate", &agents, &names) else {
        return;
    };
    for r in &records {
        assert_eq!(r["verifier"]["mode"], "separate", "{r:#}");
    }
    let [oracle, nop, honest, tamper] = [&records[0], &records[1], &records[2], &records[3]];
    // The oracle also wrote /app/notes.txt, which the verifier fails on if it can see it.
    assert_eq!(oracle["verifier"]["status"], "passed", "{oracle:#}");
    assert_eq!(honest["verifier"]["status"], "passed", "{honest:#}");
    assert_eq!(honest["integrity"]["status"], "clean", "{honest:#}");
    // Its file and the working dir the engine created for it, and nothing else of the
    // engine's (its init under a merged /usr, its marker).
    assert_eq!(honest["changes"]["added"], 2, "{honest:#}");
    assert_ne!(nop["verifier"]["status"], "passed", "{nop:#}");
    assert_eq!(tamper["verifier"]["status"], "failed", "{tamper:#}");
    assert_eq!(tamper["integrity"]["status"], "restored", "{tamper:#}");
}
