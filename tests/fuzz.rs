//! Bad-input fuzzing (proptest; no engine needed): task.toml, job.yaml, outcome records,
//! completion records, reward files and tar archives read out of containers. For every input
//! the parser either accepts it or returns a typed error with a one-line message; nothing
//! panics. A checked-in corpus of hostile inputs (`tests/fuzz/corpus/<target>/`) runs first,
//! then generated cases; `PROPTEST_CASES` raises the count for a longer run (the default keeps
//! `cargo test` fast).

mod common;

use std::path::PathBuf;

use arbiter::job::{RunArgs, resolve};
use arbiter::outcome::{ClaimStatus, CompletionRecord, collect_claim};
use arbiter::sandbox::{ExtractLimits, extract_tar_file};
use arbiter::verifier::parse_reward;
use proptest::prelude::*;

/// Corpus files named `ok-*` must be accepted (the targets are not vacuous).
fn must_accept(path: &std::path::Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("ok-"))
}

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = common::repo().join("tests/fuzz/corpus").join(target);
    let mut files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.expect("entry").path();
            let bytes = std::fs::read(&path).expect("read corpus file");
            (path, bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus {}", dir.display());
    files
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(128),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ------------------------------------------------------------------ task.toml ---

/// Load a task dir whose task.toml is `bytes`: Ok (and within the documented invariants), or a
/// one-line typed error.
fn check_task(bytes: &[u8]) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("t");
    std::fs::create_dir_all(dir.join("tests")).expect("mkdir");
    std::fs::write(dir.join("task.toml"), bytes).expect("write");
    std::fs::write(dir.join("instruction.md"), "Do it.").expect("write");
    std::fs::write(dir.join("tests/test.sh"), "#!/bin/sh\n").expect("write");
    match arbiter::task::load(&dir) {
        Ok(task) => {
            let env = &task.environment;
            for secs in [task.agent.timeout_sec, task.verifier.timeout_sec] {
                prop_assert!(secs.is_finite() && secs > 0.0, "timeout {secs}");
            }
            prop_assert!(env.cpus.is_finite() && env.cpus > 0.0, "cpus {}", env.cpus);
            prop_assert!(env.memory_mb > 0 && env.pids_limit > 0);
            for path in &task.artifacts {
                prop_assert!(
                    path.starts_with('/') && !path.split('/').any(|p| p == ".."),
                    "artifact {path}"
                );
            }
            // The record keeps the metadata: it must serialize.
            prop_assert!(serde_json::to_vec(&task.metadata).is_ok());
        }
        Err(e) => {
            let message = e.to_string();
            prop_assert!(!message.is_empty());
            prop_assert!(!message.contains('\n'), "multi-line error: {message}");
        }
    }
    Ok(())
}

fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("-inf".to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("1e308".to_string()),
        Just("18446744073709551615".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        "[a-z0-9 ./_${}-]{0,12}".prop_map(|s| format!("{s:?}")),
        Just("\"/app/../etc/passwd\"".to_string()),
        Just("\"relative/path\"".to_string()),
        Just("\"2G\"".to_string()),
        Just("\"${UNSET_VAR_FOR_FUZZ}\"".to_string()),
        Just("[]".to_string()),
        Just("[\"/a\", \"/b/..\"]".to_string()),
        Just("{}".to_string()),
        Just("{ x = 1 }".to_string()),
        Just("1979-05-27T07:32:00Z".to_string()),
    ]
}

const TASK_KEYS: &[(&str, &[&str])] = &[
    ("", &["version", "schema_version", "artifacts", "name"]),
    ("task", &["name"]),
    ("agent", &["timeout_sec", "user"]),
    (
        "verifier",
        &["timeout_sec", "environment_mode", "env", "network_mode"],
    ),
    (
        "environment",
        &[
            "docker_image",
            "build_timeout_sec",
            "cpus",
            "memory_mb",
            "memory",
            "pids_limit",
            "network_mode",
            "allow_internet",
            "workdir",
            "storage_mb",
            "storage",
            "gpus",
        ],
    ),
    ("completion", &["mode", "deliverables", "validation"]),
    ("metadata", &["difficulty", "tags", "category"]),
    ("frobnicate", &["x"]),
];

