//! Host directories in pods without host mounts (a pod may run on any node, and a
//! cluster rarely lets pods mount the host's paths).
//!
//! - **Read-only** (the presets' agent cache, a command agent's `mounts:`): the directory
//!   becomes an image — the toolbox's busybox at `/toolbox/busybox` and the directory at
//!   `/data` — keyed by a fingerprint of its tree (paths, types, modes, sizes, mtimes, link
//!   targets), built with the local engine and pushed to the registry once per key (like an
//!   environment image), used by digest. An init container of that image copies `/data` into
//!   an emptyDir that the main container mounts read-only at the container path. The node
//!   pulls the image once and keeps it; what a trial pays is the copy on the node, never an
//!   upload. (Kubernetes 1.31+'s image volumes would mount the image itself, without the
//!   copy, but need containerd ≥ 2.1; the test cluster runs Debian's 1.6.)
//! - **Read-write** (the AWorld control root): an emptyDir at the container path, seeded
//!   by an upload of the host directory once the pod runs, and read back by
//!   [`Sandbox::collect_mounts`](crate::sandbox::Sandbox::collect_mounts) once the agent is
//!   done — the host directory then holds what the agent left, as a bind mount leaves it on
//!   Docker — and emptied in the pod, as emptying the host directory empties a bind mount.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use tokio::sync::OnceCell;

use super::KubernetesSandbox;
use super::error::KubeError;
use super::exec::RawEnd;
use super::images::Prepared;
use super::names::IMAGE_BUSYBOX;
use super::names::root;
use super::transfer::download_failed;
use crate::digest::sha256_hex;
use crate::sandbox::toolbox::toolbox_argv;
use crate::sandbox::{ContainerId, ContainerLimits, Fetched, Mount, SandboxError, dir_to_tar};

/// Repository of the mount images in the registry.
const MOUNT_REPOSITORY: &str = "arbiter-mount";
/// Where the mount image keeps the directory.
const IMAGE_DATA: &str = "/data";
/// Where the copying init container mounts the emptyDir.
const INIT_TARGET: &str = "/arbiter-mount";
/// At most this much of a read-write mount is read back.
const READBACK_LIMIT: u64 = 1 << 30;

/// A mount of a pod, ready for its spec.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PlannedMount {
    pub container: String,
    /// The mount image (by digest), for a read-only mount.
    pub image: Option<String>,
    /// The host directory's permission bits (the mount point gets them).
    pub mode: u32,
}

/// Init containers (one per read-only mount), volumes and the main container's mounts.
pub(super) fn pod_parts(
    planned: &[PlannedMount],
    limits: &ContainerLimits,
    cpu_request: f64,
) -> (Vec<Container>, Vec<Volume>, Vec<VolumeMount>) {
    let (mut init, mut volumes, mut mounts) = (Vec::new(), Vec::new(), Vec::new());
    for (i, m) in planned.iter().enumerate() {
        let volume = format!("arbiter-mount-{i}");
        volumes.push(Volume {
            name: volume.clone(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: volume.clone(),
            mount_path: m.container.clone(),
            read_only: Some(m.image.is_some()),
            ..Default::default()
        });
        let mode = format!("{:o}", m.mode & 0o7777);
        let script = match &m.image {
            Some(_) => format!(
                "B={IMAGE_BUSYBOX}; $B cp -a {IMAGE_DATA}/. {INIT_TARGET}/ && $B chmod {mode} {INIT_TARGET}"
            ),
            None => continue,
        };
        // The copy runs with the task's CPUs, and asks the scheduler for no more than the
        // main container does (an init container's requests do not add to the pod's: the
        // larger of init and main counts, so a whole CPU here made every pod with a mount
        // take a whole CPU whatever `cpu_request` said).
        let millis = (limits.cpus * 1000.0).round().max(100.0) as u64;
        let asked = ((limits.cpus * cpu_request * 1000.0).round() as u64).clamp(1, millis);
        let amounts = |cpu: u64| {
            std::collections::BTreeMap::from([
                ("cpu".to_string(), Quantity(format!("{cpu}m"))),
                ("memory".to_string(), Quantity("64Mi".to_string())),
            ])
        };
        init.push(Container {
            name: format!("mount-{i}"),
            image: m.image.clone(),
            command: Some(vec![
                IMAGE_BUSYBOX.to_string(),
                "sh".to_string(),
                "-c".to_string(),
                script,
            ]),
            resources: Some(ResourceRequirements {
                limits: Some(amounts(millis)),
                requests: Some(amounts(asked)),
                ..Default::default()
            }),
            security_context: Some(root()),
            volume_mounts: Some(vec![VolumeMount {
                name: volume,
                mount_path: INIT_TARGET.to_string(),
                ..Default::default()
            }]),
            ..Default::default()
        });
    }
    (init, volumes, mounts)
}

/// A fingerprint of a directory tree: what changes when any path, type, mode, owner, size,
/// mtime or link target in it does (not a hash of every byte: an agent cache is gigabytes).
pub(super) fn fingerprint(dir: &Path) -> std::io::Result<String> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<u8>) -> std::io::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name();
            let rel = format!("{rel}/{}", name.to_string_lossy());
            let meta = std::fs::symlink_metadata(entry.path())?;
            let _ = write!(
                out,
                "{rel}\0{:o}\0{}\0{}\0{}\0{}.{}\0",
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.len(),
                meta.mtime(),
                meta.mtime_nsec()
            );
            if meta.file_type().is_symlink() {
                let _ = write!(out, "{}\0", std::fs::read_link(entry.path())?.display());
            } else if meta.is_dir() {
                walk(&entry.path(), &rel, out)?;
            }
            out.push(b'\n');
        }
        Ok(())
    }
    let mut out = Vec::new();
    let meta = std::fs::metadata(dir)?;
    let _ = writeln!(out, "{:o}", meta.mode());
    walk(dir, "", &mut out)?;
    Ok(sha256_hex(&out))
}

