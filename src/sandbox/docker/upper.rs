//! What a Docker container wrote to its filesystem, measured on the engine's host from the
//! container's writable layer (overlay2's `UpperDir`) instead of an engine request each time.
//!
//! One inspect per container finds the layer; each measurement after that is a walk of it on
//! this host: bytes (apparent sizes of everything but directories, a hard link once — what
//! the engine's own `SizeRw` sums) and paths (every entry: files, directories, links and
//! deletion markers). The walk only reads metadata and never follows a symlink. It stops once
//! above the caller's file bound, so an agent's millions of files cost at most the bound.
//!
//! When the layer cannot be read here (a remote `DOCKER_HOST`, another storage driver, the
//! harness not root), measurements fall back to the engine's inspect with size, which counts
//! no paths: the file bound is then applied to the change list at the end of the agent phase.
//!
//! A walk that races the agent (it still runs) can at worst be made to count more than the
//! layer holds, by swapping a directory for a symlink between listing and reading it: the
//! agent can only stop itself that way. The measurement after every process is gone is exact.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bollard::Docker;
use bollard::query_parameters::InspectContainerOptionsBuilder;

use crate::sandbox::{DiskUsage, SandboxError};

/// The writable layer of each container measured so far (`None`: not readable on this host).
#[derive(Debug, Default)]
pub(super) struct UpperDirs {
    dirs: Mutex<HashMap<String, Option<PathBuf>>>,
    /// The layers of containers seen stopped by [`crate::sandbox::Sandbox::stop`] and not started
    /// since (nothing writes to them any more), when readable on this host.
    stopped: Mutex<HashMap<String, super::layer::Layer>>,
    /// The layers of containers seen stopped and started again since: known, but written to.
    restarted: Mutex<HashMap<String, super::layer::Layer>>,
}

impl UpperDirs {
    fn get(&self, id: &str) -> Option<Option<PathBuf>> {
        self.dirs.lock().ok()?.get(id).cloned()
    }

    fn set(&self, id: &str, dir: Option<PathBuf>) {
        if let Ok(mut dirs) = self.dirs.lock() {
            dirs.insert(id.to_string(), dir);
        }
    }

    /// Learn a container's layer from an inspect made for another reason (its `GraphDriver`),
    /// so that its first measurement needs no inspect of its own. A layer already known (or
    /// known to be unreadable) is kept.
    pub(super) fn prime(&self, id: &str, driver: Option<&bollard::models::DriverData>) {
        if self.get(id).is_some() || !engine_is_local() {
            return;
        }
        if let Some(dir) = upper_dir_of(driver) {
            self.set(id, Some(dir));
        }
    }

    /// Every process of the container is gone (and none is started again before
    /// [`UpperDirs::started`]), as `info`, the inspection that saw it stopped, says.
    pub(super) fn stopped(&self, id: &str, info: &bollard::models::ContainerInspectResponse) {
        if !engine_is_local() {
            return;
        }
        let Some(layer) = layer_of(info) else {
            return;
        };
        if let Ok(mut stopped) = self.stopped.lock() {
            stopped.insert(id.to_string(), layer);
        }
    }

    /// The container (re)starts: its layer may change again.
    pub(super) fn started(&self, id: &str) {
        let layer = self.stopped.lock().ok().and_then(|mut s| s.remove(id));
        if let (Some(layer), Ok(mut restarted)) = (layer, self.restarted.lock()) {
            restarted.insert(id.to_string(), layer);
        }
    }

    /// Whether the container was seen stopped and started again since.
    pub(super) fn is_restarted(&self, id: &str) -> bool {
        self.restarted.lock().is_ok_and(|r| r.contains_key(id))
    }

    /// A container started again since it was seen stopped is stopped once more (its layers
    /// and mounts are the ones seen then).
    pub(super) fn stopped_again(&self, id: &str) {
        let layer = self.restarted.lock().ok().and_then(|mut r| r.remove(id));
        if let (Some(layer), Ok(mut stopped)) = (layer, self.stopped.lock()) {
            stopped.insert(id.to_string(), layer);
        }
    }

    /// The layers of a stopped container, when they are readable on this host.
    pub(super) fn layer_of_stopped(&self, id: &str) -> Option<super::layer::Layer> {
        self.stopped.lock().ok()?.get(id).cloned()
    }

    /// The container is gone: forget its layer.
    pub(super) fn forget(&self, id: &str) {
        if let Ok(mut stopped) = self.stopped.lock() {
            stopped.remove(id);
        }
        if let Ok(mut restarted) = self.restarted.lock() {
            restarted.remove(id);
        }
        if let Ok(mut dirs) = self.dirs.lock() {
            dirs.remove(id);
        }
    }
}

