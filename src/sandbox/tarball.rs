//! Tar archives in and out of containers, without trusting their contents.
//!
//! Archives read out of a container were shaped by the agent: entries may be symlinks to host
//! paths, `..` components, devices or huge files. Extraction keeps regular files and
//! directories only, never leaves the destination, and stops at a byte and entry budget.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

/// Build an uncompressed tar of the contents of `dir`, rooted at `prefix/` (no symlinks followed).
pub fn dir_to_tar(dir: &Path, prefix: &str) -> io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.mode(tar::HeaderMode::Deterministic);
    builder.append_dir_all(prefix, dir)?;
    builder.into_inner()
}

/// One tar archive holding the entries of `parts` in order (each part's end-of-archive
/// blocks dropped, one at the end): a single upload that unpacks as the parts would one after
/// the other. Each part must be a whole archive (as `tarball` builds them).
pub fn concat_archives(parts: &[&[u8]]) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        // The end of the last entry: its data's offset plus its size in whole blocks.
        let mut archive = tar::Archive::new(*part);
        let mut end = 0u64;
        for entry in archive.entries()?.raw(true) {
            let entry = entry?;
            let size = entry.header().entry_size()?;
            end = entry.raw_file_position() + size.div_ceil(512) * 512;
        }
        let end = usize::try_from(end)
            .ok()
            .filter(|&e| e <= part.len())
            .ok_or_else(|| std::io::Error::other("archive shorter than its entries"))?;
        out.extend_from_slice(&part[..end]);
    }
    out.extend_from_slice(&[0u8; 1024]);
    Ok(out)
}

/// Rewrite the archive at `path` to hold only its first entry (with any extension headers in
/// front of it); returns the new size. An archive without entries is left empty of them.
pub fn keep_first_entry(path: &Path) -> io::Result<u64> {
    let bytes = fs::read(path)?;
    let end = {
        let mut archive = tar::Archive::new(bytes.as_slice());
        match archive.entries()?.next() {
            Some(entry) => {
                let entry = entry?;
                let size = entry.header().entry_size()?;
                entry.raw_file_position() + size.div_ceil(512) * 512
            }
            None => 0,
        }
    };
    let end = usize::try_from(end)
        .ok()
        .filter(|&e| e <= bytes.len())
        .ok_or_else(|| io::Error::other("archive shorter than its first entry"))?;
    let mut out = bytes[..end].to_vec();
    out.extend_from_slice(&[0u8; 1024]);
    let tmp = path.with_extension("first.tmp");
    fs::write(&tmp, &out)?;
    fs::rename(&tmp, path)?;
    Ok(out.len() as u64)
}

/// The head of an upload that replaces each of `paths` (absolute) rather than merging into
/// it (`Sandbox::upload_replacing` on Docker): each path's parents as directories, then an
/// empty regular file at the path, which the engine's unpacking puts in place of whatever is
/// there (recursively removed, never followed). An error names a path that is not plain.
pub(crate) fn replacement_stubs(paths: &[&str]) -> Result<Vec<u8>, String> {
    let mut parents: Vec<String> = Vec::new();
    let mut stubs: Vec<String> = Vec::new();
    for path in paths {
        let parts: Vec<&str> = path
            .strip_prefix('/')
            .ok_or_else(|| format!("{path}: not an absolute path"))?
            .split('/')
            .filter(|p| !p.is_empty())
            .collect();
        if parts.is_empty() || parts.iter().any(|p| *p == "." || *p == "..") {
            return Err(format!("{path}: not a path to replace"));
        }
        for n in 1..parts.len() {
            let parent = format!("{}/", parts[..n].join("/"));
            if !parents.contains(&parent) {
                parents.push(parent);
            }
        }
        stubs.push(parts.join("/"));
    }
    let mut entries: Vec<TarEntry<'_>> = parents
        .iter()
        .map(|p| TarEntry {
            path: p,
            content: None,
            mode: 0o755,
        })
        .collect();
    entries.extend(stubs.iter().map(|p| TarEntry {
        path: p,
        content: Some(b""),
        mode: 0o600,
    }));
    files_to_tar(&entries).map_err(|e| format!("building the archive: {e}"))
}