/// The mount image's archive, written to `file`: the toolbox's busybox and `dir` at `/data`.
fn write_image_tar(dir: &Path, busybox: &Path, file: &std::fs::File) -> std::io::Result<()> {
    let mut builder = tar::Builder::new(std::io::BufWriter::new(file));
    builder.follow_symlinks(false);
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(0o755);
    header.set_size(0);
    builder.append_data(&mut header, "toolbox", std::io::empty())?;
    let mut bytes = Vec::new();
    std::fs::File::open(busybox)?.read_to_end(&mut bytes)?;
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o755);
    header.set_size(bytes.len() as u64);
    builder.append_data(&mut header, "toolbox/busybox", &bytes[..])?;
    builder.append_dir_all(IMAGE_DATA.trim_start_matches('/'), dir)?;
    builder.into_inner()?.flush()
}

impl KubernetesSandbox {
    /// Each mount of a container spec, its image built and pushed where it is read-only.
    pub(super) async fn plan_mounts(
        &self,
        mounts: &[Mount],
    ) -> Result<Vec<PlannedMount>, SandboxError> {
        let mut planned = Vec::new();
        for m in mounts {
            let mode = std::fs::metadata(&m.host)
                .map_err(SandboxError::io(&m.host))?
                .permissions()
                .mode();
            let image = if m.read_only {
                Some(self.mount_image(&m.host).await?)
            } else {
                None
            };
            planned.push(PlannedMount {
                container: m.container.clone(),
                image,
                mode,
            });
        }
        Ok(planned)
    }

    /// The image of a read-only host directory, by digest: pushed once per fingerprint (the
    /// registry is asked first, so another process's push counts), once per process however
    /// many trials ask at the same time.
    async fn mount_image(&self, host: &Path) -> Result<String, SandboxError> {
        let host = host.canonicalize().map_err(SandboxError::io(host))?;
        let cell = {
            let mut cells = self.images.lock().await;
            cells
                .entry(format!("mount-dir:{}", host.display()))
                .or_insert_with(|| Arc::new(OnceCell::new()))
                .clone()
        };
        let prepared = cell
            .get_or_try_init(|| async {
                let toolbox = self.toolbox.as_ref().ok_or_else(|| {
                    KubeError::Setup("no harness toolbox (run scripts/bootstrap)".to_string())
                })?;
                let dir = host.clone();
                let started = std::time::Instant::now();
                let print = tokio::task::spawn_blocking(move || fingerprint(&dir))
                    .await
                    .map_err(|e| KubeError::Setup(format!("fingerprint: {e}")))?
                    .map_err(SandboxError::io(&host))?;
                let tag = sha256_hex(format!("{print}{}", toolbox.busybox_sha256).as_bytes())
                    [..16]
                    .to_string();
                tracing::debug!(dir = %host.display(), tag, seconds = started.elapsed().as_secs_f64(), "mount fingerprint");
                let (name, repo) = self.pushed_name(MOUNT_REPOSITORY)?;
                let registry = self.registry()?;
                if let Some(digest) = registry.digest(&repo, &tag).await? {
                    return Ok(Prepared {
                        reference: format!("{name}@{digest}"),
                        config: None,
                        digest: Some(digest),
                    });
                }
                self.import_dir(&host, &toolbox.dir.join("busybox"), &name, &tag)
                    .await?;
                self.push(&name, &tag).await?;
                let digest = registry
                    .digest(&repo, &tag)
                    .await?
                    .ok_or_else(|| KubeError::Push {
                        image: name.clone(),
                        message: "pushed, but the registry does not list it".to_string(),
                    })?;
                Ok::<_, SandboxError>(Prepared {
                    reference: format!("{name}@{digest}"),
                    config: None,
                    digest: Some(digest),
                })
            })
            .await?;
        Ok(prepared.reference.clone())
    }

