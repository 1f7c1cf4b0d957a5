//! [`Sandbox::changes`](crate::sandbox::Sandbox::changes) on a cluster: computed from inside
//! the pod with the harness toolbox, since no cluster gives access to a container's layers.
//!
//! The toolbox relay walks the pod's root filesystem (`relay walk`: the paths `find -xdev`
//! lists, every path's `lstat`; see `walk.rs`, which compares the walks). The image's side
//! is the same walk in a pod of the image that nothing of the image ran in, pinned to the
//! agent pod's node (ctimes of the image's files are the node's), made once per (image
//! digest, node) and kept in memory for the process. A file whose ctime changed but whose
//! every attribute is the image's is compared by content: its sha256 (a symlink's target's)
//! in the pod and in a pod of its base, made only when there is such a file. A pod started from a frozen filesystem counts its
//! changes against its own walk right after the replay (what the frozen filesystem held), as
//! a Docker container of a committed image does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};
use tokio::sync::{Mutex, OnceCell};

use super::KubernetesSandbox;
use super::error::KubeError;
use super::exec::{RawEnd, Sink};
use super::names::annotated_labels;
use super::pod::MAIN;
use super::walk::{STAT_FORMAT, Walk, compare, finish_paths, lossy};
use crate::sandbox::toolbox::toolbox_argv;
use crate::sandbox::{
    Base, Change, ChangeKind, ContainerId, ContainerLimits, ContainerSpec, FrozenId, ImageRef,
    LABEL_JOB, LABEL_MANAGED, LABEL_ROLE, LABEL_TRIAL, Network, Owner, Resource, Role,
    SandboxError, StartSpec,
};

/// The walk of a pod's root filesystem: the mount table, a NUL, every path NUL-terminated, a
/// NUL, then each path's [`STAT_FORMAT`] line (see `walk.rs`), dates in UTC. The toolbox
/// relay's `walk` (`docker/toolbox/relay/src/walk.rs`): one process for what busybox's `cat`,
/// `find -xdev`, `xargs` and `stat` printed, byte for byte (a sixth of their CPU on a small
/// image, half on Debian's).
pub(super) fn walk_argv() -> Vec<String> {
    vec![
        super::toolbox_maps::relay_path(),
        "walk".to_string(),
        STAT_FORMAT.to_string(),
    ]
}

/// Reads NUL-terminated paths on stdin; prints one line per path: the sha256 of a file's
/// bytes or of a symlink's target, `other` for anything else, `missing` when gone.
const CONTENT: &str = r#"B=/.arbiter/toolbox/busybox
while IFS= read -r -d '' p; do
  if [ -L "$p" ]; then h=$($B readlink -n "$p" | $B sha256sum)
  elif [ -f "$p" ]; then h=$($B sha256sum < "$p")
  elif [ -e "$p" ]; then h=other
  else h=missing; fi
  echo "${h%% *}"
done"#;

/// A walk's output, at most (a path's line is about 120 bytes: two million paths).
const MAX_WALK_BYTES: usize = 256 * 1024 * 1024;
/// Deadline of one walk or content comparison.
const WALK_DEADLINE: Duration = Duration::from_secs(600);

/// One image's walk, made once.
type WalkCell = Arc<OnceCell<Arc<Walk>>>;

/// What the backend keeps for the change set and frozen filesystems.
#[derive(Default)]
pub(super) struct Integrity {
    /// Frozen filesystems kept on this host, by id.
    pub(super) frozen: Mutex<HashMap<String, Arc<super::frozen::Frozen>>>,
    /// Walks of images, by (image digest, node).
    indexes: Mutex<HashMap<(String, String), WalkCell>>,
    /// Pods started from a frozen filesystem: their walk right after the replay, and the
    /// frozen filesystem (what a pod to compare contents with starts from).
    pub(super) replayed: Mutex<HashMap<String, (Arc<Walk>, FrozenId)>>,
    /// Content digests of paths of a base (by base key and path).
    contents: Mutex<HashMap<(String, Vec<u8>), String>>,
}