/// One entry of an in-memory archive: a directory (`content = None`) or a file.
pub struct TarEntry<'a> {
    pub path: &'a str,
    pub content: Option<&'a [u8]>,
    pub mode: u32,
}

/// Build an uncompressed tar from in-memory entries.
pub fn files_to_tar(entries: &[TarEntry<'_>]) -> io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(entry.mode);
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        match entry.content {
            Some(bytes) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(bytes.len() as u64);
                builder.append_data(&mut header, entry.path, bytes)?;
            }
            None => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, entry.path, io::empty())?;
            }
        }
    }
    builder.into_inner()
}

/// Budget for an extraction.
#[derive(Debug, Clone, Copy)]
pub struct ExtractLimits {
    pub max_bytes: u64,
    pub max_entries: usize,
}

impl Default for ExtractLimits {
    fn default() -> Self {
        ExtractLimits {
            max_bytes: 64 * 1024 * 1024,
            max_entries: 10_000,
        }
    }
}

/// A file written by an extraction.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtractedFile {
    /// Path relative to the archive root ("" when the root itself is a file).
    pub relative: String,
    pub size: u64,
    pub sha256: String,
}

/// An entry that was not extracted, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedEntry {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExtractReport {
    pub files: Vec<ExtractedFile>,
    pub skipped: Vec<SkippedEntry>,
    /// The byte or entry budget ran out; later entries were dropped.
    pub truncated: bool,
}

/// Extract the archive in `tar_path` (as produced by the engine's archive endpoint) to `dest`.
///
/// The archive's first path component is its root (the basename of what was fetched). When the
/// root is a file it is written to `dest` itself; when it is a directory, its contents go under
/// `dest/`. Only regular files and directories are written.
pub fn extract_tar_file(
    tar_path: &Path,
    dest: &Path,
    limits: ExtractLimits,
) -> io::Result<ExtractReport> {
    let mut archive = tar::Archive::new(File::open(tar_path)?);
    let mut report = ExtractReport::default();
    let mut total: u64 = 0;
    let mut count = 0usize;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        count += 1;
        if count > limits.max_entries {
            report.truncated = true;
            break;
        }
        let Some(relative) = safe_relative(&raw) else {
            report.skipped.push(SkippedEntry {
                path: raw,
                reason: "unsafe path".into(),
            });
            continue;
        };
        let target = if relative.as_os_str().is_empty() {
            dest.to_path_buf()
        } else {
            dest.join(&relative)
        };
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            fs::create_dir_all(&target)?;
            continue;
        }
        if kind.is_hard_link() {
            // A second name for a file of this same archive: copy the file already written
            // (the engine picks which of the names is the "original", so refusing would drop
            // one of the agent's files at random). A link to anything else is skipped.
            let source = entry
                .link_name()?
                .and_then(|l| safe_relative(&l.to_string_lossy()))
                .and_then(|rel| {
                    let rel = rel.to_string_lossy().into_owned();
                    report.files.iter().find(|f| f.relative == rel).cloned()
                });
            match source {
                Some(source) if total.saturating_add(source.size) <= limits.max_bytes => {
                    let from = if source.relative.is_empty() {
                        dest.to_path_buf()
                    } else {
                        dest.join(&source.relative)
                    };
                    if fs::symlink_metadata(&from).is_ok_and(|m| m.is_file()) {
                        if let Some(parent) = target.parent() {
                            fs::create_dir_all(parent)?;
                        }
                        if fs::symlink_metadata(&target).is_ok() {
                            fs::remove_file(&target)?;
                        }
                        fs::copy(&from, &target)?;
                        total += source.size;
                        report.files.push(ExtractedFile {
                            relative: relative.to_string_lossy().into_owned(),
                            ..source
                        });
                        continue;
                    }
                }
                Some(_) => {
                    report.skipped.push(SkippedEntry {
                        path: raw,
                        reason: format!("over the {} byte budget", limits.max_bytes),
                    });
                    report.truncated = true;
                    continue;
                }
                None => {}
            }
        }
        if !(kind.is_file() || kind == tar::EntryType::Continuous) {
            let reason = if kind.is_symlink() {
                let link = entry
                    .link_name()?
                    .map(|l| l.display().to_string())
                    .unwrap_or_default();
                format!("symlink to {link} (not followed)")
            } else if kind.is_hard_link() {
                "hard link (not followed)".to_string()
            } else {
                format!("special file ({kind:?})")
            };
            report.skipped.push(SkippedEntry { path: raw, reason });
            continue;
        }
        let size = entry.header().size()?;
        if total.saturating_add(size) > limits.max_bytes {
            report.skipped.push(SkippedEntry {
                path: raw,
                reason: format!("over the {} byte budget", limits.max_bytes),
            });
            report.truncated = true;
            continue;
        }
        total += size;
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        // Never write through a symlink that might already sit at the target.
        if fs::symlink_metadata(&target).is_ok() {
            fs::remove_file(&target)?;
        }
        let mut out = File::create(&target)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        loop {
            let n = entry.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
            written += n as u64;
        }
        out.sync_all()?;
        report.files.push(ExtractedFile {
            relative: relative.to_string_lossy().into_owned(),
            size: written,
            sha256: crate::digest::hex(&hasher.finalize()),
        });
    }
    Ok(report)
}

