//! The Kubernetes backend against a real cluster (`scripts/k8s up`, then
//! `eval "$(scripts/k8s env)"`). Skipped with a message when `KUBECONFIG` is unset; a failure
//! when `ARBITER_REQUIRE_K8S=1`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbiter::sandbox::{
    Base, ContainerLimits, ContainerSpec, ExecEnd, ExecSpec, Fetched, ImageRecipe, ImageRef,
    ImageSpec, KubeSettings, KubernetesSandbox, Network, Owner, Resource, Role, Sandbox, Selector,
    StartSpec,
};

fn required() -> bool {
    std::env::var("ARBITER_REQUIRE_K8S").as_deref() == Ok("1")
}

/// The cluster's backend, or `None` (skip) when no cluster is configured.
async fn cluster() -> Option<KubernetesSandbox> {
    if std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty()) {
        if required() {
            panic!("ARBITER_REQUIRE_K8S=1 but KUBECONFIG is unset (eval \"$(scripts/k8s env)\")");
        }
        eprintln!("skipping: no KUBECONFIG (scripts/k8s up; eval \"$(scripts/k8s env)\")");
        return None;
    }
    let toolbox = arbiter::sandbox::toolbox::locate_toolbox().expect("toolbox (scripts/bootstrap)");
    let sb = KubernetesSandbox::connect(KubeSettings::default())
        .await
        .expect("kubeconfig")
        .with_toolbox(&toolbox);
    let problems = sb.preflight().await;
    assert!(problems.is_empty(), "preflight: {problems:?}");
    Some(sb)
}

fn owner(trial: &str) -> Owner {
    Owner {
        job: "k8s-test".to_string(),
        trial: trial.to_string(),
        role: Role::Agent,
        extra: BTreeMap::new(),
    }
}

/// An image built from `dockerfile` in a fresh context (a unique key per content).
fn build_spec(dir: &Path, name: &str, dockerfile: &str) -> ImageSpec {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("Dockerfile"), dockerfile).unwrap();
    let key = arbiter_digest(dockerfile);
    ImageSpec {
        recipe: ImageRecipe::Build {
            context: dir.to_path_buf(),
            file: "Dockerfile".to_string(),
        },
        key: format!("arbiter-env/{name}:{}", &key[..16]),
        timeout: Duration::from_secs(600),
        labels: BTreeMap::from([("arbiter.managed".into(), "true".into())]),
    }
}

fn arbiter_digest(text: &str) -> String {
    use std::fmt::Write;
    let mut h: u64 = 0xcbf29ce484222325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    let mut s = String::new();
    for i in 0..4u64 {
        let _ = write!(s, "{:016x}", h.rotate_left((i * 16) as u32) ^ i);
    }
    s
}

fn container(image: &ImageRef, trial: &str, network: Network, memory_mb: u64) -> ContainerSpec {
    ContainerSpec {
        base: Base::Image(image.clone()),
        owner: owner(trial),
        env: Vec::new(),
        limits: ContainerLimits {
            cpus: 0.5,
            memory_mb,
            pids_limit: 256,
            gpus: 0,
        },
        network,
        workdir: None,
        mounts: Vec::new(),
        start: StartSpec::for_role(Role::Agent),
    }
}

fn sh(script: &str) -> ExecSpec {
    ExecSpec {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: Vec::new(),
        user: None,
        workdir: None,
        stdout: None,
        stderr: None,
        cap_bytes: 1 << 20,
        timeout: Some(Duration::from_secs(60)),
        grace: Duration::from_secs(2),
    }
}

fn logged(dir: &Path, spec: ExecSpec) -> (ExecSpec, PathBuf, PathBuf) {
    let (out, err) = (dir.join("out"), dir.join("err"));
    (
        ExecSpec {
            stdout: Some(out.clone()),
            stderr: Some(err.clone()),
            ..spec
        },
        out,
        err,
    )
}

