//! The content of the agent's changes (`agent/changes.tar`): written by the collect phase from
//! the subtrees the change set reads anyway, so a trial can be regraded after its frozen
//! filesystem is gone (SPEC §13).
//!
//! The archive holds every changed subtree with names relative to `/` (so it unpacks at `/`
//! of the original image), within a byte cap. It is written to a temp file and renamed into
//! place once complete: a trial either has the whole archive or none. Anything that keeps it
//! from being complete (a subtree over the cap, unreadable, or past the change set's read
//! limits) is the reason the record gives for `regradable: false`.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::history::ChangeContent;
use crate::verifier::{at_or_under, left_out};

/// The archive, relative to the trial dir.
pub(crate) const CHANGES_TAR: &str = "agent/changes.tar";
/// Default `change_content_cap_mb`.
pub(crate) const DEFAULT_CONTENT_CAP_MB: u64 = 256;
/// Bytes of tar per entry header (one block; long names add more, counted as they come).
const BLOCK: u64 = 512;

/// The directory holding `root` (`/` for a top-level path).
fn parent_of(root: &str) -> &str {
    match root.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &root[..i],
    }
}

/// `name` (as the backend packs a subtree: relative to the subtree's parent) as a path
/// relative to `/`, normalised; `None` for a name that climbs out (`..`).
fn rerooted(parent: &str, name: &str) -> Option<String> {
    let joined = if name.starts_with('/') {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    };
    let mut parts = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// Builds `agent/changes.tar` while the change set reads the agent's subtrees.
pub(crate) struct ContentWriter {
    dest: PathBuf,
    cap: u64,
    out: Option<(tempfile::TempPath, tar::Builder<BufWriter<File>>)>,
    bytes: u64,
    roots: Vec<String>,
    why_not: Option<String>,
}

impl ContentWriter {
    /// A writer of `<trial dir>/agent/changes.tar` holding at most `cap` bytes (0: keep none).
    pub(crate) fn new(trial_dir: &Path, cap: u64) -> Self {
        let dest = trial_dir.join(CHANGES_TAR);
        let mut writer = ContentWriter {
            dest,
            cap,
            out: None,
            bytes: 0,
            roots: Vec::new(),
            why_not: None,
        };
        if cap == 0 {
            writer.why_not = Some(
                "change_content_cap_mb is 0: the content of the agent's changes was not kept"
                    .to_string(),
            );
            return writer;
        }
        let dir = writer.dest.parent().unwrap_or(trial_dir).to_path_buf();
        match tempfile::NamedTempFile::new_in(&dir) {
            Ok(tmp) => {
                let (file, path) = tmp.into_parts();
                writer.out = Some((path, tar::Builder::new(BufWriter::new(file))));
            }
            Err(e) => writer.refuse(format!(
                "the change set's content could not be written: {}: {e}",
                dir.display()
            )),
        }
        writer
    }

    /// Stop keeping content: the trial cannot be regraded from its change set, for `why`
    /// (the first reason given wins).
    pub(crate) fn refuse(&mut self, why: String) {
        if self.why_not.is_none() {
            self.why_not = Some(why);
        }
        self.out = None;
    }

    /// A changed subtree that could not be read (`why`): the content is incomplete.
    pub(crate) fn missing(&mut self, root: &str, why: &str) {
        self.refuse(format!("the changed path {root} could not be kept: {why}"));
    }

    /// Add the subtree `root`, fetched as the archive at `archive` (`bytes` long).
    pub(crate) fn add(&mut self, root: &str, archive: &Path, bytes: u64) {
        if self.out.is_none() {
            return;
        }
        if self.bytes.saturating_add(bytes) > self.cap {
            self.refuse(format!(
                "the agent's changed files exceed the cap of {} MiB (change_content_cap_mb)",
                self.cap / (1024 * 1024)
            ));
            return;
        }
        let Some((_, builder)) = self.out.as_mut() else {
            return;
        };
        match append_rerooted(builder, root, archive) {
            Ok(added) => {
                self.bytes = self.bytes.saturating_add(added);
                self.roots.push(root.to_string());
            }
            Err(e) => self.missing(root, &e.to_string()),
        }
    }

    /// Finish the archive (renamed into place) and describe it for the record.
    pub(crate) fn finish(mut self) -> ChangeContent {
        let Some((tmp, builder)) = self.out.take() else {
            let why = self
                .why_not
                .take()
                .unwrap_or_else(|| "the content of the agent's changes was not kept".to_string());
            return ChangeContent::not_kept(self.cap, why);
        };
        let done = builder
            .into_inner()
            .and_then(|w| w.into_inner().map_err(|e| e.into_error()))
            .and_then(|file| file.sync_all().map(|()| file));
        let persisted = done.and_then(|file| {
            let size = file.metadata()?.len();
            tmp.persist(&self.dest).map_err(|e| e.error)?;
            Ok(size)
        });
        match persisted {
            Ok(size) => ChangeContent {
                regradable: true,
                file: Some(CHANGES_TAR.to_string()),
                bytes: size,
                cap_bytes: self.cap,
                roots: self.roots,
                reason: None,
            },
            Err(e) => ChangeContent::not_kept(
                self.cap,
                format!(
                    "the change set's content could not be written: {}: {e}",
                    self.dest.display()
                ),
            ),
        }
    }
}

/// Copy every entry of the subtree archive into `out`, named relative to `/`; hard links are
/// re-rooted the same way. Gives the bytes added (headers and padded content).
fn append_rerooted<W: Write>(
    out: &mut tar::Builder<W>,
    root: &str,
    archive: &Path,
) -> io::Result<u64> {
    let parent = parent_of(root);
    let mut added = 0;
    let mut source = tar::Archive::new(File::open(archive)?);
    for entry in source.entries()? {
        let mut entry = entry?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let Some(path) = rerooted(parent, &name) else {
            continue;
        };
        if path.is_empty() {
            continue;
        }
        let mut header = entry.header().clone();
        let kind = header.entry_type();
        let size = header.size().unwrap_or(0);
        added += BLOCK + size.div_ceil(BLOCK) * BLOCK;
        if kind.is_hard_link() || kind.is_symlink() {
            let target = entry
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned())
                .unwrap_or_default();
            let target = if kind.is_hard_link() {
                match rerooted(parent, &target) {
                    Some(t) => t,
                    None => continue,
                }
            } else {
                target
            };
            header.set_size(0);
            out.append_link(&mut header, &path, &target)?;
        } else {
            out.append_data(&mut header, &path, &mut entry)?;
        }
    }
    Ok(added)
}

