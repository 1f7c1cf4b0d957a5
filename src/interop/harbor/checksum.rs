//! Harbor's `task_checksum`: `dirhash(task_dir, "sha256")` (the `dirhash` package's protocol
//! with entry properties name and data) over the task dir, `.harborignore` files left out.
//!
//! Each file is `sha256(content)`; each directory is `sha256` of its entries' descriptors,
//! sorted and joined by `\0\0`, a descriptor being its sorted properties (`data:<file hash>` or
//! `dirhash:<dir hash>`, and `name:<name>`) joined by `\0`. Symlinks are followed; directories
//! with nothing in them are left out. A task with `.harborignore` rules (whose gitignore
//! patterns Harbor applies inside `tests/` and `solution/`) is not computed here: `None`, and
//! the export keeps arbiter's own checksum.

use std::path::Path;

/// Symlinks followed this deep are taken for a cycle (Harbor refuses those too).
const MAX_DEPTH: usize = 64;

pub(crate) fn task_checksum(dir: &Path) -> Option<String> {
    dir_hash(dir, 0).ok().flatten()
}

fn dir_hash(dir: &Path, depth: usize) -> std::io::Result<Option<String>> {
    if depth > MAX_DEPTH {
        return Err(std::io::Error::other("too deep"));
    }
    let mut descriptors = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| std::io::Error::other("a name that is not UTF-8"))?;
        if name == ".harborignore" {
            return Err(std::io::Error::other("ignore rules"));
        }
        let path = entry.path();
        // Followed, as dirhash follows links.
        let meta = std::fs::metadata(&path)?;
        let (kind, hash) = if meta.is_dir() {
            match dir_hash(&path, depth + 1)? {
                Some(h) => ("dirhash", h),
                None => continue,
            }
        } else {
            ("data", crate::digest::sha256_hex(&std::fs::read(&path)?))
        };
        let mut props = [format!("{kind}:{hash}"), format!("name:{name}")];
        props.sort();
        descriptors.push(props.join("\0"));
    }
    if descriptors.is_empty() {
        return Ok(None);
    }
    descriptors.sort();
    Ok(Some(crate::digest::sha256_hex(
        descriptors.join("\0\0").as_bytes(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_dirs_do_not_count_and_ignore_rules_are_not_guessed() {
        let tmp = tempfile::tempdir().expect("tmp");
        assert_eq!(task_checksum(tmp.path()), None, "nothing to hash");
        std::fs::write(tmp.path().join("a.txt"), "a").expect("write");
        let one = task_checksum(tmp.path()).expect("a hash");
        std::fs::create_dir_all(tmp.path().join("empty/inner")).expect("mkdir");
        assert_eq!(task_checksum(tmp.path()).as_deref(), Some(one.as_str()));
        std::fs::write(tmp.path().join("empty/inner/b"), "b").expect("write");
        assert_ne!(task_checksum(tmp.path()).as_deref(), Some(one.as_str()));
        std::fs::write(tmp.path().join(".harborignore"), "*.log\n").expect("write");
        assert_eq!(task_checksum(tmp.path()), None);
    }

    #[test]
    fn one_file_hashes_as_dirhash_does() {
        // dirhash: sha256("data:" + sha256(b"a") + "\0name:a.txt")
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(tmp.path().join("a.txt"), "a").expect("write");
        let file = crate::digest::sha256_hex(b"a");
        let want = crate::digest::sha256_hex(format!("data:{file}\0name:a.txt").as_bytes());
        assert_eq!(task_checksum(tmp.path()), Some(want));
    }
}