    /// `docker import` of the mount image's archive (streamed from a temp file: an agent cache
    /// is too big to hold in memory).
    async fn import_dir(
        &self,
        host: &Path,
        busybox: &Path,
        name: &str,
        tag: &str,
    ) -> Result<(), SandboxError> {
        let failed = |message: String| KubeError::Push {
            image: format!("{name}:{tag}"),
            message,
        };
        let file = tempfile::tempfile().map_err(|e| failed(format!("temp file: {e}")))?;
        let (dir, bb) = (host.to_path_buf(), busybox.to_path_buf());
        let file =
            tokio::task::spawn_blocking(move || write_image_tar(&dir, &bb, &file).map(|()| file))
                .await
                .map_err(|e| failed(format!("packing {}: {e}", host.display())))?
                .map_err(|e| failed(format!("packing {}: {e}", host.display())))?;
        let mut file = tokio::fs::File::from_std(file);
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        file.rewind()
            .await
            .map_err(|e| failed(format!("temp file: {e}")))?;
        let body = futures_util::stream::unfold(file, |mut f| async move {
            let mut buf = vec![0u8; 1 << 20];
            match f.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(buf.into()), f))
                }
                Err(e) => Some((Err(e), f)),
            }
        });
        self.builds
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let engine = self.engine().await?;
        let options = CreateImageOptionsBuilder::new()
            .from_src("-")
            .repo(name)
            .tag(tag)
            .build();
        let mut stream =
            engine
                .client()
                .create_image(Some(options), Some(bollard::body_try_stream(body)), None);
        while let Some(item) = stream.next().await {
            let info = item.map_err(|e| failed(format!("import: {e}")))?;
            if let Some(detail) = info.error_detail {
                return Err(
                    failed(format!("import: {}", detail.message.unwrap_or_default())).into(),
                );
            }
        }
        Ok(())
    }

    /// Upload each read-write mount's host directory into the running pod.
    pub(super) async fn seed_mounts(
        &self,
        pod: &str,
        mounts: &[Mount],
    ) -> Result<(), SandboxError> {
        for m in mounts.iter().filter(|m| !m.read_only) {
            let tar = dir_to_tar(&m.host, ".").map_err(SandboxError::io(&m.host))?;
            self.upload_tar(pod, &m.container, &tar, &[]).await?;
        }
        Ok(())
    }

    /// [`Sandbox::collect_mounts`](crate::sandbox::Sandbox::collect_mounts).
    pub(super) async fn collect_pod_mounts(&self, id: &ContainerId) -> Result<(), SandboxError> {
        let mounts = self
            .states
            .lock()
            .await
            .get(id.as_str())
            .map(|s| s.mounts.clone())
            .unwrap_or_default();
        for m in mounts.iter().filter(|m| !m.read_only) {
            self.read_back(id.as_str(), m).await?;
        }
        Ok(())
    }

    /// The container's side of `m` into the host directory (which is emptied first), then
    /// the container's side emptied.
    async fn read_back(&self, pod: &str, m: &Mount) -> Result<(), SandboxError> {
        let parent = m.host.parent().unwrap_or(Path::new("/"));
        let scratch = tempfile::tempdir_in(parent).map_err(SandboxError::io(parent))?;
        let archive = scratch.path().join("mount.tar");
        let fetched = self
            .download_tar(pod, &m.container, &archive, READBACK_LIMIT, false)
            .await?;
        let failed = |message: String| download_failed(pod, message);
        match fetched {
            Fetched::Archive { .. } => {}
            Fetched::NotFound => return Err(failed(format!("{} is gone", m.container))),
            Fetched::TooLarge { limit } => {
                return Err(failed(format!(
                    "{} holds more than {limit} bytes",
                    m.container
                )));
            }
        }
        let unpacked = scratch.path().join("unpacked");
        let host = m.host.clone();
        tokio::task::spawn_blocking(move || replace_with_archive(&archive, &unpacked, &host))
            .await
            .map_err(|e| failed(format!("unpacking: {e}")))?
            .map_err(|e| failed(format!("unpacking into {}: {e}", m.host.display())))?;
        let argv = toolbox_argv(
            "sh",
            &[
                "-c",
                "cd \"$1\" || exit 1; for f in * .[!.]* ..?*; do [ -e \"$f\" ] || [ -L \"$f\" ] || continue; /.arbiter/toolbox/busybox rm -rf -- \"$f\" || exit 1; done",
                "arbiter-empty",
                &m.container,
            ],
        );
        let (end, _, err) = self
            .harness(pod, &argv, None, std::time::Duration::from_secs(120))
            .await?;
        if end != RawEnd::Exited(0) {
            return Err(failed(format!(
                "emptying {}: {} ({end:?})",
                m.container,
                String::from_utf8_lossy(&err).trim()
            )));
        }
        Ok(())
    }
}

