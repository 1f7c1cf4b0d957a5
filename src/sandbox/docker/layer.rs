//! An archive of a path of a stopped container, built on the engine's host from overlay2's
//! layers instead of an archive request to the engine (issues 10 and 16: each such request
//! costs the engine a helper process and tens of milliseconds, and a trial makes one for its
//! logs and one per changed subtree).
//!
//! Only for a container whose every process is gone (the Docker backend records the layers
//! when it sees the container stopped, and forgets them when it starts): nothing can then
//! change them while they are read. The archive is built from the writable layer
//! (`UpperDir`) alone, and only when that alone holds everything the engine's merged view
//! has at and beneath the path: every name a lower layer (`LowerDir`, the image) has in a
//! directory of the subtree must be in the writable layer's directory too (as an entry or a
//! deletion marker), no entry may be a metadata-only copy-up or a renamed-directory
//! redirect, and the path must not meet a mount. Anything else is `Ok(None)`, and the caller
//! asks the engine: a wrong archive is never the fallback.
//!
//! Names and order are the engine's (relative to the path's parent, parents before children,
//! siblings by name; a directory's name without the engine's trailing `/`, which every reader
//! here trims). Each entry is read with `lstat` semantics and never followed: a symlink is
//! archived as a link, and a regular file is opened with `O_NOFOLLOW` and must still be the
//! file listed. overlay2's deletion markers (character devices 0:0) are left out, as the
//! merged view has no such file.
//!
//! About 650 lines, half of them the unit tests of these rules (one per way the layer may not
//! hold a path whole).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::sandbox::Fetched;

/// A stopped container's layers on this host.
#[derive(Debug, Clone)]
pub(super) struct Layer {
    /// Its writable layer.
    pub upper: PathBuf,
    /// Its image's layers, top first.
    pub lowers: Vec<PathBuf>,
    /// Where mounts are in its filesystem (their content is in no layer).
    pub mounts: Vec<String>,
}

/// An entry only partly in the writable layer (the engine is asked instead).
#[derive(Debug)]
struct IncompleteError;

impl std::fmt::Display for IncompleteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("only partly in the writable layer")
    }
}

impl std::error::Error for IncompleteError {}

impl Layer {
    /// Write an archive of container path `path` into `to`, at most `limit` bytes; `Ok(None)`
    /// when the writable layer alone does not hold everything at and beneath `path`.
    pub(super) fn archive(&self, path: &str, to: &Path, limit: u64) -> io::Result<Option<Fetched>> {
        self.build(path, to, limit, true)
    }

    /// Write an archive of `path`'s own entry (a directory without what is beneath it) into
    /// `to`: the writable layer's entry is the merged view's (a directory's own attributes are
    /// its top layer's). `Ok(None)` when the writable layer does not have it, or a mount is
    /// at or above it.
    pub(super) fn entry_archive(
        &self,
        path: &str,
        to: &Path,
        limit: u64,
    ) -> io::Result<Option<Fetched>> {
        self.build(path, to, limit, false)
    }

