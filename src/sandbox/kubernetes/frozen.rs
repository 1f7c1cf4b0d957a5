//! Frozen filesystems on a cluster, which has no commit of a pod's filesystem: the base image
//! plus what the container changed against it, kept on this host.
//!
//! [`Sandbox::freeze`](crate::sandbox::Sandbox::freeze) takes the change set against the
//! image (`changes.rs`) and reads out of the pod, with the toolbox's tar, every changed subtree
//! whole (an added path, a modified file or link) and each modified or added directory's own
//! entry (its mode, owner, mtime: restored after what is beneath it), and keeps the paths to remove first (deletions, and whatever of
//! the image's stands where the container put something of another type). Paths are bytes
//! as the filesystem has them (a newline, non-UTF-8); tar keeps owners, modes, symlinks and
//! the hard links within the changes.
//!
//! A container created from it is a pod of the base image whose PID 1 first waits for a
//! harness marker: the changes are replayed as root (removals, then the archives), the pod's
//! filesystem is walked (what its own change set is counted against), and only then the
//! marker is set and PID 1 runs its process (arbiter's keep-alive, or the image's ENTRYPOINT
//! with it as arguments), so nothing of the image runs on the filesystem before the replay,
//! as on Docker, where the container starts from the committed filesystem.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::KubernetesSandbox;
use super::error::KubeError;
use super::exec::{RawEnd, resolve_command};
use super::names::random_suffix;
use super::pod::KEEPALIVE_MARKER;
use super::registry::{Reference, Registry};
use super::walk::{lossy, parent};
use crate::sandbox::toolbox::{keepalive_argv, toolbox_argv};
use crate::sandbox::{
    Base, ChangeKind, ContainerId, ContainerSpec, FrozenId, ImageRef, Owner, Process, SandboxError,
};

/// Reads NUL-terminated paths on stdin (absolute, with a `.` before each: relative to `/`,
/// and none taken for an option); writes one archive of them (tar flags `$1`) to stdout (kept
/// in the pod and checked, `kept.rs`). `xargs` makes the argument list in linear
/// time (a shell's `set -- "$@" p` per path is quadratic: a freeze of 40,000 paths was still
/// in it after five minutes); `$2` is the number of paths, so that a list `xargs` cut in two
/// (it must not: each batch is far below its `-s`) fails instead of making two archives.
const ARCHIVE: &str = r#"B=/.arbiter/toolbox/busybox; f=$1 n=$2
exec $B xargs -0 -s 1048576 $B sh -c 'n=$0 f=$1; shift; [ $# = "$n" ] || { echo "the list was cut: $# of $n paths" >&2; exit 93; }; exec /.arbiter/toolbox/busybox tar -c -f - -C / $f "$@"' "$n" "$f""#;

/// Reads NUL-terminated absolute paths on stdin and removes each (whatever it is).
const REMOVE: &str = r#"B=/.arbiter/toolbox/busybox
while IFS= read -r -d '' p; do $B rm -rf "$p" || exit 1; done"#;

/// Set once the replay is done (root-only scratch volume: nothing of the agent's sets it).
const REPLAYED: &str = "/.arbiter/scratch/replayed";

/// PID 1 of a pod of a frozen filesystem: waits for [`REPLAYED`], then runs its arguments,
/// the command found through the image's `PATH` as the engine would (the toolbox's shell
/// would otherwise run its own applet of that name).
const AWAIT_REPLAY: &str = concat!(
    r#"B=/.arbiter/toolbox/busybox
while [ ! -e /.arbiter/scratch/replayed ]; do $B usleep 50000; done
"#,
    resolve_command!(),
    r#"exec "$@""#
);

/// Bytes of one archive read out of a pod, at most.
const MAX_FROZEN_BYTES: u64 = 32 * 1024 * 1024 * 1024;
/// Deadline of one archive's read.
const ARCHIVE_DEADLINE: Duration = Duration::from_secs(1800);

/// Path bytes one archive exec takes at most: its paths become the arguments of `tar` (the
/// toolbox's busybox has no `-T`), and one exec's argument list holds ARG_MAX (2 MiB with
/// Linux's default stack; 128 KiB is all POSIX promises). A freeze of more paths is several
/// archives, replayed in order.
const ARGS_PER_ARCHIVE: usize = 256 * 1024;

const REMOVALS: &str = "remove";

/// A frozen filesystem: its base image and the changes, in a directory of this host that
/// goes with it.
pub(super) struct Frozen {
    /// The base image, as pods name it.
    pub image: String,
    dir: tempfile::TempDir,
    /// The archives in `dir`, in the order they are replayed: the changed roots whole, then
    /// the entries archived one by one (directories' own entries, roots over a mount).
    parts: Vec<PathBuf>,
}

