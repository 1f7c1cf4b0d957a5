//! Per-trial control roots on the host: seeded from a template by copying, mounted read-write
//! into the agent's container only, then copied into the trial's `agent/control/` and emptied
//! before any verifier runs.
//!
//! The mounted directory is `<trial>/.control` (so two trials, including concurrent attempts of
//! one task, never share one); it is removed when the trial ends. Copies never follow
//! symlinks: a link the agent made is saved as a link, never as the file it points to.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Limits on what is saved from a control root.
pub(crate) const MAX_BYTES: u64 = 256 * 1024 * 1024;
pub(crate) const MAX_ENTRIES: u64 = 20_000;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ControlError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> ControlError + '_ {
    move |source| ControlError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What was copied.
#[derive(Debug, Default)]
pub(crate) struct CopyReport {
    pub files: u64,
    pub bytes: u64,
    pub skipped: Vec<String>,
}

/// Create `dir` fresh (absolute path returned) and copy `template` into it. Everything is made
/// writable for any user, so an agent running as a non-root user can use it.
pub(crate) fn prepare(dir: &Path, template: Option<&Path>) -> Result<PathBuf, ControlError> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io_at(dir))?;
    }
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    let dir = dir.canonicalize().map_err(io_at(dir))?;
    if let Some(template) = template {
        let mut report = CopyReport::default();
        copy_tree(template, &dir, &mut report, u64::MAX, u64::MAX)?;
    }
    open_up(&dir)?;
    Ok(dir)
}

fn open_up(path: &Path) -> Result<(), ControlError> {
    let meta = std::fs::symlink_metadata(path).map_err(io_at(path))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mode = meta.permissions().mode();
    let wanted = if meta.is_dir() {
        mode | 0o777
    } else {
        mode | 0o666
    };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(wanted)).map_err(io_at(path))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io_at(path))? {
            let entry = entry.map_err(io_at(path))?;
            open_up(&entry.path())?;
        }
    }
    Ok(())
}

/// Copy what the agent left in `from` to `to` (created), within the limits.
pub(crate) fn save(from: &Path, to: &Path) -> Result<CopyReport, ControlError> {
    std::fs::create_dir_all(to).map_err(io_at(to))?;
    let mut report = CopyReport::default();
    copy_tree(from, to, &mut report, MAX_BYTES, MAX_ENTRIES)?;
    Ok(report)
}

/// Remove everything inside `dir`, keeping `dir` itself (it may still be a mount source).
pub(crate) fn empty(dir: &Path) -> Result<(), ControlError> {
    for entry in std::fs::read_dir(dir).map_err(io_at(dir))? {
        let entry = entry.map_err(io_at(dir))?;
        let path = entry.path();
        let is_dir = entry.file_type().map_err(io_at(&path))?.is_dir();
        if is_dir {
            std::fs::remove_dir_all(&path).map_err(io_at(&path))?;
        } else {
            std::fs::remove_file(&path).map_err(io_at(&path))?;
        }
    }
    Ok(())
}

fn copy_tree(
    from: &Path,
    to: &Path,
    report: &mut CopyReport,
    max_bytes: u64,
    max_entries: u64,
) -> Result<(), ControlError> {
    let mut entries: Vec<_> = std::fs::read_dir(from)
        .map_err(io_at(from))?
        .collect::<Result<_, _>>()
        .map_err(io_at(from))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let src = entry.path();
        let dest = to.join(entry.file_name());
        let shown = src.display().to_string();
        let meta = std::fs::symlink_metadata(&src).map_err(io_at(&src))?;
        let kind = meta.file_type();
        if report.files >= max_entries {
            report
                .skipped
                .push(format!("{shown}: more than {max_entries} entries"));
            continue;
        }
        if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(io_at(&src))?;
            std::os::unix::fs::symlink(&target, &dest).map_err(io_at(&dest))?;
            report.files += 1;
        } else if kind.is_dir() {
            std::fs::create_dir_all(&dest).map_err(io_at(&dest))?;
            std::fs::set_permissions(&dest, meta.permissions()).map_err(io_at(&dest))?;
            copy_tree(&src, &dest, report, max_bytes, max_entries)?;
        } else if kind.is_file() {
            if report.bytes.saturating_add(meta.len()) > max_bytes {
                report
                    .skipped
                    .push(format!("{shown}: over the {max_bytes}-byte limit"));
                continue;
            }
            std::fs::copy(&src, &dest).map_err(io_at(&dest))?;
            report.files += 1;
            report.bytes += meta.len();
        } else {
            report.skipped.push(format!("{shown}: not a regular file"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_is_copied_and_saved_copies_never_follow_links() {
        let tmp = tempfile::tempdir().expect("tmp");
        let template = tmp.path().join("template");
        std::fs::create_dir_all(template.join("sub")).expect("mkdir");
        std::fs::write(template.join("sub/seed.txt"), "seed").expect("write");
        let root = prepare(&tmp.path().join("trial/.control"), Some(&template)).expect("prepare");
        assert_eq!(
            std::fs::read_to_string(root.join("sub/seed.txt")).expect("seed"),
            "seed"
        );
        std::fs::write(root.join("sub/seed.txt"), "changed").expect("write");
        assert_eq!(
            std::fs::read_to_string(template.join("sub/seed.txt")).expect("template"),
            "seed",
            "the template is copied, not shared"
        );
        std::os::unix::fs::symlink("/etc/hostname", root.join("link")).expect("link");
        let saved = tmp.path().join("trial/agent/control");
        let report = save(&root, &saved).expect("save");
        assert_eq!(report.files, 2);
        assert!(
            std::fs::symlink_metadata(saved.join("link"))
                .expect("link")
                .file_type()
                .is_symlink()
        );
        empty(&root).expect("empty");
        assert_eq!(std::fs::read_dir(&root).expect("dir").count(), 0);
        assert!(saved.join("sub/seed.txt").is_file());
    }
}
