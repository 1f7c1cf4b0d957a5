//! `arbiter tasks load` through the real binary, no engine: a directory of tasks shaped like
//! the public corpora (a TermiGen task shipping a `docker-compose.yml` as data, SkillsBench's
//! host token in compose, InfraBench's GPU passthrough, a Windows task), the exact lines and
//! exit code, and the `--format jsonl` fields `scripts/corpus` counts.

mod common;

use std::fs;
use std::path::Path;

use common::*;

fn write(dir: &Path, rel: &str, content: &str) {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, content).expect("write");
}

/// A task under `root/name` built from `environment/Dockerfile` (`FROM … WORKDIR /app`).
fn task(root: &Path, name: &str, toml: &str) -> std::path::PathBuf {
    let dir = root.join(name);
    write(&dir, "task.toml", toml);
    write(&dir, "instruction.md", "Do it.\n");
    write(
        &dir,
        "environment/Dockerfile",
        "FROM python:3.12-slim\nWORKDIR /app\n",
    );
    write(
        &dir,
        "tests/test.sh",
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    dir
}

#[test]
fn tasks_load_reports_each_task_without_docker() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("corpus");
    let data = task(&root, "a-compose-yml-is-data", "");
    write(
        &data,
        "environment/docker-compose.yml",
        "services:\n  web:\n    environment:\n      - APP_DEBUG=${DEBUG_MODE\n",
    );
    let token = task(&root, "b-host-token", "[environment]\nworkdir = \"/srv\"\n");
    write(
        &token,
        "environment/docker-compose.yaml",
        "services:\n  main:\n    environment:\n      - GH_TOKEN=${ARBITER_LOAD_TEST_SURELY_UNSET}\n",
    );
    let gpu = task(&root, "c-gpu", "");
    write(
        &gpu,
        "environment/docker-compose.yaml",
        "services:\n  main:\n    devices: [\"/dev/kfd\", \"/dev/dri\"]\n    ipc: host\n",
    );
    task(
        &root,
        "d-windows",
        "[environment]\nos = \"windows\"\nworkdir = 'C:\\app'\n",
    );
    let shown = root.display().to_string();

    let out = arbiter(&["tasks", "load", &shown]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "loaded   a-compose-yml-is-data  ({shown}/a-compose-yml-is-data)\n\
             loaded   b-host-token  ({shown}/b-host-token)\n  \
             warning: ./environment/docker-compose.yaml:services.main.environment.GH_TOKEN: ${{ARBITER_LOAD_TEST_SURELY_UNSET}} is not set; using an empty string\n\
             refused  {shown}/c-gpu: ./environment/docker-compose.yaml:services.main.devices: asks for host devices in the container (GPU passthrough such as /dev/kfd, /dev/dri), which arbiter does not grant; the task is refused rather than run without it\n\
             refused  {shown}/d-windows: ./task.toml:environment.os: \"windows\" is not supported (arbiter runs Linux containers only)\n\
             4 task(s): 2 loaded, 2 refused\n"
        )
    );

    let out = arbiter(&["tasks", "load", "-r", "--format", "jsonl", &shown]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["workdir_source"], "dockerfile");
    assert_eq!(lines[0]["workdir"], "/app");
    assert_eq!(
        lines[0]["compose_files"],
        serde_json::json!(["docker-compose.yml"])
    );
    assert_eq!(lines[1]["workdir_source"], "task.toml");
    assert_eq!(lines[1]["workdir"], "/srv");
    assert_eq!(
        lines[1]["compose_files"],
        serde_json::json!(["docker-compose.yaml"])
    );
    assert!(lines[1]["agent_network"].is_string());
    assert_eq!(lines[2]["loaded"], false);
    assert!(lines[2]["workdir_source"].is_null());
}

/// The working dir as BuildKit reads the Dockerfile: heredoc bodies are not instructions.
/// Small Dockerfiles in the shape of the public corpora's heredoc tasks (SkillsBench's
/// `RUN python3 - <<'PY'` whose first line is `from huggingface_hub import …`, a shell
/// heredoc, TermiGen's `cat > file << 'EOF'`), and one BuildKit refuses.
#[test]
fn tasks_load_reads_heredocs_as_buildkit_does() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("corpus");
    let dockerfiles = [
        (
            "a-skillsbench-python-heredoc",
            "FROM ubuntu:24.04\nWORKDIR /root\nCOPY skills /root/.claude/skills\n\
             RUN python3 - <<'PY'\nfrom huggingface_hub import snapshot_download\n\
             snapshot_download(repo_id=\"vikp/surya_det3\")\nPY\n",
        ),
        (
            "b-skillsbench-shell-heredoc",
            "FROM ubuntu:24.04\nWORKDIR /root\nSHELL [\"/bin/bash\", \"-c\"]\n\
             RUN <<'EOF'\nset -euo pipefail\nworkdir /tmp\nEOF\nCOPY DAMOP.pptx /root/papers/all/\n",
        ),
        (
            "c-termigen-cat-heredocs",
            "FROM ubuntu:22.04\nRUN cat > /workspace/app/utils.h << 'EOF'\nint add(int a, int b);\nEOF\n\
             RUN cat > /workspace/app/Makefile << 'EOF'\nall: app\n\tgcc -o app main.c\nEOF\n\
             WORKDIR /workspace/app\n",
        ),
        (
            "d-unterminated",
            "FROM ubuntu:24.04\nWORKDIR /app\nRUN <<EOF\necho no end\n",
        ),
    ];
    for (name, dockerfile) in dockerfiles {
        let dir = task(&root, name, "");
        write(&dir, "environment/Dockerfile", dockerfile);
    }

    let out = arbiter(&[
        "tasks",
        "load",
        "--format",
        "jsonl",
        &root.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let seen: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| {
            let line: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            serde_json::json!([
                line["name"],
                line["workdir_source"],
                line["workdir"],
                line["heredocs"],
                line["dockerfile_error"]
            ])
        })
        .collect();
    assert_eq!(
        seen,
        [
            serde_json::json!([
                "a-skillsbench-python-heredoc",
                "dockerfile",
                "/root",
                1,
                null
            ]),
            serde_json::json!([
                "b-skillsbench-shell-heredoc",
                "dockerfile",
                "/root",
                1,
                null
            ]),
            serde_json::json!([
                "c-termigen-cat-heredocs",
                "dockerfile",
                "/workspace/app",
                2,
                null
            ]),
            serde_json::json!([
                "d-unterminated",
                "none",
                null,
                0,
                "line 3: unterminated heredoc"
            ]),
        ]
    );
}
