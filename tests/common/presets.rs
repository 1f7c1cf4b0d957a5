//! Helpers of the preset test binaries (Docker and Kubernetes): the fake keys, the example
//! tasks, the scripted provider's scripts and the checks of a preset's trial.

use std::collections::BTreeMap;
use std::path::Path;

use arbiter::agent::PresetKind;
use arbiter::agent::cache::AgentCache;
use serde_json::{Value, json};

use super::{docker_available, files_under, repo, result};

pub const FAKE_OPENAI_KEY: &str = "sk-proj-arbiterFAKEopenaiKEY0123456789";
pub const FAKE_ANTHROPIC_KEY: &str = "sk-ant-arbiterFAKEanthropicKEY0123456789";
pub const TASKS: [&str; 6] = [
    "csv-to-json",
    "exact-deliverable",
    "fix-broken-config",
    "fix-python-bug",
    "shell-script-spec",
    "sqlite-report",
];

/// Whether the engine and the cache entries are there; panics under
/// `ARBITER_REQUIRE_DOCKER=1` when they are not.
pub fn ready(kinds: &[PresetKind]) -> bool {
    if !docker_available() {
        return false;
    }
    let require = std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() == Ok("1");
    let cache = AgentCache::from_env().expect("cache root");
    for kind in kinds {
        if let Err(e) = cache.lookup(kind.name(), kind.pinned_version()) {
            assert!(
                !require,
                "ARBITER_REQUIRE_DOCKER=1 but {e} (scripts/agents installs it)"
            );
            eprintln!("skipping: {e}");
            return false;
        }
    }
    true
}

/// A gateway token: `arb-` and 48 hex digits.
pub fn holds_token(text: &str) -> bool {
    text.split("arb-")
        .skip(1)
        .any(|rest| rest.len() >= 48 && rest[..48].chars().all(|c| c.is_ascii_hexdigit()))
}

pub fn task_dir(task: &str) -> String {
    repo().join("tasks").join(task).display().to_string()
}

/// Every trial's record, by trial id.
pub fn records(dir: &Path) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir.join("trials"))
        .expect("trials")
        .flatten()
    {
        let id = entry.file_name().to_string_lossy().into_owned();
        out.insert(id.clone(), result(dir, &id));
    }
    out
}

pub fn agent_secs(r: &Value) -> f64 {
    r["phases"]["agent"]["seconds"].as_f64().unwrap_or(f64::NAN)
}

/// The preset's per-task scripts as one script of cases.
pub fn all_tasks_script(kind: PresetKind) -> Value {
    let dir = repo()
        .join("tests/fixtures/agents")
        .join(kind.name())
        .join("scripts");
    let cases: Vec<Value> = TASKS
        .iter()
        .map(|t| {
            let path = dir.join(format!("{t}.json"));
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            serde_json::from_str(&text).expect("script JSON")
        })
        .collect();
    json!({"turns": [{"say": "I do not know this task."}], "cases": cases})
}

/// The preset's trajectory as arbiter exports it (ATIF v1.8): valid against
/// docs/atif.schema.json and Harbor's two cross-field rules.
pub fn valid_atif(trial_dir: &Path) {
    let path = trial_dir.join("agent/trajectory.atif.json");
    let v: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("trajectory.atif.json")).expect("JSON");
    assert_eq!(v["schema_version"], "ATIF-v1.8", "{}", path.display());
    let schema: Value =
        serde_json::from_str(include_str!("../../docs/atif.schema.json")).expect("schema");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{}: {errors:#?}", path.display());
    let broken = arbiter::gateway::atif::invariant_errors(&v);
    assert!(broken.is_empty(), "{}: {broken:#?}", path.display());
}

/// Text that holds neither fake key nor a trial token; `what` names where it came from.
pub fn assert_no_secret_text(what: &str, text: &str) {
    assert!(
        !text.contains(FAKE_OPENAI_KEY) && !text.contains(FAKE_ANTHROPIC_KEY),
        "{what} holds a real key"
    );
    assert!(!holds_token(text), "{what} holds a trial token");
}

