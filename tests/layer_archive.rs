//! The Docker backend builds an archive of a stopped container's path from its writable layer
//! on this host when that alone holds the path whole (sandbox/layer.rs). Real engine: every
//! path is downloaded once while the container runs (the engine's own archive) and once after
//! it is stopped, and the two archives must say the same; the paths the layer holds whole must
//! cost no engine request, and the ones it does not (the image's files show through, a mount)
//! must still be the engine's. And the verifier's `upload_replacing`: what the agent left at
//! `/tests` and `/logs/verifier` is replaced, never merged or followed.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::Duration;

use futures_util::FutureExt;

use arbiter::sandbox::docker::DockerSandbox;
use arbiter::sandbox::docker::engine_requests;
use arbiter::sandbox::{
    Base, ContainerLimits, ContainerSpec, ExecEnd, ExecSpec, Fetched, ImageRef, Mount, Network,
    Owner, Resource, Role, Sandbox, TarEntry, files_to_tar,
};

const IMAGE: &str = "arbiter/debian:bookworm";

/// The engine request counter is the process's: the tests here run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What an archive says of each entry: type, mode, owner, mtime, link target and content (a
/// hard link stands for its target's content: the engine writes the second name of a file as
/// a link to the first, the layer writes both in full).
type Listing = BTreeMap<Vec<u8>, (String, u32, u64, u64, u64, Option<Vec<u8>>, Vec<u8>)>;

fn listing(tar_path: &Path) -> Listing {
    let mut archive = tar::Archive::new(std::fs::File::open(tar_path).expect("archive"));
    let mut out = Listing::new();
    let mut links = Vec::new();
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        let name = entry.path_bytes().into_owned();
        let name = name.strip_suffix(b"/").unwrap_or(&name).to_vec();
        let header = entry.header().clone();
        let link = entry.link_name_bytes().map(|l| l.into_owned());
        let mut body = Vec::new();
        entry.read_to_end(&mut body).expect("body");
        let kind = header.entry_type();
        if kind.is_hard_link() {
            links.push((name, header, link));
            continue;
        }
        out.insert(
            name,
            (
                format!("{kind:?}"),
                header.mode().expect("mode"),
                header.uid().expect("uid"),
                header.gid().expect("gid"),
                header.mtime().expect("mtime"),
                link,
                body,
            ),
        );
    }
    for (name, header, target) in links {
        let target = target.expect("a hard link names its target");
        let mut linked = out
            .get(&target)
            .cloned()
            .expect("the link's target is archived");
        linked.1 = header.mode().expect("mode");
        out.insert(name, linked);
    }
    out
}

fn exec(argv: &[&str]) -> ExecSpec {
    common::exec_spec(argv, Duration::from_secs(60), Duration::from_secs(1))
}

