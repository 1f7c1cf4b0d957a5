//! The change set and frozen filesystems on a real cluster, against the Docker backend doing
//! the same (`scripts/k8s up`, then `eval "$(scripts/k8s env)"`). Skipped with a message when
//! `KUBECONFIG` is unset; a failure when `ARBITER_REQUIRE_K8S=1`.

mod common;

use common::k8s::cluster;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use arbiter::sandbox::docker::DockerSandbox;
use arbiter::sandbox::kubernetes::KubernetesSandbox;
use arbiter::sandbox::{
    Base, Change, ChangeKind, ContainerSpec, ExecEnd, ExecSpec, ImageRef, ImageSpec, Network,
    Owner, Resource, Role, Sandbox, Selector,
};

async fn docker() -> DockerSandbox {
    let toolbox = arbiter::sandbox::toolbox::locate_toolbox().expect("toolbox (scripts/bootstrap)");
    DockerSandbox::connect()
        .await
        .expect("engine")
        .with_toolbox(&toolbox)
}

fn owner(trial: &str) -> Owner {
    let job = if trial.starts_with("many") {
        "k8s-many-test"
    } else if trial.starts_with("frozen") {
        "k8s-frozen-test"
    } else {
        "k8s-integrity-test"
    };
    Owner {
        job: job.to_string(),
        trial: trial.to_string(),
        role: Role::Agent,
        extra: BTreeMap::new(),
    }
}