/// The part of an archive path below its root component, if it is safe to join.
fn safe_relative(raw: &str) -> Option<PathBuf> {
    let mut parts = Path::new(raw)
        .components()
        .filter(|c| !matches!(c, Component::CurDir));
    match parts.next() {
        Some(Component::Normal(_)) => {}
        _ => return None,
    }
    let mut out = PathBuf::new();
    for part in parts {
        match part {
            Component::Normal(p) => out.push(p),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacement_stubs_are_parents_then_an_empty_file_per_path() {
        let bytes = replacement_stubs(&["/tests", "/logs/verifier"]).expect("stubs");
        let mut archive = tar::Archive::new(bytes.as_slice());
        let entries: Vec<(String, tar::EntryType, u64)> = archive
            .entries()
            .expect("entries")
            .map(|e| {
                let e = e.expect("entry");
                let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
                (
                    name,
                    e.header().entry_type(),
                    e.header().size().expect("size"),
                )
            })
            .collect();
        assert_eq!(
            entries,
            [
                ("logs/".to_string(), tar::EntryType::Directory, 0),
                ("tests".to_string(), tar::EntryType::Regular, 0),
                ("logs/verifier".to_string(), tar::EntryType::Regular, 0),
            ]
        );
        assert!(replacement_stubs(&["tests"]).is_err());
        assert!(replacement_stubs(&["/a/../b"]).is_err());
        assert!(replacement_stubs(&["/"]).is_err());
    }

    #[test]
    fn keeping_the_first_entry_keeps_it_whole_with_a_long_name() {
        let dir = tempfile::tempdir().expect("tmp");
        let long = format!("{}/f", "d".repeat(150));
        let bytes = files_to_tar(&[
            TarEntry {
                path: &long,
                content: Some(b"first"),
                mode: 0o644,
            },
            TarEntry {
                path: "second",
                content: Some(b"second"),
                mode: 0o644,
            },
        ])
        .expect("tar");
        let path = dir.path().join("a.tar");
        std::fs::write(&path, &bytes).expect("write");
        let size = keep_first_entry(&path).expect("cut");
        let kept = std::fs::read(&path).expect("read");
        assert_eq!(size, kept.len() as u64);
        let mut archive = tar::Archive::new(kept.as_slice());
        let entries: Vec<(String, Vec<u8>)> = archive
            .entries()
            .expect("entries")
            .map(|e| {
                let mut e = e.expect("entry");
                let mut body = Vec::new();
                e.read_to_end(&mut body).expect("body");
                (e.path().expect("path").display().to_string(), body)
            })
            .collect();
        assert_eq!(entries, [(long, b"first".to_vec())]);
    }

    fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> tempfile::NamedTempFile {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        let bytes = b.into_inner().expect("tar");
        let mut f = tempfile::NamedTempFile::new().expect("tmp");
        f.write_all(&bytes).expect("write");
        f
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        // set_path refuses `..`; write the raw name to simulate a hostile archive.
        let name = h.as_old_mut().name.as_mut();
        name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        b.append(&h, data).expect("append");
    }

    #[test]
    fn directory_root_goes_under_dest_and_files_are_hashed() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ar = archive(|b| {
            file(b, "agent/outcome.json", b"{}");
            file(b, "agent/sub/x.txt", b"hello");
        });
        let report =
            extract_tar_file(ar.path(), tmp.path(), ExtractLimits::default()).expect("extract");
        assert_eq!(
            fs::read(tmp.path().join("sub/x.txt")).expect("read"),
            b"hello"
        );
        let x = report
            .files
            .iter()
            .find(|f| f.relative == "sub/x.txt")
            .expect("listed");
        assert_eq!(
            x.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert!(!report.truncated);
    }

    #[test]
    fn file_root_is_written_to_dest_itself() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ar = archive(|b| file(b, "out.txt", b"abc"));
        let dest = tmp.path().join("copy");
        extract_tar_file(ar.path(), &dest, ExtractLimits::default()).expect("extract");
        assert_eq!(fs::read(&dest).expect("read"), b"abc");
    }

    #[test]
    fn dotdot_and_symlinks_are_skipped() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dest = tmp.path().join("d");
        let ar = archive(|b| {
            file(b, "agent/../../escape.txt", b"x");
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, "agent/link", "/etc/passwd")
                .expect("link");
        });
        let report = extract_tar_file(ar.path(), &dest, ExtractLimits::default()).expect("extract");
        assert!(!tmp.path().join("escape.txt").exists());
        assert!(!dest.join("link").exists());
        assert_eq!(report.skipped.len(), 2, "{report:?}");
        assert!(report.skipped[1].reason.contains("symlink to /etc/passwd"));
    }

    #[test]
    fn hard_links_inside_the_archive_are_copies_and_others_are_skipped() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dest = tmp.path().join("d");
        let outside = tmp.path().join("outside.txt");
        fs::write(&outside, b"host").expect("outside");
        let ar = archive(|b| {
            file(b, "dir/a.txt", b"same");
            for (name, target) in [
                ("dir/b.txt", "dir/a.txt".to_string()),
                ("dir/c.txt", outside.display().to_string()),
                ("dir/d.txt", "dir/../../outside.txt".to_string()),
            ] {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(tar::EntryType::Link);
                h.set_size(0);
                b.append_link(&mut h, name, &target).expect("link");
            }
        });
        let report = extract_tar_file(ar.path(), &dest, ExtractLimits::default()).expect("extract");
        assert_eq!(fs::read(dest.join("b.txt")).expect("b"), b"same");
        assert!(
            !fs::symlink_metadata(dest.join("b.txt"))
                .expect("meta")
                .file_type()
                .is_symlink()
        );
        assert!(!dest.join("c.txt").exists() && !dest.join("d.txt").exists());
        assert_eq!(report.files.len(), 2, "{report:?}");
        assert_eq!(report.skipped.len(), 2, "{report:?}");
        assert_eq!(fs::read(&outside).expect("outside"), b"host");
    }

    #[test]
    fn byte_budget_truncates() {
        let tmp = tempfile::tempdir().expect("tmp");
        let ar = archive(|b| {
            file(b, "r/a", &[1u8; 100]);
            file(b, "r/b", &[2u8; 100]);
        });
        let report = extract_tar_file(
            ar.path(),
            tmp.path(),
            ExtractLimits {
                max_bytes: 150,
                max_entries: 10,
            },
        )
        .expect("extract");
        assert!(report.truncated);
        assert_eq!(report.files.len(), 1);
        assert!(!tmp.path().join("b").exists());
    }
}