#[tokio::test]
async fn the_layers_archive_of_a_stopped_container_is_the_engines() {
    let Some((_serial, sb)) = engine().await else {
        return;
    };
    let mounted = tempfile::tempdir().expect("tmp");
    std::fs::write(mounted.path().join("input.txt"), b"from the host").expect("write");
    let mut spec = plain_spec("layer");
    spec.owner.role = Role::Agent;
    spec.mounts = vec![Mount {
        host: mounted.path().to_path_buf(),
        container: "/data".to_string(),
        read_only: true,
    }];
    let id = sb.create(&spec).await.expect("create");
    let scratch = tempfile::tempdir().expect("tmp");
    let result = AssertUnwindSafe(async {
        sb.start(&id).await.expect("start");
        let script = r#"set -e
mkdir -p /work/sub /logs/agent
printf 'hello' > /work/a.txt
printf 'tool' > /work/sub/tool && chmod 4755 /work/sub/tool
ln -s /etc/shadow /work/link
ln -s / /work/root
ln -s sub/ /work/trail
ln -s "/$(printf 'x%.0s' $(seq 1 150))/target" /work/long
ln /work/a.txt /work/hard
mkfifo /work/fifo
mkdir /odd && printf 'odd' > "$(printf '/odd/new\nline\377')"
chown 1234:5678 /work/a.txt
touch -d '2001-02-03 04:05:06' /work/sub
printf 'log' > /logs/agent/out.log
printf 'edited' >> /etc/debian_version
rm /etc/issue.net
chmod 0700 /var/log
"#;
        let out = sb
            .exec(&id, &exec(&["bash", "-c", script]))
            .await
            .expect("exec");
        assert_eq!(out.end, ExecEnd::Exited(0), "{out:?}");
        // (path, whether the writable layer holds it whole)
        let paths: [(&str, bool); 8] = [
            ("/work", true),
            ("/work/a.txt", true),
            ("/logs", true),
            ("/etc/debian_version", true),
            ("/var/log", false),
            ("/etc", false),
            ("/data", false),
            ("/data/input.txt", false),
        ];
        let mut engine = Vec::new();
        for (i, (path, _)) in paths.iter().enumerate() {
            let to = scratch.path().join(format!("engine-{i}.tar"));
            let got = sb
                .download(&id, arbiter::sandbox::Download::whole(path, &to, 1 << 30))
                .await
                .expect("download");
            assert!(matches!(got, Fetched::Archive { .. }), "{path}: {got:?}");
            engine.push(listing(&to));
        }
        let gone = scratch.path().join("gone.tar");
        assert_eq!(
            sb.download(
                &id,
                arbiter::sandbox::Download::whole("/etc/issue.net", &gone, 1 << 30)
            )
            .await
            .expect("download"),
            Fetched::NotFound
        );
        sb.stop(&id).await.expect("stop");
        for (i, (path, whole)) in paths.iter().enumerate() {
            let to = scratch.path().join(format!("layer-{i}.tar"));
            let before = engine_requests();
            let got = sb
                .download(&id, arbiter::sandbox::Download::whole(path, &to, 1 << 30))
                .await
                .expect("download");
            let requests = engine_requests() - before;
            assert!(matches!(got, Fetched::Archive { .. }), "{path}: {got:?}");
            assert_eq!(
                requests,
                if *whole { 0 } else { 1 },
                "{path}: engine requests"
            );
            let layer = listing(&to);
            assert_eq!(
                layer.keys().collect::<Vec<_>>(),
                engine[i].keys().collect::<Vec<_>>(),
                "{path}: names"
            );
            assert_eq!(layer, engine[i], "{path}: entries");
        }
        // A modified directory's own entry (all the change set reads of `/var/log`, which the
        // agent only chmod'ed): from the layer, as the engine's archive of it begins.
        let to = scratch.path().join("entry.tar");
        let before = engine_requests();
        let got = sb
            .download(
                &id,
                arbiter::sandbox::Download::entry("/var/log", &to, 1 << 30),
            )
            .await
            .expect("entry");
        assert!(matches!(got, Fetched::Archive { .. }), "{got:?}");
        assert_eq!(engine_requests(), before);
        let entry = listing(&to);
        assert_eq!(entry.len(), 1, "{:?}", entry.keys().collect::<Vec<_>>());
        assert_eq!(
            entry.get(b"log".as_slice()),
            engine[4].get(b"log".as_slice())
        );
        // A name that is not UTF-8 is archived as it is; the engine's archive drops the bytes
        // that are not UTF-8 (so its entry would name another path), hence not compared above.
        let to = scratch.path().join("odd.tar");
        let before = engine_requests();
        sb.download(&id, arbiter::sandbox::Download::whole("/odd", &to, 1 << 30))
            .await
            .expect("download");
        assert_eq!(engine_requests(), before);
        let odd = listing(&to);
        assert_eq!(
            odd.get(b"odd/new\nline\xff".as_slice())
                .map(|e| e.6.clone()),
            Some(b"odd".to_vec()),
            "{:?}",
            odd.keys().collect::<Vec<_>>()
        );
        assert_eq!(
            sb.download(
                &id,
                arbiter::sandbox::Download::whole("/etc/issue.net", &gone, 1 << 30)
            )
            .await
            .expect("download"),
            Fetched::NotFound
        );
        // Over the limit, as the engine's download is.
        let to = scratch.path().join("small.tar");
        assert_eq!(
            sb.download(&id, arbiter::sandbox::Download::whole("/work", &to, 2048))
                .await
                .expect("download"),
            Fetched::TooLarge { limit: 2048 }
        );
        assert!(!to.exists());
    })
    .catch_unwind()
    .await;
    removed(&sb, id, result).await;
}