/// The container's overlay2 layers and mounts, as its inspection names them, when they are
/// directories on this host.
pub(super) fn layer_of(
    info: &bollard::models::ContainerInspectResponse,
) -> Option<super::layer::Layer> {
    let driver = info.graph_driver.as_ref();
    let upper = upper_dir_of(driver)?;
    let lowers = lower_dirs_of(driver)?;
    let mounts = info
        .mounts
        .iter()
        .flatten()
        .filter_map(|m| m.destination.clone())
        .collect();
    Some(super::layer::Layer {
        upper,
        lowers,
        mounts,
    })
}

/// Whether the engine runs on this host (its layers are this host's directories).
pub(super) fn engine_is_local() -> bool {
    match std::env::var("DOCKER_HOST") {
        Ok(host) => host.is_empty() || host.starts_with("unix://"),
        Err(_) => true,
    }
}

/// The container's overlay2 upper directory, when the engine names one that is a directory
/// on this host.
fn upper_dir_of(driver: Option<&bollard::models::DriverData>) -> Option<PathBuf> {
    let driver = driver?;
    if driver.name != "overlay2" {
        return None;
    }
    let dir = PathBuf::from(driver.data.get("UpperDir")?);
    if !dir.is_absolute() {
        return None;
    }
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    meta.is_dir().then_some(dir)
}

/// The container's overlay2 lower directories (its image's layers, top first), when each is
/// a directory on this host; an image without layers has none.
fn lower_dirs_of(driver: Option<&bollard::models::DriverData>) -> Option<Vec<PathBuf>> {
    let driver = driver?;
    if driver.name != "overlay2" {
        return None;
    }
    let Some(list) = driver.data.get("LowerDir") else {
        return Some(Vec::new());
    };
    list.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| {
            let dir = PathBuf::from(d);
            let meta = std::fs::symlink_metadata(&dir).ok()?;
            (dir.is_absolute() && meta.is_dir()).then_some(dir)
        })
        .collect()
}

/// [`crate::sandbox::Sandbox::disk_usage`] for the Docker backend: a walk of the writable layer on this
/// host when it can be read (one inspect per container, to find it), else the engine's size.
pub(super) async fn layer_usage(
    docker: &Docker,
    dirs: &UpperDirs,
    id: &str,
    count_files_to: u64,
) -> Result<Option<DiskUsage>, SandboxError> {
    let dir = match dirs.get(id) {
        Some(dir) => dir,
        None => {
            let dir = if engine_is_local() {
                let info = docker
                    .inspect_container(
                        id,
                        None::<bollard::query_parameters::InspectContainerOptions>,
                    )
                    .await
                    .map_err(super::error::engine("container inspect"))?;
                upper_dir_of(info.graph_driver.as_ref())
            } else {
                None
            };
            if dir.is_none() {
                tracing::debug!(%id, "writable layer not readable on this host: the engine measures it");
            }
            dirs.set(id, dir.clone());
            dir
        }
    };
    if let Some(dir) = dir {
        let walked = tokio::task::spawn_blocking({
            let dir = dir.clone();
            move || walk(&dir, count_files_to)
        })
        .await;
        match walked {
            Ok(Ok(usage)) => return Ok(Some(usage)),
            Ok(Err(e)) => tracing::debug!(%id, dir = %dir.display(), "writable layer walk: {e}"),
            Err(e) => tracing::debug!(%id, "writable layer walk: {e}"),
        }
        dirs.set(id, None);
    }
    let options = InspectContainerOptionsBuilder::new().size(true).build();
    let info = docker
        .inspect_container(id, Some(options))
        .await
        .map_err(super::error::engine("container inspect"))?;
    Ok(info.size_rw.map(|n| DiskUsage {
        bytes: n.max(0) as u64,
        files: None,
    }))
}

/// Path bytes of directories waiting to be read, at most: past it the walk gives up (the
/// backend then measures through the engine) rather than hold the names of a hostile tree.
const MAX_PENDING_BYTES: usize = 64 * 1024 * 1024;

/// Walk `root` without following symlinks: apparent bytes of every non-directory (a hard link
/// once) and the number of entries below it, stopping once the count is above `count_files_to`.
/// Entries that vanish or are replaced mid-walk are skipped. Anything else that keeps a
/// directory from being read (a path past `PATH_MAX`, permissions, too many pending
/// directories) is an error, never a lower count: the caller then asks the engine instead.
pub(super) fn walk(root: &Path, count_files_to: u64) -> std::io::Result<DiskUsage> {
    let top = std::fs::symlink_metadata(root)?;
    let mut bytes = 0u64;
    let mut files = 0u64;
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    // Each directory with the identity it had when listed: one that is no longer that
    // directory (replaced mid-walk) is skipped rather than followed.
    let mut stack: Vec<(PathBuf, (u64, u64))> = vec![(root.to_path_buf(), (top.dev(), top.ino()))];
    let mut pending = root.as_os_str().len();
    let mut first = true;
    while let Some((dir, identity)) = stack.pop() {
        pending = pending.saturating_sub(dir.as_os_str().len());
        if !first {
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() && (m.dev(), m.ino()) == identity => {}
                Err(e) if !vanished(&e) => return Err(e),
                _ => continue,
            }
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if !first && vanished(&e) => continue,
            Err(e) => return Err(e),
        };
        first = false;
        for entry in entries {
            let Ok(entry) = entry else { continue };
            files += 1;
            if files > count_files_to {
                return Ok(DiskUsage {
                    bytes,
                    files: Some(files),
                });
            }
            // `fstatat` on the listed directory, not following a symlink.
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                let path = entry.path();
                pending += path.as_os_str().len();
                if pending > MAX_PENDING_BYTES {
                    return Err(std::io::Error::other(
                        "too many directories waiting to be read",
                    ));
                }
                stack.push((path, (meta.dev(), meta.ino())));
                continue;
            }
            if meta.len() == 0 || (meta.nlink() > 1 && !linked.insert((meta.dev(), meta.ino()))) {
                continue;
            }
            bytes = bytes.saturating_add(meta.len());
        }
    }
    Ok(DiskUsage {
        bytes,
        files: Some(files),
    })
}

