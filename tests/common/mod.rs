//! Shared helpers for integration tests that run the real `arbiter` binary.
#![allow(dead_code)]

pub mod k8s;
pub mod k8s_pod;
pub mod presets;
pub mod serve;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/tasks").join(name)
}

/// Copy the tree `from` to `to` (regular files and directories).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let dest = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &dest);
        } else {
            std::fs::copy(entry.path(), &dest).expect("copy");
        }
    }
}

/// What the verifier's files look like to `Sandbox::upload_replacing`, unpacked at `/`: an
/// empty `/logs/verifier` (mode 777) and `/tests/test.sh` writing reward 1.
pub fn verifier_files_tar() -> Vec<u8> {
    use arbiter::sandbox::{TarEntry, files_to_tar};
    files_to_tar(&[
        TarEntry {
            path: "logs/",
            content: None,
            mode: 0o755,
        },
        TarEntry {
            path: "logs/verifier/",
            content: None,
            mode: 0o777,
        },
        TarEntry {
            path: "tests/",
            content: None,
            mode: 0o755,
        },
        TarEntry {
            path: "tests/test.sh",
            content: Some(b"#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n"),
            mode: 0o755,
        },
    ])
    .expect("tar")
}

/// Whether a Docker engine answers. With `ARBITER_REQUIRE_DOCKER=1` a missing engine is a
/// test failure, not a skip.
pub fn docker_available() -> bool {
    let ok = Command::new("docker")
        .args(["version", "--format", "{{.Server.APIVersion}}"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() == Ok("1") {
            panic!("ARBITER_REQUIRE_DOCKER=1 but no Docker engine answers (run scripts/bootstrap)");
        }
        eprintln!("skipping: no Docker engine (set ARBITER_REQUIRE_DOCKER=1 to fail instead)");
    }
    ok
}

pub fn arbiter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(args)
        .output()
        .expect("run arbiter")
}

/// The letters and digits of the name of `tmp` (a fresh temp dir): a name part no other
/// test's job shares.
pub fn unique_name(tmp: &Path) -> String {
    tmp.file_name()
        .expect("name")
        .to_string_lossy()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

/// Run `arbiter run` into a fresh job dir; returns (output, job dir, tempdir guard).
pub fn run_job(extra: &[&str]) -> (Output, PathBuf, tempfile::TempDir) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let job_dir = tmp.path().join(format!("job-{}", unique_name(tmp.path())));
    let job_dir_s = job_dir.to_string_lossy().into_owned();
    let mut args = vec!["run", "--quiet", "--job-dir", job_dir_s.as_str()];
    args.extend_from_slice(extra);
    let out = arbiter(&args);
    let (out, dir) = (out, job_dir);
    assert_no_leftovers(&dir);
    (out, dir, tmp)
}

pub fn result(job_dir: &Path, trial: &str) -> Value {
    let path = job_dir.join("trials").join(trial).join("result.json");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).expect("result.json is JSON")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether `label` (an `arbiter.job` label value) is that of the job named `name`:
/// `<name>-<12 hex of its dir>`, `.kept` on kept snapshots. Another job named `<name>-flood`
/// running beside this one is not ours.
pub fn is_job_label(label: &str, name: &str) -> bool {
    label
        .strip_prefix(&format!("{name}-"))
        .map(|rest| rest.trim_end_matches(".kept"))
        .is_some_and(|h| h.len() == 12 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `field` (a `docker ps --format` template, e.g. `{{.ID}}`) of every container (any state)
/// labelled with the job of `job_dir`, matched by its exact label.
pub fn job_containers(job_dir: &Path, field: &str) -> Vec<String> {
    let name = job_dir
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let out = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            "label=arbiter.managed=true",
            "--format",
            &format!("{{{{.Label \"arbiter.job\"}}}} {field}"),
        ])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(job, _)| is_job_label(job, &name))
        .map(|(_, value)| value.to_string())
        .collect()
}