/// Unpack `archive` (a download: one root entry, the mount point) under `scratch`, then make
/// `host` hold exactly what the root held: its old entries removed, the new ones moved in.
/// Regular files, directories, symlinks (never followed) and hard links within the archive
/// only; nothing leaves `scratch` (the tar crate refuses paths outside it).
fn replace_with_archive(archive: &Path, scratch: &Path, host: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(scratch)?;
    let mut tar = tar::Archive::new(std::fs::File::open(archive)?);
    tar.set_preserve_permissions(true);
    tar.set_preserve_mtime(true);
    let mut root: Option<PathBuf> = None;
    for entry in tar.entries()? {
        let mut entry = entry?;
        let kind = entry.header().entry_type();
        if !(kind.is_dir() || kind.is_file() || kind.is_symlink() || kind.is_hard_link()) {
            tracing::debug!(path = %entry.path()?.display(), "not a file, directory or link: skipped");
            continue;
        }
        if root.is_none() {
            root = entry
                .path()?
                .components()
                .next()
                .map(|c| PathBuf::from(c.as_os_str()));
        }
        entry.unpack_in(scratch)?;
    }
    let from = match root {
        Some(root) => scratch.join(root),
        None => scratch.to_path_buf(),
    };
    for entry in std::fs::read_dir(host)? {
        let path = entry?.path();
        if std::fs::symlink_metadata(&path)?.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    if from.is_dir() {
        for entry in std::fs::read_dir(&from)? {
            let entry = entry?;
            std::fs::rename(entry.path(), host.join(entry.file_name()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_only_mount_is_copied_by_an_init_container_and_mounted_read_only() {
        let limits = ContainerLimits {
            cpus: 1.0,
            memory_mb: 256,
            pids_limit: 64,
            gpus: 0,
            storage_mb: None,
        };
        let planned = [
            PlannedMount {
                container: "/opt/agent".into(),
                image: Some("reg/arbiter-mount@sha256:ab".into()),
                mode: 0o40755,
            },
            PlannedMount {
                container: "/control".into(),
                image: None,
                mode: 0o40777,
            },
        ];
        let (init, volumes, mounts) = pod_parts(&planned, &limits, 0.25);
        assert_eq!(init.len(), 1, "no init container for a read-write mount");
        // The copy may use the task's CPU, but asks for no more than the main container.
        let res = init[0].resources.as_ref().unwrap();
        assert_eq!(res.limits.as_ref().unwrap()["cpu"].0, "1000m");
        assert_eq!(res.requests.as_ref().unwrap()["cpu"].0, "250m");
        assert_eq!(volumes.len(), 2);
        assert!(volumes.iter().all(|v| v.empty_dir.is_some()));
        assert_eq!(mounts[0].mount_path, "/opt/agent");
        assert_eq!(mounts[0].read_only, Some(true));
        assert_eq!(mounts[1].read_only, Some(false));
        let script = &init[0].command.as_ref().unwrap()[3];
        assert!(script.contains("cp -a /data/. /arbiter-mount/"), "{script}");
        assert!(script.contains("chmod 755"), "{script}");
        assert_eq!(
            init[0].image.as_deref(),
            Some("reg/arbiter-mount@sha256:ab")
        );
    }

    #[test]
    fn the_fingerprint_follows_the_tree() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("d")).unwrap();
        std::fs::write(tmp.path().join("d/f"), "x").unwrap();
        let a = fingerprint(tmp.path()).unwrap();
        assert_eq!(a, fingerprint(tmp.path()).unwrap());
        std::fs::write(tmp.path().join("d/f"), "xy").unwrap();
        let b = fingerprint(tmp.path()).unwrap();
        assert_ne!(a, b);
        std::os::unix::fs::symlink("/etc", tmp.path().join("l")).unwrap();
        assert_ne!(b, fingerprint(tmp.path()).unwrap());
    }

    #[test]
    fn a_read_back_replaces_the_host_directory_and_keeps_links() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("control");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", src.join("link")).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        b.follow_symlinks(false);
        b.append_dir_all("control", &src).unwrap();
        let archive = tmp.path().join("a.tar");
        std::fs::write(&archive, b.into_inner().unwrap()).unwrap();
        let host = tmp.path().join("host");
        std::fs::create_dir_all(host.join("old")).unwrap();
        std::fs::write(host.join("stale.txt"), "old").unwrap();
        replace_with_archive(&archive, &tmp.path().join("scratch"), &host).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&host)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["link", "sub"]);
        assert_eq!(
            std::fs::read_to_string(host.join("sub/a.txt")).unwrap(),
            "a"
        );
        assert!(
            std::fs::symlink_metadata(host.join("link"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}