/// Neither fake key nor a trial token in any file under `dir` (a job dir).
pub fn assert_no_secret_in(dir: &Path) {
    for file in files_under(dir) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).expect("read")).into_owned();
        assert_no_secret_text(&file.display().to_string(), &text);
    }
}

/// A running `arbiter run --quiet ARGS --job-dir DIR -c CONFIG` with the fake keys in its
/// environment, its stdout and stderr drained on threads so that it never blocks on a full
/// pipe.
pub struct KeyedRun {
    pub child: std::process::Child,
    stdout: std::thread::JoinHandle<Vec<u8>>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
}

impl KeyedRun {
    pub fn start(args: &[&str], dir: &Path, config: &Path) -> KeyedRun {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_arbiter"))
            .args(["run", "--quiet"])
            .args(args)
            .arg("--job-dir")
            .arg(dir)
            .arg("-c")
            .arg(config)
            .env("OPENAI_API_KEY", FAKE_OPENAI_KEY)
            .env("ANTHROPIC_API_KEY", FAKE_ANTHROPIC_KEY)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run arbiter");
        let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
            std::thread::spawn(move || {
                let mut b = Vec::new();
                pipe.read_to_end(&mut b).ok();
                b
            })
        };
        let stdout = drain(Box::new(child.stdout.take().expect("stdout")));
        let stderr = drain(Box::new(child.stderr.take().expect("stderr")));
        KeyedRun {
            child,
            stdout,
            stderr,
        }
    }

    /// Its output, once it ended with `status`.
    pub fn output(self, status: std::process::ExitStatus) -> std::process::Output {
        std::process::Output {
            status,
            stdout: self.stdout.join().expect("stdout thread"),
            stderr: self.stderr.join().expect("stderr thread"),
        }
    }
}

/// A job under `dir` of every preset on `exact-deliverable`, without retries, whose providers
/// (OpenAI's and Anthropic's, with the fake keys from the environment, no retries) point at a
/// port of 127.0.0.1 nothing listens on.
pub fn unreachable_models_job(dir: &Path) -> std::path::PathBuf {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let agents: String = PresetKind::ALL
        .iter()
        .map(|kind| {
            let provider = if *kind == PresetKind::ClaudeCode {
                "anthropic"
            } else {
                "openai"
            };
            format!(
                "  - {{name: {k}, kind: {k}, model: {{provider: {provider}, name: some-model}}}}\n",
                k = kind.name()
            )
        })
        .collect();
    super::write_job(
        dir,
        &format!(
            "tasks: [{}]\nretries: {{max: 0, backoff_sec: 0}}\nmodels:\n  - {{name: openai, api: openai, base_url: 'http://127.0.0.1:{port}/v1', api_key: '${{OPENAI_API_KEY}}', retry: {{max: 0}}}}\n  - {{name: anthropic, api: anthropic, base_url: 'http://127.0.0.1:{port}', api_key: '${{ANTHROPIC_API_KEY}}', retry: {{max: 0}}}}\nagents:\n{agents}",
            task_dir("exact-deliverable")
        ),
    )
}

/// Whether claude-code is in the host's agent cache (a skip message when not).
pub fn claude_code_cached() -> bool {
    let cache = AgentCache::from_env().expect("cache");
    let kind = PresetKind::ClaudeCode;
    let cached = cache.lookup(kind.name(), kind.pinned_version()).is_ok();
    if !cached {
        eprintln!("skipped: claude-code is not in the agent cache (scripts/agents)");
    }
    cached
}

/// No file under `dir` holds a trial token.
pub fn assert_no_token_in(dir: &Path) {
    for file in files_under(dir) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).expect("read")).into_owned();
        assert!(
            !holds_token(&text),
            "{} holds a trial token",
            file.display()
        );
    }
}