/// No container or image labelled with this job may remain on the engine.
pub fn assert_no_leftovers(job_dir: &Path) {
    let name = job_dir
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    for kind in [&["ps", "-a"][..], &["images"][..]] {
        let out = Command::new("docker")
            .args(kind)
            .args([
                "--filter",
                "label=arbiter.managed=true",
                "--format",
                "{{.ID}} {{.Label \"arbiter.job\"}}",
            ])
            .output()
            .expect("docker");
        let listing = String::from_utf8_lossy(&out.stdout);
        let ours: Vec<&str> = listing
            .lines()
            .filter(|l| {
                l.split(' ')
                    .nth(1)
                    .is_some_and(|label| is_job_label(label, &name))
            })
            .collect();
        assert!(ours.is_empty(), "leftover {kind:?} of job {name}: {ours:?}");
    }
}

/// Regular files under `dir`, recursively, without following symlinks.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).into_iter().flatten().flatten() {
            let path = entry.path();
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => stack.push(path),
                Ok(meta) if meta.is_file() => out.push(path),
                _ => {}
            }
        }
    }
    out
}

/// Command lines of every process on the host, arguments joined by spaces.
pub fn host_cmdlines() -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        if let Ok(bytes) = std::fs::read(entry.path().join("cmdline")) {
            out.push(String::from_utf8_lossy(&bytes).replace('\0', " "));
        }
    }
    out
}

/// Write a job config into `dir`; returns its path.
pub fn write_job(dir: &Path, yaml: &str) -> PathBuf {
    let config = dir.join("job.yaml");
    std::fs::write(&config, yaml).expect("write job.yaml");
    config
}

/// `value` without the fields named in `ignored` (dotted paths from the top, e.g.
/// `verifier.seconds`), at every depth.
pub fn strip_fields(value: &mut Value, ignored: &[&str]) {
    fn strip(value: &mut Value, prefix: &str, ignored: &[&str]) {
        if let Value::Object(map) = value {
            let path = |k: &str| {
                if prefix.is_empty() {
                    k.to_string()
                } else {
                    format!("{prefix}.{k}")
                }
            };
            map.retain(|k, _| !ignored.contains(&path(k).as_str()));
            for (k, v) in map.iter_mut() {
                strip(v, &path(k), ignored);
            }
        }
    }
    strip(value, "", ignored)
}

/// A task of `tests/fixtures/harbor-run`.
pub fn harbor_task(name: &str) -> PathBuf {
    repo().join("tests/fixtures/harbor-run").join(name)
}

/// `arbiter run --quiet --job-dir <tmp>/job-<unique> <extra>`, its command first given to
/// `env` (to set its environment): the output and the job dir.
pub fn run_in_with(
    tmp: &Path,
    extra: &[&str],
    env: impl FnOnce(&mut Command) -> &mut Command,
) -> (Output, PathBuf) {
    let job_dir = tmp.join(format!("job-{}", unique_name(tmp)));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_arbiter"));
    cmd.args(["run", "--quiet", "--job-dir"])
        .arg(&job_dir)
        .args(extra);
    let out = env(&mut cmd).output().expect("run arbiter");
    (out, job_dir)
}

/// The arguments that run the oracle and the nop agent on `task`.
pub fn oracle_and_nop(task: &Path) -> [&str; 5] {
    [
        task.to_str().expect("utf8"),
        "--agent",
        "oracle",
        "--agent",
        "nop",
    ]
}

/// A job config under `dir` of the nop agent on `task`, without retries.
pub fn nop_without_retries(dir: &Path, task: &Path) -> PathBuf {
    write_job(
        dir,
        &format!(
            "tasks: [{}]\nagents: [nop]\nretries: {{max: 0}}\n",
            task.display()
        ),
    )
}

/// An exec of `argv` (no env, user, workdir or log files; output capped at 1 MiB) ending at
/// `timeout`, with `grace` after it.
pub fn exec_spec(
    argv: &[&str],
    timeout: std::time::Duration,
    grace: std::time::Duration,
) -> arbiter::sandbox::ExecSpec {
    arbiter::sandbox::ExecSpec {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        env: Vec::new(),
        user: None,
        workdir: None,
        stdout: None,
        stderr: None,
        cap_bytes: 1 << 20,
        timeout: Some(timeout),
        grace,
    }
}

