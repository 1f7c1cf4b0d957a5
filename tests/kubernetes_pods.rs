//! Sidecars, host directories and control roots on a real cluster, through the real binary
//! (`scripts/k8s up`, then `eval "$(scripts/k8s env)"`): a compose task whose agent reaches a
//! sidecar on 127.0.0.1 by its service name (a healthcheck and a dependency); a command agent
//! with a read-only mount that reads it and cannot write it; an aworld control root that ends
//! with the same files as on Docker. Skipped with a message when `KUBECONFIG` is unset; a
//! failure when `ARBITER_REQUIRE_K8S=1`.
//!
//! The verifiers run `live` here: `snapshot` with sidecars, mounts or a control root verifies
//! a frozen filesystem, which the Kubernetes backend does not make yet (issue 27, item 1).

mod common;

use std::path::{Path, PathBuf};

use common::k8s::{configured, pods_of};
use common::*;

fn write_files(dir: &Path, files: &[(&str, String)]) {
    for (rel, content) in files {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        if rel.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
}

/// A task whose agent must fetch a token from the sidecar `web` (which depends on `db`
/// being healthy, and is healthy itself once it serves); the main service waits for `web`.
fn compose_task(root: &Path) -> PathBuf {
    let dir = root.join("k8s-compose");
    write_files(
        &dir,
        &[
            (
                "task.toml",
                "version = \"2.0\"\n[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 60\nenvironment_mode = \"live\"\n[environment]\nnetwork_mode = \"no-network\"\n".to_string(),
            ),
            (
                "instruction.md",
                "Fetch http://web:8080/token and write its body to /app/answer.\n".to_string(),
            ),
            (
                "environment/Dockerfile",
                "FROM arbiter/busybox:latest\nRUN mkdir -p /app\n".to_string(),
            ),
            (
                "environment/sidecar/Dockerfile",
                "FROM arbiter/busybox:latest\nRUN mkdir -p /www\nCMD [\"httpd\", \"-f\", \"-p\", \"127.0.0.1:8080\", \"-h\", \"/www\"]\n".to_string(),
            ),
            (
                "environment/docker-compose.yaml",
                r#"services:
  main:
    environment:
      WEB_URL: http://web:8080
    depends_on:
      web:
        condition: service_healthy
  db:
    build:
      context: ./sidecar
    command: ["sh", "-c", "echo \"$$SECRET\" > /www/secret && exec httpd -f -p 127.0.0.1:8081 -h /www"]
    environment:
      SECRET: db-secret-4419
    healthcheck:
      test: ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8081/secret"]
      interval: 1s
      timeout: 2s
      retries: 30
  web:
    build:
      context: ./sidecar
    user: "1000:1000"
    entrypoint: ["sh", "-c"]
    command: ["wget -q -O /tmp/secret http://db:8081/secret && mkdir -p /tmp/www && printf 'token-%s-%s' \"$$(id -u)\" \"$$(cat /tmp/secret)\" > /tmp/www/token && exec httpd -f -p 127.0.0.1:8080 -h /tmp/www"]
    depends_on:
      db:
        condition: service_healthy
    healthcheck:
      test: ["CMD-SHELL", "wget -q -O /dev/null http://127.0.0.1:8080/token"]
      interval: 1s
      timeout: 2s
      retries: 30
"#
                .to_string(),
            ),
            (
                "solution/solve.sh",
                "#!/bin/sh\nmkdir -p /app\nwget -q -O /app/answer \"$WEB_URL/token\"\n".to_string(),
            ),
            (
                "tests/test.sh",
                "#!/bin/sh\n# Live: the sidecar still serves; the answer must be what it served.\nwant=$(wget -q -O - http://web:8080/token)\nif [ -n \"$want\" ] && [ \"$(cat /app/answer 2>/dev/null)\" = \"$want\" ] && [ \"$want\" = token-1000-db-secret-4419 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n".to_string(),
            ),
        ],
    );
    dir
}

#[test]
fn a_compose_sidecar_serves_the_agent_on_its_pods_loopback() {
    if !configured() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let task = compose_task(tmp.path());
    let (out, job_dir, _guard) = run_job(&[
        task.to_str().unwrap(),
        "--agent",
        "oracle",
        "--agent",
        "nop",
        "--backend",
        "kubernetes",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let oracle = result(&job_dir, "k8s-compose__oracle__default__1");
    assert_eq!(oracle["verifier"]["status"], "passed", "{oracle:#}");
    assert_eq!(oracle["sandbox"]["backend"], "kubernetes");
    let nop = result(&job_dir, "k8s-compose__nop__default__1");
    assert_eq!(nop["verifier"]["status"], "failed", "{nop:#}");
    assert!(nop["infra_error"].is_null(), "{nop:#}");
    assert_eq!(pods_of(&job_dir), Vec::<String>::new(), "pods left");
}

#[test]
fn a_sidecar_that_never_gets_healthy_is_an_environment_error() {
    if !configured() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let task = compose_task(tmp.path());
    let compose = task.join("environment/docker-compose.yaml");
    let text = std::fs::read_to_string(&compose).unwrap().replace(
        "http://127.0.0.1:8081/secret\"]\n      interval: 1s\n      timeout: 2s\n      retries: 30",
        "http://127.0.0.1:8081/nothing-here\"]\n      interval: 1s\n      timeout: 2s\n      retries: 2",
    );
    std::fs::write(&compose, text).unwrap();
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nagents: [oracle]\nretries: {{max: 0}}\nbackend: {{kind: kubernetes}}\n",
            task.display()
        ),
    );
    let (out, job_dir, _guard) = run_job(&["-c", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let r = result(&job_dir, "k8s-compose__oracle__default__1");
    assert_eq!(r["infra_error"]["phase"], "environment", "{r:#}");
    let message = r["infra_error"]["message"].as_str().unwrap();
    assert!(
        message.contains("compose service db (a dependency of web) is unhealthy"),
        "{message}"
    );
    assert_eq!(pods_of(&job_dir), Vec::<String>::new(), "pods left");
}

/// A task whose verifier checks what a command agent read from its mount and whether the
/// mount refused its writes.
fn mount_task(root: &Path) -> PathBuf {
    let dir = root.join("k8s-mount");
    write_files(
        &dir,
        &[
            (
                "task.toml",
                "version = \"2.0\"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\nenvironment_mode = \"live\"\n[environment]\nnetwork_mode = \"no-network\"\n".to_string(),
            ),
            ("instruction.md", "Copy the mounted note.\n".to_string()),
            (
                "environment/Dockerfile",
                "FROM arbiter/busybox:latest\nRUN mkdir -p /app\n".to_string(),
            ),
            (
                "tests/test.sh",
                "#!/bin/sh\nok=1\n[ \"$(cat /app/note 2>/dev/null)\" = mounted-note-5521 ] || ok=0\n[ \"$(cat /app/tool-says 2>/dev/null)\" = tool-ran ] || ok=0\n[ \"$(cat /app/write 2>/dev/null)\" = refused ] || ok=0\n[ ! -e /opt/kit/planted ] || ok=0\necho $ok > /logs/verifier/reward.txt\n".to_string(),
            ),
        ],
    );
    dir
}

#[test]
fn a_command_agents_read_only_mount_is_readable_and_not_writable() {
    if !configured() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let task = mount_task(tmp.path());
    let kit = tmp.path().join("kit");
    write_files(
        &kit,
        &[
            ("note.txt", "mounted-note-5521".to_string()),
            ("bin/tool.sh", "#!/bin/sh\necho tool-ran\n".to_string()),
        ],
    );
    std::os::unix::fs::symlink("note.txt", kit.join("link-to-note")).unwrap();
    let script = "cat /opt/kit/link-to-note > /app/note; /opt/kit/bin/tool.sh > /app/tool-says; if echo x > /opt/kit/planted 2>/dev/null || touch /opt/kit/note.txt 2>/dev/null || rm -f /opt/kit/note.txt 2>/dev/null && [ ! -e /opt/kit/note.txt ]; then echo written > /app/write; else echo refused > /app/write; fi";
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nagents:\n  - name: reader\n    kind: command\n    run: [\"sh\", \"-c\", {script:?}]\n    mounts:\n      - host: {}\n        container: /opt/kit\nbackend: {{kind: kubernetes}}\n",
            task.display(),
            kit.display()
        ),
    );
    let (out, job_dir, _guard) = run_job(&["-c", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = result(&job_dir, "k8s-mount__reader__default__1");
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    assert_eq!(
        std::fs::read_to_string(kit.join("note.txt")).unwrap(),
        "mounted-note-5521",
        "the host directory is untouched"
    );
    assert!(!kit.join("planted").exists());
    assert_eq!(pods_of(&job_dir), Vec::<String>::new(), "pods left");
}

/// Every file under `dir` (relative, `run-<host>-<pid>` names made neutral) with its content
/// (except the run file's, which names its host and pid, and the env the stand-in saw).
fn control_files(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = files_under(dir)
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            let content = std::fs::read_to_string(&p).unwrap_or_default();
            if rel.starts_with("state/run-") {
                ("state/run-*".to_string(), String::new())
            } else if rel == "state/env-seen.json" {
                // What the agent's env held: deadlines and paths differ by run.
                (rel, String::new())
            } else {
                (rel, content)
            }
        })
        .collect();
    out.sort();
    out
}

#[test]
fn an_aworld_control_root_ends_with_the_same_files_as_on_docker() {
    if !configured() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // aw-plain, built from a Dockerfile (the cluster pulls only from its registry), live.
    let task = tmp.path().join("aw-plain");
    write_files(
        &task,
        &[
            (
                "task.toml",
                "version = \"1.0\"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\nenvironment_mode = \"live\"\n[environment]\nnetwork_mode = \"no-network\"\ncpus = 1\nmemory_mb = 256\npids_limit = 256\nworkdir = \"/app\"\n".to_string(),
            ),
            ("environment/Dockerfile", "FROM arbiter/debian:bookworm\nRUN mkdir -p /app\n".to_string()),
            ("instruction.md", std::fs::read_to_string(fixture("aw-plain/instruction.md")).unwrap()),
            ("tests/test.sh", std::fs::read_to_string(fixture("aw-plain/tests/test.sh")).unwrap()),
        ],
    );
    let template = tmp.path().join("template");
    write_files(
        &template,
        &[
            ("seed.txt", "seed".to_string()),
            ("nested/keep.txt", "kept".to_string()),
        ],
    );
    let agent = format!(
        "  - name: ctl\n    kind: aworld\n    binary: /opt/aworld-standin/aworld-cli\n    mounts:\n      - host: {}\n        container: /opt/aworld-standin\n    model:\n      name: test-model\n      provider: openai\n      base_url: http://127.0.0.1:9/v1\n      api_key: sk-not-a-real-key-0000\n    control_template: {}\n    env:\n      STANDIN_BEHAVIOR: succeed\n      STANDIN_WORK: \"echo hello > /app/out.txt\"\n      STANDIN_MARK: marked-7\n",
        repo().join("tests/fixtures/aworld-standin").display(),
        template.display()
    );
    let yaml = |backend: &str| {
        format!(
            "tasks: [{}]\nagents:\n{agent}backend: {{kind: {backend}}}\n",
            task.display()
        )
    };
    let trial = "aw-plain__ctl__default__1";
    let run = |backend: &str| {
        let dir = tmp.path().join(backend);
        std::fs::create_dir_all(&dir).unwrap();
        let config = write_job(&dir, &yaml(backend));
        let (out, job_dir, guard) = run_job(&["-c", config.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{backend}: {}", stderr(&out));
        let r = result(&job_dir, trial);
        assert_eq!(r["verifier"]["status"], "passed", "{backend}: {r:#}");
        assert_eq!(r["audit"]["verdict"], "certified", "{backend}: {r:#}");
        (r, job_dir, guard)
    };
    let (k8s, k8s_dir, _g1) = run("kubernetes");
    assert_eq!(pods_of(&k8s_dir), Vec::<String>::new(), "pods left");
    let saved = k8s_dir.join("trials").join(trial).join("agent/control");
    let files = control_files(&saved);
    let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"state/run-*"), "{files:?}");
    assert!(
        files.contains(&(
            "seed.txt".to_string(),
            "seed+changed by a trial".to_string()
        )),
        "{files:?}"
    );
    assert!(
        files.contains(&("mark.txt".to_string(), "marked-7".to_string())),
        "{files:?}"
    );
    assert!(
        files.contains(&("nested/keep.txt".to_string(), "kept".to_string())),
        "{files:?}"
    );
    // The live verifier sees the control root emptied, as on Docker.
    let listing = std::fs::read_to_string(
        k8s_dir
            .join("trials")
            .join(trial)
            .join("verifier/logs/control-listing.txt"),
    )
    .unwrap_or_default();
    assert_eq!(listing.trim(), "", "the verifier saw: {listing}");
    assert_eq!(k8s["control_root"]["files"], files.len() as u64, "{k8s:#}");
    assert_eq!(
        std::fs::read_to_string(template.join("seed.txt")).unwrap(),
        "seed",
        "the template is untouched"
    );
    if !docker_available() {
        return;
    }
    let (docker, docker_dir, _g2) = run("docker");
    let on_docker = control_files(&docker_dir.join("trials").join(trial).join("agent/control"));
    assert_eq!(
        files, on_docker,
        "the same control-root files on both backends"
    );
    assert_eq!(
        k8s["control_root"]["files"],
        docker["control_root"]["files"]
    );
}

/// Measured, not asserted (run by hand: `cargo test --test kubernetes_pods -- --ignored
/// --nocapture mount_cost`; `ARBITER_MOUNT_COST_DIR` picks the directory, by default the
/// claude-code agent cache): what a read-only mount costs a pod — the first use (fingerprint,
/// image import, push), then each pod's start with the mount (pull once per node, then the
/// init container's copy) against one without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn mount_cost() {
    use arbiter::sandbox::kubernetes::KubeSettings;
    use arbiter::sandbox::kubernetes::KubernetesSandbox;
    use arbiter::sandbox::{
        Base, ContainerLimits, ContainerSpec, ExecSpec, ImageRecipe, ImageSpec, Mount, Network,
        Owner, Resource, Role, Sandbox, StartSpec,
    };
    use std::time::{Duration, Instant};
    if !configured() {
        return;
    }
    let dir = std::env::var_os("ARBITER_MOUNT_COST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/arbiter/agents/claude-code")
        });
    let toolbox = arbiter::sandbox::toolbox::locate_toolbox().expect("toolbox");
    let sb = KubernetesSandbox::connect(KubeSettings::default())
        .await
        .expect("kubeconfig")
        .with_toolbox(&toolbox);
    assert!(sb.preflight().await.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("Dockerfile"), "FROM arbiter/busybox\n").unwrap();
    let image = sb
        .prepare_image(&ImageSpec {
            recipe: ImageRecipe::Build {
                context: tmp.path().to_path_buf(),
                file: "Dockerfile".into(),
            },
            key: "arbiter-env/k8s-mount-cost:1".into(),
            timeout: Duration::from_secs(600),
            labels: Default::default(),
        })
        .await
        .expect("image");
    let spec = |mounts: Vec<Mount>, trial: &str| ContainerSpec {
        base: Base::Image(image.clone()),
        owner: Owner {
            job: "k8s-pods-mount-cost".into(),
            trial: trial.into(),
            role: Role::Agent,
            extra: Default::default(),
        },
        env: Vec::new(),
        limits: ContainerLimits {
            cpus: 1.0,
            memory_mb: 256,
            pids_limit: 256,
            gpus: 0,
            storage_mb: None,
        },
        network: Network::None,
        workdir: None,
        mounts,
        start: StartSpec::default(),
    };
    let mount = Mount {
        host: dir.clone(),
        container: "/opt/mounted".into(),
        read_only: true,
    };
    let du = |p: &Path| -> u64 {
        files_under(p)
            .iter()
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.len())
            .sum()
    };
    eprintln!("directory {} ({} MB)", dir.display(), du(&dir) / 1_000_000);
    let mut rounds = Vec::new();
    for (i, mounts) in [
        vec![mount.clone()],
        vec![],
        vec![mount.clone()],
        vec![],
        vec![mount.clone()],
    ]
    .into_iter()
    .enumerate()
    {
        let with = !mounts.is_empty();
        let t = Instant::now();
        let id = sb
            .create(&spec(mounts, &format!("cost-{i}")))
            .await
            .expect("create");
        sb.start(&id).await.expect("start");
        let seconds = t.elapsed().as_secs_f64();
        let out = tmp.path().join(format!("ls-{i}"));
        let listed = sb
            .exec(
                &id,
                &ExecSpec {
                    argv: vec!["sh".into(), "-c".into(), "ls /opt/mounted | wc -l".into()],
                    env: Vec::new(),
                    user: None,
                    workdir: None,
                    stdout: Some(out.clone()),
                    stderr: None,
                    cap_bytes: 4096,
                    timeout: Some(Duration::from_secs(30)),
                    grace: Duration::from_secs(1),
                },
            )
            .await
            .expect("exec");
        let entries = std::fs::read_to_string(&out).unwrap_or_default();
        sb.remove(&Resource::Container(id)).await.expect("remove");
        eprintln!(
            "round {i}: mount={with} create+start {seconds:.2}s ({:?}, {} entries)",
            listed.end,
            entries.trim()
        );
        if with {
            assert_ne!(entries.trim(), "0", "the mount is there");
        }
        rounds.push((with, seconds));
    }
}