/// The node, image and owner of a pod, once it has a node and an image.
pub(super) fn facts_of(got: &Pod) -> Option<PodFacts> {
    let spec = got.spec.as_ref();
    let node = spec.and_then(|s| s.node_name.clone()).unwrap_or_default();
    let image = spec
        .and_then(|s| s.containers.iter().find(|c| c.name == MAIN))
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let image_id = got
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == MAIN))
        .map(|c| c.image_id.clone())
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| image.clone());
    let labels = annotated_labels(&got.metadata).unwrap_or_default();
    if node.is_empty() || image.is_empty() {
        return None;
    }
    Some(PodFacts {
        node,
        image,
        image_id,
        labels,
    })
}

/// What the change set needs to know of a pod.
#[derive(Debug, Clone)]
pub(super) struct PodFacts {
    pub node: String,
    /// The main container's image, as the pod names it.
    pub image: String,
    /// The image's digest as the node resolved it (else the image as named).
    pub image_id: String,
    pub labels: BTreeMap<String, String>,
}

impl PodFacts {
    /// An owner like the pod's, with `role`.
    pub(super) fn owner(&self, role: Role) -> Owner {
        let get = |k: &str| self.labels.get(k).cloned().unwrap_or_default();
        let extra = self
            .labels
            .iter()
            .filter(|(k, _)| {
                ![LABEL_MANAGED, LABEL_JOB, LABEL_TRIAL, LABEL_ROLE].contains(&k.as_str())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Owner {
            job: get(LABEL_JOB),
            trial: get(LABEL_TRIAL),
            role,
            extra,
        }
    }
}

/// Required node affinity to exactly `node` (by name, as a DaemonSet pins its pods).
pub(super) fn pinned_to(node: &str) -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".to_string(),
                        operator: "In".to_string(),
                        values: Some(vec![node.to_string()]),
                    }]),
                    match_expressions: None,
                }],
            }),
            preferred_during_scheduling_ignored_during_execution: None,
        }),
        ..Default::default()
    }
}

impl KubernetesSandbox {
    /// [`Sandbox::changes`](crate::sandbox::Sandbox::changes).
    pub(super) async fn change_list(&self, id: &ContainerId) -> Result<Vec<Change>, SandboxError> {
        let pod = id.as_str();
        let replayed = self.integrity.replayed.lock().await.get(pod).cloned();
        let (base_walk, base) = match replayed {
            Some((walk, frozen)) => (walk, Base::Frozen(frozen)),
            None => {
                let facts = self.pod_facts(pod).await?;
                let walk = self.image_walk(&facts).await?;
                (walk, Base::Image(ImageRef::new(facts.image)))
            }
        };
        self.changes_against(pod, &base_walk, base).await
    }

    /// The pod's changes against `image` (the walk of `base`).
    pub(super) async fn changes_against(
        &self,
        pod: &str,
        image: &Walk,
        base: Base,
    ) -> Result<Vec<Change>, SandboxError> {
        let (list, _) = self.changed_paths(pod, image, base).await?;
        Ok(list
            .into_iter()
            .map(|(p, kind)| Change {
                path: lossy(&p),
                kind,
            })
            .collect())
    }

    /// The pod's changes against `image` by path as the filesystem has it, and its walk.
    pub(super) async fn changed_paths(
        &self,
        pod: &str,
        image: &Walk,
        base: Base,
    ) -> Result<(Vec<(Vec<u8>, ChangeKind)>, Walk), SandboxError> {
        let now = self.walk(pod).await?;
        let pending = compare(image, &now);
        let changed = if pending.ambiguous.is_empty() {
            Vec::new()
        } else {
            self.content_differs(pod, base, &pending.ambiguous).await?
        };
        tracing::debug!(
            pod,
            ambiguous = pending.ambiguous.len(),
            changed = changed.len(),
            "change set from inside"
        );
        Ok((finish_paths(image, pending, &changed), now))
    }

    /// The node, image and owner of a pod: as the watch saw it running when this process
    /// started it (no request), else read from the API.
    pub(super) async fn pod_facts(&self, pod: &str) -> Result<PodFacts, SandboxError> {
        if let Some(facts) = self
            .states
            .lock()
            .await
            .get(pod)
            .and_then(|s| s.facts.clone())
        {
            return Ok(facts);
        }
        let got = self.get_pod(pod).await?;
        facts_of(&got).ok_or_else(|| {
            KubeError::Exec {
                pod: pod.to_string(),
                message: "the pod has no node or no image yet".to_string(),
            }
            .into()
        })
    }

