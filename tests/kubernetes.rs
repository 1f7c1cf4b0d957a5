//! The Kubernetes backend against a real cluster (`scripts/k8s up`, then
//! `eval "$(scripts/k8s env)"`). Skipped with a message when `KUBECONFIG` is unset; a failure
//! when `ARBITER_REQUIRE_K8S=1`.

mod common;

use common::k8s::{
    cluster, command_job, k8s_job_dir, kubectl, pods_of, quick_built, quick_job, spawn_job,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbiter::sandbox::{
    Base, ContainerSpec, Download, ExecEnd, ExecSpec, Fetched, ImageRecipe, ImageRef, ImageSpec,
    Network, Owner, Resource, Role, Sandbox, Selector,
};

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
    let key = arbiter_digest(dockerfile);
    common::dockerfile_spec(dir, name, &key[..16], dockerfile)
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
    let base = Base::Image(image.clone());
    common::agent_container(base, owner(trial), network, (0.5, memory_mb, 256))
}

fn sh(script: &str) -> ExecSpec {
    let (timeout, grace) = (Duration::from_secs(60), Duration::from_secs(2));
    common::exec_spec(&["sh", "-c", script], timeout, grace)
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
        .download(
            &id,
            arbiter::sandbox::Download::whole("/work/in", &to, 1 << 30),
        )
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
    let missing = sb
        .download(
            &id,
            arbiter::sandbox::Download::whole("/work/none", &to, 1 << 20),
        )
        .await
        .unwrap();
    assert_eq!(missing, Fetched::NotFound);
    let small = sb
        .download(
            &id,
            arbiter::sandbox::Download::whole("/work/in", &to, 1000),
        )
        .await
        .unwrap();
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
    // After stop nothing of the agent runs, and a second start sends no request.
    sb.start(&id).await.expect("start again");

    // The verifier's files into what the agent left (the snapshot verifier's path, one
    // exec): planted files are gone, not merged; a symlinked /logs/verifier is replaced,
    // not followed; a /tests the filesystem will not let go is `Refused`.
    let planted = sh(
        "mkdir -p /tests/sub /tmp/forged && echo 'import os' > /tests/conftest.py && touch /tests/sub/x && echo 1 > /tmp/forged/reward.txt && mkdir -p /logs && ln -s /tmp/forged /logs/verifier",
    );
    assert_eq!(
        sb.exec(&id, &planted).await.unwrap().end,
        ExecEnd::Exited(0)
    );
    let verifier_files = common::verifier_files_tar();
    // Held for the next command (one exec, not two): the upload itself sends nothing.
    let before = sb.api_requests();
    sb.upload_replacing(&id, &["/tests", "/logs/verifier"], verifier_files.clone())
        .await
        .expect("replace");
    assert_eq!(sb.api_requests(), before, "held for the next command");
    let (spec, out, _) = logged(
        tmp.path(),
        sh(
            "cd / && find tests logs/verifier | sort && stat -c '%a %F' logs/verifier && cat /tmp/forged/reward.txt",
        ),
    );
    assert_eq!(sb.exec(&id, &spec).await.unwrap().end, ExecEnd::Exited(0));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "logs/verifier\ntests\ntests/test.sh\n777 directory\n1\n"
    );
    // A path the filesystem will not let go (the kernel's here; an agent's would be a
    // read-only mount it made): the replace is refused by the command that carried it, which
    // is not run, and nothing is unpacked.
    sb.upload_replacing(&id, &["/proc/1/environ"], verifier_files)
        .await
        .expect("held");
    let refused = sb.exec(&id, &sh("touch /carried-ran")).await;
    assert!(
        matches!(
            refused,
            Err(arbiter::sandbox::SandboxError::Refused { op: "replace", .. })
        ),
        "{refused:?}"
    );
    assert_eq!(
        sb.exec(&id, &sh("test ! -e /carried-ran && test ! -e /tests/x"))
            .await
            .unwrap()
            .end,
        ExecEnd::Exited(0),
        "the command that carried a refused replace did not run"
    );
    // Held files are in place before anything reads them: a download right after the upload
    // sends them first. Two held for `/` go as one archive; one for another dir goes after
    // what was held.
    let file = |path: &str, body: &[u8]| {
        arbiter::sandbox::files_to_tar(&[arbiter::sandbox::TarEntry {
            path,
            content: Some(body),
            mode: 0o644,
        }])
        .unwrap()
    };
    sb.upload(&id, "/", file("held/a.txt", b"a")).await.unwrap();
    sb.upload(&id, "/", file("held/b.txt", b"b")).await.unwrap();
    sb.upload(&id, "/tmp", file("c.txt", b"c")).await.unwrap();
    let fetched = tmp.path().join("held.tar");
    let got = sb
        .download(&id, Download::whole("/held", &fetched, 1 << 20))
        .await
        .unwrap();
    assert!(matches!(got, Fetched::Archive { .. }), "{got:?}");
    let mut names: Vec<String> = tar::Archive::new(std::fs::File::open(&fetched).unwrap())
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["held/", "held/a.txt", "held/b.txt"]);
    let (spec, out, _) = logged(tmp.path(), sh("cat /tmp/c.txt /held/a.txt"));
    assert_eq!(sb.exec(&id, &spec).await.unwrap().end, ExecEnd::Exited(0));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "ca");

    // Many paths in one exec: each archive as its own download gives it.
    let many: Vec<PathBuf> = (0..4)
        .map(|i| tmp.path().join(format!("many-{i}.tar")))
        .collect();
    let wants = [
        Download::whole("/held", &many[0], 1 << 20),
        Download::entry("/held", &many[1], 1 << 20),
        Download::whole("/nothing-here", &many[2], 1 << 20),
        Download::whole("/held", &many[3], 100),
    ];
    let before = sb.api_requests();
    let got = sb.download_many(&id, &wants).await.expect("many");
    assert_eq!(sb.api_requests() - before, 1, "one exec for them all");
    assert!(matches!(got[0], Ok(Fetched::Archive { .. })), "{got:?}");
    assert!(matches!(got[1], Ok(Fetched::Archive { .. })), "{got:?}");
    assert!(matches!(got[2], Ok(Fetched::NotFound)), "{got:?}");
    assert!(
        matches!(got[3], Ok(Fetched::TooLarge { limit: 100 })),
        "{got:?}"
    );
    let single = tmp.path().join("single.tar");
    sb.download(&id, Download::whole("/held", &single, 1 << 20))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(&many[0]).unwrap(),
        std::fs::read(&single).unwrap()
    );
    let names_of = |path: &Path| -> Vec<String> {
        tar::Archive::new(std::fs::File::open(path).unwrap())
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect()
    };
    assert_eq!(names_of(&many[1]), ["held/"], "the entry alone");

    // The stop sends `/logs` along: a read beneath it right after sends no request, and
    // gives what the pod's own archive gives once an exec made that one stale.
    let logs = sh(
        "mkdir -p /logs/agent/sub && printf 'one' > /logs/agent/a.txt && printf 'two' > /logs/agent/sub/b.txt && ln -s ../agent /logs/agent/up && ln -s /etc /logs/etc-link",
    );
    assert_eq!(sb.exec(&id, &logs).await.unwrap().end, ExecEnd::Exited(0));
    sb.stop(&id).await.expect("stop");
    type Entry = (String, String, String, Vec<u8>);
    let entries = |path: &Path| -> Vec<Entry> {
        let mut a = tar::Archive::new(std::fs::File::open(path).unwrap());
        let mut all: Vec<Entry> = a
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let name = e.path().unwrap().display().to_string();
                let name = name.trim_end_matches('/').to_string();
                let link = e
                    .link_name()
                    .unwrap()
                    .map(|l| l.display().to_string())
                    .unwrap_or_default();
                let h = e.header();
                let meta = format!(
                    "{:o} {} {} {:?}",
                    h.mode().unwrap(),
                    h.uid().unwrap(),
                    h.mtime().unwrap(),
                    h.entry_type()
                );
                let mut body = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut body).unwrap();
                (name, link, meta, body)
            })
            .collect();
        all.sort();
        all
    };
    let from_stop = tmp.path().join("from-stop.tar");
    let before = sb.api_requests();
    let got = sb
        .download(&id, Download::whole("/logs/agent", &from_stop, 1 << 20))
        .await
        .unwrap();
    assert!(matches!(got, Fetched::Archive { .. }), "{got:?}");
    assert_eq!(sb.api_requests(), before, "read from what the stop sent");
    // Through a symlink the kernel follows: only the pod can say.
    let through = tmp.path().join("through.tar");
    let got = sb
        .download(
            &id,
            Download::whole("/logs/etc-link/passwd", &through, 1 << 20),
        )
        .await
        .unwrap();
    assert!(matches!(got, Fetched::Archive { .. }), "{got:?}");
    // The pod was asked, in the exec the stop left open for its next command (parked.rs):
    // no request of its own.
    assert_eq!(sb.api_requests(), before, "asked in the stop's parked exec");
    assert_eq!(entries(&through)[0].0, "passwd");
    assert_eq!(
        sb.exec(&id, &sh("true")).await.unwrap().end,
        ExecEnd::Exited(0)
    );
    let from_pod = tmp.path().join("from-pod.tar");
    let before = sb.api_requests();
    sb.download(&id, Download::whole("/logs/agent", &from_pod, 1 << 20))
        .await
        .unwrap();
    assert!(
        sb.api_requests() > before,
        "stale after an exec: read from the pod"
    );
    assert_eq!(entries(&from_stop), entries(&from_pod));
    assert_eq!(
        entries(&from_pod)
            .iter()
            .map(|(n, l, _, b)| format!("{n}|{l}|{}", String::from_utf8_lossy(b)))
            .collect::<Vec<_>>(),
        [
            "agent||",
            "agent/a.txt||one",
            "agent/sub||",
            "agent/sub/b.txt||two",
            "agent/up|../agent|"
        ]
    );

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