/// The snapshot verifier's path: the agent's container, stopped, started again for the tests,
/// then halted. The halt is one request (its layers are known from the stop), and what the
/// tests left is then read from the layer, as the engine's archive of it was.
#[tokio::test]
async fn a_restarted_container_once_halted_is_read_from_its_layer() {
    let Some((_serial, sb)) = engine().await else {
        return;
    };
    let id = sb.create(&plain_spec("halt")).await.expect("create");
    let scratch = tempfile::tempdir().expect("tmp");
    let result = AssertUnwindSafe(async {
        sb.start(&id).await.expect("start");
        sb.stop(&id).await.expect("stop");
        sb.start(&id).await.expect("restart");
        // The tests' output, and a process of theirs still writing when they exit.
        let script = "mkdir -p /logs/verifier/sub && echo 1 > /logs/verifier/reward.txt && echo x > /logs/verifier/sub/log && (while :; do echo y >> /logs/verifier/busy; sleep 0.01; done) >/dev/null 2>&1 &";
        let out = sb
            .exec(&id, &exec(&["bash", "-c", script]))
            .await
            .expect("exec");
        assert_eq!(out.end, ExecEnd::Exited(0), "{out:?}");
        let before = engine_requests();
        sb.halt(&id).await.expect("halt");
        assert_eq!(engine_requests() - before, 1, "the kill alone");
        let from_layer = scratch.path().join("layer.tar");
        let before = engine_requests();
        let got = sb
            .download(&id, arbiter::sandbox::Download::whole("/logs/verifier", &from_layer, 1 << 30))
            .await
            .expect("download");
        assert!(matches!(got, Fetched::Archive { .. }), "{got:?}");
        assert_eq!(engine_requests(), before, "read from the layer");
        // Nothing writes any more: a second read says the same, and so does the engine's
        // archive once the container runs again (its writer is gone).
        let again = scratch.path().join("again.tar");
        sb.download(&id, arbiter::sandbox::Download::whole("/logs/verifier", &again, 1 << 30))
            .await
            .expect("download");
        assert_eq!(listing(&again), listing(&from_layer));
        sb.start(&id).await.expect("start again");
        let engine = scratch.path().join("engine.tar");
        sb.download(&id, arbiter::sandbox::Download::whole("/logs/verifier", &engine, 1 << 30))
            .await
            .expect("download");
        let layer = listing(&from_layer);
        assert_eq!(layer, listing(&engine));
        let names: Vec<String> = layer
            .keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "verifier",
                "verifier/busy",
                "verifier/reward.txt",
                "verifier/sub",
                "verifier/sub/log"
            ]
        );
    })
    .catch_unwind()
    .await;
    removed(&sb, id, result).await;
}

/// The change list of a stopped container comes from its layers on this host: the engine's
/// list, path for path, for every kind of change an agent makes — plus the file whose content
/// it rewrote keeping size and mtime, which the engine's metadata-only diff misses.
#[tokio::test]
async fn a_stopped_containers_change_list_from_its_layers_is_the_engines() {
    let Some((_serial, sb)) = engine().await else {
        return;
    };
    let id = sb.create(&plain_spec("changes")).await.expect("create");
    let result = AssertUnwindSafe(async {
        sb.start(&id).await.expect("start");
        let script = r#"set -e
mkdir -p /work/sub && printf 'new' > /work/sub/f && ln -s /etc/passwd /work/link && mkfifo /work/fifo
printf 'edited' >> /etc/debian_version
chmod 0600 /etc/hostname.orig 2>/dev/null || true
chmod 0700 /var/log
chown 1234 /etc/issue
rm /etc/issue.net
rm -rf /usr/share/doc/bash && mkdir /usr/share/doc/bash && printf 'mine' > /usr/share/doc/bash/README
rm -rf /usr/share/man && printf 'a file now' > /usr/share/man
rm -f /etc/motd && mkdir /etc/motd && printf 'x' > /etc/motd/inside
touch /etc/profile
cat /etc/bash.bashrc > /dev/null
cp -p /etc/shells /tmp/shells.ref
tr 'a-z' 'b-za' < /etc/shells > /tmp/shells.new
cat /tmp/shells.new > /etc/shells && touch -r /tmp/shells.ref /etc/shells
cmp -s /etc/shells /tmp/shells.ref && exit 9
[ "$(stat -c '%s %Y' /etc/shells)" = "$(stat -c '%s %Y' /tmp/shells.ref)" ]
ln /work/sub/f /work/hard
"#;
        let out = sb
            .exec(&id, &exec(&["bash", "-c", script]))
            .await
            .expect("exec");
        assert_eq!(out.end, ExecEnd::Exited(0), "{out:?}");
        let sorted = |mut v: Vec<arbiter::sandbox::Change>| {
            v.sort_by(|a, b| a.path.cmp(&b.path));
            v.into_iter()
                .map(|c| (c.path, c.kind))
                .collect::<Vec<_>>()
        };
        // Running: the engine's list.
        let engine = sorted(sb.changes(&id).await.expect("engine changes"));
        sb.stop(&id).await.expect("stop");
        let before = engine_requests();
        let layers = sorted(sb.changes(&id).await.expect("layer changes"));
        assert_eq!(engine_requests(), before, "no engine request");
        use arbiter::sandbox::ChangeKind::Modified;
        let rewritten = ("/etc/shells".to_string(), Modified);
        assert!(!engine.contains(&rewritten), "the engine's diff misses it");
        assert!(layers.contains(&rewritten), "{layers:?}");
        let without: Vec<_> = layers.iter().filter(|c| **c != rewritten).cloned().collect();
        assert_eq!(without, engine);
        for path in ["/work/sub/f", "/etc/issue.net", "/usr/share/man", "/etc/motd/inside"] {
            assert!(layers.iter().any(|(p, _)| p == path), "{path}: {layers:?}");
        }
    })
    .catch_unwind()
    .await;
    removed(&sb, id, result).await;
}

