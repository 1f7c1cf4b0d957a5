//! Synthetic job directories for report tests: trials.jsonl (full arbiter.trial.v1 records),
//! lock.json and job.yaml, written directly — no engine needed.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

/// How a synthetic trial comes out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Verifier passed; the agent claimed success.
    Pass,
    /// Verifier failed; no claim of success.
    Fail,
    /// Verifier failed although the agent claimed success.
    FalseCompletion,
    /// Verifier passed without a claim.
    Unclaimed,
    /// The verifier wrote no reward.
    VerifierError,
    /// Harness failure: not scored.
    Infra,
}

pub struct T<'a> {
    pub task: &'a str,
    pub agent: &'a str,
    pub variant: &'a str,
    pub attempt: u32,
    pub kind: Kind,
    pub agent_seconds: f64,
}

pub fn record(t: &T<'_>, job: &str) -> Value {
    let id = format!("{}__{}__{}__{}", t.task, t.agent, t.variant, t.attempt);
    let claimed = matches!(t.kind, Kind::Pass | Kind::FalseCompletion);
    let claim = if t.kind == Kind::Infra {
        json!({"status": "missing"})
    } else if claimed {
        json!({"status": "present", "source": "file", "semantic_status": "succeeded",
               "record": {"schema_version": "aworld.run.outcome.v1", "semantic_status": "succeeded",
                          "process_exit_code": 0, "trajectory_fidelity": "complete",
                          "llm_call_count": 12, "tool_call_count": 30, "action_count": 30,
                          "last_successful_checkpoint": null}})
    } else {
        json!({"status": "present", "source": "stderr", "semantic_status": "task_failed",
               "record": {"schema_version": "aworld.run.outcome.v1", "semantic_status": "task_failed"}})
    };
    let (verifier, verdict) = match t.kind {
        Kind::Pass => (
            json!({"status": "passed", "mode": "snapshot", "reward": {"reward": 1.0}, "exit_code": 0}),
            Some("certified"),
        ),
        Kind::Unclaimed => (
            json!({"status": "passed", "mode": "snapshot", "reward": {"reward": 1.0}, "exit_code": 0}),
            Some("unclaimed_success"),
        ),
        Kind::Fail => (
            json!({"status": "failed", "mode": "snapshot", "reward": {"reward": 0.0}, "exit_code": 1}),
            Some("honest_failure"),
        ),
        Kind::FalseCompletion => (
            json!({"status": "failed", "mode": "snapshot", "reward": {"reward": 0.25}, "exit_code": 1}),
            Some("false_completion"),
        ),
        Kind::VerifierError => (
            json!({"status": "error", "mode": "snapshot", "exit_code": 2,
                   "detail": "the verifier wrote no reward.json or reward.txt"}),
            Some("unverifiable"),
        ),
        Kind::Infra => (
            json!({"status": "skipped", "mode": "snapshot", "detail": "not run: infrastructure error"}),
            None,
        ),
    };
    let mut r = json!({
        "schema": "arbiter.trial.v1",
        "id": id, "job": job, "task": t.task, "agent": t.agent, "variant": t.variant,
        "attempt": t.attempt,
        "task_checksum": "sha256:0000",
        "image": "arbiter/busybox:latest",
        "termination": if t.kind == Kind::Infra {
            json!({"kind": "infra_error", "detail": "container create failed"})
        } else {
            json!({"kind": "exited", "exit_code": 0})
        },
        "claim": claim,
        "verifier": verifier,
        "audit": verdict.map(|v| json!({"verdict": v, "violations": [], "evidence": ["synthetic"]})),
        "phases": {
            "environment": {"seconds": 0.5},
            "agent": {"seconds": t.agent_seconds},
            "collect": {"seconds": 0.25},
            "verify": {"seconds": 0.75}
        },
        "retries": 0,
        "artifacts": [],
        "overrides": {},
        "limits": {"cpus": 1.0, "memory_mb": 2048, "pids_limit": 1024, "network": "no-network", "storage_enforced": false},
        "output": {"stdout_bytes": 10, "stderr_bytes": 20, "truncated": false},
        "started_at": "2026-01-02T03:04:05Z",
        "finished_at": "2026-01-02T03:05:05Z"
    });
    if t.kind == Kind::Infra {
        r["infra_error"] =
            json!({"phase": "environment", "message": "container create failed: engine gone"});
        r["retries"] = json!(2);
        r.as_object_mut().expect("object").remove("audit");
        r["audit"] = Value::Null;
    }
    r
}

