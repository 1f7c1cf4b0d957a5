//! Last line of defence for secrets (SPEC §3): any resolved secret value that reached a file
//! under the trial directory (an agent that echoed its key, a tool that saved its config in the
//! control root) is replaced by `***`, in file contents and in file names. Secrets are also
//! registered process-wide so that the log writer ([`ScrubbingWriter`]) masks them at every
//! `RUST_LOG` level (the engine client logs request bodies, exec env included, at debug and trace).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// Every secret value any trial of this process has resolved, in the forms a log line may
/// carry them (raw, JSON-escaped, Debug-escaped).
static REGISTERED: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Remember `secrets` so that the log writer masks them from now on.
pub(crate) fn register(secrets: &[String]) {
    let Ok(mut all) = REGISTERED.write() else {
        return;
    };
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        let json = serde_json::to_string(secret).unwrap_or_default();
        let debug = format!("{secret:?}");
        for form in [
            secret.clone(),
            json.trim_matches('"').to_string(),
            debug.trim_matches('"').to_string(),
        ] {
            if !form.is_empty() && !all.contains(&form) {
                all.push(form);
            }
        }
    }
    // Longest first, so that a secret containing another is masked whole.
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// Whether `text` holds any registered secret (so it must not be passed where the host can
/// see it, e.g. a path in an engine request that the engine puts in a helper's argv).
pub(crate) fn mentions_secret(text: &str) -> bool {
    REGISTERED
        .read()
        .map(|all| all.iter().any(|s| text.contains(s.as_str())))
        .unwrap_or(false)
}

/// A writer that masks every registered secret in what passes through it. Each tracing event
/// reaches it as one buffer, so a secret is never split across two writes.
pub(crate) struct ScrubbingWriter<W>(pub W);

impl<W: Write> Write for ScrubbingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let secrets = REGISTERED.read().map(|s| s.clone()).unwrap_or_default();
        if secrets.is_empty() {
            return self.0.write(buf);
        }
        let mut bytes = buf.to_vec();
        scrub_bytes(&mut bytes, &secrets);
        self.0.write_all(&bytes)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

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

/// Scrub every regular file under `dir` (symlinks are not followed), and rename every file or
/// directory whose name holds a secret. Returns the paths changed (as they are now named).
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
            let mut path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let mut name_bytes = name.as_bytes().to_vec();
            if scrub_bytes(&mut name_bytes, secrets) {
                let renamed = free_name(&current, &String::from_utf8_lossy(&name_bytes));
                match std::fs::rename(&path, &renamed) {
                    Ok(()) => {
                        changed.push(renamed.display().to_string());
                        path = renamed;
                    }
                    Err(e) => {
                        tracing::warn!("renaming a file whose name holds a secret: {e}");
                        let _ =
                            std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
                        continue;
                    }
                }
            }
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
    changed.dedup();
    changed
}

/// `dir/name`, or `dir/name.N` for the first N not taken.
fn free_name(dir: &Path, name: &str) -> PathBuf {
    let mut candidate = dir.join(name);
    let mut n = 1;
    while std::fs::symlink_metadata(&candidate).is_ok() {
        candidate = dir.join(format!("{name}.{n}"));
        n += 1;
    }
    candidate
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

    #[test]
    fn names_holding_a_secret_are_renamed() {
        let tmp = tempfile::tempdir().expect("tmp");
        let secret = "sk-name-secret".to_string();
        std::fs::create_dir_all(tmp.path().join("d-sk-name-secret/sub")).expect("mkdir");
        std::fs::write(
            tmp.path().join("d-sk-name-secret/sub/sk-name-secret.txt"),
            "x",
        )
        .expect("write");
        std::fs::write(tmp.path().join("***.txt"), "taken").expect("write");
        std::fs::write(tmp.path().join("sk-name-secret.txt"), "y").expect("write");
        scrub_dir(tmp.path(), std::slice::from_ref(&secret));
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("d-***/sub/***.txt")).expect("read"),
            "x"
        );
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("***.txt")).expect("read"),
            "taken"
        );
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("***.txt.1")).expect("read"),
            "y"
        );
    }

    #[test]
    fn the_log_writer_masks_registered_secrets_in_every_form() {
        register(&["tok\"en-log-secret".to_string()]);
        let mut out = ScrubbingWriter(Vec::new());
        out.write_all(b"raw tok\"en-log-secret json tok\\\"en-log-secret end")
            .expect("write");
        assert_eq!(String::from_utf8_lossy(&out.0), "raw *** json *** end");
    }
}