impl Frozen {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl KubernetesSandbox {
    /// [`Sandbox::freeze`](crate::sandbox::Sandbox::freeze).
    pub(super) async fn freeze_pod(
        &self,
        id: &ContainerId,
        owner: &Owner,
    ) -> Result<FrozenId, SandboxError> {
        let pod = id.as_str();
        let facts = self.pod_facts(pod).await?;
        let image = self.image_walk(&facts).await?;
        let base = Base::Image(ImageRef::new(facts.image.clone()));
        let (list, now) = self.changed_paths(pod, &image, base).await?;
        let added: HashSet<&[u8]> = list
            .iter()
            .filter(|(_, k)| *k == ChangeKind::Added)
            .map(|(p, _)| p.as_slice())
            .collect();
        let is_dir =
            |walk: &super::walk::Walk, p: &[u8]| walk.entries.get(p).is_some_and(|s| s.is_dir());
        let (mut roots, mut dirs, mut removals) = (Vec::new(), Vec::new(), Vec::new());
        for (path, kind) in &list {
            match kind {
                ChangeKind::Added => {
                    let mut up = parent(path);
                    let mut beneath_added = false;
                    while up != b"/" {
                        if added.contains(up) {
                            beneath_added = true;
                            break;
                        }
                        up = parent(up);
                    }
                    if !beneath_added {
                        roots.push(path.clone());
                    }
                    // Its own entry again, last: extracting what is beneath it changed its mtime.
                    if is_dir(&now, path) {
                        dirs.push(path.clone());
                    }
                }
                ChangeKind::Deleted => removals.push(path.clone()),
                ChangeKind::Modified if is_dir(&now, path) => {
                    if !is_dir(&image, path) {
                        removals.push(path.clone());
                    }
                    dirs.push(path.clone());
                }
                ChangeKind::Modified => {
                    removals.push(path.clone());
                    roots.push(path.clone());
                }
            }
        }
        let (roots, flat) = split_at_mounts(roots, &now);
        // The entries of a root with a mount beneath it, one by one and before the
        // directories' own entries again.
        let dirs: Vec<Vec<u8>> = flat.into_iter().chain(dirs).collect();
        let dir = tempfile::Builder::new()
            .prefix("arbiter-k8s-frozen-")
            .tempdir()
            .map_err(SandboxError::io(std::env::temp_dir()))?;
        let mut frozen = Frozen {
            image: facts.image.clone(),
            dir,
            parts: Vec::new(),
        };
        if !removals.is_empty() {
            let path = frozen.file(REMOVALS);
            std::fs::write(&path, nul_list(&removals)).map_err(SandboxError::io(&path))?;
        }
        let mut total = 0u64;
        for (list, flags, name) in [(&roots, "", "roots"), (&dirs, "--no-recursion", "dirs")] {
            for (i, batch) in batches(list, ARGS_PER_ARCHIVE).into_iter().enumerate() {
                let path = frozen.file(&format!("{name}-{i:05}.tar"));
                let left = MAX_FROZEN_BYTES.saturating_sub(total);
                total += self.archive(pod, batch, flags, &path, left).await?;
                frozen.parts.push(path);
            }
        }
        let frozen_id = FrozenId::new(format!(
            "k8s-frozen-{}-{}",
            owner.role.as_str(),
            random_suffix()
        ));
        tracing::debug!(
            pod,
            frozen = %frozen_id,
            roots = roots.len(),
            dirs = dirs.len(),
            removals = removals.len(),
            "frozen"
        );
        self.integrity
            .frozen
            .lock()
            .await
            .insert(frozen_id.to_string(), Arc::new(frozen));
        Ok(frozen_id)
    }

    /// One archive of `paths` in `pod` at `to`, its size checked against the pod's count.
    async fn archive(
        &self,
        pod: &str,
        paths: &[Vec<u8>],
        flags: &str,
        to: &Path,
        limit: u64,
    ) -> Result<u64, SandboxError> {
        let count = paths.len().to_string();
        let argv = toolbox_argv("sh", &["-c", ARCHIVE, "arbiter-archive", flags, &count]);
        let dotted: Vec<Vec<u8>> = paths
            .iter()
            .map(|p| [b".", p.as_slice()].concat())
            .collect();
        let stdin = nul_list(&dotted);
        let got = self
            .tar_to_file(pod, &argv, Some(&stdin), to, limit, ARCHIVE_DEADLINE)
            .await?;
        let (written, over, counted, stderr) = (got.written, got.over, got.counted, got.stderr);
        let end = got.end?;
        let mut file = got.file;
        use tokio::io::AsyncWriteExt;
        file.flush().await.map_err(SandboxError::io(to))?;
        if over || end != RawEnd::Exited(0) || counted != Some(written) {
            return Err(KubeError::Transfer {
                op: "freeze",
                pod: pod.to_string(),
                message: format!(
                    "{} paths ({}…): {written} bytes received, {} counted, over the limit: {over} ({end:?}): {}",
                    paths.len(),
                    lossy(&paths[0]),
                    counted.map_or("none".to_string(), |c| c.to_string()),
                    stderr.trim().chars().take(400).collect::<String>()
                ),
            }
            .into());
        }
        Ok(written)
    }