fn task_toml() -> impl Strategy<Value = String> {
    let entry = (
        0..TASK_KEYS.len(),
        any::<prop::sample::Index>(),
        toml_value(),
    );
    prop::collection::vec(entry, 0..12).prop_map(|entries| {
        let mut top = String::new();
        let mut tables: std::collections::BTreeMap<&str, String> = Default::default();
        for (t, key, value) in entries {
            let (table, keys) = TASK_KEYS[t];
            let key = key.get(keys);
            let line = format!("{key} = {value}\n");
            if table.is_empty() {
                top.push_str(&line);
            } else {
                tables.entry(table).or_default().push_str(&line);
            }
        }
        for (table, body) in tables {
            top.push_str(&format!("[{table}]\n{body}"));
        }
        top
    })
}

#[test]
fn task_toml_corpus() {
    for (path, bytes) in corpus("task_toml") {
        check_task(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if must_accept(&path) {
            let tmp = tempfile::tempdir().expect("tmp");
            let dir = tmp.path().join("t");
            std::fs::create_dir_all(dir.join("tests")).expect("mkdir");
            std::fs::write(dir.join("task.toml"), &bytes).expect("write");
            std::fs::write(dir.join("instruction.md"), "Do it.").expect("write");
            std::fs::write(dir.join("tests/test.sh"), "#!/bin/sh\n").expect("write");
            if let Err(e) = arbiter::task::load(&dir) {
                panic!("{}: rejected: {e}", path.display());
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn task_toml_structured(text in task_toml()) {
        check_task(text.as_bytes())?;
    }

    #[test]
    fn task_toml_arbitrary(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check_task(&bytes)?;
    }
}

// ------------------------------------------------------------------- job.yaml ---

/// Resolve a job whose job.yaml is `bytes`: Ok, or a one-line typed error.
fn check_job(bytes: &[u8]) -> Result<(), String> {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("job.yaml");
    std::fs::write(&path, bytes).expect("write");
    let args = RunArgs {
        config: Some(path),
        job_dir: Some(tmp.path().join("job")),
        ..RunArgs::default()
    };
    match resolve(&args) {
        Ok(spec) => {
            if spec.concurrency == 0 {
                return Err("accepted concurrency 0".into());
            }
            Ok(())
        }
        Err(e) => {
            let message = e.to_string();
            if message.is_empty() || message.contains('\n') {
                return Err(format!("bad error message: {message:?}"));
            }
            Ok(())
        }
    }
}

fn yaml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        Just(".nan".to_string()),
        Just(".inf".to_string()),
        Just("-.inf".to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("~".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("oracle".to_string()),
        Just("[oracle, nop, ghost]".to_string()),
        Just("[{name: x, kind: command, run: []}]".to_string()),
        Just(
            "[{name: x, kind: command, run: [sh], mounts: [{host: /nonexistent, container: rel}]}]"
                .to_string()
        ),
        Just("[{name: x, kind: command, run: [sh], env: {K: '${UNSET_FUZZ_VAR}'}}]".to_string()),
        Just("[{name: a, env: {X: '1'}}, {name: a}]".to_string()),
        Just("{max: -1, backoff_sec: .nan}".to_string()),
        Just("{max: 99999999999, backoff_sec: 1e308, max_backoff_sec: -5}".to_string()),
        Just("{agent: 0, verifier: -1, build: .inf}".to_string()),
        Just("&a [*a]".to_string()),
        "[a-z0-9 ./_-]{0,10}".prop_map(|s| format!("{s:?}")),
    ]
}

const JOB_KEYS: &[&str] = &[
    "name",
    "agents",
    "attempts",
    "concurrency",
    "pass_threshold",
    "job_dir",
    "log_cap_mb",
    "variants",
    "timeouts",
    "retries",
    "unknown_key",
];

fn job_yaml() -> impl Strategy<Value = String> {
    let task = common::fixture("quick").display().to_string();
    prop::collection::vec((any::<prop::sample::Index>(), yaml_value()), 0..8).prop_map(
        move |entries| {
            let mut text = format!("tasks: [{task}]\n");
            for (key, value) in entries {
                text.push_str(&format!("{}: {value}\n", key.get(JOB_KEYS)));
            }
            text
        },
    )
}

#[test]
fn job_yaml_corpus() {
    for (path, bytes) in corpus("job_yaml") {
        // Corpus files name the fixture task as @QUICK@.
        let text = String::from_utf8_lossy(&bytes)
            .replace("@QUICK@", &common::fixture("quick").display().to_string());
        check_job(text.as_bytes()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if must_accept(&path) {
            let tmp = tempfile::tempdir().expect("tmp");
            let config = tmp.path().join("job.yaml");
            std::fs::write(&config, text.as_bytes()).expect("write");
            let args = RunArgs {
                config: Some(config),
                job_dir: Some(tmp.path().join("job")),
                ..RunArgs::default()
            };
            if let Err(e) = resolve(&args) {
                panic!("{}: rejected: {e}", path.display());
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn job_yaml_structured(text in job_yaml()) {
        check_job(text.as_bytes()).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn job_yaml_arbitrary(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check_job(&bytes).map_err(TestCaseError::fail)?;
    }
}

// ------------------------------------------------------ outcome and completion ---

fn check_outcome(file: Option<&[u8]>, stderr: &[u8]) -> Result<(), TestCaseError> {
    let claim = collect_claim(file, stderr);
    match claim.status {
        ClaimStatus::Present => prop_assert!(claim.record.is_some() && claim.error.is_none()),
        ClaimStatus::Invalid => {
            prop_assert!(claim.record.is_none());
            let error = claim.error.clone().unwrap_or_default();
            prop_assert!(!error.is_empty() && !error.contains('\n'), "{error:?}");
        }
        ClaimStatus::Missing => prop_assert!(file.is_none()),
        // Only an imported job's records say `unknown`; reading a claim never does.
        ClaimStatus::Unknown => prop_assert!(false, "a read claim is never unknown"),
    }
    // The record is what the trial writes: it must serialize.
    prop_assert!(serde_json::to_vec(&claim).is_ok());
    let _ = CompletionRecord::parse(file.unwrap_or_default());
    Ok(())
}

fn outcome_json() -> impl Strategy<Value = String> {
    let status = prop_oneof![
        Just("\"succeeded\"".to_string()),
        Just("\"task_failed\"".to_string()),
        Just("\"infrastructure_failed\"".to_string()),
        Just("\"cancelled\"".to_string()),
        Just("\"SUCCEEDED\"".to_string()),
        Just("null".to_string()),
        Just("1".to_string()),
        Just("[\"succeeded\"]".to_string()),
    ];
    let number = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        Just("-1".to_string()),
        Just("1e999".to_string()),
        Just("\"3\"".to_string()),
        Just("null".to_string()),
    ];
    (status, number.clone(), number, any::<bool>(), any::<bool>()).prop_map(
        |(status, exit, calls, schema, failure)| {
            let schema = if schema {
                "\"aworld.run.outcome.v1\""
            } else {
                "\"aworld.run.outcome.v0\""
            };
            let failure = if failure {
                ",\"failure\":{\"stage\":\"x\",\"error_code\":5}"
            } else {
                ""
            };
            format!(
                "{{\"schema_version\":{schema},\"semantic_status\":{status},\"process_exit_code\":{exit},\"trajectory_fidelity\":\"complete\",\"llm_call_count\":{calls},\"tool_call_count\":0,\"action_count\":0,\"last_successful_checkpoint\":null{failure}}}"
            )
        },
    )
}

#[test]
fn outcome_corpus() {
    for (path, bytes) in corpus("outcome") {
        check_outcome(Some(&bytes), b"")
            .and_then(|()| check_outcome(None, &bytes))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn outcome_structured(text in outcome_json(), marker in outcome_json()) {
        check_outcome(Some(text.as_bytes()), format!("noise\nAWORLD_RUN_OUTCOME={marker}\n").as_bytes())?;
        check_outcome(None, format!("AWORLD_RUN_OUTCOME={marker}").as_bytes())?;
    }

    #[test]
    fn outcome_arbitrary(file in prop::collection::vec(any::<u8>(), 0..512), stderr in prop::collection::vec(any::<u8>(), 0..512)) {
        check_outcome(Some(&file), &stderr)?;
        let mut marked = b"AWORLD_RUN_OUTCOME=".to_vec();
        marked.extend_from_slice(&stderr);
        check_outcome(None, &marked)?;
    }
}

// -------------------------------------------------------------------- rewards ---

fn check_reward(json: Option<&[u8]>, txt: Option<&[u8]>) -> Result<(), TestCaseError> {
    match parse_reward(json, txt) {
        Ok(reward) => {
            prop_assert!(!reward.is_empty());
            prop_assert!(reward.values().all(|v| v.is_finite()), "{reward:?}");
            prop_assert!(arbiter::verifier::primary_value(&reward).is_finite());
        }
        Err(e) => {
            let message = e.to_string();
            prop_assert!(
                !message.is_empty() && !message.contains('\n'),
                "{message:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn reward_corpus() {
    for (path, bytes) in corpus("reward") {
        let is_json = path.extension().is_some_and(|e| e == "json");
        let result = if is_json {
            check_reward(Some(&bytes), None)
        } else {
            check_reward(None, Some(&bytes))
        };
        result.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if must_accept(&path) {
            assert!(
                parse_reward(Some(&bytes), None).is_ok(),
                "{}",
                path.display()
            );
        }
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn reward_txt(text in prop_oneof![
        any::<f64>().prop_map(|f| format!("{f}")),
        "[0-9eE.+ \\-a-z\\n]{0,16}",
        Just("1e309".to_string()),
        Just("NaN".to_string()),
        Just("-0".to_string()),
    ]) {
        check_reward(None, Some(text.as_bytes()))?;
    }

    #[test]
    fn reward_json(pairs in prop::collection::vec(("[a-z]{0,4}", prop_oneof![
        any::<f64>().prop_map(|f| serde_json::to_string(&f).unwrap_or_default()),
        Just("1e400".to_string()),
        Just("-1e400".to_string()),
        Just("\"1\"".to_string()),
        Just("null".to_string()),
        Just("true".to_string()),
        Just("[1]".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_string()),
    ]), 0..5)) {
        let body: Vec<String> = pairs.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
        let json = format!("{{{}}}", body.join(","));
        check_reward(Some(json.as_bytes()), Some(b"1"))?;
    }

    #[test]
    fn reward_arbitrary(json in prop::collection::vec(any::<u8>(), 0..256), txt in prop::collection::vec(any::<u8>(), 0..64)) {
        check_reward(Some(&json), None)?;
        check_reward(None, Some(&txt))?;
    }
}

// ------------------------------------------------------------------ archives ---

/// Extract `bytes` as a tar into a fresh dir: never panics, never writes outside it, never
/// leaves a symlink.
fn check_tar(bytes: &[u8]) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().expect("tmp");
    let tar = tmp.path().join("in.tar");
    std::fs::write(&tar, bytes).expect("write");
    let dest = tmp.path().join("out");
    let limits = ExtractLimits {
        max_bytes: 1 << 20,
        max_entries: 100,
    };
    let _ = extract_tar_file(&tar, &dest, limits);
    let mut stack = vec![tmp.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("ls").flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("meta");
            prop_assert!(!meta.file_type().is_symlink(), "{}", path.display());
            prop_assert!(
                path == tar || path.starts_with(&dest),
                "written outside the destination: {}",
                path.display()
            );
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    Ok(())
}

fn tar_entry() -> impl Strategy<Value = (String, u8, Vec<u8>, String)> {
    (
        prop_oneof![
            "[a-z]{1,3}(/[a-z.]{1,3}){0,3}",
            Just("root/../../escape".to_string()),
            Just("/abs/path".to_string()),
            Just("root/./x".to_string()),
            Just("..".to_string()),
            Just("root/sub/../../../x".to_string()),
        ],
        prop_oneof![
            Just(b'0'),
            Just(b'1'),
            Just(b'2'),
            Just(b'3'),
            Just(b'5'),
            Just(b'6'),
            Just(b'7'),
            Just(b'x')
        ],
        prop::collection::vec(any::<u8>(), 0..64),
        prop_oneof![
            Just("/".to_string()),
            Just("../../..".to_string()),
            Just("root/a".to_string()),
            "[a-z/.]{0,8}",
        ],
    )
}

fn raw_tar(entries: &[(String, u8, Vec<u8>, String)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, kind, data, link) in entries {
        let mut header = [0u8; 512];
        let name = path.as_bytes();
        header[..name.len().min(100)].copy_from_slice(&name[..name.len().min(100)]);
        header[100..107].copy_from_slice(b"0000644");
        let size = if matches!(kind, b'0' | b'7') {
            data.len()
        } else {
            0
        };
        header[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        header[136..147].copy_from_slice(b"00000000000");
        header[156] = *kind;
        let link = link.as_bytes();
        header[157..157 + link.len().min(100)].copy_from_slice(&link[..link.len().min(100)]);
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        header[148..156].copy_from_slice(b"        ");
        let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
        header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        out.extend_from_slice(&header);
        if size > 0 {
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
    }
    out.resize(out.len() + 1024, 0);
    out
}

#[test]
fn tar_corpus() {
    for (path, bytes) in corpus("tar") {
        check_tar(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn tar_structured(entries in prop::collection::vec(tar_entry(), 1..8)) {
        check_tar(&raw_tar(&entries))?;
    }

    #[test]
    fn tar_arbitrary(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        check_tar(&bytes)?;
    }
}