    /// The walk of the pod's image on the pod's node: once per (digest, node).
    pub(super) async fn image_walk(&self, facts: &PodFacts) -> Result<Arc<Walk>, SandboxError> {
        // By digest where there is one: the runtime's image id and a pinned reference of the
        // same image name it alike (a pod handed over early has only the latter).
        let id = facts.image_id.as_str();
        let id = id.rsplit_once('@').map_or(id, |(_, digest)| digest);
        let key = (id.to_string(), facts.node.clone());
        let cell = self
            .integrity
            .indexes
            .lock()
            .await
            .entry(key)
            .or_default()
            .clone();
        let walk = cell
            .get_or_try_init(|| async {
                let base = Base::Image(ImageRef::new(facts.image.clone()));
                let probe = self.probe(facts, base).await?;
                let walked = self.walk(probe.as_str()).await;
                self.remove_probe(&probe).await;
                tracing::debug!(image = facts.image, node = facts.node, "image walked");
                walked.map(Arc::new)
            })
            .await?;
        Ok(walk.clone())
    }

    /// A running pod of `base` on the node of `facts` that nothing of the image ran in.
    pub(super) async fn probe(
        &self,
        facts: &PodFacts,
        base: Base,
    ) -> Result<ContainerId, SandboxError> {
        let spec = ContainerSpec {
            base,
            owner: facts.owner(Role::Snapshot),
            env: Vec::new(),
            limits: ContainerLimits {
                cpus: 0.2,
                memory_mb: 256,
                pids_limit: 256,
                gpus: 0,
                storage_mb: None,
            },
            network: Network::Bridge,
            workdir: None,
            mounts: Vec::new(),
            start: StartSpec::default(),
        };
        // Boxed: pod creation and start are large futures, nested here deep inside a trial's.
        let id = Box::pin(self.create_pod_on(&spec, Some(&facts.node))).await?;
        if let Err(e) = Box::pin(self.start_pod(&id)).await {
            self.remove_probe(&id).await;
            return Err(e);
        }
        Ok(id)
    }

    pub(super) async fn remove_probe(&self, id: &ContainerId) {
        if let Err(e) = self.remove_resource(&Resource::Container(id.clone())).await {
            tracing::warn!(pod = %id, "removing a probe pod: {e}");
        }
    }

    /// Walk the pod's root filesystem.
    pub(super) async fn walk(&self, pod: &str) -> Result<Walk, SandboxError> {
        // The walk the pod's stop sent along (after_stop.rs), when nothing ran since.
        if let Some(walk) = self.stopped_logs.take_walk(pod) {
            return Ok(walk);
        }
        let argv = walk_argv();
        let mut out = Vec::new();
        let kept = self
            .run_kept(
                pod,
                &argv,
                None,
                (
                    &mut Sink::Memory {
                        buf: &mut out,
                        cap: MAX_WALK_BYTES,
                    },
                    super::kept::Keep::File,
                ),
                64 * 1024,
                (Some(WALK_DEADLINE), Duration::from_secs(1)),
            )
            .await?;
        let (end, err) = (kept.end, kept.err);
        let failed = |message: String| -> SandboxError {
            KubeError::Exec {
                pod: pod.to_string(),
                message: format!("walking its filesystem: {message}"),
            }
            .into()
        };
        if end != RawEnd::Exited(0) {
            return Err(failed(format!(
                "{} ({end:?})",
                String::from_utf8_lossy(&err).trim()
            )));
        }
        if kept.over || out.len() >= MAX_WALK_BYTES {
            return Err(failed(format!("over {MAX_WALK_BYTES} bytes of listing")));
        }
        Walk::parse(&out).map_err(failed)
    }