/// An image built from `dockerfile` (a key per content), for the cluster and the local engine.
fn build_spec(dir: &Path, name: &str, dockerfile: &str) -> ImageSpec {
    use sha2::Digest;
    let key: String = sha2::Sha256::digest(dockerfile.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    common::dockerfile_spec(dir, name, &key[..16], dockerfile)
}

fn container(base: Base, trial: &str, network: Network) -> ContainerSpec {
    common::agent_container(base, owner(trial), network, (0.25, 256, 256))
}

fn sh(script: &str) -> ExecSpec {
    let (timeout, grace) = (Duration::from_secs(120), Duration::from_secs(2));
    common::exec_spec(&["sh", "-c", script], timeout, grace)
}

/// A Debian image with files for every kind of change.
const IMAGE: &str = r#"FROM arbiter/debian:bookworm
RUN mkdir -p /opt/data /opt/tree/a/b /opt/opq && cd /opt/data \
 && echo keep > keep && echo c > chmod && echo d > del && echo l > tolink && echo s > same \
 && echo t > touched && echo o > owned && echo x > /opt/opq/x && echo deep > /opt/tree/a/b/c \
 && echo f > /opt/tree/f && touch -d 2020-01-01 keep \
 && printf '#!/bin/sh\nif [ -e /opt/added.txt ]; then echo replayed; else echo bare; fi > /var/ep.log\nexec "$@"\n' > /usr/local/bin/ep.sh \
 && chmod 755 /usr/local/bin/ep.sh
ENTRYPOINT ["/usr/local/bin/ep.sh"]
"#;

/// Every kind of change the brief lists, done the same way in both backends' containers.
const ACTIONS: &str = r#"set -e
echo new > /opt/added.txt
mkdir -p "/opt/new dir/sub" && echo x > "/opt/new dir/sub/f"
touch "/opt/data/$(printf 'nl\nname')"
touch "/opt/data/$(printf '\377\376')"
touch -r /opt/data/keep /opt/ref && printf 'KEEP\n' > /opt/data/keep && touch -r /opt/ref /opt/data/keep && rm /opt/ref
chmod 600 /opt/data/chmod
rm /opt/data/del
rm /opt/data/tolink && ln -s /etc/passwd /opt/data/tolink
rm -rf /opt/tree
chmod 644 /opt/data/same
: >> /opt/data/touched
rm -rf /opt/opq && mkdir /opt/opq && echo y > /opt/opq/y
ln /opt/added.txt /opt/hard
chown 1:1 /opt/data/owned
rm /etc/issue
"#;

/// What each engine itself adds to a container: not the agent's doing.
/// (Docker's init, and the directories it made or copied up only to hold it: the
/// actions touch nothing under `/usr` or `/sbin`.)
const DOCKER_OWN: &[&str] = &[
    "/.arbiter",
    "/.arbiter/toolbox",
    "/.dockerenv",
    "/sbin/docker-init",
    "/usr/sbin/docker-init",
    "/sbin",
    "/usr/sbin",
    "/usr",
];
const KUBERNETES_OWN: &[&str] = &[
    "/.arbiter",
    "/.arbiter/toolbox",
    "/.arbiter/scratch",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/dev/termination-log",
];

fn listed(changes: &[Change], own: &[&str]) -> BTreeSet<(String, ChangeKind)> {
    changes
        .iter()
        .filter(|c| !own.contains(&c.path.as_str()))
        .map(|c| (c.path.clone(), c.kind))
        .collect()
}

/// Remove every pod and container of this test job, on both backends.
async fn sweep(k8s: &KubernetesSandbox, job: &str) {
    let dock = docker().await;
    for listed in k8s
        .list(&Selector::Job(job.to_string()))
        .await
        .unwrap_or_default()
    {
        let _ = k8s.remove(&listed.resource).await;
    }
    for listed in dock
        .list(&Selector::Job(job.to_string()))
        .await
        .unwrap_or_default()
    {
        let _ = dock.remove(&listed.resource).await;
    }
}

/// Run `body` with the job's leftovers swept before and after, whether it passes or not.
async fn swept<F: std::future::Future<Output = ()>>(k8s: &KubernetesSandbox, job: &str, body: F) {
    use futures_util::FutureExt;
    sweep(k8s, job).await;
    let result = std::panic::AssertUnwindSafe(body).catch_unwind().await;
    sweep(k8s, job).await;
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_change_set_from_inside_a_pod_is_the_docker_backends() {
    let Some(k8s) = cluster().await else { return };
    swept(&k8s, "k8s-integrity-test", changes_match(&k8s)).await;
}

async fn changes_match(k8s: &KubernetesSandbox) {
    let dock = docker().await;
    let tmp = tempfile::tempdir().unwrap();
    let spec = build_spec(&tmp.path().join("ctx"), "k8s-changes", IMAGE);
    let pod_image = k8s
        .prepare_image(&spec)
        .await
        .expect("prepare on the cluster");
    let local = ImageRef::new(spec.key.clone());

    let d = dock
        .create(&container(
            Base::Image(local.clone()),
            "changes-docker",
            Network::None,
        ))
        .await
        .expect("docker create");
    dock.start(&d).await.expect("docker start");
    let p = k8s
        .create(&container(
            Base::Image(pod_image.clone()),
            "changes-k8s",
            Network::None,
        ))
        .await
        .expect("pod create");
    k8s.start(&p).await.expect("pod start");

    for (name, end) in [
        (
            "docker",
            dock.exec(&d, &sh(ACTIONS)).await.expect("exec").end,
        ),
        ("k8s", k8s.exec(&p, &sh(ACTIONS)).await.expect("exec").end),
    ] {
        assert_eq!(end, ExecEnd::Exited(0), "{name}: the actions ran");
    }
    dock.stop(&d).await.expect("docker stop");
    k8s.stop(&p).await.expect("pod stop");

    let t = Instant::now();
    let from_docker = dock.changes(&d).await.expect("docker changes");
    let docker_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let from_pod = k8s
        .changes(&p)
        .await
        .expect("pod changes (first: walks the image)");
    let first_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let again = k8s.changes(&p).await.expect("pod changes again");
    let again_secs = t.elapsed().as_secs_f64();
    eprintln!(
        "change set: docker {docker_secs:.3}s, pod {first_secs:.3}s first (image walked), {again_secs:.3}s after"
    );
    let _ = dock.remove(&Resource::Container(d)).await;
    let _ = k8s.remove(&Resource::Container(p)).await;

    let want = listed(&from_docker, DOCKER_OWN);
    let got = listed(&from_pod, KUBERNETES_OWN);
    assert_eq!(listed(&again, KUBERNETES_OWN), got, "the same list twice");
    let only_docker: Vec<_> = want.difference(&got).collect();
    let only_pod: Vec<_> = got.difference(&want).collect();
    assert!(
        only_docker.is_empty() && only_pod.is_empty(),
        "only docker: {only_docker:?}\nonly the pod: {only_pod:?}"
    );
    // The list holds what was done (not two empty lists agreeing).
    for (path, kind) in [
        ("/opt/data/keep", ChangeKind::Modified),
        ("/opt/data/chmod", ChangeKind::Modified),
        ("/opt/data/del", ChangeKind::Deleted),
        ("/opt/data/tolink", ChangeKind::Modified),
        ("/opt/tree", ChangeKind::Deleted),
        ("/opt/new dir/sub/f", ChangeKind::Added),
        ("/opt/data/nl\nname", ChangeKind::Added),
        ("/opt/opq/x", ChangeKind::Deleted),
        ("/opt/hard", ChangeKind::Added),
        ("/opt/data/owned", ChangeKind::Modified),
    ] {
        assert!(got.contains(&(path.to_string(), kind)), "{path} {kind:?}");
    }
    for untouched in ["/opt/data/same", "/opt/data/touched", "/opt/tree/f"] {
        assert!(
            !got.iter().any(|(p, _)| p == untouched),
            "{untouched} listed"
        );
    }
    // Every path the engines themselves add is one of those named above.
    for c in &from_pod {
        if KUBERNETES_OWN.contains(&c.path.as_str()) {
            eprintln!("kubernetes adds {} ({:?})", c.path, c.kind);
        }
    }
}

/// What a filesystem holds under the paths the actions touched: names, modes, owners, sizes,
/// mtimes, types, link targets, link counts, contents. (Not a symlink's own mtime, which
/// the toolbox's tar does not restore; not a directory's link count, which overlayfs
/// reports as 1 for a directory it made opaque.)
const FACTS: &str = r#"find /opt /etc/issue /etc/passwd -xdev ! -type d ! -type l -exec stat -c '%n|%a|%u:%g|%s|%Y|%F|%h' {} + 2>&1 | sort
find /opt -xdev -type d -exec stat -c '%n|%a|%u:%g|%Y' {} + | sort
find /opt -xdev -type l -exec stat -c '%n|%a|%u:%g|%N' {} + | sort
find /opt -xdev -type f -exec sha256sum {} + | sort"#;

async fn facts(sb: &KubernetesSandbox, id: &arbiter::sandbox::ContainerId, dir: &Path) -> String {
    let out = dir.join("facts");
    let spec = ExecSpec {
        stdout: Some(out.clone()),
        ..sh(FACTS)
    };
    let done = sb.exec(id, &spec).await.expect("facts");
    assert!(matches!(done.end, ExecEnd::Exited(_)));
    String::from_utf8_lossy(&std::fs::read(&out).unwrap()).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_pod_is_the_agents_filesystem_replayed_before_the_entrypoint() {
    let Some(k8s) = cluster().await else { return };
    swept(&k8s, "k8s-frozen-test", frozen_replays(&k8s)).await;
}

async fn frozen_replays(k8s: &KubernetesSandbox) {
    let tmp = tempfile::tempdir().unwrap();
    let spec = build_spec(&tmp.path().join("ctx"), "k8s-changes", IMAGE);
    let image = k8s.prepare_image(&spec).await.expect("prepare");
    let p = k8s
        .create(&container(
            Base::Image(image.clone()),
            "frozen-a",
            Network::None,
        ))
        .await
        .expect("create");
    k8s.start(&p).await.expect("start");
    let done = k8s.exec(&p, &sh(ACTIONS)).await.expect("actions");
    assert_eq!(done.end, ExecEnd::Exited(0));
    k8s.stop(&p).await.expect("stop");
    let before = facts(k8s, &p, tmp.path()).await;
    assert!(
        before.contains("/opt/data/tolink|777|0:0|'/opt/data/tolink' -> '/etc/passwd'"),
        "{before}"
    );

    let t = Instant::now();
    let frozen = k8s.freeze(&p, &owner("frozen-a")).await.expect("freeze");
    eprintln!("freeze: {:.2}s", t.elapsed().as_secs_f64());
    let mut verifier = container(Base::Frozen(frozen.clone()), "frozen-b", Network::None);
    verifier.owner.role = Role::Verifier;
    let t = Instant::now();
    let q = k8s.create(&verifier).await.expect("create from frozen");
    k8s.start(&q).await.expect("start from frozen");
    eprintln!("a pod of it running: {:.2}s", t.elapsed().as_secs_f64());
    let after = facts(k8s, &q, tmp.path()).await;
    assert_eq!(before, after, "the frozen filesystem is the agent's");
    // The image's ENTRYPOINT ran on the replayed filesystem.
    let log = tmp.path().join("ep");
    let cat = ExecSpec {
        stdout: Some(log.clone()),
        ..sh("cat /var/ep.log")
    };
    k8s.exec(&q, &cat).await.expect("cat");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "replayed\n");
    // Its own changes count from the replayed filesystem.
    let none = k8s.changes(&q).await.expect("changes of the frozen pod");
    let more = k8s
        .exec(&q, &sh("echo more > /opt/more && rm /opt/added.txt"))
        .await
        .expect("more");
    assert_eq!(more.end, ExecEnd::Exited(0));
    k8s.stop(&q).await.expect("stop");
    let listed: Vec<(String, ChangeKind)> = k8s
        .changes(&q)
        .await
        .expect("changes")
        .into_iter()
        .map(|c| (c.path, c.kind))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("/opt".to_string(), ChangeKind::Modified),
            ("/opt/added.txt".to_string(), ChangeKind::Deleted),
            ("/opt/more".to_string(), ChangeKind::Added),
            // The ENTRYPOINT's own write, once the replay was done.
            ("/var".to_string(), ChangeKind::Modified),
            ("/var/ep.log".to_string(), ChangeKind::Modified),
        ],
        "(right after the start: {none:?})"
    );
    // A frozen filesystem of a pod of one (steps): the changes of both.
    let twice = k8s
        .freeze(&q, &owner("frozen-b"))
        .await
        .expect("freeze again");
    // (The node is shared: the two pods make room for the third.)
    for id in [p, q] {
        k8s.remove(&Resource::Container(id)).await.expect("remove");
    }
    let r = k8s
        .create(&container(
            Base::Frozen(twice.clone()),
            "frozen-c",
            Network::None,
        ))
        .await
        .expect("create");
    k8s.start(&r).await.expect("start");
    let third = facts(k8s, &r, tmp.path()).await;
    assert!(third.contains("/opt/more|"), "{third}");
    assert!(!third.contains("/opt/added.txt|"), "{third}");
    // (/opt/added.txt was removed in the second pod: its hard link stands alone now.)
    assert!(third.contains("/opt/hard|644|0:0|4|"), "{third}");
    assert!(!third.contains("/opt/tree"), "{third}");
    k8s.remove(&Resource::Container(r)).await.expect("remove");
    for f in [frozen, twice] {
        k8s.remove(&Resource::Frozen(f))
            .await
            .expect("remove frozen");
    }
}

