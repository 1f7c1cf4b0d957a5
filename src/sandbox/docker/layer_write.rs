//! An archive unpacked into a created, never started container's writable layer on the
//! engine's host, instead of the engine's archive upload after its start (issue 16: each
//! upload costs the engine a helper process, about 70 ms of CPU).
//!
//! Only where the result is the engine's to the attribute: the container's start runs
//! nothing but arbiter's keep-alive (the Docker backend asks only then), and the archive only
//! adds to the filesystem — every entry is a directory, a regular file or a symlink at a new
//! path (or a directory over a directory of the image's that has no extended attributes),
//! each parent is an earlier directory entry of the archive, and no entry meets a mount. Each
//! entry then gets what the engine's unpacking gives it: mode (after the owner, so set-id bits
//! stay), owner, and modification time (access time the same), directories' times set last.
//! The overlay is not mounted while the container has never started, so its writable layer
//! may be written to. Anything else is `Ok(false)` before anything is written, and the caller
//! uploads after the start as before.

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::layer::Layer;
use super::layer_changes::Seen;

/// What one archive entry becomes.
enum Kind {
    Dir,
    File(Vec<u8>),
    Symlink(PathBuf),
}

struct Planned {
    rel: PathBuf,
    kind: Kind,
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: SystemTime,
    /// The writable layer already has this directory (one the engine made at create).
    exists: bool,
}

/// Paths the engine itself mounts or fills at start (nothing is written at or beneath them).
const ENGINE_OWNED: &[&str] = &[
    "proc",
    "sys",
    "dev",
    "etc/hosts",
    "etc/hostname",
    "etc/resolv.conf",
];