/// An image spec built from `dockerfile` (written to `dir`), keyed
/// `arbiter-env/<name>:<tag>` and labelled as arbiter's.
pub fn dockerfile_spec(
    dir: &Path,
    name: &str,
    tag: &str,
    dockerfile: &str,
) -> arbiter::sandbox::ImageSpec {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("Dockerfile"), dockerfile).unwrap();
    arbiter::sandbox::ImageSpec {
        recipe: arbiter::sandbox::ImageRecipe::Build {
            context: dir.to_path_buf(),
            file: "Dockerfile".to_string(),
        },
        key: format!("arbiter-env/{name}:{tag}"),
        timeout: std::time::Duration::from_secs(600),
        labels: std::collections::BTreeMap::from([("arbiter.managed".into(), "true".into())]),
    }
}

/// The spec of an agent container of `owner` on `base` with `network` and the limits
/// `(cpus, memory_mb, pids_limit)` (no GPU, storage limit, env, workdir or mounts).
pub fn agent_container(
    base: arbiter::sandbox::Base,
    owner: arbiter::sandbox::Owner,
    network: arbiter::sandbox::Network,
    (cpus, memory_mb, pids_limit): (f64, u64, i64),
) -> arbiter::sandbox::ContainerSpec {
    use arbiter::sandbox::{ContainerLimits, ContainerSpec, Role, StartSpec};
    ContainerSpec {
        base,
        owner,
        env: Vec::new(),
        limits: ContainerLimits {
            cpus,
            memory_mb,
            pids_limit,
            gpus: 0,
            storage_mb: None,
        },
        network,
        workdir: None,
        mounts: Vec::new(),
        start: StartSpec::for_role(Role::Agent),
    }
}

/// Whether `job_dir` holds the record of `trial`.
pub fn has_record(job_dir: &Path, trial: &str) -> bool {
    job_dir
        .join("trials")
        .join(trial)
        .join("result.json")
        .is_file()
}

/// `arbiter run --quiet -c CONFIG --job-dir JOB_DIR`.
pub fn run_config(config: &Path, job_dir: &Path) -> Output {
    arbiter(&[
        "run",
        "--quiet",
        "-c",
        config.to_str().expect("utf8"),
        "--job-dir",
        job_dir.to_str().expect("utf8"),
    ])
}

/// The name of `tmp` lowercased, letters and digits only: an image tag of this test alone.
pub fn image_tag(tmp: &Path) -> String {
    tmp.file_name()
        .expect("name")
        .to_string_lossy()
        .to_lowercase()
        .replace(|c: char| !c.is_ascii_alphanumeric(), "")
}

/// `kill -INT` the running `child` (as Ctrl-C would), then its output once it ended.
pub fn interrupt(child: std::process::Child) -> Output {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    child.wait_with_output().expect("wait")
}

/// The `env:` lines of an agent definition in a job config (none without `env`), each value
/// JSON-quoted.
pub fn env_lines(env: &[(&str, &str)]) -> String {
    if env.is_empty() {
        return String::new();
    }
    let mut text = String::from("    env:\n");
    for (k, v) in env {
        text.push_str(&format!(
            "      {k}: {}\n",
            serde_json::to_string(v).expect("json")
        ));
    }
    text
}

/// The paths an attempt's record says were cleared before the next attempt.
pub fn cleared(attempt: &Value) -> Vec<&str> {
    attempt["cleared"]
        .as_array()
        .expect("cleared")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// `docker run -d --rm --init --network none` of `image` running `sleep SECS`, named `name`
/// and labelled as arbiter's: the output of `docker run`.
pub fn offline_container(name: &str, image: &str, secs: &str) -> Output {
    Command::new("docker")
        .args(["run", "-d", "--rm", "--init", "--network", "none"])
        .args(["--label", "arbiter.managed=true", "--name", name])
        .args([image, "sleep", secs])
        .output()
        .expect("docker run")
}
