//! Last line of defence for secrets (SPEC §3): any resolved secret value that reached a file
//! under the trial directory (an agent that echoed its key, a tool that saved its config in the
//! control root) is replaced by `***`.

use std::path::Path;

/// Files larger than this are not rewritten (and a warning names them).
const MAX_SCRUB_BYTES: u64 = 512 * 1024 * 1024;

/// Replace every occurrence of each secret in `bytes`; returns whether anything changed.
pub(crate) fn scrub_bytes(bytes: &mut Vec<u8>, secrets: &[String]) -> bool {
    let mut changed = false;
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let needle = secret.as_bytes();
        if !contains(bytes, needle) {
            continue;
        }
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i..].starts_with(needle) {
                out.extend_from_slice(b"***");
                i += needle.len();
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        *bytes = out;
        changed = true;
    }
    changed
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.len() <= haystack.len() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Scrub every regular file under `dir` (symlinks are not followed). Returns the files changed.
pub(crate) fn scrub_dir(dir: &Path, secrets: &[String]) -> Vec<String> {
    let mut changed = Vec::new();
    if secrets.is_empty() {
        return changed;
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                if meta.len() > MAX_SCRUB_BYTES {
                    tracing::warn!(path = %path.display(), "too large to scrub for secrets");
                    continue;
                }
                let Ok(mut bytes) = std::fs::read(&path) else {
                    continue;
                };
                if scrub_bytes(&mut bytes, secrets) {
                    match std::fs::write(&path, &bytes) {
                        Ok(()) => changed.push(path.display().to_string()),
                        Err(e) => tracing::warn!(path = %path.display(), "scrubbing a secret: {e}"),
                    }
                }
            }
        }
    }
    changed.sort();
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_every_occurrence() {
        let mut bytes = b"key=sk-123 and sk-123; sk-12".to_vec();
        assert!(scrub_bytes(&mut bytes, &["sk-123".to_string()]));
        assert_eq!(bytes, b"key=*** and ***; sk-12");
        assert!(!scrub_bytes(&mut bytes, &["absent".to_string()]));
    }

    #[test]
    fn scrubs_files_below_a_directory() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(tmp.path().join("a/b")).expect("mkdir");
        std::fs::write(tmp.path().join("a/b/log"), "token sk-secret-1").expect("write");
        std::fs::write(tmp.path().join("clean"), "nothing").expect("write");
        let changed = scrub_dir(tmp.path(), &["sk-secret-1".to_string()]);
        assert_eq!(changed.len(), 1);
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("a/b/log")).expect("read"),
            "token ***"
        );
    }
}
