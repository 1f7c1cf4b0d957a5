//! Real agent CLIs from the host cache, in real containers, against the scripted model server
//! (tests/fixtures/agents/scripted_model.py on 127.0.0.1, network `host` for these tests
//! only): each preset's plan runs unmodified, does the scripted work, and its adapter reads
//! the claim from what the CLI left.
//!
//! Needs a Docker engine, the image `arbiter/debian:bookworm` and the agents in the cache
//! (`scripts/agents`, which `scripts/test` runs). Without them the tests skip, and under
//! `ARBITER_REQUIRE_DOCKER=1` they fail.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use arbiter::agent::cache::AgentCache;
use arbiter::agent::{
    AdapterReads, Agent, AgentEnd, INSTRUCTION_PATH, ModelWiring, PlanContext, PresetKind,
};
use arbiter::outcome::{ClaimSource, ClaimStatus};
use arbiter::sandbox::docker::DockerSandbox;
use arbiter::sandbox::{
    Base, ContainerLimits, ContainerSpec, ExecEnd, ExecSpec, Fetched, ImageRef, Mount, Network,
    Owner, Resource, Role, Sandbox, TarEntry, files_to_tar,
};

const IMAGE: &str = "arbiter/debian:bookworm";

/// Whether the engine, image and cache entry are there; panics under
/// `ARBITER_REQUIRE_DOCKER=1` when they are not.
fn ready(kind: PresetKind) -> Option<AgentCache> {
    if !common::docker_available() {
        return None;
    }
    let require = std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() == Ok("1");
    let image_ok = Command::new("docker")
        .args(["image", "inspect", IMAGE])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !image_ok {
        assert!(
            !require,
            "ARBITER_REQUIRE_DOCKER=1 but {IMAGE} is missing (run scripts/bootstrap)"
        );
        eprintln!("skipping: {IMAGE} is missing");
        return None;
    }
    let cache = AgentCache::from_env().expect("cache root");
    if let Err(e) = cache.lookup(kind.name(), kind.pinned_version()) {
        assert!(
            !require,
            "ARBITER_REQUIRE_DOCKER=1 but {e} (scripts/agents installs it)"
        );
        eprintln!("skipping: {e}");
        return None;
    }
    Some(cache)
}

/// The scripted model server, killed on drop.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(script: &serde_json::Value) -> Server {
        let dir = tempfile::tempdir().expect("tmp");
        let script_path = dir.path().join("script.json");
        std::fs::write(&script_path, script.to_string()).expect("script");
        let port_file = dir.path().join("port");
        let log = dir.path().join("requests.jsonl");
        let child = Command::new("python3")
            .arg(common::repo().join("tests/fixtures/agents/scripted_model.py"))
            .arg("--script")
            .arg(&script_path)
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the scripted model server");
        let started = Instant::now();
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file)
                && let Ok(port) = text.trim().parse()
            {
                break port;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "scripted model server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Server {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    fn requests(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|t| t.lines().filter(|l| l.contains("\"POST\"")).count())
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Run {
    exit_code: Option<i64>,
    seconds: f64,
    claim: arbiter::outcome::Claim,
    out_txt: String,
    logs_tar: Vec<u8>,
    argv: Vec<String>,
}