    /// Digests of `paths` in `pod` (one line per path).
    async fn contents(&self, pod: &str, paths: &[Vec<u8>]) -> Result<Vec<String>, SandboxError> {
        let mut stdin = Vec::new();
        for p in paths {
            stdin.extend_from_slice(p);
            stdin.push(0);
        }
        let argv = toolbox_argv("sh", &["-c", CONTENT]);
        let (end, out, err) = self
            .harness(pod, &argv, Some(&stdin), WALK_DEADLINE)
            .await?;
        let lines: Vec<String> = String::from_utf8_lossy(&out)
            .lines()
            .map(str::to_string)
            .collect();
        if end != RawEnd::Exited(0) || lines.len() != paths.len() {
            return Err(KubeError::Exec {
                pod: pod.to_string(),
                message: format!(
                    "comparing contents: {} lines for {} paths: {} ({end:?})",
                    lines.len(),
                    paths.len(),
                    String::from_utf8_lossy(&err).trim()
                ),
            }
            .into());
        }
        Ok(lines)
    }

    /// Which of `paths` hold other content in `pod` than in a pod of `base`.
    async fn content_differs(
        &self,
        pod: &str,
        base: Base,
        paths: &[Vec<u8>],
    ) -> Result<Vec<Vec<u8>>, SandboxError> {
        let mine = self.contents(pod, paths).await?;
        let key = match &base {
            Base::Image(i) => format!("image:{i}"),
            Base::Frozen(f) => format!("frozen:{f}"),
        };
        let mut theirs: HashMap<Vec<u8>, String> = HashMap::new();
        let mut unknown = Vec::new();
        {
            let known = self.integrity.contents.lock().await;
            for p in paths {
                match known.get(&(key.clone(), p.clone())) {
                    Some(h) => {
                        theirs.insert(p.clone(), h.clone());
                    }
                    None => unknown.push(p.clone()),
                }
            }
        }
        if !unknown.is_empty() {
            let facts = self.pod_facts(pod).await?;
            let probe = self.probe(&facts, base).await?;
            let got = self.contents(probe.as_str(), &unknown).await;
            self.remove_probe(&probe).await;
            let got = got?;
            let mut known = self.integrity.contents.lock().await;
            for (p, h) in unknown.into_iter().zip(got) {
                known.insert((key.clone(), p.clone()), h.clone());
                theirs.insert(p, h);
            }
        }
        Ok(paths
            .iter()
            .zip(mine)
            .filter(|(p, h)| theirs.get(*p) != Some(h))
            .map(|(p, _)| {
                tracing::trace!(path = lossy(p), "content differs");
                p.clone()
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The toolbox relay's walk of `root` (`walk_argv`'s, but of its root); `None`: no toolbox.
    fn relay_walk(root: &std::path::Path) -> Option<std::process::Output> {
        let relay = super::super::hot::tests::toolbox_file("relay")?;
        Some(
            std::process::Command::new(relay)
                .args(["walk", STAT_FORMAT])
                .arg(root)
                .output()
                .unwrap(),
        )
    }

    /// What the walk ran before the relay walked (busybox's `find`, `xargs` and `stat`), for
    /// [`the_relay_walks_as_busybox_did`] to hold the relay to, with the root as `$2`.
    const BUSYBOX_WALK: &str = r#"B=/.arbiter/toolbox/busybox; export TZ=UTC0; L=$3/walk-$$
$B cat /proc/self/mountinfo || exit 90
printf '\000'
find "$2" -xdev -print0 > "$L" || { unlink "$L"; echo "find failed" >&2; exit 91; }
$B cat "$L" || exit 92
printf '\000'
xargs -0 -r $B stat -c "$1" < "$L"; r=$?
unlink "$L"; exit $r"#;

    /// The relay's walk over a tree of a few thousand names, of every kind a root filesystem
    /// holds (directories, files, hard links, symlinks, a fifo, names with a space and a
    /// newline, dates before 1970 and far ahead): every path once, and the same bytes as
    /// busybox's `find`, `xargs` and `stat` printed, which `Walk::parse` reads.
    #[test]
    fn the_relay_walks_as_busybox_did() {
        let root = tempfile::tempdir().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let mut want = vec![root.path().to_path_buf()];
        for d in 0..20 {
            let dir = root
                .path()
                .join(format!("a-fairly-long-directory-name-{d:02}"));
            std::fs::create_dir(&dir).unwrap();
            want.push(dir.clone());
            for f in 0..100 {
                let file = dir.join(format!("some-file-with-a-long-name-{f:03}.txt"));
                std::fs::write(&file, b"x").unwrap();
                want.push(file);
            }
        }
        let odd = root.path().join("odd");
        std::fs::create_dir(&odd).unwrap();
        let old = odd.join("a name\nwith a newline");
        std::fs::write(&old, b"old").unwrap();
        let at = |secs: i64| {
            let span = std::time::Duration::from_secs(secs.unsigned_abs());
            if secs < 0 {
                std::time::UNIX_EPOCH - span
            } else {
                std::time::UNIX_EPOCH + span
            }
        };
        std::fs::File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(at(-86_400 * 400 - 7))
            .unwrap();
        let late = odd.join("late");
        std::fs::write(&late, b"").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&late)
            .unwrap()
            .set_modified(at(4_102_444_800 + 86_400 * 59))
            .unwrap();
        std::fs::hard_link(&late, odd.join("late-too")).unwrap();
        std::os::unix::fs::symlink("../nowhere", odd.join("dangling")).unwrap();
        let fifo = odd.join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        for p in [
            "a name\nwith a newline",
            "late",
            "late-too",
            "dangling",
            "fifo",
        ] {
            want.push(odd.join(p));
        }
        want.push(odd);
        let Some(out) = relay_walk(root.path()) else {
            return;
        };
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let walk = Walk::parse(&out.stdout).unwrap();
        let mut want: Vec<Vec<u8>> = want
            .iter()
            .map(|p| p.as_os_str().as_encoded_bytes().to_vec())
            .collect();
        want.sort();
        let got: Vec<Vec<u8>> = walk.entries.keys().cloned().collect();
        assert_eq!(got, want);
        let before = super::super::hot::tests::toolbox_sh(
            BUSYBOX_WALK,
            &[
                "arbiter-walk",
                STAT_FORMAT,
                &root.path().display().to_string(),
                &scratch.path().display().to_string(),
            ],
        )
        .unwrap()
        .output()
        .unwrap();
        assert!(
            before.status.success(),
            "{}",
            String::from_utf8_lossy(&before.stderr)
        );
        // The mount table is the kernel's at the moment each walk read it, and the host's
        // changes whenever the engine starts or stops a container beside the suite: each walk
        // must hold a whole one (every line a mountinfo line, `/proc` among the mount points),
        // and everything after it must be busybox's, byte for byte (the first line apart
        // shown).
        let split = |b: &'static str, out: &[u8]| -> (Vec<u8>, Vec<u8>) {
            let end = out.iter().position(|&c| c == 0).expect(b);
            (out[..end].to_vec(), out[end..].to_vec())
        };
        let (mounts, rest) = split("the relay's mount table ends", &out.stdout);
        let (busybox_mounts, busybox_rest) = split("busybox's mount table ends", &before.stdout);
        for table in [&mounts, &busybox_mounts] {
            let table = String::from_utf8_lossy(table);
            assert!(table.ends_with('\n'), "{table}");
            assert!(table.lines().all(|l| l.contains(" - ")), "{table}");
        }
        assert!(walk.mounts.contains(&b"/proc"[..]), "{:?}", walk.mounts);
        let lines = |b: &[u8]| -> Vec<String> {
            b.split(|&c| c == b'\n' || c == 0)
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect()
        };
        let (got, want) = (lines(&rest), lines(&busybox_rest));
        let apart = got.iter().zip(&want).position(|(g, w)| g != w);
        assert_eq!(
            (apart.map(|i| (&got[i], &want[i])), got.len()),
            (None, want.len())
        );
        assert_eq!(rest, busybox_rest);
    }

    /// A directory that cannot be read fails the walk (91), its path named, with nothing on
    /// stdout: a change set is never computed from part of a filesystem.
    #[test]
    fn an_unreadable_directory_fails_the_walk() {
        let root = tempfile::tempdir().unwrap();
        let Some(out) = relay_walk(&root.path().join("missing")) else {
            return;
        };
        assert_eq!(out.status.code(), Some(91));
        assert!(out.stdout.is_empty());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("missing"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