/// The change set's archive without the subtrees `clean` mode leaves out: every root at,
/// under or above a finding (as `verifier::prepare_clean` does). Gives the archive's bytes
/// and the roots left out.
pub(crate) fn without_findings(
    archive: &Path,
    roots: &[String],
    findings: &[String],
) -> io::Result<(Vec<u8>, Vec<String>)> {
    let left: Vec<String> = roots
        .iter()
        .filter(|root| left_out(root, findings))
        .cloned()
        .collect();
    if left.is_empty() {
        let mut bytes = Vec::new();
        File::open(archive)?.read_to_end(&mut bytes)?;
        return Ok((bytes, left));
    }
    let mut out = tar::Builder::new(Vec::new());
    let mut source = tar::Archive::new(File::open(archive)?);
    for entry in source.entries()? {
        let mut entry = entry?;
        let name = format!("/{}", String::from_utf8_lossy(&entry.path_bytes()));
        let name = name.trim_end_matches('/');
        if left.iter().any(|r| at_or_under(name, r)) {
            continue;
        }
        let mut header = entry.header().clone();
        let path = name.trim_start_matches('/').to_string();
        let kind = header.entry_type();
        if kind.is_hard_link() || kind.is_symlink() {
            let target = entry
                .link_name_bytes()
                .map(|l| String::from_utf8_lossy(&l).into_owned())
                .unwrap_or_default();
            out.append_link(&mut header, &path, &target)?;
        } else {
            out.append_data(&mut header, &path, &mut entry)?;
        }
    }
    Ok((out.into_inner()?, left))
}

/// After the trial's files were scrubbed of secrets (`scrubbed`: the files changed): an archive
/// in which a secret was replaced no longer unpacks, so it is removed and the record says why.
pub(crate) fn after_scrub(
    trial_dir: &std::path::Path,
    content: &mut ChangeContent,
    scrubbed: &[String],
) {
    let Some(file) = &content.file else {
        return;
    };
    let archive = trial_dir.join(file);
    if scrubbed.iter().any(|s| std::path::Path::new(s) == archive) {
        discard_content(
            trial_dir,
            content,
            "the agent's changed files held a secret value (scrubbed), so their content was not kept",
        );
    }
}