/// Plan `kind` for a task whose instruction asks for `/app/out.txt`, run it in a fresh
/// container of [`IMAGE`] with the cache mounted read-only, and read the claim.
/// `extra` is more YAML for the agent definition (`max_turns: 2\n`).
async fn run_preset(
    kind: PresetKind,
    cache: AgentCache,
    server: &Server,
    token: &str,
    extra: &str,
) -> Run {
    let task_dir = tempfile::tempdir().expect("tmp");
    let dir = task_dir.path().join("t");
    std::fs::create_dir_all(dir.join("tests")).expect("mkdir");
    std::fs::write(
        dir.join("task.toml"),
        format!(
            "[agent]\ntimeout_sec = 120\n[environment]\nnetwork_mode = \"no-network\"\ndocker_image = \"{IMAGE}\"\nworkdir = \"/app\"\n"
        ),
    )
    .expect("task.toml");
    std::fs::write(dir.join("instruction.md"), "Write hello to /app/out.txt.\n").expect("instr");
    std::fs::write(dir.join("tests/test.sh"), "#!/bin/sh\nexit 0\n").expect("test.sh");
    let task = arbiter::task::load(&dir).expect("task loads");
    let agent: Agent =
        serde_yaml::from_str(&format!("name: a\nkind: {}\n{extra}", kind.name())).expect("agent");
    agent.validate().expect("valid");
    agent.check_installed(&cache).expect("installed");
    let ctx = PlanContext {
        model: Some(ModelWiring {
            openai_base_url: format!("http://127.0.0.1:{}/v1", server.port),
            anthropic_base_url: format!("http://127.0.0.1:{}", server.port),
            token: token.to_string(),
            model: "scripted-model".to_string(),
        }),
        cache: Some(cache),
        now_unix: None,
    };
    let plan = agent.plan_in(&task, &BTreeMap::new(), &ctx).expect("plans");
    let run = plan.run.clone().expect("run step");

    let sb = DockerSandbox::connect().await.expect("engine");
    let spec = ContainerSpec {
        base: Base::Image(ImageRef::new(IMAGE)),
        owner: Owner {
            job: "presets-test".to_string(),
            trial: kind.name().to_string(),
            role: Role::Agent,
            extra: BTreeMap::from([("arbiter.test".to_string(), "presets".to_string())]),
        },
        env: vec![(
            "ARBITER_INSTRUCTION_FILE".to_string(),
            INSTRUCTION_PATH.to_string(),
        )],
        limits: ContainerLimits {
            cpus: 2.0,
            memory_mb: 2048,
            pids_limit: 1024,
            gpus: 0,
            storage_mb: None,
        },
        network: Network::Host,
        workdir: Some("/app".to_string()),
        mounts: plan
            .ro_mounts
            .iter()
            .map(|(host, container)| Mount {
                host: host.clone(),
                container: container.clone(),
                read_only: true,
            })
            .collect(),
        start: arbiter::sandbox::StartSpec::default(),
    };
    let id = sb.create(&spec).await.expect("create");
    let result = async {
        sb.start(&id).await.expect("start");
        let base = files_to_tar(&[
            TarEntry {
                path: "arbiter/",
                content: None,
                mode: 0o755,
            },
            TarEntry {
                path: "arbiter/instruction.md",
                content: Some(task.instruction.as_bytes()),
                mode: 0o644,
            },
            TarEntry {
                path: "logs/",
                content: None,
                mode: 0o755,
            },
            TarEntry {
                path: "logs/agent/",
                content: None,
                mode: 0o777,
            },
            TarEntry {
                path: "app/",
                content: None,
                mode: 0o777,
            },
        ])
        .expect("tar");
        sb.upload(&id, "/", base).await.expect("base files");
        for upload in &plan.uploads {
            sb.upload(&id, &upload.dest, upload.tar.clone())
                .await
                .expect("upload");
        }
        let out_dir = tempfile::tempdir().expect("tmp");
        let exec = |argv: Vec<String>, env: Vec<(String, String)>, name: &str| ExecSpec {
            argv,
            env,
            user: run.user.clone(),
            workdir: Some("/app".to_string()),
            stdout: Some(out_dir.path().join(format!("{name}.stdout"))),
            stderr: Some(out_dir.path().join(format!("{name}.stderr"))),
            cap_bytes: 10 * 1024 * 1024,
            timeout: Some(Duration::from_secs(120)),
            grace: Duration::from_secs(2),
        };
        let started = Instant::now();
        let outcome = sb
            .exec(&id, &exec(run.argv.clone(), plan.env.clone(), "agent"))
            .await
            .expect("exec");
        let seconds = started.elapsed().as_secs_f64();
        let stdout = std::fs::read(out_dir.path().join("agent.stdout")).unwrap_or_default();
        let stderr = std::fs::read(out_dir.path().join("agent.stderr")).unwrap_or_default();
        let adapter = plan.adapter.expect("adapter");
        let file = match adapter.reads() {
            AdapterReads::File(path) => {
                let cat = sb
                    .exec(&id, &exec(vec!["cat".into(), path], Vec::new(), "file"))
                    .await
                    .expect("cat");
                (cat.end == ExecEnd::Exited(0))
                    .then(|| std::fs::read(out_dir.path().join("file.stdout")).unwrap_or_default())
            }
            AdapterReads::Output => None,
        };
        let claim = adapter.claim(&AgentEnd {
            exit_code: outcome.end.exit_code(),
            stdout: &stdout,
            stdout_truncated: outcome.truncated,
            stderr: &stderr,
            file: file.as_deref(),
        });
        if claim.semantic_status.as_deref() != Some("succeeded") {
            eprintln!(
                "agent stdout:\n{}\nagent stderr:\n{}",
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            );
        }
        sb.exec(
            &id,
            &exec(vec!["cat".into(), "/app/out.txt".into()], Vec::new(), "out"),
        )
        .await
        .expect("cat out");
        let out_txt =
            std::fs::read_to_string(out_dir.path().join("out.stdout")).unwrap_or_default();
        let tar_path = out_dir.path().join("logs.tar");
        let fetched = sb
            .download(
                &id,
                arbiter::sandbox::Download::whole("/logs/agent", &tar_path, 512 * 1024 * 1024),
            )
            .await
            .expect("logs");
        assert!(matches!(fetched, Fetched::Archive { .. }), "{fetched:?}");
        let mut logs_tar = std::fs::read(&tar_path).expect("tar");
        logs_tar.extend(stdout);
        logs_tar.extend(stderr);
        Run {
            exit_code: outcome.end.exit_code(),
            seconds,
            claim,
            out_txt,
            logs_tar,
            argv: run.argv.clone(),
        }
    }
    .await;
    sb.remove(&Resource::Container(id.clone()))
        .await
        .expect("remove");
    result
}