/// 40,000 files of the image, each rewritten by the agent (a `git checkout` of another commit
/// in a SWE-style image does this): their paths are ~3 MB, more than one exec's argument list
/// holds (ARG_MAX, 2 MB here). The freeze and its replay still carry every one.
const MANY: &str = r#"FROM arbiter/debian:bookworm
RUN mkdir -p /opt/many && cd /opt/many && for i in $(seq 40000); do echo x > "a-file-name-long-enough-to-fill-the-argument-list-of-one-exec-$i"; done
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_freeze_of_more_paths_than_one_argument_list_holds_replays_them_all() {
    let Some(k8s) = cluster().await else { return };
    swept(&k8s, "k8s-many-test", many_replayed(&k8s)).await;
}

async fn many_replayed(k8s: &KubernetesSandbox) {
    let tmp = tempfile::tempdir().unwrap();
    let spec = build_spec(&tmp.path().join("ctx"), "k8s-many", MANY);
    let image = k8s.prepare_image(&spec).await.expect("prepare");
    let p = k8s
        .create(&container(Base::Image(image), "many-a", Network::None))
        .await
        .expect("create");
    k8s.start(&p).await.expect("start");
    let rewrite = sh("cd /opt/many && for f in *; do echo y > \"$f\"; done");
    assert_eq!(
        k8s.exec(&p, &rewrite).await.expect("rewrite").end,
        ExecEnd::Exited(0)
    );
    k8s.stop(&p).await.expect("stop");
    let t = Instant::now();
    let frozen = k8s.freeze(&p, &owner("many-a")).await.expect("freeze");
    eprintln!(
        "freeze of 40,000 changed files: {:.2}s",
        t.elapsed().as_secs_f64()
    );
    k8s.remove(&Resource::Container(p)).await.expect("remove");
    let q = k8s
        .create(&container(
            Base::Frozen(frozen.clone()),
            "many-b",
            Network::None,
        ))
        .await
        .expect("create from frozen");
    k8s.start(&q).await.expect("start from frozen");
    let out = tmp.path().join("count");
    let count = ExecSpec {
        stdout: Some(out.clone()),
        ..sh("cd /opt/many && ls | wc -l && find . -type f -exec cat {} + | sort | uniq -c")
    };
    assert_eq!(
        k8s.exec(&q, &count).await.expect("count").end,
        ExecEnd::Exited(0)
    );
    let seen = std::fs::read_to_string(&out).unwrap();
    let seen: Vec<&str> = seen.split_whitespace().collect();
    assert_eq!(
        seen,
        ["40000", "40000", "y"],
        "every file replayed, rewritten"
    );
    k8s.remove(&Resource::Container(q)).await.expect("remove");
    k8s.remove(&Resource::Frozen(frozen))
        .await
        .expect("remove frozen");
}