impl Layer {
    /// Unpack `tar` at the container's `/` (see the module's doc); `Ok(false)`, with nothing
    /// written, when the engine must do it.
    pub(super) fn unpack_before_start(&self, tar: &[u8]) -> io::Result<bool> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(false); // the entries' owners could not be set
        }
        let Some(plan) = self.plan(tar)? else {
            return Ok(false);
        };
        for entry in &plan {
            self.write_entry(entry)?;
        }
        // Directories last, deepest first: writing into them moved their times.
        for entry in plan.iter().rev() {
            if matches!(entry.kind, Kind::Dir) {
                let dir = std::fs::File::open(self.upper.join(&entry.rel))?;
                dir.set_times(times(entry.mtime))?;
            }
        }
        Ok(true)
    }

    /// The entries of `tar`, each checked against the layers; `None` if any is not a plain
    /// addition the host can make as the engine would.
    fn plan(&self, tar: &[u8]) -> io::Result<Option<Vec<Planned>>> {
        let mut plan = Vec::new();
        let mut dirs: HashSet<PathBuf> = HashSet::new();
        let mut archive = tar::Archive::new(tar);
        for entry in archive.entries()? {
            let mut entry = entry?;
            if entry.pax_extensions()?.is_some_and(|mut p| {
                p.any(|x| x.is_ok_and(|x| x.key_bytes().starts_with(b"SCHILY.xattr")))
            }) {
                return Ok(None);
            }
            let Some(rel) = plain_relative(&entry.path_bytes()) else {
                return Ok(None);
            };
            let parts: Vec<&str> = rel.iter().filter_map(|p| p.to_str()).collect();
            if parts.len() != rel.iter().count()
                || self.mounts.iter().any(|m| under_mount(&parts, m))
                || ENGINE_OWNED.iter().any(|o| under_mount(&parts, o))
            {
                return Ok(None);
            }
            if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty())
                && !dirs.contains(parent)
            {
                return Ok(None);
            }
            let header = entry.header();
            let mode = header.mode()? & 0o7777;
            let (uid, gid) = (header.uid()?, header.gid()?);
            let (Ok(uid), Ok(gid)) = (u32::try_from(uid), u32::try_from(gid)) else {
                return Ok(None);
            };
            let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(header.mtime()?);
            let kind = match header.entry_type() {
                tar::EntryType::Directory => Kind::Dir,
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let mut bytes = Vec::with_capacity(header.size()? as usize);
                    entry.read_to_end(&mut bytes)?;
                    Kind::File(bytes)
                }
                tar::EntryType::Symlink => match entry.link_name()? {
                    Some(target) => Kind::Symlink(target.into_owned()),
                    None => return Ok(None),
                },
                _ => return Ok(None),
            };
            let is_dir = matches!(kind, Kind::Dir);
            let planned = dirs.contains(&rel) || plan.iter().any(|p: &Planned| p.rel == rel);
            let exists = if planned {
                // A directory again (two archives joined) takes the later attributes, as the
                // engine's unpacking gives it; anything else twice is the engine's to do.
                if !(is_dir && dirs.contains(&rel)) {
                    return Ok(None);
                }
                true
            } else {
                let Some(exists) = self.fits(&rel, is_dir)? else {
                    return Ok(None);
                };
                exists
            };
            if is_dir {
                dirs.insert(rel.clone());
            }
            plan.push(Planned {
                rel,
                kind,
                mode,
                uid,
                gid,
                mtime,
                exists,
            });
        }
        Ok(Some(plan))
    }

    /// Whether an entry at `rel` only adds to the filesystem: `Some(false)` for a new path,
    /// `Some(true)` for a directory over one the writable layer already has, `None` when the
    /// engine must unpack it.
    fn fits(&self, rel: &Path, is_dir: bool) -> io::Result<Option<bool>> {
        match std::fs::symlink_metadata(self.upper.join(rel)) {
            Ok(m) => return Ok((is_dir && m.is_dir()).then_some(true)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(match self.image_entry(rel)? {
            Seen::Absent => Some(false),
            Seen::At(host, meta) if is_dir && meta.is_dir() && !has_any_xattr(&host)? => {
                Some(false)
            }
            Seen::At(..) => None,
        })
    }

    fn write_entry(&self, entry: &Planned) -> io::Result<()> {
        let host = self.upper.join(&entry.rel);
        match &entry.kind {
            Kind::Dir => {
                if !entry.exists {
                    std::fs::create_dir(&host)?;
                }
                std::os::unix::fs::lchown(&host, Some(entry.uid), Some(entry.gid))?;
                std::fs::set_permissions(&host, std::fs::Permissions::from_mode(entry.mode))
            }
            Kind::File(bytes) => {
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .mode(0o600)
                    .open(&host)?;
                file.write_all(bytes)?;
                std::os::unix::fs::fchown(&file, Some(entry.uid), Some(entry.gid))?;
                file.set_permissions(std::fs::Permissions::from_mode(entry.mode))?;
                file.set_times(times(entry.mtime))
            }
            Kind::Symlink(target) => {
                std::os::unix::fs::symlink(target, &host)?;
                std::os::unix::fs::lchown(&host, Some(entry.uid), Some(entry.gid))?;
                set_link_times(&host, entry.mtime)
            }
        }
    }
}

fn times(mtime: SystemTime) -> std::fs::FileTimes {
    std::fs::FileTimes::new()
        .set_accessed(mtime)
        .set_modified(mtime)
}

/// A relative archive path of plain components (`./` and trailing `/` dropped).
fn plain_relative(raw: &[u8]) -> Option<PathBuf> {
    let parts: Vec<&[u8]> = raw
        .split(|b| *b == b'/')
        .filter(|p| !p.is_empty() && *p != b".")
        .collect();
    if parts.is_empty() || raw.first() == Some(&b'/') || parts.contains(&b"..".as_slice()) {
        return None;
    }
    let mut out = PathBuf::new();
    for part in parts {
        out.push(std::ffi::OsStr::from_bytes(part));
    }
    Some(out)
}

/// Whether container path `parts` is at or beneath mount point `mount` (a directory above
/// one is the writable layer's, where the engine made the mount point at create).
fn under_mount(parts: &[&str], mount: &str) -> bool {
    let mount: Vec<&str> = mount.split('/').filter(|p| !p.is_empty()).collect();
    parts.len() >= mount.len() && parts[..mount.len()] == mount[..]
}

fn has_any_xattr(path: &Path) -> io::Result<bool> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a path with a NUL byte"))?;
    // SAFETY: a valid NUL-terminated path; a null buffer of size 0 asks for the list's size.
    let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOTSUP) => Ok(false),
            _ => Err(e),
        };
    }
    Ok(n > 0)
}