/// Write a job dir with these trials; agents and variants are listed in job.yaml in the order
/// given.
pub fn write_job(dir: &Path, trials: &[T<'_>], agents: &[&str], variants: &[&str], attempts: u32) {
    std::fs::create_dir_all(dir.join("trials")).expect("mkdir");
    let job = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "job".into());
    let mut f = std::fs::File::create(dir.join("trials.jsonl")).expect("create");
    for t in trials {
        writeln!(
            f,
            "{}",
            serde_json::to_string(&record(t, &job)).expect("json")
        )
        .expect("write");
    }
    let lock = json!({"schema": "arbiter.lock.v1", "arbiter_version": "0.1.0", "tasks": {},
                      "agents": {}, "variants": {}, "attempts": attempts, "pass_threshold": 1.0,
                      "timeouts": {"agent": 1.0, "verifier": 1.0, "build": 1.0, "install": 1.0}});
    std::fs::write(
        dir.join("lock.json"),
        serde_json::to_vec_pretty(&lock).expect("json"),
    )
    .expect("lock");
    let mut yaml = format!("name: {job}\nagents:\n");
    for a in agents {
        yaml.push_str(&format!("- name: {a}\n  kind: nop\n"));
    }
    yaml.push_str("variants:\n");
    for v in variants {
        yaml.push_str(&format!("- name: {v}\n"));
    }
    std::fs::write(dir.join("job.yaml"), yaml).expect("yaml");
}

/// Deterministic pseudo-random kinds for a grid of trials (for bigger synthetic jobs).
pub fn grid(
    tasks: usize,
    arms: &[(&'static str, &'static str, f64)],
    attempts: u32,
    seed: u64,
) -> Vec<(String, &'static str, &'static str, u32, Kind, f64)> {
    let mut s = seed;
    let mut next = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = Vec::new();
    for (agent, variant, p) in arms {
        for t in 0..tasks {
            // per-task difficulty shared by every arm, so arms are correlated like real ones
            let difficulty = ((t * 37) % 100) as f64 / 100.0;
            for a in 1..=attempts {
                let u = next();
                let kind = if u < 0.02 {
                    Kind::Infra
                } else if u < 0.04 {
                    Kind::VerifierError
                } else if next() < (p + 0.5 - difficulty).clamp(0.02, 0.98) {
                    Kind::Pass
                } else if next() < 0.2 {
                    Kind::FalseCompletion
                } else {
                    Kind::Fail
                };
                out.push((
                    format!("task-{t:03}"),
                    *agent,
                    *variant,
                    a,
                    kind,
                    5.0 + 40.0 * next(),
                ));
            }
        }
    }
    out
}

pub fn write_grid(
    dir: &Path,
    rows: &[(String, &'static str, &'static str, u32, Kind, f64)],
    agents: &[&str],
    variants: &[&str],
    attempts: u32,
) {
    let trials: Vec<T<'_>> = rows
        .iter()
        .map(|(task, agent, variant, attempt, kind, secs)| T {
            task,
            agent,
            variant,
            attempt: *attempt,
            kind: *kind,
            agent_seconds: *secs,
        })
        .collect();
    write_job(dir, &trials, agents, variants, attempts);
}

pub fn arbiter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(args)
        .output()
        .expect("run arbiter")
}

pub fn arbiter_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .current_dir(dir)
        .args(args)
        .output()
        .expect("run arbiter")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Where tests leave files a person may want to look at (screenshots).
pub fn output_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("report-tests")
        .join(name);
    std::fs::create_dir_all(&dir).expect("mkdir output dir");
    dir
}

