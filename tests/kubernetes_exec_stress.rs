//! Exec streams under load on the test cluster (`scripts/k8s up`): many transfers at once of
//! files of known sizes and digests, each of which must arrive whole — the output a harness
//! command wrote is kept in the pod and a stream that came short is completed from that copy
//! (`sandbox/kubernetes/kept.rs`), never by running the command again nor by an infra retry.
//! `ARBITER_STRESS_EXECS` (default 240) sets the number of downloads.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arbiter::sandbox::{
    Base, Download, ExecEnd, Fetched, Network, Owner, Resource, Role, Sandbox, TarEntry,
    files_to_tar,
};
use sha2::{Digest, Sha256};

/// Bytes of file `i`: sizes from empty to ~3 MiB, some not a multiple of any frame size.
fn content(i: usize) -> Vec<u8> {
    let size = match i % 6 {
        0 => 0,
        1 => 1,
        2 => 4095 + i,
        3 => 65_537 * (i % 7 + 1),
        4 => 1_048_576 + 13 * i,
        _ => 3 * 1_048_576 - i,
    };
    let mut state = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A pod of the test cluster with files `/work/f0.bin`… of [`content`]; the files.
async fn pod_with_files(
    sb: &arbiter::sandbox::kubernetes::KubernetesSandbox,
    dir: &std::path::Path,
    trial: &str,
) -> (arbiter::sandbox::ContainerId, Vec<Vec<u8>>) {
    let spec = common::dockerfile_spec(
        &dir.join("ctx"),
        "k8s-stress",
        "stress01",
        "FROM arbiter/busybox\nRUN mkdir -p /work\n",
    );
    let image = sb.prepare_image(&spec).await.expect("prepare");
    let owner = Owner {
        job: "k8s-stress".to_string(),
        trial: trial.to_string(),
        role: Role::Agent,
        extra: BTreeMap::new(),
    };
    let id = sb
        .create(&common::agent_container(
            Base::Image(image),
            owner,
            Network::None,
            (1.0, 512, 256),
        ))
        .await
        .expect("create");
    sb.start(&id).await.expect("start");
    let files: Vec<Vec<u8>> = (0..12).map(content).collect();
    let names: Vec<String> = (0..files.len()).map(|i| format!("f{i}.bin")).collect();
    let entries: Vec<TarEntry> = files
        .iter()
        .zip(&names)
        .map(|(bytes, name)| TarEntry {
            path: name,
            content: Some(bytes),
            mode: 0o644,
        })
        .collect();
    sb.upload(&id, "/work", files_to_tar(&entries).unwrap())
        .await
        .expect("upload");
    (id, files)
}

fn total() -> usize {
    std::env::var("ARBITER_STRESS_EXECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(240)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn downloads_under_load_arrive_whole_with_no_retry() {
    let Some(sb) = common::k8s::cluster().await else {
        return;
    };
    let total = total();
    let tmp = tempfile::tempdir().unwrap();
    let (id, files) = pod_with_files(&sb, tmp.path(), "downloads").await;
    let names: Vec<String> = (0..files.len()).map(|i| format!("f{i}.bin")).collect();
    let want: Vec<String> = files.iter().map(|f| sha(f)).collect();

    let sb = Arc::new(sb);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(16));
    for n in 0..total {
        let (sb, id, gate) = (Arc::clone(&sb), id.clone(), Arc::clone(&gate));
        let i = n % names.len();
        let path = format!("/work/{}", names[i]);
        let to = tmp.path().join(format!("got-{n}.tar"));
        tasks.spawn(async move {
            let _slot = gate.acquire().await.expect("semaphore");
            let got = sb.download(&id, Download::whole(&path, &to, 1 << 30)).await;
            let got = got.map_err(|e| format!("download {n} of {path}: {e}"))?;
            if !matches!(got, Fetched::Archive { .. }) {
                return Err(format!("download {n} of {path}: {got:?}"));
            }
            let mut archive = tar::Archive::new(std::fs::File::open(&to).unwrap());
            let mut entries = archive.entries().unwrap();
            let mut entry = entries.next().expect("one entry").unwrap();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            let _ = std::fs::remove_file(&to);
            Ok::<_, String>((i, bytes.len(), sha(&bytes)))
        });
    }
    let (mut failures, mut done) = (Vec::new(), 0usize);
    while let Some(joined) = tasks.join_next().await {
        match joined.expect("task") {
            Ok((i, len, digest)) => {
                done += 1;
                if digest != want[i] {
                    failures.push(format!(
                        "file {i}: {len} of {} bytes, sha256 {digest}",
                        files[i].len()
                    ));
                }
            }
            Err(e) => failures.push(e),
        }
    }
    let took = started.elapsed();
    let rereads = sb.kept_rereads();
    eprintln!(
        "{done} downloads in {:.1}s; streams completed from the pod's copy: {rereads}",
        took.as_secs_f64()
    );
    // Kept copies go with the next transfer: at most one batch of them is left (one per
    // download still running when the last one started), not one per download. The
    // listing's own exec keeps its output in the pod too: one more.
    let listing = tmp.path().join("left");
    let ls = arbiter::sandbox::ExecSpec {
        stdout: Some(listing.clone()),
        ..common::exec_spec(
            &[
                "sh",
                "-c",
                "ls /.arbiter/scratch | grep -c '^keep-.*[.]o$' || true",
            ],
            Duration::from_secs(60),
            Duration::from_secs(1),
        )
    };
    assert_eq!(
        sb.exec(&id, &ls).await.expect("exec").end,
        ExecEnd::Exited(0)
    );
    let left: usize = std::fs::read_to_string(&listing)
        .unwrap()
        .trim()
        .parse()
        .expect("a count");
    assert!(
        left <= 16 + 1,
        "{left} kept copies left in the pod after {total} downloads"
    );
    sb.remove(&Resource::Container(id)).await.expect("remove");
    assert!(
        failures.is_empty(),
        "{} lost: {failures:#?}",
        failures.len()
    );
    assert_eq!(done, total);
}

/// Commands whose stdout and stderr are files of known size and digest, fast and slow
/// exits, with and without an environment on stdin, a non-zero exit among them: every byte
/// arrives (completed from the pod's copy when a stream came short), no exec fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn command_output_under_load_arrives_whole() {
    let Some(sb) = common::k8s::cluster().await else {
        return;
    };
    let total = total();
    let tmp = tempfile::tempdir().unwrap();
    let (id, files) = pod_with_files(&sb, tmp.path(), "execs").await;
    let files = Arc::new(files);
    let sb = Arc::new(sb);
    let started = Instant::now();
    let gate = Arc::new(tokio::sync::Semaphore::new(16));
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..total {
        let (sb, id, gate, files) = (
            Arc::clone(&sb),
            id.clone(),
            Arc::clone(&gate),
            Arc::clone(&files),
        );
        let (i, j) = (n % files.len(), (n * 7 + 3) % files.len());
        let (out, err) = (
            tmp.path().join(format!("out-{n}")),
            tmp.path().join(format!("err-{n}")),
        );
        tasks.spawn(async move {
            let _slot = gate.acquire().await.expect("semaphore");
            let tail = match n % 4 {
                0 => "",
                1 => "; sleep 0.3",
                2 => "; exit 3",
                _ => "; usleep 20000",
            };
            let script = format!("cat /work/f{i}.bin; cat /work/f{j}.bin >&2{tail}");
            let spec = arbiter::sandbox::ExecSpec {
                stdout: Some(out.clone()),
                stderr: Some(err.clone()),
                cap_bytes: 8 << 20,
                env: if n % 2 == 0 {
                    vec![("N".to_string(), n.to_string())]
                } else {
                    Vec::new()
                },
                ..common::exec_spec(
                    &["sh", "-c", &script],
                    Duration::from_secs(300),
                    Duration::from_secs(2),
                )
            };
            let done = sb
                .exec(&id, &spec)
                .await
                .map_err(|e| format!("exec {n}: {e}"))?;
            let want = if n % 4 == 2 { 3 } else { 0 };
            let mut problems = Vec::new();
            if done.end != ExecEnd::Exited(want) {
                problems.push(format!("exec {n}: {:?}", done.end));
            }
            for (what, path, k) in [("stdout", &out, i), ("stderr", &err, j)] {
                let got = std::fs::read(path).unwrap();
                let _ = std::fs::remove_file(path);
                if sha(&got) != sha(&files[k]) {
                    problems.push(format!(
                        "exec {n} {what}: {} of {} bytes (f{k})",
                        got.len(),
                        files[k].len()
                    ));
                }
            }
            if done.stdout_bytes != files[i].len() as u64
                || done.stderr_bytes != files[j].len() as u64
            {
                problems.push(format!(
                    "exec {n}: counted {} and {} bytes",
                    done.stdout_bytes, done.stderr_bytes
                ));
            }
            if problems.is_empty() {
                Ok(())
            } else {
                Err(problems.join("; "))
            }
        });
    }
    let mut failures = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Err(e) = joined.expect("task") {
            failures.push(e);
        }
    }
    eprintln!(
        "{total} execs in {:.1}s; streams completed from the pod's copy: {}",
        started.elapsed().as_secs_f64(),
        sb.kept_rereads()
    );
    sb.remove(&Resource::Container(id)).await.expect("remove");
    assert!(
        failures.is_empty(),
        "{} lost: {failures:#?}",
        failures.len()
    );
}