/// A walk that races the agent finds paths gone or replaced: skipped, not an error.
fn vanished(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ELOOP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_counts_entries_and_apparent_bytes_without_following_links() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        std::fs::create_dir_all(r.join("a/b")).unwrap();
        std::fs::write(r.join("a/one"), vec![0u8; 1000]).unwrap();
        std::fs::write(r.join("a/b/two"), vec![0u8; 24]).unwrap();
        std::fs::write(r.join("empty"), b"").unwrap();
        // A hard link counts once in bytes, twice as a path.
        std::fs::hard_link(r.join("a/one"), r.join("a/b/one-again")).unwrap();
        // A sparse file counts in full.
        std::fs::File::create(r.join("sparse"))
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        // A symlink to a big tree is one entry of its own length, never followed.
        let outside = tempfile::tempdir().unwrap();
        for i in 0..50 {
            std::fs::write(outside.path().join(format!("f{i}")), b"x").unwrap();
        }
        let target = outside.path().to_str().unwrap().to_string();
        std::os::unix::fs::symlink(&target, r.join("link")).unwrap();

        let usage = walk(r, u64::MAX).unwrap();
        // a, a/b, a/one, a/b/two, a/b/one-again, empty, sparse, link
        assert_eq!(usage.files, Some(8));
        assert_eq!(usage.bytes, 1000 + 24 + (1 << 30) + target.len() as u64);
    }

    #[test]
    fn a_walk_stops_once_above_its_bound() {
        let root = tempfile::tempdir().unwrap();
        for i in 0..100 {
            std::fs::write(root.path().join(format!("f{i}")), b"").unwrap();
        }
        assert_eq!(walk(root.path(), 10).unwrap().files, Some(11));
        assert_eq!(walk(root.path(), 100).unwrap().files, Some(100));
    }

    #[test]
    fn a_directory_past_path_max_is_an_error_not_a_lower_count() {
        let root = tempfile::tempdir().unwrap();
        // Created relative to each level (a full path this long cannot be used).
        let name = "d".repeat(250);
        let mut dir = std::fs::File::open(root.path()).unwrap();
        use std::os::fd::AsRawFd;
        for _ in 0..20 {
            let c = std::ffi::CString::new(name.clone()).unwrap();
            // SAFETY: valid fd and NUL-terminated name.
            let made = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) };
            assert_eq!(made, 0, "mkdirat");
            // SAFETY: valid fd and NUL-terminated name; the result is checked.
            let fd = unsafe {
                libc::openat(
                    dir.as_raw_fd(),
                    c.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY,
                )
            };
            assert!(fd >= 0, "openat");
            // SAFETY: a fresh fd we own.
            dir = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        }
        let err = walk(root.path(), u64::MAX).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG), "{err}");
    }

    #[test]
    fn an_unreadable_root_is_an_error() {
        let root = tempfile::tempdir().unwrap();
        assert!(walk(&root.path().join("missing"), 10).is_err());
    }

    #[test]
    fn only_an_overlay2_upper_dir_that_exists_is_used() {
        let root = tempfile::tempdir().unwrap();
        let upper = root.path().to_str().unwrap().to_string();
        let driver = |name: &str, dir: &str| bollard::models::DriverData {
            name: name.to_string(),
            data: HashMap::from([("UpperDir".to_string(), dir.to_string())]),
        };
        assert_eq!(
            upper_dir_of(Some(&driver("overlay2", &upper))),
            Some(root.path().to_path_buf())
        );
        assert_eq!(upper_dir_of(Some(&driver("btrfs", &upper))), None);
        assert_eq!(
            upper_dir_of(Some(&driver("overlay2", "relative/dir"))),
            None
        );
        assert_eq!(
            upper_dir_of(Some(&driver("overlay2", &format!("{upper}/missing")))),
            None
        );
        assert_eq!(upper_dir_of(None), None);
    }
}