/// A tool the report tests need (chromium, xmllint). With ARBITER_REQUIRE_DOCKER=1 (CI) a
/// missing tool fails the test instead of skipping it.
pub fn tool(name: &str, package: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() == Ok("1") {
            panic!(
                "ARBITER_REQUIRE_DOCKER=1 but {name} is missing (Debian package {package}; scripts/test installs it as root)"
            );
        }
        eprintln!(
            "skipping: {name} not found (apt-get install {package}); set ARBITER_REQUIRE_DOCKER=1 to fail instead"
        );
    }
    found
}

pub fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Replace the trials.jsonl line of `id` with `f(record)`, and write it as the trial's
/// result.json too.
pub fn edit_record(dir: &Path, id: &str, f: impl Fn(&mut Value)) {
    let path = dir.join("trials.jsonl");
    let text = std::fs::read_to_string(&path).expect("jsonl");
    let mut lines = Vec::new();
    for line in text.lines() {
        let mut v: Value = serde_json::from_str(line).expect("line");
        if v["id"] == id {
            f(&mut v);
            let tdir = dir.join("trials").join(id);
            std::fs::create_dir_all(&tdir).expect("trial dir");
            std::fs::write(
                tdir.join("result.json"),
                serde_json::to_vec_pretty(&v).expect("json"),
            )
            .expect("result.json");
        }
        lines.push(serde_json::to_string(&v).expect("json"));
    }
    std::fs::write(&path, lines.join("\n") + "\n").expect("write jsonl");
}

pub fn usage(cost: f64, input: u64, errors: u64) -> Value {
    json!({"requests": 3, "input_tokens": input, "output_tokens": 100, "cache_read_tokens": 0,
           "cost_usd": cost, "upstream_errors": {"429": errors},
           "budget": {"max_cost_usd": 2.0, "exhausted": false}})
}

pub const HOSTILE: &str = "</script><script>alert(1)</script><img src=x onerror=alert(2)>\"'&";

/// A trial directory with every file a trial page reads, each carrying hostile text.
pub fn write_rich_trial(dir: &Path, id: &str, trajectory_bytes: usize) {
    let t = dir.join("trials").join(id);
    std::fs::create_dir_all(t.join("agent")).expect("agent dir");
    std::fs::create_dir_all(t.join("verifier")).expect("verifier dir");
    let big_output = "x".repeat(5000);
    let mut steps = vec![
        json!({"step_id": 1, "source": "user", "message": format!("Fix the build {HOSTILE}")}),
        json!({"step_id": 2, "source": "agent", "model_name": "claude-sonnet-4-5",
               "message": [{"type": "text", "text": "I will run the tests."}],
               "tool_calls": [{"tool_call_id": "c1", "function_name": "bash",
                               "arguments": {"command": format!("pytest -q {HOSTILE}")}}],
               "observation": {"results": [{"source_call_id": "c1", "content": big_output}]},
               "metrics": {"prompt_tokens": 1200, "completion_tokens": 80}}),
    ];
    let mut n = 3;
    while serde_json::to_vec(&steps).expect("json").len() < trajectory_bytes {
        steps.push(json!({"step_id": n, "source": "agent", "message": format!("step {n}: {}", "y".repeat(2000)),
                          "tool_calls": [{"tool_call_id": format!("c{n}"), "function_name": "bash", "arguments": {"command": "ls"}}],
                          "observation": {"results": [{"source_call_id": format!("c{n}"), "content": "z".repeat(1500)}]}}));
        n += 1;
    }
    let atif = json!({"schema_version": "ATIF-v1.4", "session_id": "s1",
                      "agent": {"name": "claude-code", "version": "2.1.332", "model_name": "claude-sonnet-4-5"},
                      "steps": steps, "final_metrics": {"total_prompt_tokens": 1200}});
    std::fs::write(
        t.join("agent/trajectory.atif.json"),
        serde_json::to_vec(&atif).expect("json"),
    )
    .expect("trajectory");
    let calls = [
        json!({"time": "2026-01-02T03:04:06Z", "api": "anthropic", "model": "claude-sonnet-4-5", "status": 200,
               "latency_ms": 812, "input_tokens": 1200, "output_tokens": 80, "stop_reason": "tool_use"}),
        json!({"time": "2026-01-02T03:04:08Z", "api": "anthropic", "model": HOSTILE, "status": 429,
               "latency_ms": 15, "error": HOSTILE}),
    ];
    std::fs::write(
        t.join("agent/model-calls.jsonl"),
        calls
            .iter()
            .map(|c| c.to_string() + "\n")
            .collect::<String>(),
    )
    .expect("calls");
    let changes = json!({"added": [{"path": format!("/app/{HOSTILE}"), "type": "file", "size": 12, "mode": "0644"},
                                   {"path": "/usr/local/bin/pytest", "type": "file", "size": 90, "mode": "0755"}],
                         "modified": [{"path": "/usr/bin/python3", "type": "file", "size": 5_000_000, "mode": "0755"}],
                         "deleted": [{"path": "/app/old.txt", "type": "file"}]});
    std::fs::write(
        t.join("agent/changes.json"),
        serde_json::to_vec(&changes).expect("json"),
    )
    .expect("changes");
    std::fs::write(t.join("agent/stdout.log"), format!("hello {HOSTILE}\n")).expect("log");
    std::fs::write(t.join("agent/stderr.log"), "x\n".repeat(100_000)).expect("log");
    std::fs::write(
        t.join("verifier/stdout.log"),
        format!("1 failed {HOSTILE}\n"),
    )
    .expect("log");
}