/// The agent container's first upload, into its writable layer before its start: the
/// container's filesystem is then what the engine's upload after the start makes of the
/// same archive (modes, set-id bits, owners, times, links, a directory of the image's given
/// new attributes), for one inspection instead of the upload; an archive that would replace
/// one of the image's files is left to the engine, with nothing written.
#[tokio::test]
async fn an_upload_before_the_start_leaves_what_the_engines_upload_leaves() {
    let Some((_serial, sb)) = engine().await else {
        return;
    };
    let mut b = tar::Builder::new(Vec::new());
    let mut add =
        |path: &str, kind: tar::EntryType, mode: u32, uid: u64, body: &[u8], link: Option<&str>| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_uid(uid);
            h.set_gid(uid);
            h.set_mtime(1_000_000_000 + mode as u64);
            h.set_size(body.len() as u64);
            if let Some(target) = link {
                h.set_link_name(target).expect("link");
            }
            h.set_cksum();
            b.append_data(&mut h, path, body).expect("append");
        };
    use tar::EntryType::{Directory, Regular, Symlink};
    add("arbiter/", Directory, 0o755, 0, b"", None);
    add(
        "arbiter/instruction.md",
        Regular,
        0o644,
        0,
        b"do the task",
        None,
    );
    add("logs/", Directory, 0o755, 0, b"", None);
    add("logs/agent/", Directory, 0o777, 0, b"", None);
    add("usr/", Directory, 0o755, 0, b"", None);
    add("usr/local/", Directory, 0o750, 0, b"", None);
    add(
        "usr/local/tool",
        Regular,
        0o4755,
        0,
        b"#!/bin/sh\necho hi\n",
        None,
    );
    add(
        "usr/local/link",
        Symlink,
        0o777,
        0,
        b"",
        Some("/etc/passwd"),
    );
    add("owned/", Directory, 0o700, 1234, b"", None);
    add("owned/mine", Regular, 0o600, 1234, b"secret-free", None);
    let archive = b.into_inner().expect("tar");
    let engine_side = sb
        .create(&plain_spec("upload-engine"))
        .await
        .expect("create");
    let host_side = sb
        .create(&plain_spec("upload-layer"))
        .await
        .expect("create");
    let scratch = tempfile::tempdir().expect("tmp");
    let result = AssertUnwindSafe(async {
        sb.start(&engine_side).await.expect("start");
        sb.upload(&engine_side, "/", archive.clone())
            .await
            .expect("upload");
        let before = engine_requests();
        assert!(
            sb.upload_before_start(&host_side, &archive)
                .await
                .expect("upload before start"),
            "a plain addition goes into the layer"
        );
        assert_eq!(engine_requests() - before, 1, "one inspection");
        sb.start(&host_side).await.expect("start");
        for (i, path) in ["/arbiter", "/logs", "/usr/local", "/owned"]
            .iter()
            .enumerate()
        {
            let (a, b) = (
                scratch.path().join(format!("engine-{i}.tar")),
                scratch.path().join(format!("layer-{i}.tar")),
            );
            sb.download(
                &engine_side,
                arbiter::sandbox::Download::whole(path, &a, 1 << 30),
            )
            .await
            .expect("download");
            sb.download(
                &host_side,
                arbiter::sandbox::Download::whole(path, &b, 1 << 30),
            )
            .await
            .expect("download");
            assert_eq!(listing(&b), listing(&a), "{path}");
        }
    })
    .catch_unwind()
    .await;
    sb.remove(&Resource::Container(engine_side))
        .await
        .expect("remove");
    removed(&sb, host_side, result).await;
    // Over a file of the image's: the engine's to do, and the layer is left as it was.
    let id = sb
        .create(&plain_spec("upload-refused"))
        .await
        .expect("create");
    let over = files_to_tar(&[
        TarEntry {
            path: "etc/",
            content: None,
            mode: 0o755,
        },
        TarEntry {
            path: "etc/debian_version",
            content: Some(b"forged"),
            mode: 0o644,
        },
    ])
    .expect("tar");
    let result = AssertUnwindSafe(async {
        assert!(!sb.upload_before_start(&id, &over).await.expect("asked"));
        sb.start(&id).await.expect("start");
        let out_dir = tempfile::tempdir().expect("tmp");
        let mut spec = exec(&["cat", "/etc/debian_version"]);
        spec.stdout = Some(out_dir.path().join("out"));
        sb.exec(&id, &spec).await.expect("exec");
        let seen = std::fs::read_to_string(out_dir.path().join("out")).expect("stdout");
        assert_ne!(seen, "forged");
    })
    .catch_unwind()
    .await;
    removed(&sb, id, result).await;
}