    /// The frozen filesystem `id`, if this process has it.
    async fn frozen(&self, id: &FrozenId) -> Result<Arc<Frozen>, SandboxError> {
        self.integrity
            .frozen
            .lock()
            .await
            .get(id.as_str())
            .cloned()
            .ok_or_else(|| {
                KubeError::Setup(format!("no frozen filesystem {id} in this process")).into()
            })
    }

    /// [`Sandbox::remove`](crate::sandbox::Sandbox::remove) of a frozen filesystem: its
    /// directory goes with it.
    pub(super) async fn remove_frozen(&self, id: &FrozenId) {
        self.integrity.frozen.lock().await.remove(id.as_str());
    }

    /// What a pod of frozen filesystem `id` is created as: a spec of its base image, and the
    /// main container's command (PID 1 waits for the replay, then runs the spec's process).
    pub(super) async fn frozen_start(
        &self,
        spec: &ContainerSpec,
        id: &FrozenId,
    ) -> Result<(ContainerSpec, Vec<String>), SandboxError> {
        let frozen = self.frozen(id).await?;
        let mut keepalive = keepalive_argv();
        keepalive.push(KEEPALIVE_MARKER.to_string());
        let process = match &spec.start.process {
            Process::Keepalive => keepalive,
            Process::ImageEntrypoint => {
                let mut argv = self.entrypoint_of(&frozen.image).await?;
                argv.extend(keepalive);
                argv
            }
            Process::Service { .. } => {
                return Err(SandboxError::Unsupported {
                    op: "compose services",
                    backend: "kubernetes",
                });
            }
        };
        let mut command = toolbox_argv("sh", &["-c", AWAIT_REPLAY, "arbiter-replay"]);
        command.extend(process);
        let mut base = spec.clone();
        base.base = Base::Image(ImageRef::new(frozen.image.clone()));
        Ok((base, command))
    }

    /// The image's ENTRYPOINT from its registry (empty: none).
    async fn entrypoint_of(&self, image: &str) -> Result<Vec<String>, SandboxError> {
        let r = Reference::parse(image);
        let registry = Registry::new(&r.host)?;
        Ok(registry
            .image_entrypoint(&r.repository, &r.reference)
            .await?
            .unwrap_or_default())
    }