fn script_writing_out_txt(kind: PresetKind) -> serde_json::Value {
    match kind {
        PresetKind::Aider => serde_json::json!({
            "step_by": "request",
            "steps": [{"say": "Creating it.\n\n/app/out.txt\n```\nhello\n```\n"}],
        }),
        PresetKind::MiniSweAgent => serde_json::json!({
            "steps": [
                {"run": "echo hello > /app/out.txt"},
                {"run": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"},
            ],
        }),
        PresetKind::ClaudeCode | PresetKind::Codex => serde_json::json!({
            "steps": [{"run": "echo hello > /app/out.txt"}, {"say": "Wrote /app/out.txt."}],
        }),
    }
}

async fn solves_scripted_task(kind: PresetKind) {
    let Some(cache) = ready(kind) else { return };
    let server = Server::start(&script_writing_out_txt(kind));
    let token = format!("arb-test-token-{}", std::process::id());
    let run = run_preset(kind, cache, &server, &token, "").await;
    eprintln!(
        "{}: agent phase {:.2} s, {} model requests",
        kind.name(),
        run.seconds,
        server.requests()
    );
    assert_eq!(run.exit_code, Some(0), "{}", kind.name());
    // ~1 s measured on an idle machine; a single network stall (Codex's analytics or plugin
    // sync, a DNS lookup with no network) costs 5 s. A bound on seconds fails on a loaded
    // machine (9.7 s seen with builds running, 1.1 s idle), so it is checked only when asked
    // for: ARBITER_PRESET_MAX_AGENT_SECS=8 (a benchmark's knob, not the suite's).
    let bound: Option<f64> = std::env::var("ARBITER_PRESET_MAX_AGENT_SECS")
        .ok()
        .and_then(|s| s.parse().ok());
    if let Some(bound) = bound
        && matches!(kind, PresetKind::ClaudeCode | PresetKind::Codex)
    {
        assert!(
            run.seconds < bound,
            "{}: agent phase took {:.1} s",
            kind.name(),
            run.seconds
        );
    }
    assert_eq!(run.claim.status, ClaimStatus::Present, "{:?}", run.claim);
    assert_eq!(run.claim.source, Some(ClaimSource::Adapter));
    assert_eq!(run.claim.semantic_status.as_deref(), Some("succeeded"));
    assert_eq!(run.out_txt.trim(), "hello", "the scripted work was done");
    assert!(server.requests() >= 1);
    assert!(
        run.argv.iter().all(|a| !a.contains(&token)),
        "token in argv"
    );
    let haystack = String::from_utf8_lossy(&run.logs_tar);
    assert!(
        !haystack.contains(&token),
        "{}: the token is in the agent's collected logs",
        kind.name()
    );
    // No phone-home: with network `host` a lookup would succeed or fail loudly; neither may
    // be attempted (price maps, update checks, telemetry).
    for sign in [
        "raw.githubusercontent.com",
        "Temporary failure in name resolution",
        "Name or service not known",
    ] {
        assert!(
            !haystack.contains(sign),
            "{}: {sign:?} in its output",
            kind.name()
        );
    }
}

#[tokio::test]
async fn claude_code_solves_a_scripted_task_from_the_read_only_cache() {
    solves_scripted_task(PresetKind::ClaudeCode).await;
}

#[tokio::test]
async fn codex_solves_a_scripted_task_from_the_read_only_cache() {
    solves_scripted_task(PresetKind::Codex).await;
}

#[tokio::test]
async fn mini_swe_agent_solves_a_scripted_task_from_the_read_only_cache() {
    solves_scripted_task(PresetKind::MiniSweAgent).await;
}

#[tokio::test]
async fn aider_solves_a_scripted_task_from_the_read_only_cache() {
    solves_scripted_task(PresetKind::Aider).await;
}

#[tokio::test]
async fn claude_code_turn_limit_reads_as_task_failed() {
    let kind = PresetKind::ClaudeCode;
    let Some(cache) = ready(kind) else { return };
    let server =
        Server::start(&serde_json::json!({"steps": [{"run": "true"}], "repeat_last": true}));
    let run = run_preset(
        kind,
        cache,
        &server,
        "arb-test-token-turns",
        "max_turns: 2\n",
    )
    .await;
    assert_eq!(run.claim.semantic_status.as_deref(), Some("task_failed"));
    assert_eq!(
        run.claim.record.as_ref().expect("record")["failure"]["error_code"],
        "max_turns"
    );
}

#[tokio::test]
async fn mini_swe_agent_step_limit_reads_as_task_failed() {
    let kind = PresetKind::MiniSweAgent;
    let Some(cache) = ready(kind) else { return };
    let server =
        Server::start(&serde_json::json!({"steps": [{"run": "true"}], "repeat_last": true}));
    let run = run_preset(
        kind,
        cache,
        &server,
        "arb-test-token-steps",
        "max_turns: 2\n",
    )
    .await;
    assert_eq!(run.claim.semantic_status.as_deref(), Some("task_failed"));
    assert_eq!(
        run.claim.record.as_ref().expect("record")["failure"]["error_code"],
        "limits_exceeded"
    );
}

#[tokio::test]
async fn a_refused_token_reads_as_infrastructure_for_every_preset() {
    for kind in PresetKind::ALL {
        let Some(cache) = ready(kind) else { return };
        let server = Server::start(&serde_json::json!({
            "steps": [],
            "fail": {"status": 401, "type": "authentication_error", "message": "invalid key"},
        }));
        let run = run_preset(kind, cache, &server, "arb-test-token-refused", "").await;
        assert_eq!(
            run.claim.semantic_status.as_deref(),
            Some("infrastructure_failed"),
            "{}: {:?}",
            kind.name(),
            run.claim
        );
    }
}

/// `arbiter agents` on the real binary, against the host cache.
#[test]
fn agents_cli_errors_and_a_second_install_is_a_no_op() {
    let out = common::arbiter(&["agents", "install", "claude"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        common::stderr(&out),
        "error: \"claude\" is not an agent preset (expected one of: claude-code, codex, mini-swe-agent, aider)\n"
    );
    let out = common::arbiter(&["agents", "install", "codex@"]);
    assert_eq!(out.status.code(), Some(2));
    // A second install of a cached preset fetches nothing.
    let Some(cache) = ready(PresetKind::Codex) else {
        return;
    };
    let before = std::fs::read(
        cache
            .entry_dir("codex", PresetKind::Codex.pinned_version())
            .join("manifest.json"),
    )
    .expect("manifest");
    let root = cache.root().to_string_lossy().into_owned();
    let out = common::arbiter(&["agents", "install", "codex", "--cache", &root]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(common::stdout(&out).contains("codex 0.171.0: already installed in"));
    let after = std::fs::read(
        cache
            .entry_dir("codex", PresetKind::Codex.pinned_version())
            .join("manifest.json"),
    )
    .expect("manifest");
    assert_eq!(before, after, "the entry was not rewritten");
    let out = common::arbiter(&["agents", "list", "--cache", &root]);
    assert!(common::stdout(&out).contains("codex           0.171.0    installed"));
}

/// A fake `npm` on `PATH` (`npm pack` writes a tarball holding an ELF-looking
/// `package/claude` and prints npm's `--json` answer) and a fresh cache: the first
/// `agents install` fetches, a second is a no-op that runs no npm, and a damaged entry (its
/// binary cut short) is detected and fetched again.
#[test]
fn a_second_install_fetches_nothing_and_a_damaged_entry_is_fetched_again() {
    let tmp = tempfile::tempdir().expect("tmp");
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let calls = tmp.path().join("npm-calls.log");
    // npm pack SPEC --json --pack-destination DIR
    let npm = format!(
        r#"#!/bin/sh
set -e
echo "$*" >> {calls}
dest=$5
work=$(mktemp -d)
mkdir -p "$work/package"
printf '\177ELFfake-claude-binary' > "$work/package/claude"
chmod +x "$work/package/claude"
tar -czf "$dest/claude-code-9.9.9.tgz" -C "$work" package
echo '[{{"filename": "claude-code-9.9.9.tgz", "integrity": "sha512-fake"}}]'
"#,
        calls = calls.display()
    );
    std::fs::write(bin.join("npm"), npm).expect("npm");
    std::fs::set_permissions(
        bin.join("npm"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let cache = tmp.path().join("cache");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let install = || {
        Command::new(env!("CARGO_BIN_EXE_arbiter"))
            .args(["agents", "install", "claude-code@9.9.9", "--cache"])
            .arg(&cache)
            .env("PATH", &path)
            .output()
            .expect("arbiter agents install")
    };
    let npm_calls = || {
        std::fs::read_to_string(&calls)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };

    let out = install();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(
        common::stdout(&out).contains("claude-code 9.9.9: installed in"),
        "{}",
        common::stdout(&out)
    );
    assert_eq!(npm_calls(), 1);
    let entry = cache.join("claude-code/9.9.9");
    let manifest = std::fs::read(entry.join("manifest.json")).expect("manifest");

    // Second install: nothing fetched, nothing rewritten.
    let out = install();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    assert!(
        common::stdout(&out).contains("claude-code 9.9.9: already installed in"),
        "{}",
        common::stdout(&out)
    );
    assert_eq!(npm_calls(), 1, "a second install ran npm");
    assert_eq!(
        std::fs::read(entry.join("manifest.json")).expect("manifest"),
        manifest
    );

    // Damage the entry (the binary cut short, as by a full disk): detected, fetched again,
    // whole again. The check is the listing (names, sizes, modes), not a content hash.
    std::fs::write(entry.join("bin/claude"), b"\x7fELFfake").expect("damage");
    let out = install();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let said = common::stdout(&out);
    assert!(
        said.contains("claude-code 9.9.9: installed in")
            && said.contains("replaced the previous entry"),
        "{said}"
    );
    assert!(
        said.contains("damaged") || said.contains("differ"),
        "{said}"
    );
    assert_eq!(npm_calls(), 2);
    assert_eq!(
        std::fs::read(entry.join("bin/claude")).expect("binary"),
        b"\x7fELFfake-claude-binary"
    );
    let cache = AgentCache::at(&cache);
    cache.verify("claude-code", "9.9.9").expect("whole again");
}

/// `--model anthropic/...` without `ANTHROPIC_API_KEY` (and no such provider in a job file)
/// is refused before anything starts: exit 2, one line naming the flag and the variable.
#[test]
fn the_model_flag_without_its_key_is_refused_in_one_line() {
    let task = common::repo().join("tasks/exact-deliverable");
    let out = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args([
            "run",
            "--agent",
            "claude-code",
            "--model",
            "anthropic/claude-sonnet-4-5",
        ])
        .arg(&task)
        .env_remove("ANTHROPIC_API_KEY")
        .output()
        .expect("arbiter run");
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert_eq!(
        common::stderr(&out),
        "error: --model:anthropic/claude-sonnet-4-5: ANTHROPIC_API_KEY is not set in arbiter's environment (the anthropic provider is implied from it; or define it under models: in the job file)\n"
    );
    assert!(common::stdout(&out).is_empty());
    let out = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["run", "--agent", "codex", "--model", "gpt-5"])
        .arg(&task)
        .output()
        .expect("arbiter run");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        common::stderr(&out),
        "error: --model:gpt-5: expected PROVIDER/NAME (e.g. anthropic/claude-sonnet-4-5)\n"
    );
}