    fn build(&self, path: &str, to: &Path, limit: u64, whole: bool) -> io::Result<Option<Fetched>> {
        let Some(parts) = components(path) else {
            return Ok(None);
        };
        let Some((name, parents)) = parts.split_last() else {
            return Ok(None);
        };
        // A mount's content is in no layer: at or beneath one for the entry alone; above one
        // too for the whole subtree.
        let blocked = |mount: &String| match components(mount) {
            Some(m) if whole => meets(&parts, &m),
            Some(m) => parts.starts_with(&m),
            None => true,
        };
        if self.mounts.iter().any(blocked) {
            return Ok(None);
        }
        // Every parent a real directory of the writable layer: the engine would resolve a
        // symlink there inside the container, which the layer alone cannot do.
        let mut at = self.upper.clone();
        for part in parents {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        at.push(name);
        let meta = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if is_whiteout(&meta) {
            return Ok(None);
        }
        let rel: PathBuf = parts.iter().collect();
        let file = File::create(to)?;
        let mut builder = tar::Builder::new(Capped {
            inner: io::BufWriter::new(file),
            written: 0,
            limit,
        });
        let appended = if whole {
            self.append_tree(&mut builder, &rel, Path::new(name), &meta)
        } else {
            match append_one(&mut builder, &at, Path::new(name), &meta) {
                Ok(()) => Ok(true),
                Err(e) if e.get_ref().is_some_and(|i| i.is::<IncompleteError>()) => Ok(false),
                Err(e) => Err(e),
            }
        };
        let built = appended.and_then(|complete| {
            let mut w = builder.into_inner()?;
            w.flush()?;
            Ok(complete.then_some(w.written))
        });
        match built {
            Ok(Some(bytes)) => Ok(Some(Fetched::Archive { bytes })),
            Ok(None) => {
                let _ = std::fs::remove_file(to);
                Ok(None)
            }
            Err(e) => {
                let _ = std::fs::remove_file(to);
                if e.kind() == io::ErrorKind::FileTooLarge {
                    Ok(Some(Fetched::TooLarge { limit }))
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Append `rel` (the path below the layers' roots, already `lstat`ed as `meta`) as `name`,
    /// and everything below a directory; `Ok(false)` when a lower layer has a name the
    /// writable layer lacks (the archive is then incomplete and must not be used).
    fn append_tree<W: Write>(
        &self,
        builder: &mut tar::Builder<W>,
        rel: &Path,
        name: &Path,
        meta: &std::fs::Metadata,
    ) -> io::Result<bool> {
        let mut stack: Vec<(PathBuf, PathBuf, std::fs::Metadata)> =
            vec![(rel.to_path_buf(), name.to_path_buf(), meta.clone())];
        while let Some((rel, name, meta)) = stack.pop() {
            let host = self.upper.join(&rel);
            match append_one(builder, &host, &name, &meta) {
                Ok(()) => {}
                Err(e) if e.get_ref().is_some_and(|i| i.is::<IncompleteError>()) => {
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
            if !meta.is_dir() {
                continue;
            }
            let mut children: Vec<(OsString, std::fs::Metadata)> = Vec::new();
            let mut names: HashSet<OsString> = HashSet::new();
            for entry in std::fs::read_dir(&host)? {
                let entry = entry?;
                names.insert(entry.file_name());
                // `fstatat` on the listed directory, not following a symlink.
                let meta = entry.metadata()?;
                if is_whiteout(&meta) {
                    continue;
                }
                children.push((entry.file_name(), meta));
            }
            if !self.lowers_covered(&rel, &names)? {
                return Ok(false);
            }
            // Popped in name order.
            children.sort_by(|a, b| b.0.as_bytes().cmp(a.0.as_bytes()));
            for (child, meta) in children {
                stack.push((rel.join(&child), name.join(&child), meta));
            }
        }
        Ok(true)
    }

    /// Whether every name each lower layer has in directory `rel` is among `names` (the
    /// writable layer's entries there, deletion markers included).
    fn lowers_covered(&self, rel: &Path, names: &HashSet<OsString>) -> io::Result<bool> {
        for lower in &self.lowers {
            let dir = lower.join(rel);
            match std::fs::symlink_metadata(&dir) {
                Ok(m) if m.is_dir() => {}
                // Not a directory there: nothing of it shows through a directory above.
                Ok(_) => continue,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e),
            }
            for entry in std::fs::read_dir(&dir)? {
                if !names.contains(&entry?.file_name()) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }
}

/// Whether container path `parts` is at, beneath or above mount point `mount`.
fn meets(parts: &[&str], mount: &[&str]) -> bool {
    let n = parts.len().min(mount.len());
    parts[..n] == mount[..n]
}

/// The components of an absolute container path; `None` for anything but plain names.
fn components(path: &str) -> Option<Vec<&str>> {
    let rest = path.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    parts
        .iter()
        .all(|p| *p != "." && *p != "..")
        .then_some(parts)
}

/// overlay2's deletion marker: a character device 0:0.
pub(super) fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// Nothing at that path in a layer (or a file where a directory would be on the way).
pub(super) fn gone(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR))
}

fn append_one<W: Write>(
    builder: &mut tar::Builder<W>,
    host: &Path,
    name: &Path,
    meta: &std::fs::Metadata,
) -> io::Result<()> {
    // overlayfs's metadata-only copy-up and renamed-directory redirects leave the data in
    // the base: the layer alone does not hold this entry.
    for xattr in [c"trusted.overlay.metacopy", c"trusted.overlay.redirect"] {
        if has_xattr(host, xattr)? {
            return Err(io::Error::other(IncompleteError));
        }
    }
    let kind = meta.file_type();
    let mut header = tar::Header::new_gnu();
    // The whole st_mode, file-type bits included, as the engine's archive has it.
    header.set_mode(meta.mode());
    header.set_uid(u64::from(meta.uid()));
    header.set_gid(u64::from(meta.gid()));
    header.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
    header.set_size(0);
    if kind.is_dir() {
        header.set_entry_type(tar::EntryType::Directory);
        builder.append_data(&mut header, name, io::empty())
    } else if kind.is_symlink() {
        header.set_entry_type(tar::EntryType::Symlink);
        let target = std::fs::read_link(host)?;
        append_symlink(builder, &mut header, name, target.as_os_str().as_bytes())
    } else if kind.is_file() {
        let file = open_listed(host, meta)?;
        let opened = file.metadata()?;
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(opened.len());
        // A file that shrank under the reader would leave the archive short: exactly its
        // listed size is written (the layer is not written to; this is a second check).
        let mut body = io::Read::take(file, opened.len());
        builder.append_data(&mut header, name, &mut body)
    } else if kind.is_char_device() || kind.is_block_device() || kind.is_fifo() {
        header.set_entry_type(if kind.is_char_device() {
            tar::EntryType::Char
        } else if kind.is_block_device() {
            tar::EntryType::Block
        } else {
            tar::EntryType::Fifo
        });
        let rdev = meta.rdev();
        header.set_device_major(libc::major(rdev))?;
        header.set_device_minor(libc::minor(rdev))?;
        builder.append_data(&mut header, name, io::empty())
    } else {
        // A socket: the engine's archive has none either.
        Ok(())
    }
}

/// A symlink entry whose target is `target` byte for byte (the tar crate's `append_link`
/// normalises it: `/` would become `//`); a target over the header's 100 bytes goes in a GNU
/// long-link entry first, as the tar crate itself writes one.
fn append_symlink<W: Write>(
    builder: &mut tar::Builder<W>,
    header: &mut tar::Header,
    name: &Path,
    target: &[u8],
) -> io::Result<()> {
    let field = &mut header.as_old_mut().linkname;
    field.fill(0);
    if target.len() > field.len() {
        let mut long = tar::Header::new_gnu();
        long.as_gnu_mut()
            .ok_or_else(|| io::Error::other("not a GNU header"))?
            .name[..13]
            .copy_from_slice(b"././@LongLink");
        long.set_mode(0o644);
        long.set_entry_type(tar::EntryType::GNULongLink);
        long.set_size(target.len() as u64 + 1);
        long.set_cksum();
        let mut data = target.to_vec();
        data.push(0);
        builder.append(&long, data.as_slice())?;
    }
    let n = target.len().min(field.len());
    field[..n].copy_from_slice(&target[..n]);
    builder.append_data(header, name, io::empty())
}

/// The regular file at `host` that `meta` (its `lstat`) describes, opened without following a
/// link and without blocking; an error if another file is there now.
pub(super) fn open_listed(host: &Path, meta: &std::fs::Metadata) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(host)?;
    let opened = file.metadata()?;
    if !opened.is_file() || (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
        return Err(io::Error::other(format!(
            "{} changed while it was read",
            host.display()
        )));
    }
    Ok(file)
}

/// Whether `path` (never followed) carries the extended attribute `name`.
pub(super) fn has_xattr(path: &Path, name: &std::ffi::CStr) -> io::Result<bool> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a path with a NUL byte"))?;
    // SAFETY: both are valid NUL-terminated strings; a null buffer of size 0 asks only for
    // the value's size.
    let n = unsafe { libc::lgetxattr(c.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    if n >= 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(false),
        _ => Err(e),
    }
}

/// A writer that refuses to go past `limit` bytes (`FileTooLarge`).
struct Capped<W> {
    inner: W,
    written: u64,
    limit: u64,
}

impl<W: Write> Write for Capped<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written.saturating_add(buf.len() as u64) > self.limit {
            return Err(io::Error::from(io::ErrorKind::FileTooLarge));
        }
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(upper: &Path, path: &str, to: &Path, limit: u64) -> io::Result<Option<Fetched>> {
        Layer {
            upper: upper.to_path_buf(),
            lowers: Vec::new(),
            mounts: Vec::new(),
        }
        .archive(path, to, limit)
    }

    fn whiteout(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mknod only creates a node (needs root, as
        // overlay2 does; the test is skipped without it).
        let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o600, 0) };
        assert_eq!(r, 0, "mknod {}", path.display());
    }

    fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    #[test]
    fn only_a_subtree_the_writable_layer_holds_whole_is_archived() {
        let layers = tempfile::tempdir().unwrap();
        let (upper, lower) = (layers.path().join("upper"), layers.path().join("lower"));
        // The image has /app/keep.txt and /app/gone.txt; the container added /app/new.txt
        // and, where it can (root), deleted /app/gone.txt.
        std::fs::create_dir_all(lower.join("app")).unwrap();
        std::fs::write(lower.join("app/keep.txt"), b"image").unwrap();
        std::fs::write(lower.join("app/gone.txt"), b"image").unwrap();
        std::fs::create_dir_all(upper.join("app")).unwrap();
        std::fs::write(upper.join("app/new.txt"), b"agent").unwrap();
        std::fs::create_dir_all(upper.join("logs/agent")).unwrap();
        std::fs::write(upper.join("logs/agent/out.log"), b"log").unwrap();
        let layer = Layer {
            upper: upper.clone(),
            lowers: vec![lower.clone()],
            mounts: vec!["/.arbiter".to_string(), "/data/in".to_string()],
        };
        let to = layers.path().join("a.tar");
        // The merged /app also shows the image's files: not the layer's alone.
        assert!(layer.archive("/app", &to, u64::MAX).unwrap().is_none());
        assert!(!to.exists());
        // An added file, and a directory the image has nothing of, are.
        assert!(
            layer
                .archive("/app/new.txt", &to, u64::MAX)
                .unwrap()
                .is_some()
        );
        assert!(layer.archive("/logs", &to, u64::MAX).unwrap().is_some());
        assert_eq!(
            listing(&to)
                .iter()
                .map(|e| e.0.as_str())
                .collect::<Vec<_>>(),
            ["logs", "logs/agent", "logs/agent/out.log"]
        );
        // Once every name of the image's /app is in the layer too (a copy, a deletion
        // marker), the layer holds /app whole.
        if is_root() {
            std::fs::write(upper.join("app/keep.txt"), b"edited").unwrap();
            whiteout(&upper.join("app/gone.txt"));
            assert!(layer.archive("/app", &to, u64::MAX).unwrap().is_some());
            assert_eq!(
                listing(&to)
                    .iter()
                    .map(|e| e.0.as_str())
                    .collect::<Vec<_>>(),
                ["app", "app/keep.txt", "app/new.txt"],
                "the deletion marker is not archived"
            );
        }
        // Mount points, what is beneath them and what is above them are the engine's.
        std::fs::create_dir_all(upper.join(".arbiter")).unwrap();
        std::fs::create_dir_all(upper.join("data/in/x")).unwrap();
        for path in ["/.arbiter", "/.arbiter/bin", "/data", "/data/in/x"] {
            assert!(
                layer.archive(path, &to, u64::MAX).unwrap().is_none(),
                "{path}"
            );
        }
    }

    fn listing(tar_path: &Path) -> Vec<(String, tar::EntryType, Vec<u8>, Option<String>)> {
        let mut archive = tar::Archive::new(File::open(tar_path).unwrap());
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
                let kind = e.header().entry_type();
                let link = e
                    .link_name()
                    .unwrap()
                    .map(|l| l.to_string_lossy().into_owned());
                let mut body = Vec::new();
                io::Read::read_to_end(&mut e, &mut body).unwrap();
                (name, kind, body, link)
            })
            .collect()
    }

    #[test]
    fn a_subtree_is_archived_as_the_engine_names_it_without_following_links() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        std::fs::create_dir_all(u.join("opt/tool/bin")).unwrap();
        std::fs::write(u.join("opt/tool/bin/run"), b"#!/bin/sh\n").unwrap();
        std::fs::write(u.join("opt/tool/a.txt"), b"a").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", u.join("opt/tool/leak")).unwrap();
        std::os::unix::fs::symlink("/etc", u.join("opt/tool/etc")).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let to = scratch.path().join("a.tar");
        let got = archive(u, "/opt/tool", &to, u64::MAX).unwrap();
        assert!(matches!(got, Some(Fetched::Archive { .. })), "{got:?}");
        let names: Vec<(String, tar::EntryType, Vec<u8>, Option<String>)> = listing(&to);
        let summary: Vec<(&str, tar::EntryType)> =
            names.iter().map(|(n, k, _, _)| (n.as_str(), *k)).collect();
        assert_eq!(
            summary,
            [
                ("tool", tar::EntryType::Directory),
                ("tool/a.txt", tar::EntryType::Regular),
                ("tool/bin", tar::EntryType::Directory),
                ("tool/bin/run", tar::EntryType::Regular),
                ("tool/etc", tar::EntryType::Symlink),
                ("tool/leak", tar::EntryType::Symlink),
            ]
        );
        assert_eq!(names[3].2, b"#!/bin/sh\n");
        assert_eq!(names[5].3.as_deref(), Some("/etc/shadow"));
        assert!(names[5].2.is_empty(), "a symlink is never followed");
        // A single file is named by its own name.
        let got = archive(u, "/opt/tool/a.txt", &to, u64::MAX).unwrap();
        assert!(matches!(got, Some(Fetched::Archive { .. })));
        assert_eq!(listing(&to)[0].0, "a.txt");
    }

    #[test]
    fn what_the_layer_cannot_answer_alone_is_none() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        std::fs::create_dir_all(u.join("real/dir")).unwrap();
        std::fs::write(u.join("real/dir/f"), b"x").unwrap();
        std::os::unix::fs::symlink("real", u.join("via")).unwrap();
        let to = upper.path().join("out.tar");
        // Not in the layer (the base has it, or nobody does).
        assert!(archive(u, "/absent", &to, u64::MAX).unwrap().is_none());
        // Reached through a symlink the container would resolve.
        assert!(archive(u, "/via/dir/f", &to, u64::MAX).unwrap().is_none());
        // Not a plain absolute path.
        assert!(archive(u, "real/dir", &to, u64::MAX).unwrap().is_none());
        assert!(
            archive(u, "/real/../real", &to, u64::MAX)
                .unwrap()
                .is_none()
        );
        assert!(archive(u, "/", &to, u64::MAX).unwrap().is_none());
        assert!(!to.exists());
    }