/// The collect phase decided not to verify the agent's filesystem: the content kept so far is
/// removed and the record says why the trial cannot be regraded.
pub(crate) fn discard_content(trial_dir: &std::path::Path, content: &mut ChangeContent, why: &str) {
    if let Some(file) = content.file.take() {
        let _ = std::fs::remove_file(trial_dir.join(file));
    }
    *content = ChangeContent::not_kept(content.cap_bytes, why.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A subtree archive as the backend packs `root` (names relative to its parent).
    fn subtree(dir: &Path, name: &str, files: &[(&str, &[u8])]) -> PathBuf {
        let path = dir.join(format!("{name}.tar"));
        let mut b = tar::Builder::new(File::create(&path).expect("create"));
        for (file, body) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(body.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(if file.ends_with('/') {
                tar::EntryType::Directory
            } else {
                tar::EntryType::Regular
            });
            b.append_data(&mut h, file, *body).expect("append");
        }
        b.finish().expect("finish");
        path
    }

    /// A temp dir holding an empty trial dir (`trial/agent/` made) and the subtree archive of
    /// `/app/out.txt` (`hi`): (temp dir, trial dir, archive).
    fn trial_with_out_txt() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().expect("tmp");
        let trial = tmp.path().join("trial");
        std::fs::create_dir_all(trial.join("agent")).expect("dir");
        let a = subtree(tmp.path(), "a", &[("out.txt", b"hi\n")]);
        (tmp, trial, a)
    }

    /// What a writer with a 1 MiB cap keeps of `subtrees` (changed root, its archive), each
    /// 2 KiB unpacked.
    fn keep(trial: &Path, subtrees: &[(&str, &PathBuf)]) -> ChangeContent {
        let mut w = ContentWriter::new(trial, 1024 * 1024);
        for (root, archive) in subtrees {
            w.add(root, archive, 2048);
        }
        w.finish()
    }

    /// How many entries `agent/` of `trial` holds.
    fn agent_entries(trial: &Path) -> usize {
        std::fs::read_dir(trial.join("agent")).expect("ls").count()
    }

    fn names(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut a = tar::Archive::new(bytes);
        a.entries()
            .expect("entries")
            .map(|e| {
                let mut e = e.expect("entry");
                let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
                let mut body = Vec::new();
                e.read_to_end(&mut body).expect("read");
                (name, body)
            })
            .collect()
    }

    #[test]
    fn subtrees_are_rerooted_at_slash_and_renamed_into_place() {
        let (tmp, trial, a) = trial_with_out_txt();
        let b = subtree(
            tmp.path(),
            "b",
            &[("new/", b""), ("new/x.py", b"print(1)\n")],
        );
        let content = keep(&trial, &[("/app/out.txt", &a), ("/usr/lib/new", &b)]);
        assert!(content.regradable, "{content:?}");
        assert_eq!(content.file.as_deref(), Some(CHANGES_TAR));
        assert_eq!(content.roots, ["/app/out.txt", "/usr/lib/new"]);
        let bytes = std::fs::read(trial.join(CHANGES_TAR)).expect("archive");
        assert_eq!(content.bytes, bytes.len() as u64);
        let got = names(&bytes);
        let paths: Vec<&str> = got.iter().map(|(n, _)| n.trim_end_matches('/')).collect();
        assert_eq!(paths, ["app/out.txt", "usr/lib/new", "usr/lib/new/x.py"]);
        assert_eq!(got[0].1, b"hi\n");
        // Only the archive is left in agent/ (no temp file).
        assert_eq!(agent_entries(&trial), 1);
    }

    #[test]
    fn over_the_cap_or_a_missing_subtree_keeps_nothing_and_says_why() {
        let (_tmp, trial, a) = trial_with_out_txt();
        let mut w = ContentWriter::new(&trial, 1024 * 1024);
        w.add("/app/out.txt", &a, 2 * 1024 * 1024);
        let content = w.finish();
        assert!(!content.regradable);
        assert!(
            content
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("exceed the cap of 1 MiB")),
            "{content:?}"
        );
        assert!(!trial.join(CHANGES_TAR).exists());
        assert_eq!(agent_entries(&trial), 0);

        let mut w = ContentWriter::new(&trial, 1024 * 1024);
        w.add("/app/out.txt", &a, 2048);
        w.missing("/app/big", "larger than the change set's read limit");
        let content = w.finish();
        assert!(!content.regradable);
        assert_eq!(
            content.reason.as_deref(),
            Some(
                "the changed path /app/big could not be kept: larger than the change set's read limit"
            )
        );
        assert!(!trial.join(CHANGES_TAR).exists());

        let content = ContentWriter::new(&trial, 0).finish();
        assert!(!content.regradable);
        assert!(
            content
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("is 0"))
        );
    }

    #[test]
    fn findings_leave_their_whole_subtree_out() {
        let (tmp, trial, a) = trial_with_out_txt();
        let b = subtree(
            tmp.path(),
            "b",
            &[
                ("evil/", b""),
                ("evil/__init__.py", b"x"),
                ("evil/ok.py", b"y"),
            ],
        );
        let content = keep(&trial, &[("/app/out.txt", &a), ("/usr/lib/evil", &b)]);
        let (bytes, left_out) = without_findings(
            &trial.join(CHANGES_TAR),
            &content.roots,
            &["/usr/lib/evil/__init__.py".to_string()],
        )
        .expect("filter");
        assert_eq!(left_out, ["/usr/lib/evil"]);
        let paths: Vec<String> = names(&bytes).into_iter().map(|(n, _)| n).collect();
        assert_eq!(paths, ["app/out.txt"]);
        let (all, none) =
            without_findings(&trial.join(CHANGES_TAR), &content.roots, &[]).expect("all");
        assert!(none.is_empty());
        assert_eq!(names(&all).len(), 4);
    }

    #[test]
    fn names_that_climb_out_are_dropped() {
        assert_eq!(rerooted("/app", "out.txt").as_deref(), Some("app/out.txt"));
        assert_eq!(rerooted("/", "etc/x").as_deref(), Some("etc/x"));
        assert_eq!(rerooted("/app", "../etc/passwd"), None);
    }
}
