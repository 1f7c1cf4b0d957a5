//! An archive of a path as a stopped container's writable layer holds it, built on the
//! engine's host from overlay2's `UpperDir` instead of an archive request to the engine
//! (issue 10: each such request costs the engine a helper process and tens of milliseconds,
//! and the change set makes one per changed subtree).
//!
//! Only for a container whose every process is gone (the Docker backend checks this itself,
//! whatever the caller says): nothing can then change the layer while it is read, so its
//! entries are what the container wrote. Names and order are the engine's (relative to the
//! path's parent, parents before children, siblings by name; a directory's name without the
//! engine's trailing `/`, which every reader here trims); each entry is read with
//! `lstat` semantics and never followed (a symlink is archived as a link, a regular file is
//! opened with `O_NOFOLLOW` and must still be the file listed). overlay2's deletion markers
//! (character devices 0:0) are left out, as the engine's merged view has no such file.
//!
//! A path the layer cannot answer alone — not in the layer, or reached through a symlink the
//! container would resolve — is `Ok(None)`: the caller asks the engine instead.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::Fetched;

/// Write an archive of container path `path` from the layer at `upper` into `to`, at most
/// `limit` bytes; `Ok(None)` when the layer alone cannot answer for `path`.
pub(super) fn archive(
    upper: &Path,
    path: &str,
    to: &Path,
    limit: u64,
) -> io::Result<Option<Fetched>> {
    let Some(parts) = components(path) else {
        return Ok(None);
    };
    let Some((name, parents)) = parts.split_last() else {
        return Ok(None);
    };
    // Every parent a real directory of the layer: the engine would resolve a symlink there
    // inside the container, which the layer alone cannot do.
    let mut at = upper.to_path_buf();
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
    let file = File::create(to)?;
    let mut builder = tar::Builder::new(Capped {
        inner: io::BufWriter::new(file),
        written: 0,
        limit,
    });
    let built = append_tree(&mut builder, &at, Path::new(name), &meta)
        .and_then(|()| builder.into_inner())
        .and_then(|mut w| {
            w.flush()?;
            Ok(w.written)
        });
    match built {
        Ok(bytes) => Ok(Some(Fetched::Archive { bytes })),
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

/// The components of an absolute container path; `None` for anything but plain names.
fn components(path: &str) -> Option<Vec<&str>> {
    let rest = path.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    parts
        .iter()
        .all(|p| *p != "." && *p != "..")
        .then_some(parts)
}

fn is_whiteout(meta: &std::fs::Metadata) -> bool {
    meta.file_type().is_char_device() && meta.rdev() == 0
}

/// Append `host` (already `lstat`ed as `meta`) as `name`, and everything below a directory.
fn append_tree<W: Write>(
    builder: &mut tar::Builder<W>,
    host: &Path,
    name: &Path,
    meta: &std::fs::Metadata,
) -> io::Result<()> {
    let mut stack: Vec<(PathBuf, PathBuf, std::fs::Metadata)> =
        vec![(host.to_path_buf(), name.to_path_buf(), meta.clone())];
    while let Some((host, name, meta)) = stack.pop() {
        append_one(builder, &host, &name, &meta)?;
        if !meta.is_dir() {
            continue;
        }
        let mut children: Vec<(std::ffi::OsString, std::fs::Metadata)> = Vec::new();
        for entry in std::fs::read_dir(&host)? {
            let entry = entry?;
            // `fstatat` on the listed directory, not following a symlink.
            let meta = entry.metadata()?;
            if is_whiteout(&meta) {
                continue;
            }
            children.push((entry.file_name(), meta));
        }
        // Popped in name order.
        children.sort_by(|a, b| b.0.as_bytes().cmp(a.0.as_bytes()));
        for (child, meta) in children {
            stack.push((host.join(&child), name.join(&child), meta));
        }
    }
    Ok(())
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
            return Err(io::Error::other(format!(
                "{} is only partly in the layer ({})",
                host.display(),
                xattr.to_string_lossy()
            )));
        }
    }
    let kind = meta.file_type();
    let mut header = tar::Header::new_gnu();
    header.set_mode(meta.mode() & 0o7777);
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
        builder.append_link(&mut header, name, target)
    } else if kind.is_file() {
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

/// Whether `path` (never followed) carries the extended attribute `name`.
fn has_xattr(path: &Path, name: &std::ffi::CStr) -> io::Result<bool> {
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