    /// Replay frozen filesystem `id` into the running `pod` (whose PID 1 waits for it), walk
    /// the result, then let PID 1 go on.
    pub(super) async fn replay(&self, pod: &str, id: &FrozenId) -> Result<(), SandboxError> {
        let frozen = self.frozen(id).await?;
        let failed = |message: String| -> SandboxError {
            KubeError::Transfer {
                op: "replay",
                pod: pod.to_string(),
                message,
            }
            .into()
        };
        let removals = frozen.file(REMOVALS);
        if removals.exists() {
            let list = std::fs::read(&removals).map_err(SandboxError::io(&removals))?;
            let argv = toolbox_argv("sh", &["-c", REMOVE]);
            let (end, _, err) = self
                .harness(pod, &argv, Some(&list), ARCHIVE_DEADLINE)
                .await?;
            if end != RawEnd::Exited(0) {
                return Err(failed(format!(
                    "removing: {} ({end:?})",
                    String::from_utf8_lossy(&err).trim()
                )));
            }
        }
        for path in &frozen.parts {
            let tar = tokio::fs::read(path)
                .await
                .map_err(SandboxError::io(path))?;
            self.upload_tar(pod, "/", &tar, &[]).await?;
        }
        let walk = self.walk(pod).await?;
        self.integrity
            .replayed
            .lock()
            .await
            .insert(pod.to_string(), (Arc::new(walk), id.clone()));
        let argv = toolbox_argv("touch", &[REPLAYED]);
        let (end, _, err) = self
            .harness(pod, &argv, None, Duration::from_secs(30))
            .await?;
        if end != RawEnd::Exited(0) {
            return Err(failed(format!(
                "marking it replayed: {}",
                String::from_utf8_lossy(&err).trim()
            )));
        }
        Ok(())
    }
}

/// `paths` cut into runs whose argument bytes (each path with its `.` prefix, its NUL and
/// its pointer) stay within `max`; a path alone over it is a run of its own. Nothing for no
/// paths.
fn batches(paths: &[Vec<u8>], max: usize) -> Vec<&[Vec<u8>]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, p) in paths.iter().enumerate() {
        let cost = p.len() + 2 + std::mem::size_of::<usize>();
        if i > start && bytes + cost > max {
            out.push(&paths[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += cost;
    }
    if start < paths.len() {
        out.push(&paths[start..]);
    }
    out
}

/// Paths NUL-terminated, for a script's stdin.
fn nul_list(paths: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in paths {
        out.extend_from_slice(p);
        out.push(0);
    }
    out
}

/// Roots to archive with recursion, and the entries (parents first) of those that hold a mount
/// point beneath them, to archive one by one: a recursive tar would descend into the mount (a
/// volume of the pod — the agent's cache, a read-only `mounts:` entry — not the agent's
/// filesystem: a root `/opt` over a 400 MB agent cache froze those 400 MB). The walk (`find
/// -xdev`) holds no entry of another filesystem; the mount points themselves are left out.
fn split_at_mounts(roots: Vec<Vec<u8>>, now: &super::walk::Walk) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let holds_mount = |root: &[u8]| {
        now.mounts
            .iter()
            .any(|m| m.len() > root.len() && m.starts_with(root) && m[root.len()] == b'/')
    };
    let (mut whole, mut flat) = (Vec::new(), Vec::new());
    for root in roots {
        if !holds_mount(&root) {
            whole.push(root);
            continue;
        }
        let mut beneath = root.clone();
        beneath.push(b'/');
        flat.extend(
            now.entries
                .keys()
                .filter(|p| **p == root || p.starts_with(&beneath))
                .filter(|p| !now.mounts.contains(p.as_slice()))
                .cloned(),
        );
    }
    // Parents before children (the walk's order is by bytes: `/a/b` after `/a`, but `/a-x`
    // between them would not matter: each entry is archived with its full path).
    flat.sort();
    (whole, flat)
}

#[cfg(test)]
mod tests {
    use super::super::walk::{Stat, Walk};
    use super::*;

    fn stat() -> Stat {
        Stat {
            mode: 0o40755,
            uid: 0,
            gid: 0,
            size: 0,
            mtime: 0,
            mtime_ns: 0,
            ctime: String::new(),
            rdev: (0, 0),
            ino: 1,
            nlink: 1,
        }
    }

    #[test]
    fn a_root_over_a_mount_is_archived_entry_by_entry_without_the_mount() {
        let mut now = Walk::default();
        for p in [
            "/opt",
            "/opt/agent",
            "/opt/notes.txt",
            "/opt/sub",
            "/opt/sub/f",
            "/app",
            "/app/x",
        ] {
            now.entries.insert(p.as_bytes().to_vec(), stat());
        }
        now.mounts.insert(b"/opt/agent".to_vec());
        now.mounts.insert(b"/proc".to_vec());
        let roots = vec![b"/opt".to_vec(), b"/app".to_vec()];
        let (whole, flat) = split_at_mounts(roots, &now);
        assert_eq!(whole, [b"/app".to_vec()]);
        let flat: Vec<&str> = flat
            .iter()
            .map(|p| std::str::from_utf8(p).unwrap())
            .collect();
        assert_eq!(flat, ["/opt", "/opt/notes.txt", "/opt/sub", "/opt/sub/f"]);
        // A mount whose name only starts like a root's is not beneath it.
        now.mounts.insert(b"/app-cache".to_vec());
        let (whole, flat) = split_at_mounts(vec![b"/app".to_vec()], &now);
        assert_eq!((whole.len(), flat.len()), (1, 0));
    }

    #[test]
    fn paths_are_cut_into_argument_lists_that_fit() {
        let paths: Vec<Vec<u8>> = (0..1000)
            .map(|i| format!("/p/{i:06}").into_bytes())
            .collect();
        // Each costs 9 + 2 + 8 = 19 bytes: 10 fit in 190.
        let runs = batches(&paths, 190);
        assert_eq!(runs.len(), 100);
        assert!(runs.iter().all(|r| r.len() == 10));
        assert_eq!(runs.concat(), paths, "every path once, in order");
        assert_eq!(batches(&paths, 189)[0].len(), 9);
        // A path longer than the bound goes alone; no paths, no archive.
        let long = vec![vec![b'x'; 500], b"/a".to_vec()];
        assert_eq!(batches(&long, 100).len(), 2);
        assert!(batches(&[], 100).is_empty());
    }
}