/// The image of `spec` prepared by eight tasks at once: the references they got.
async fn prepare_eight_at_once(
    sb: &Arc<arbiter::sandbox::kubernetes::KubernetesSandbox>,
    spec: &ImageSpec,
) -> Vec<String> {
    let mut handles = Vec::new();
    for _ in 0..8 {
        let (sb, spec) = (Arc::clone(sb), spec.clone());
        handles.push(tokio::spawn(async move { sb.prepare_image(&spec).await }));
    }
    let mut refs = Vec::new();
    for h in handles {
        refs.push(h.await.unwrap().expect("prepare").as_str().to_string());
    }
    refs
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
    let mut refs = prepare_eight_at_once(&sb, &spec).await;
    refs.dedup();
    assert_eq!(refs.len(), 1, "{refs:?}");
    let after = sb.builds_and_pushes();
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1));
}

/// A registry that hiccups: a proxy on the loopback in front of the test cluster's registry
/// that answers HTTP 500 to the first two manifest checks (HEAD) and to the first manifest
/// push (PUT), and forwards everything else; how many of each it saw.
async fn hiccuping_registry() -> (String, Arc<[std::sync::atomic::AtomicUsize; 2]>) {
    use axum::body::Body;
    use axum::http::{Method, Request, StatusCode};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let seen: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let counts = Arc::clone(&seen);
    let http = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |request: Request<Body>| {
        let (counts, http) = (Arc::clone(&counts), http.clone());
        async move {
            let manifest = request.uri().path().contains("/manifests/");
            let n = match (request.method(), manifest) {
                (&Method::HEAD, true) => Some((0, 2)),
                (&Method::PUT, true) => Some((1, 1)),
                _ => None,
            }
            .map(|(which, fail)| (counts[which].fetch_add(1, Ordering::SeqCst), fail));
            if let Some((n, fail)) = n
                && n < fail
            {
                return axum::http::Response::builder()
                    .status(StatusCode::INTERNAL_SERVER_ERROR)
                    .body(Body::from("injected"))
                    .expect("response");
            }
            let url = format!(
                "http://127.0.0.1:5000{}",
                request.uri().path_and_query().map_or("/", |p| p.as_str())
            );
            let method = request.method().clone();
            let mut headers = request.headers().clone();
            headers.remove("host");
            let body = reqwest::Body::wrap_stream(request.into_body().into_data_stream());
            let got = http
                .request(method, url)
                .headers(headers)
                .body(body)
                .send()
                .await
                .expect("the registry behind the proxy");
            let mut reply = axum::http::Response::builder().status(got.status());
            for (k, v) in got.headers() {
                reply = reply.header(k, v);
            }
            reply
                .body(Body::from(got.bytes().await.expect("reply body")))
                .expect("response")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let host = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (host, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registry_that_hiccups_still_gets_one_push_of_eight_concurrent_builds() {
    use arbiter::sandbox::kubernetes::{KubeSettings, KubernetesSandbox};
    use std::sync::atomic::Ordering;
    if cluster().await.is_none() || !common::docker_available() {
        return;
    }
    let (host, seen) = hiccuping_registry().await;
    let toolbox = arbiter::sandbox::toolbox::locate_toolbox().expect("toolbox");
    let settings = KubeSettings {
        registry: Some(host.clone()),
        ..Default::default()
    };
    let sb = KubernetesSandbox::connect(settings)
        .await
        .expect("kubeconfig")
        .with_toolbox(&toolbox);
    let sb = Arc::new(sb);
    let tmp = tempfile::tempdir().unwrap();
    let unique = format!("{:?} hiccups", Instant::now());
    let dockerfile = format!("FROM arbiter/busybox\nRUN echo '{unique}' > /stamp\n");
    let spec = build_spec(&tmp.path().join("ctx"), "k8s-hiccup", &dockerfile);
    let mut refs = prepare_eight_at_once(&sb, &spec).await;
    refs.dedup();
    assert_eq!(refs.len(), 1, "{refs:?}");
    assert!(refs[0].starts_with(&host), "{refs:?}");
    assert_eq!(sb.builds_and_pushes(), (1, 1), "one build, one push");
    let (heads, puts) = (
        seen[0].load(Ordering::SeqCst),
        seen[1].load(Ordering::SeqCst),
    );
    assert!(
        heads >= 3,
        "the 500s to manifest checks were asked again ({heads})"
    );
    assert!(
        puts >= 2,
        "the push refused with a 500 was tried again ({puts})"
    );
}

// ---------------------------------------------------------------- the real binary ---

fn kubectl_apply(yaml: &str) {
    use std::io::Write;
    let bin = std::env::var("ARBITER_K8S_KUBECTL").unwrap_or_else(|_| "kubectl".to_string());
    let mut child = std::process::Command::new(bin)
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(yaml.as_bytes())
        .expect("write");
    assert!(child.wait().expect("kubectl").success(), "kubectl apply");
}

fn example_tasks() -> Vec<String> {
    let mut tasks: Vec<String> = std::fs::read_dir(common::repo().join("tasks"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("task.toml").is_file())
        .map(|e| e.path().display().to_string())
        .collect();
    tasks.sort();
    tasks
}

/// Fields of a record that differ by nature between two runs or two backends: ids, times,
/// the image reference, the backend's name; and what the Kubernetes backend does not compute
/// yet (the change set and its integrity verdict, issue 27; the storage watchdog).
const IGNORED: &[&str] = &[
    "job",
    "started_at",
    "finished_at",
    "phases",
    "image",
    "sandbox",
    "changes",
    "change_content",
    "integrity",
    "limits.storage_enforced",
    "limits.storage_used_mb",
    "limits.files_used",
    "limits.files_counted",
    "verifier.seconds",
    "termination.seconds",
    "agent_deadline_epoch",
    // An infrastructure retry is the harness's fact, kept apart from the trial's result: under
    // CI load a pods/exec download can lose bytes (issue 35), and the trial is retried as
    // infra — its final record must still say what Docker's says of the trial.
    "retries",
    "previous_errors",
];

#[test]
fn the_example_tasks_on_kubernetes_match_docker() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    if rt.block_on(cluster()).is_none() {
        return;
    }
    let tasks = example_tasks();
    assert_eq!(tasks.len(), 6, "{tasks:?}");
    let mut args: Vec<&str> = tasks.iter().map(String::as_str).collect();
    args.extend(["--agent", "oracle", "--agent", "nop", "-n", "4"]);
    let mut on_k8s = args.clone();
    on_k8s.extend(["--backend", "kubernetes"]);
    let t = Instant::now();
    let (out, k8s_dir, _guard) = common::run_job(&on_k8s);
    let k8s_seconds = t.elapsed().as_secs_f64();
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let table = common::stdout(&out);
    assert!(
        table.contains("nop     default       6       0       6      0"),
        "{table}"
    );
    assert!(
        table.contains("oracle  default       6       6       0      0"),
        "{table}"
    );
    assert!(
        pods_of(&k8s_dir).is_empty(),
        "pods left: {:?}",
        pods_of(&k8s_dir)
    );
    if !common::docker_available() {
        return;
    }
    let t = Instant::now();
    let (out, docker_dir, _guard2) = common::run_job(&args);
    eprintln!(
        "12 trials, -n 4: kubernetes {k8s_seconds:.1}s, docker {:.1}s",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let mut compared = 0;
    for entry in std::fs::read_dir(docker_dir.join("trials"))
        .unwrap()
        .flatten()
    {
        let trial = entry.file_name().to_string_lossy().into_owned();
        let mut docker = common::result(&docker_dir, &trial);
        let mut k8s = common::result(&k8s_dir, &trial);
        assert_eq!(docker["sandbox"]["backend"], "docker");
        assert_eq!(k8s["sandbox"]["backend"], "kubernetes");
        assert!(k8s["image"].as_str().unwrap().contains("@sha256:"));
        common::strip_fields(&mut docker, IGNORED);
        common::strip_fields(&mut k8s, IGNORED);
        assert_eq!(docker, k8s, "{trial}");
        compared += 1;
    }
    assert_eq!(compared, 12);
}

/// One line on stderr after `error: `, exit 2, no trial started.
fn refused(out: &std::process::Output, job_dir: &Path, want: &str) {
    let err = common::stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains(want), "{err}");
    assert!(!job_dir.join("trials").exists(), "a trial started");
}

#[test]
fn preflight_failures_are_one_line_and_exit_2() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    if rt.block_on(cluster()).is_none() {
        return;
    }
    let task = common::repo()
        .join("tasks/csv-to-json")
        .display()
        .to_string();
    let base = [
        task.as_str(),
        "--agent",
        "oracle",
        "--backend",
        "kubernetes",
    ];
    let run = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        common::run_job(&args)
    };
    let (out, dir, _g) = run(&["--namespace", "no-such-namespace"]);
    refused(&out, &dir, "namespace no-such-namespace does not exist");
    let (out, dir, _g) = run(&["--registry", "127.0.0.1:5999"]);
    refused(&out, &dir, "registry 127.0.0.1:5999");
    let (out, dir, _g) = run(&["--context", "no-such-context"]);
    refused(&out, &dir, "no context named no-such-context");

    // A user who may do everything with pods there but exec into them.
    kubectl_apply(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: arbiter-noexec}\n---\n\
apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: no-exec, namespace: arbiter-noexec}\n\
rules:\n- apiGroups: [\"\"]\n  resources: [pods, pods/log]\n  verbs: [get, list, watch, create, delete]\n---\n\
apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: no-exec, namespace: arbiter-noexec}\n\
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: no-exec}\n\
subjects:\n- {apiGroup: rbac.authorization.k8s.io, kind: User, name: arbiter-tester}\n",
    );
    let (out, dir, _g) = run(&[
        "--context",
        "arbiter-restricted",
        "--namespace",
        "arbiter-noexec",
    ]);
    refused(
        &out,
        &dir,
        "may not create pods/exec in namespace arbiter-noexec",
    );

    // Pod Security baseline forbids the NET_ADMIN init container: no-network tasks refused.
    kubectl_apply(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: arbiter-baseline\n  labels: {pod-security.kubernetes.io/enforce: baseline}\n",
    );
    let (out, dir, _g) = run(&["--namespace", "arbiter-baseline"]);
    refused(
        &out,
        &dir,
        "needs network \"no-network\", but namespace arbiter-baseline does not admit the NET_ADMIN init container",
    );
    let (out, dir, _g) = run(&["--namespace", "arbiter-baseline", "--network", "host"]);
    refused(&out, &dir, "needs network \"host\"");
}

#[test]
fn gc_removes_the_pods_of_dead_owners_only() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(sb) = rt.block_on(cluster()) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let spec = build_spec(&tmp.path().join("ctx"), "k8s-basics", TASK_IMAGE);
    let image = rt.block_on(sb.prepare_image(&spec)).expect("prepare");
    let live = format!("{}/{}/{}", hostname(), std::process::id(), start_time());
    let mut ids = Vec::new();
    for (trial, owner) in [("gc-dead", "nohost-x/1/1".to_string()), ("gc-live", live)] {
        let mut spec = container(&image, trial, Network::Bridge, 64);
        spec.owner.extra.insert("arbiter.owner".into(), owner);
        ids.push(rt.block_on(sb.create(&spec)).expect("create"));
    }
    // A dead owner of this host: a pid that does not run.
    let mut dead = container(&image, "gc-dead-here", Network::Bridge, 64);
    dead.owner
        .extra
        .insert("arbiter.owner".into(), format!("{}/4194000/1", hostname()));
    ids.push(rt.block_on(sb.create(&dead)).expect("create"));
    let out = common::arbiter(&["gc", "--backend", "kubernetes"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(text.starts_with("gc: removed "), "{text}");
    let left = rt
        .block_on(sb.list(&Selector::Job("k8s-test".into())))
        .unwrap();
    let trials: Vec<&str> = left
        .iter()
        .map(|l| l.labels["arbiter.trial"].as_str())
        .collect();
    assert!(
        trials.contains(&"gc-live") && trials.contains(&"gc-dead"),
        "{trials:?}"
    );
    assert!(!trials.contains(&"gc-dead-here"), "{trials:?}");
    for id in ids {
        rt.block_on(sb.remove(&Resource::Container(id))).unwrap();
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn start_time() -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", std::process::id())).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// The run's arguments besides the job's: the Kubernetes backend.
const ON_K8S: [&str; 2] = ["--backend", "kubernetes"];

/// The running agent pod of a trial, once there is one.
fn agent_pod(trial: &str, deadline: Instant) -> String {
    loop {
        let out = kubectl(&[
            "get",
            "pods",
            "-l",
            &format!("arbiter.trial={trial},arbiter.role=agent"),
            "--field-selector",
            "status.phase=Running",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ]);
        let names = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if let Some(name) = names.split_whitespace().next() {
            return name.to_string();
        }
        assert!(Instant::now() < deadline, "no agent pod of {trial}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_pod_deleted_behind_arbiters_back_is_an_infra_error_and_retried() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    if rt.block_on(cluster()).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = quick_job(
        tmp.path(),
        &[("slow", "sleep 4; echo ok > /app/out")],
        "retries: {max: 1, backoff_sec: 0.5}\n",
    );
    let job_dir = k8s_job_dir(tmp.path(), "vanish");
    let child = spawn_job(&config, &job_dir, &ON_K8S);
    let trial = "quick-k8s__slow__default__1";
    let deadline = Instant::now() + Duration::from_secs(180);
    let pod = agent_pod(trial, deadline);
    // Only once the agent runs (its exec is in flight): its stdout log is opened when the
    // agent's exec begins. A fixed wait after the pod runs could land in the environment phase
    // on a loaded cluster (then the error's phase is neither agent nor collect).
    let live = job_dir.join("trials").join(trial).join("agent/stdout.log");
    while !live.is_file() {
        assert!(
            Instant::now() < deadline,
            "the agent of {trial} never started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Its exec connected (the agent sleeps 4 s from then).
    std::thread::sleep(Duration::from_millis(1000));
    let deleted = kubectl(&[
        "delete",
        "pod",
        &pod,
        "--grace-period=0",
        "--force",
        "--wait=false",
    ]);
    assert!(deleted.status.success(), "{}", common::stderr(&deleted));
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let r = common::result(&job_dir, trial);
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    assert_eq!(r["retries"], 1, "{r:#}");
    let first = &r["previous_errors"][0];
    // Noticed where it happened: the agent's exec (cut), or — when the kubelet killed the
    // agent's process first and its exec ended with 137 — the collect phase's stop.
    assert!(
        first["phase"] == "agent" || first["phase"] == "collect",
        "{r:#}"
    );
    assert!(
        first["message"].as_str().is_some_and(|m| m.contains(&pod)),
        "the first try failed on the deleted pod: {r:#}"
    );
    assert!(pods_of(&job_dir).is_empty(), "{:?}", pods_of(&job_dir));
}

/// What the agent causes ends as the agent's result, told from the pod's status: a pod the
/// kubelet evicts for writing over its ephemeral-storage limit is `killed` with the verifier
/// `error` (its filesystem is gone with it); an OOM kill is `oom` — on cgroup v2 the kubelet
/// has the whole container killed (`memory.oom.group`: the filesystem is gone, the verifier
/// `error`), on cgroup v1 (this machine) only the hog, and the verifier runs. Never an
/// `infra_error`, never retried.
#[test]
fn what_the_agent_causes_is_the_agents_result_never_infra() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    if rt.block_on(cluster()).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let task = quick_built(tmp.path());
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    std::fs::write(
        task.join("task.toml"),
        toml.replace("memory_mb = 64", "memory_mb = 64\nstorage_mb = 16")
            .replace("timeout_sec = 60", "timeout_sec = 240"),
    )
    .unwrap();
    let config = command_job(
        tmp.path(),
        &[&task],
        &[
            (
                "filler",
                "dd if=/dev/zero of=/app/big bs=1M count=400; sleep 200",
            ),
            ("hog", "tail /dev/zero"),
        ],
        "retries: {max: 1, backoff_sec: 0.5}\nconcurrency: 2\n",
    );
    let job_dir = k8s_job_dir(tmp.path(), "agent-ends");
    let out = spawn_job(&config, &job_dir, &ON_K8S)
        .wait_with_output()
        .expect("wait");
    assert!(out.status.code().is_some(), "{}", common::stderr(&out));
    for (agent, kind, detail) in [
        (
            "filler",
            "killed",
            "its container was evicted for writing more than its ephemeral-storage limit while the agent ran",
        ),
        ("hog", "oom", "killed by the kernel OOM killer"),
    ] {
        let r = common::result(&job_dir, &format!("quick-k8s__{agent}__default__1"));
        assert!(r["infra_error"].is_null(), "{agent}: {r:#}");
        assert_eq!(r["retries"], 0, "{agent}: {r:#}");
        assert_eq!(r["termination"]["kind"], kind, "{agent}: {r:#}");
        assert!(
            r["termination"]["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with(detail)),
            "{agent}: {r:#}"
        );
        let lost = r["verifier"]["status"] == "error"
            && r["verifier"]["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("not run: ") && d.ends_with("could not be read"));
        let verified = r["verifier"]["status"] == "failed";
        assert!(lost || (agent == "hog" && verified), "{agent}: {r:#}");
    }
    assert!(pods_of(&job_dir).is_empty(), "{:?}", pods_of(&job_dir));
}

#[test]
fn kill_9_mid_job_then_resume_loses_and_duplicates_nothing() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    if rt.block_on(cluster()).is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = quick_job(
        tmp.path(),
        &[("slow", "sleep 3; echo ok > /app/out")],
        "attempts: 3\nconcurrency: 1\n",
    );
    let job_dir = k8s_job_dir(tmp.path(), "kill");
    let mut child = spawn_job(&config, &job_dir, &ON_K8S);
    // Killed while the second trial's agent runs: one record, one pod left behind.
    agent_pod(
        "quick-k8s__slow__default__2",
        Instant::now() + Duration::from_secs(180),
    );
    std::thread::sleep(Duration::from_millis(1000));
    child.kill().expect("kill -9");
    let _ = child.wait();
    assert!(!pods_of(&job_dir).is_empty(), "the killed job left its pod");
    let out = common::arbiter(&["resume", "--quiet", &job_dir.display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let lines = std::fs::read_to_string(job_dir.join("trials.jsonl")).unwrap();
    let mut ids: Vec<String> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        (1..=3)
            .map(|i| format!("quick-k8s__slow__default__{i}"))
            .collect::<Vec<_>>()
    );
    for id in &ids {
        assert_eq!(common::result(&job_dir, id)["verifier"]["status"], "passed");
    }
    assert!(pods_of(&job_dir).is_empty(), "{:?}", pods_of(&job_dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn network_none_is_only_loopback_and_a_failed_pull_names_the_image() {
    let Some(sb) = cluster().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let spec = build_spec(&tmp.path().join("ctx"), "k8s-basics", TASK_IMAGE);
    let image = sb.prepare_image(&spec).await.expect("prepare");
    let server = sb
        .create(&container(&image, "net-server", Network::Bridge, 64))
        .await
        .unwrap();
    let client = sb
        .create(&container(&image, "net-client", Network::Bridge, 64))
        .await
        .unwrap();
    let none = sb
        .create(&container(&image, "net-none", Network::None, 64))
        .await
        .unwrap();
    for id in [&server, &client, &none] {
        sb.start(id).await.expect("start");
    }
    let (spec, out, _) = logged(
        tmp.path(),
        sh("ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1"),
    );
    sb.exec(&server, &spec).await.unwrap();
    let ip = std::fs::read_to_string(&out).unwrap().trim().to_string();
    assert!(ip.starts_with("198.19."), "{ip}");
    let serve = ExecSpec {
        // Ends at its deadline, once the probes are done.
        timeout: Some(Duration::from_secs(10)),
        grace: Duration::from_secs(1),
        ..sh("while :; do echo hi | nc -l -p 8080; done")
    };
    let serving = {
        let sb = &sb;
        let server = server.clone();
        async move { sb.exec(&server, &serve).await }
    };
    let probes = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let connect = format!("nc -w 3 {ip} 8080 </dev/null");
        let from_pod_network = sb.exec(&client, &sh(&connect)).await.unwrap().end;
        let from_none = sb.exec(&none, &sh(&connect)).await.unwrap().end;
        // Only loopback; the agent's container cannot bring eth0 back (no NET_ADMIN).
        let (spec, out, _) = logged(
            tmp.path(),
            sh(
                "ip -o link show up | awk -F': ' '{print $2}'; ip link set eth0 up 2>/dev/null && echo UP; grep CapEff /proc/self/status",
            ),
        );
        sb.exec(&none, &spec).await.unwrap();
        let inside = std::fs::read_to_string(&out).unwrap();
        (from_pod_network, from_none, inside)
    };
    let (_, (from_pod_network, from_none, inside)) = tokio::join!(serving, probes);
    assert_eq!(
        from_pod_network,
        ExecEnd::Exited(0),
        "the pod network works"
    );
    assert_ne!(
        from_none,
        ExecEnd::Exited(0),
        "network none reached another pod"
    );
    let mut lines = inside.lines();
    assert_eq!(lines.next(), Some("lo"), "{inside}");
    assert!(!inside.contains("UP"), "{inside}");
    let caps = inside
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .map(|h| u64::from_str_radix(h.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(caps & (1 << 12), 0, "NET_ADMIN in the agent's container");
    for id in [server, client, none] {
        sb.remove(&Resource::Container(id)).await.unwrap();
    }

    // An image nobody can pull: an error naming it, with the pod's events.
    let named = ImageSpec {
        recipe: ImageRecipe::Named("127.0.0.1:5000/arbiter-test/no-such-image:1".into()),
        key: "127.0.0.1:5000/arbiter-test/no-such-image:1".into(),
        timeout: Duration::from_secs(60),
        labels: BTreeMap::new(),
    };
    let missing = sb.prepare_image(&named).await.unwrap();
    let id = sb
        .create(&container(&missing, "pull", Network::Bridge, 64))
        .await
        .unwrap();
    let err = sb.start(&id).await.unwrap_err().to_string();
    sb.remove(&Resource::Container(id)).await.unwrap();
    assert!(
        err.contains("image 127.0.0.1:5000/arbiter-test/no-such-image:1 could not be pulled"),
        "{err}"
    );
    assert!(err.contains("events:"), "{err}");
}

/// A pod handed over before the API reports its main container running (the kubelet's
/// relist lags the start by up to a second): its first command confirms it running itself,
/// in one exec with no confirming exec before it, and runs once however often it is asked.
/// Pods start one after another on an image that ran before (only such a pod is handed over
/// early), until three were handed over and needed no second ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_handed_over_early_runs_its_first_command_once_in_one_exec() {
    let Some(sb) = cluster().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let spec = build_spec(&tmp.path().join("ctx"), "k8s-basics", TASK_IMAGE);
    let image = sb.prepare_image(&spec).await.expect("prepare");
    let (mut early, mut at_once) = (0, 0);
    for i in 0..16 {
        let id = sb
            .create(&container(&image, &format!("early-{i}"), Network::None, 64))
            .await
            .expect("create");
        let handed = sb.early_starts().0;
        sb.start(&id).await.expect("start");
        let was_early = sb.early_starts().0 > handed;
        let (before, too_soon) = (sb.api_requests(), sb.early_starts().1);
        let (spec, out, _) = logged(tmp.path(), sh("echo ran >> /work/ran && wc -l < /work/ran"));
        assert_eq!(sb.exec(&id, &spec).await.unwrap().end, ExecEnd::Exited(0));
        let requests = sb.api_requests() - before;
        let asked_again = sb.early_starts().1 - too_soon;
        assert_eq!(
            std::fs::read_to_string(&out).unwrap().trim(),
            "1",
            "pod {i}: the first command ran once (asked {} times)",
            asked_again + 1
        );
        if was_early {
            early += 1;
            if asked_again == 0 {
                at_once += 1;
                assert_eq!(requests, 1, "pod {i}: its first command, one exec");
            }
        }
        sb.remove(&Resource::Container(id)).await.expect("remove");
        if at_once >= 3 {
            break;
        }
    }
    eprintln!("handed over early: {early} pods, {at_once} of them at the first ask");
    assert!(
        at_once >= 1,
        "no pod of 16 was handed over early and found running at once"
    );
}

/// Reads of a pod created and not started (an image's index, the source `clean` mode) wait
/// until it runs: concurrent ones wait for one watch together, not one watch each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_reads_of_a_pod_not_started_wait_for_one_watch() {
    let Some(sb) = cluster().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let spec = build_spec(&tmp.path().join("ctx"), "k8s-basics", TASK_IMAGE);
    let image = sb.prepare_image(&spec).await.expect("prepare");
    let id = sb
        .create(&container(&image, "unstarted-reads", Network::None, 64))
        .await
        .expect("create");
    // The first pod starts the watch of Started events: its requests are the job's.
    for _ in 0..100 {
        if sb.started_events_live() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(sb.started_events_live(), "the Started events are watched");
    let before = sb.api_requests();
    let (a, b) = (tmp.path().join("a.tar"), tmp.path().join("b.tar"));
    let (got_a, got_b) = tokio::join!(
        sb.download(&id, Download::entry("/work", &a, 1 << 20)),
        sb.download(&id, Download::whole("/etc/passwd", &b, 1 << 20)),
    );
    assert!(matches!(got_a, Ok(Fetched::Archive { .. })), "{got_a:?}");
    assert!(matches!(got_b, Ok(Fetched::Archive { .. })), "{got_b:?}");
    assert_eq!(
        sb.api_requests() - before,
        3,
        "one watch for both reads, then one exec each"
    );
    sb.remove(&Resource::Container(id)).await.expect("remove");
}