/// The engine, held for this test alone; `None` when none answers (and it is not required).
async fn engine() -> Option<(tokio::sync::MutexGuard<'static, ()>, DockerSandbox)> {
    if !common::docker_available() {
        return None;
    }
    let serial = SERIAL.lock().await;
    Some((serial, DockerSandbox::connect().await.expect("engine")))
}

/// Remove the test's container whether its checks held or not, then fail as they did.
async fn removed(
    sb: &DockerSandbox,
    id: arbiter::sandbox::ContainerId,
    result: std::thread::Result<()>,
) {
    sb.remove(&Resource::Container(id)).await.expect("remove");
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn plain_spec(trial: &str) -> ContainerSpec {
    ContainerSpec {
        base: Base::Image(ImageRef::new(IMAGE)),
        owner: Owner {
            job: "layer-archive-test".to_string(),
            trial: trial.to_string(),
            role: Role::Verifier,
            extra: BTreeMap::from([("arbiter.test".to_string(), "layer_archive".to_string())]),
        },
        env: Vec::new(),
        limits: ContainerLimits {
            cpus: 1.0,
            memory_mb: 256,
            pids_limit: 64,
            gpus: 0,
            storage_mb: None,
        },
        network: Network::None,
        workdir: Some("/".to_string()),
        mounts: Vec::new(),
        start: arbiter::sandbox::StartSpec::default(),
    }
}

#[tokio::test]
async fn upload_replacing_removes_what_the_agent_left_without_following_it() {
    let Some((_serial, sb)) = engine().await else {
        return;
    };
    let tests = common::verifier_files_tar();
    // What an agent may leave: planted files and directories in /tests, /logs/verifier a
    // symlink to a directory holding a forged reward; or /logs itself a file.
    let layouts = [
        "mkdir -p /tests/sub /tmp/forged && echo 'import os' > /tests/conftest.py && touch /tests/sub/x && echo 1 > /tmp/forged/reward.txt && mkdir -p /logs && ln -s /tmp/forged /logs/verifier",
        "rm -rf /logs && echo not-a-dir > /logs && ln -s /etc /tests",
    ];
    for (n, layout) in layouts.iter().enumerate() {
        let id = sb
            .create(&plain_spec(&format!("replace-{n}")))
            .await
            .expect("create");
        let result = AssertUnwindSafe(async {
            sb.start(&id).await.expect("start");
            let out = sb
                .exec(&id, &exec(&["bash", "-c", layout]))
                .await
                .expect("exec");
            assert_eq!(out.end, ExecEnd::Exited(0), "{layout}: {out:?}");
            sb.upload_replacing(&id, &["/tests", "/logs/verifier"], tests.clone())
                .await
                .expect("replace");
            let listing = tempfile::tempdir().expect("tmp");
            let out_file = listing.path().join("out");
            let mut spec = exec(&[
                "bash",
                "-c",
                "cd / && find tests logs/verifier | sort && stat -c '%a %F' logs/verifier && cat /tmp/forged/reward.txt 2>/dev/null; ls -d /etc/passwd",
            ]);
            spec.stdout = Some(out_file.clone());
            let out = sb.exec(&id, &spec).await.expect("exec");
            assert_eq!(out.end, ExecEnd::Exited(0), "{layout}: {out:?}");
            let seen = std::fs::read_to_string(&out_file).expect("stdout");
            let expected_forged = if n == 0 { "1\n" } else { "" };
            assert_eq!(
                seen,
                format!(
                    "logs/verifier\ntests\ntests/test.sh\n777 directory\n{expected_forged}/etc/passwd\n"
                ),
                "{layout}"
            );
        })
        .catch_unwind()
        .await;
        removed(&sb, id, result).await;
    }
}