/// `agent/changes.json` as a trial writes it (`arbiter.changes.v1`), from the engine's list of
/// a trial that edited files inside and outside its working dir `/workspace`: the engine also
/// lists every parent directory of a change as modified, which `collapse` marks implied.
/// Returns the record's `changes` (the trial's own `summarize`): 1 added, 4 modified,
/// 1 deleted, 3 outside the working dir.
pub fn write_change_set(dir: &Path, id: &str) -> Value {
    use arbiter::verifier::integrity::{
        ChangeEntry, ChangeKind::*, ChangesFile, FileType::*, HashCaps, HashReport, collapse,
        summarize,
    };
    let listed = [
        ("/etc", Modified, Dir),
        ("/etc/hosts", Modified, File),
        ("/usr", Modified, Dir),
        ("/usr/local", Modified, Dir),
        ("/usr/local/lib", Modified, Dir),
        ("/usr/local/lib/python3.12", Modified, Dir),
        ("/usr/local/lib/python3.12/site.py", Modified, File),
        ("/workspace", Modified, Dir),
        ("/workspace/src", Modified, Dir),
        ("/workspace/src/main.py", Modified, File),
        ("/workspace/README.md", Modified, File),
        ("/workspace/new.txt", Added, File),
        ("/tmp", Modified, Dir),
        ("/tmp/cache.db", Deleted, File),
    ];
    let mut entries = collapse(
        listed
            .iter()
            .map(|(p, k, t)| ChangeEntry::new(*p, *k, *t))
            .collect(),
    );
    for e in &mut entries {
        e.size = (e.file_type == File && e.kind != Deleted).then_some(120);
        e.mode = (e.kind != Deleted).then_some(0o100644);
    }
    let summary = summarize(&entries, "/workspace");
    let hashing = HashReport {
        caps: HashCaps::default(),
        planned: 0,
        planned_bytes: 0,
        skipped: Default::default(),
    };
    let file = ChangesFile::new("/workspace", hashing, entries);
    let agent = dir.join("trials").join(id).join("agent");
    std::fs::create_dir_all(&agent).expect("agent dir");
    std::fs::write(
        agent.join("changes.json"),
        serde_json::to_vec_pretty(&file).expect("json"),
    )
    .expect("changes.json");
    serde_json::to_value(summary).expect("summary")
}

/// The text of a trial page's section `id` (`facts`, `changes`, …).
pub fn page_section<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!("<section id=\"{id}\">"))
        .unwrap_or_else(|| panic!("section {id}"));
    let end = page[start..].find("</section>").expect("section end") + start;
    &page[start..end]
}