    #[test]
    fn an_entry_alone_is_its_own_attributes_whatever_the_image_has_beneath_it() {
        let layers = tempfile::tempdir().unwrap();
        let (upper, lower) = (layers.path().join("upper"), layers.path().join("lower"));
        std::fs::create_dir_all(lower.join("usr/sbin")).unwrap();
        std::fs::write(lower.join("usr/sbin/tool"), b"image").unwrap();
        std::fs::create_dir_all(upper.join("usr/sbin")).unwrap();
        std::fs::write(upper.join("usr/sbin/docker-init"), b"").unwrap();
        std::fs::write(upper.join("edited.txt"), b"agent").unwrap();
        let layer = Layer {
            upper: upper.clone(),
            lowers: vec![lower],
            mounts: vec!["/usr/sbin/docker-init".to_string(), "/data".to_string()],
        };
        let to = layers.path().join("a.tar");
        // The whole of /usr/sbin is not the layer's alone; its own entry is.
        assert!(layer.archive("/usr/sbin", &to, u64::MAX).unwrap().is_none());
        assert!(
            layer
                .entry_archive("/usr/sbin", &to, u64::MAX)
                .unwrap()
                .is_some()
        );
        let got = listing(&to);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(
            (got[0].0.as_str(), got[0].1),
            ("sbin", tar::EntryType::Directory)
        );
        // A file's entry has its content.
        assert!(
            layer
                .entry_archive("/edited.txt", &to, u64::MAX)
                .unwrap()
                .is_some()
        );
        assert_eq!(listing(&to)[0].2, b"agent");
        // A mount point, or what is beneath one, is not the layer's; above one is.
        assert!(
            layer
                .entry_archive("/usr/sbin/docker-init", &to, u64::MAX)
                .unwrap()
                .is_none()
        );
        std::fs::create_dir_all(upper.join("data/x")).unwrap();
        assert!(
            layer
                .entry_archive("/data/x", &to, u64::MAX)
                .unwrap()
                .is_none()
        );
        assert!(
            layer
                .entry_archive("/usr", &to, u64::MAX)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn an_archive_over_its_limit_is_too_large_and_leaves_no_file() {
        let upper = tempfile::tempdir().unwrap();
        std::fs::write(upper.path().join("big"), vec![7u8; 100_000]).unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let to = scratch.path().join("a.tar");
        let got = archive(upper.path(), "/big", &to, 50_000).unwrap();
        assert_eq!(got, Some(Fetched::TooLarge { limit: 50_000 }));
        assert!(!to.exists());
        let got = archive(upper.path(), "/big", &to, 200_000).unwrap();
        assert!(matches!(got, Some(Fetched::Archive { bytes }) if bytes >= 100_000));
    }

    #[test]
    fn fifos_are_archived_not_opened_and_odd_names_survive() {
        let upper = tempfile::tempdir().unwrap();
        let u = upper.path();
        std::fs::create_dir(u.join("d")).unwrap();
        let fifo = u.join("d/pipe");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let odd = std::ffi::OsStr::from_bytes(b"new\nline\xff");
        std::fs::write(u.join("d").join(odd), b"odd").unwrap();
        let to = u.join("out.tar");
        let got = archive(u, "/d", &to, u64::MAX).unwrap();
        assert!(matches!(got, Some(Fetched::Archive { .. })));
        let mut archive = tar::Archive::new(File::open(&to).unwrap());
        let names: Vec<(Vec<u8>, tar::EntryType)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path_bytes().into_owned(), e.header().entry_type())
            })
            .collect();
        assert_eq!(
            names,
            [
                (b"d".to_vec(), tar::EntryType::Directory),
                (b"d/new\nline\xff".to_vec(), tar::EntryType::Regular),
                (b"d/pipe".to_vec(), tar::EntryType::Fifo),
            ]
        );
    }
}