const TASK_IMAGE: &str = "FROM arbiter/busybox\nRUN mkdir -p /home/agent /work && echo 'agent:x:1000:1000::/home/agent:/bin/sh' >> /etc/passwd && echo 'agent:x:1000:' >> /etc/group && chown 1000:1000 /home/agent\nWORKDIR /work\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exec_codes_users_files_deadline_and_oom_on_a_pod() {
    let Some(sb) = cluster().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let spec = build_spec(&tmp.path().join("ctx"), "k8s-basics", TASK_IMAGE);
    let image = sb.prepare_image(&spec).await.expect("prepare");
    assert!(image.as_str().contains("@sha256:"), "by digest: {image}");
    let started = Instant::now();
    let id = sb
        .create(&container(&image, "basics", Network::None, 64))
        .await
        .expect("create");
    sb.start(&id).await.expect("start");
    eprintln!("pod running in {:.2}s", started.elapsed().as_secs_f64());

    // Exit codes, stdout/stderr, env over stdin, the image's WORKDIR.
    let (spec, out, err) = logged(
        tmp.path(),
        sh("echo out; echo err >&2; echo \"$X|$(pwd)\"; exit 42"),
    );
    let spec = ExecSpec {
        env: vec![("X".into(), "va lue\nline2".into())],
        ..spec
    };
    let done = sb.exec(&id, &spec).await.expect("exec");
    assert_eq!(done.end, ExecEnd::Exited(42));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "out\nva lue\nline2|/work\n"
    );
    assert_eq!(std::fs::read_to_string(&err).unwrap(), "err\n");

    // A non-root user by name and by uid; a workdir; HOME from passwd.
    for user in ["agent", "1000", "1000:1000"] {
        let (spec, out, _) = logged(tmp.path(), sh("id -u; id -g; echo $HOME; pwd"));
        let spec = ExecSpec {
            user: Some(user.into()),
            workdir: Some("/home/agent".into()),
            ..spec
        };
        let done = sb.exec(&id, &spec).await.expect("exec as user");
        assert_eq!(done.end, ExecEnd::Exited(0), "{user}");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "1000\n1000\n/home/agent\n/home/agent\n",
            "{user}"
        );
    }
    let unknown = ExecSpec {
        user: Some("nobody-here".into()),
        ..sh("true")
    };
    assert_eq!(
        sb.exec(&id, &unknown).await.unwrap().end,
        ExecEnd::Exited(126)
    );
    assert_eq!(
        sb.exec(&id, &sh("exec no-such-command")).await.unwrap().end,
        ExecEnd::Exited(127)
    );

    // A huge output: capped, counted, never buffered whole.
    let (spec, out, _) = logged(tmp.path(), sh("head -c 60000000 /dev/zero"));
    let spec = ExecSpec {
        cap_bytes: 1000,
        ..spec
    };
    let t = Instant::now();
    let done = sb.exec(&id, &spec).await.expect("huge output");
    assert_eq!(done.end, ExecEnd::Exited(0));
    assert_eq!(done.stdout_bytes, 60_000_000);
    assert!(done.truncated);
    assert!(std::fs::metadata(&out).unwrap().len() < 2000);
    eprintln!("60 MB of stdout in {:.2}s", t.elapsed().as_secs_f64());

    // Files with odd names in and out, and a 20 MiB file (chunked).
    let big: Vec<u8> = (0..20 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let odd = "odd name ü 'q' \"d\"\n$x.txt";
    let tar = arbiter::sandbox::files_to_tar(&[
        arbiter::sandbox::TarEntry {
            path: "in",
            content: None,
            mode: 0o755,
        },
        arbiter::sandbox::TarEntry {
            path: &format!("in/{odd}"),
            content: Some(b"hello"),
            mode: 0o644,
        },
        arbiter::sandbox::TarEntry {
            path: "in/big.bin",
            content: Some(&big),
            mode: 0o600,
        },
    ])
    .unwrap();
    sb.upload(&id, "/work", tar).await.expect("upload");
    let to = tmp.path().join("got.tar");
    let got = sb
        .download(&id, "/work/in", &to, 1 << 30)
        .await
        .expect("download");
    assert!(matches!(got, Fetched::Archive { .. }), "{got:?}");
    let mut names = BTreeMap::new();
    let mut archive = tar::Archive::new(std::fs::File::open(&to).unwrap());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mut content = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut content).unwrap();
        names.insert(path, content);
    }
    assert_eq!(names[&format!("in/{odd}")], b"hello");
    assert_eq!(names["in/big.bin"], big);
    let missing = sb.download(&id, "/work/none", &to, 1 << 20).await.unwrap();
    assert_eq!(missing, Fetched::NotFound);
    let small = sb.download(&id, "/work/in", &to, 1000).await.unwrap();
    assert_eq!(small, Fetched::TooLarge { limit: 1000 });

    // A deadline: SIGTERM, grace, SIGKILL; the pod lives on.
    let t = Instant::now();
    let spec = ExecSpec {
        timeout: Some(Duration::from_secs(2)),
        grace: Duration::from_secs(1),
        ..sh("trap '' TERM; sleep 100")
    };
    assert_eq!(sb.exec(&id, &spec).await.unwrap().end, ExecEnd::TimedOut);
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert_eq!(
        sb.exec(&id, &sh("true")).await.unwrap().end,
        ExecEnd::Exited(0)
    );

    // OOM: the exec dies of SIGKILL; stop says the OOM killer acted.
    let hog = sh(
        "head -c 200000000 /dev/zero | tail -c 1 >/dev/null; a=$(head -c 150000000 /dev/zero | tr '\\0' x); echo ${#a}",
    );
    let end = sb.exec(&id, &hog).await.unwrap().end;
    let stopped = sb.stop(&id).await.expect("stop");
    assert!(stopped.oom_killed, "{end:?}");
    assert_eq!(end.after_stop(stopped), ExecEnd::Killed { oom: true });
    // After stop nothing of the agent runs, and a second start only checks PID 1.
    sb.start(&id).await.expect("start again");

    let listed = sb
        .list(&Selector::Trial {
            job: "k8s-test".into(),
            trial: "basics".into(),
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].labels["arbiter.trial"], "basics");
    sb.remove(&Resource::Container(id.clone())).await.unwrap();
    sb.remove(&Resource::Container(id)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_trials_of_one_build_build_and_push_once() {
    let Some(sb) = cluster().await else { return };
    let sb = Arc::new(sb);
    let tmp = tempfile::tempdir().unwrap();
    let unique = format!("{:?}", Instant::now());
    let dockerfile = format!("FROM arbiter/busybox\nRUN echo '{unique}' > /stamp\n");
    let spec = build_spec(&tmp.path().join("ctx"), "k8s-once", &dockerfile);
    let before = sb.builds_and_pushes();
    let mut handles = Vec::new();
    for _ in 0..8 {
        let (sb, spec) = (sb.clone(), spec.clone());
        handles.push(tokio::spawn(async move { sb.prepare_image(&spec).await }));
    }
    let mut refs = Vec::new();
    for h in handles {
        refs.push(h.await.unwrap().expect("prepare").as_str().to_string());
    }
    refs.dedup();
    assert_eq!(refs.len(), 1, "{refs:?}");
    let after = sb.builds_and_pushes();
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1));
}