fn set_link_times(path: &Path, mtime: SystemTime) -> io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a path with a NUL byte"))?;
    let since = mtime
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let ts = libc::timespec {
        tv_sec: since.as_secs() as libc::time_t,
        tv_nsec: since.subsec_nanos() as libc::c_long,
    };
    let both = [ts, ts];
    // SAFETY: a valid NUL-terminated path and two timespecs, as utimensat expects.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            both.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::sandbox::{TarEntry, files_to_tar};

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    fn layer(root: &Path, mounts: &[&str]) -> Layer {
        let (upper, lower) = (root.join("upper"), root.join("lower"));
        std::fs::create_dir_all(&upper).expect("upper");
        std::fs::create_dir_all(lower.join("etc/conf")).expect("lower");
        std::fs::write(lower.join("etc/passwd"), b"root").expect("lower file");
        Layer {
            upper,
            lowers: vec![lower],
            mounts: mounts.iter().map(|m| m.to_string()).collect(),
        }
    }

    fn tar(entries: &[(&'static str, Option<&'static [u8]>, u32)]) -> Vec<u8> {
        let entries: Vec<TarEntry> = entries
            .iter()
            .map(|(path, content, mode)| TarEntry {
                path,
                content: *content,
                mode: *mode,
            })
            .collect();
        files_to_tar(&entries).expect("tar")
    }

    #[test]
    fn new_paths_are_written_with_the_archives_attributes() {
        if !is_root() {
            return;
        }
        let root = tempfile::tempdir().expect("tmp");
        let layer = layer(root.path(), &[]);
        let archive = tar(&[
            ("arbiter/", None, 0o755),
            ("arbiter/instruction.md", Some(b"do it"), 0o644),
            ("etc/", None, 0o755),
            ("etc/conf/", None, 0o700),
            ("etc/conf/tool", Some(b"#!/bin/sh"), 0o4755),
        ]);
        assert!(layer.unpack_before_start(&archive).expect("unpack"));
        let meta = |rel: &str| std::fs::symlink_metadata(layer.upper.join(rel)).expect(rel);
        assert_eq!(
            std::fs::read(layer.upper.join("arbiter/instruction.md")).expect("read"),
            b"do it"
        );
        assert_eq!(meta("arbiter/instruction.md").mode() & 0o7777, 0o644);
        assert_eq!(meta("etc/conf").mode() & 0o7777, 0o700);
        assert_eq!(
            meta("etc/conf/tool").mode() & 0o7777,
            0o4755,
            "set-uid kept"
        );
        for rel in [
            "arbiter",
            "arbiter/instruction.md",
            "etc/conf",
            "etc/conf/tool",
        ] {
            assert_eq!(meta(rel).mtime(), 0, "{rel}: the archive's mtime");
            assert_eq!((meta(rel).uid(), meta(rel).gid()), (0, 0), "{rel}");
        }
    }

    #[test]
    fn a_directory_twice_takes_the_later_attributes() {
        if !is_root() {
            return;
        }
        let root = tempfile::tempdir().expect("tmp");
        let layer = layer(root.path(), &[]);
        let first = tar(&[("arbiter/", None, 0o755), ("arbiter/a", Some(b"a"), 0o644)]);
        let second = tar(&[("arbiter/", None, 0o700), ("arbiter/b", Some(b"b"), 0o644)]);
        let both = crate::sandbox::concat_archives(&[&first, &second]).expect("tar");
        assert!(layer.unpack_before_start(&both).expect("unpack"));
        let meta = std::fs::metadata(layer.upper.join("arbiter")).expect("meta");
        assert_eq!(meta.mode() & 0o7777, 0o700);
        assert!(layer.upper.join("arbiter/a").exists() && layer.upper.join("arbiter/b").exists());
    }

    #[test]
    fn anything_but_a_plain_addition_is_left_to_the_engine_and_nothing_is_written() {
        if !is_root() {
            return;
        }
        let refused: [(&str, Vec<u8>, &[&str]); 5] = [
            (
                "a file over the image's",
                tar(&[("etc/", None, 0o755), ("etc/passwd", Some(b"x"), 0o644)]),
                &[],
            ),
            (
                "a file over the image's directory",
                tar(&[("etc/", None, 0o755), ("etc/conf", Some(b"x"), 0o644)]),
                &[],
            ),
            (
                "a parent not in the archive",
                tar(&[("new/", None, 0o755), ("other/f", Some(b"x"), 0o644)]),
                &[],
            ),
            (
                "beneath a mount",
                tar(&[("data/", None, 0o755), ("data/f", Some(b"x"), 0o644)]),
                &["/data"],
            ),
            (
                "the engine's own file",
                tar(&[("etc/", None, 0o755), ("etc/hosts", Some(b"x"), 0o644)]),
                &[],
            ),
        ];
        for (why, archive, mounts) in refused {
            let root = tempfile::tempdir().expect("tmp");
            let layer = layer(root.path(), mounts);
            assert!(
                !layer.unpack_before_start(&archive).expect("unpack"),
                "{why}"
            );
            assert_eq!(
                std::fs::read_dir(&layer.upper).expect("upper").count(),
                0,
                "{why}: nothing written"
            );
        }
    }
}
