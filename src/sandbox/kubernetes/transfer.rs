//! Files in and out of a pod as tar streams over exec, through the toolbox's `tar`.
//!
//! Exec streams can truncate silently (stdin above ~40 MiB arriving as 0 bytes has been seen
//! elsewhere), so nothing is trusted unchecked: an upload goes into a root-only scratch file
//! in chunks of at most [`CHUNK`], each chunk's arrival checked by the size of the file on the
//! far side, and the whole is unpacked only once its size and sha256 there match what was
//! sent; a download's archive of up to 64 MiB is kept in the pod before it is sent, and what
//! arrived is checked against that copy (size and sha256) and completed from it when a stream
//! came short; a larger one is counted in the pod as it streams (`kept.rs`). Every exec has a
//! deadline.

use std::path::Path;
use std::time::Duration;

use super::KubernetesSandbox;
use super::error::KubeError;
use super::exec::{RawEnd, Sink};
use super::kept::{KEEP_FILE_MAX, Keep};
use super::names::SCRATCH;
use super::proof::{self, Answer, Proofs, no_network_proof};
use crate::digest::sha256_hex;
use crate::sandbox::toolbox::toolbox_argv;
use crate::sandbox::{Fetched, SandboxError};

/// Bytes of stdin per exec, at most.
pub(super) const CHUNK: usize = 8 * 1024 * 1024;
/// Deadline of one transfer exec.
const TRANSFER_DEADLINE: Duration = Duration::from_secs(600);
/// Exit code of the download script when the path does not exist.
const NOT_FOUND: i64 = 44;

/// Exit code of the upload script when the paths to replace could not be removed.
const NOT_REMOVED: i64 = 95;

/// Upload script: `$1` mode (`new`, `append`: stdin into the file, then its size checked;
/// `one`: both, then checked and unpacked; `finish`: checked and unpacked), `$2` file, `$3`
/// its size after this step, `$4` sha256 of the whole, `$5` the directory to unpack into,
/// then the paths removed right before unpacking (`upload_replacing`: one exec, not two).
const UPLOAD: &str = r#"B=/.arbiter/toolbox/busybox; m=$1 f=$2 n=$3 h=$4 d=$5; shift 5
case $m in new|one) $B cat > "$f" || exit 97;; append) $B cat >> "$f" || exit 97;; esac
got=$($B wc -c < "$f"); got=$((got+0))
[ "$got" = "$n" ] || { $B rm -f "$f"; echo "the pod received $got bytes of $n" >&2; exit 98; }
case $m in new|append) exit 0;; esac
sum=$($B sha256sum "$f"); sum=${sum%% *}
[ "$sum" = "$h" ] || { $B rm -f "$f"; echo "the pod received sha256 $sum, sent $h" >&2; exit 98; }
[ -d "$d" ] || { $B rm -f "$f"; echo "$d is not a directory" >&2; exit 96; }
[ $# = 0 ] || $B rm -rf -- "$@" || { $B rm -f "$f"; echo "removing $* failed" >&2; exit 95; }
$B tar -x --numeric-owner -f "$f" -C "$d"; r=$?; $B rm -f "$f"; exit $r"#;

/// Download script: `$1` the path, `$2` extra tar flags (`--no-recursion` or empty), `$3`
/// the most bytes the archive may have plus one (more is not written: the pod keeps the
/// archive before sending it, `kept.rs`). The archive goes to stdout. The root is its
/// entries but the kernel's filesystems and the harness's own (busybox tar has no
/// `--one-file-system`: `/proc` would be read whole).
const DOWNLOAD: &str = r#"B=/.arbiter/toolbox/busybox; p=$1 f=$2 max=$3
[ -e "$p" ] || [ -L "$p" ] || exit 44
case $p in /) dir=/; set --
    for e in /* /.[!.]* /..?*; do
      [ -e "$e" ] || [ -L "$e" ] || continue
      case $e in /proc|/sys|/dev|/.arbiter) continue;; esac
      set -- "$@" ".$e"
    done;;
  *) p=${p%/}; dir=${p%/*}; name=${p##*/}; [ -n "$dir" ] || dir=/
    case $name in -*) name=./$name;; esac
    set -- "$name";;
esac
set -o pipefail
$B tar -c -f - -C "$dir" $f "$@" | $B head -c "$max""#;

impl KubernetesSandbox {
    /// [`Sandbox::upload`](crate::sandbox::Sandbox::upload), and with `replacing`
    /// [`Sandbox::upload_replacing`](crate::sandbox::Sandbox::upload_replacing): those paths
    /// removed (as root, by the toolbox) in the exec that unpacks, once the archive arrived
    /// whole.
    pub(super) async fn upload_tar(
        &self,
        pod: &str,
        dest: &str,
        tar: &[u8],
        replacing: &[&str],
    ) -> Result<(), SandboxError> {
        let file = format!("{SCRATCH}/upload-{}.tar", super::names::random_suffix());
        let total = tar.len().to_string();
        let sum = sha256_hex(tar);
        let step = |mode: &str, size: usize| {
            let size = size.to_string();
            let mut args = vec![
                "-c",
                UPLOAD,
                "arbiter-upload",
                mode,
                &file,
                &size,
                &sum,
                dest,
            ];
            if matches!(mode, "one" | "finish") {
                args.extend_from_slice(replacing);
            }
            toolbox_argv("sh", &args)
        };
        if tar.len() <= CHUNK {
            let argv = step("one", tar.len());
            // The pod's first exec since its start: the proofs its start left ride on it
            // (proof.rs), run before anything is unpacked.
            if let Some((proofs, cell)) = self.pending_proof(pod).await {
                let mut uploaded = false;
                cell.get_or_try_init(|| async {
                    if self.upload_proving(pod, &argv, tar, proofs).await? {
                        uploaded = true;
                        return Ok(());
                    }
                    // Not handed over yet, or no answer to trust: the proofs alone, asked
                    // again until they hold (or fail), then the upload.
                    self.prove_start(pod, proofs).await
                })
                .await?;
                if uploaded {
                    return Ok(());
                }
            }
            return self.upload_step(pod, &argv, Some(tar)).await;
        }
        self.ensure_proven(pod).await?;
        let mut sent = 0usize;
        for (i, chunk) in tar.chunks(CHUNK).enumerate() {
            sent += chunk.len();
            let mode = if i == 0 { "new" } else { "append" };
            self.upload_step(pod, &step(mode, sent), Some(chunk))
                .await?;
        }
        debug_assert_eq!(sent.to_string(), total);
        self.upload_step(pod, &step("finish", tar.len()), None)
            .await
    }

    /// One upload step (`argv`, a toolbox shell) run after `proofs`' script in the same
    /// exec: `true` when the proofs held and the step is done, `false` when they did not hold
    /// yet or gave no answer to trust (nothing was unpacked); an error when network `none` is
    /// not in place or the step failed.
    async fn upload_proving(
        &self,
        pod: &str,
        argv: &[String],
        tar: &[u8],
        proofs: Proofs,
    ) -> Result<bool, SandboxError> {
        // `… sh -c SCRIPT arbiter-upload …`: the proofs go first in the script.
        let at = argv.iter().position(|a| a == "-c").map(|i| i + 1);
        let (Some(script), Some(at)) = (proofs.script(), at.filter(|&i| i < argv.len())) else {
            return Ok(false);
        };
        let mut argv = argv.to_vec();
        argv[at] = format!("{script}\n{}", argv[at]);
        let (end, out, err) = self
            .harness(pod, &argv, Some(tar), TRANSFER_DEADLINE)
            .await?;
        if proof::proved(&out) {
            return self.upload_ended(pod, end, &err).map(|()| true);
        }
        match proof::answer(end, &out, &err) {
            Answer::Refused(why) if proofs.no_network => Err(no_network_proof(pod, &why)),
            _ => Ok(false),
        }
    }

    async fn upload_step(
        &self,
        pod: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
    ) -> Result<(), SandboxError> {
        let (end, _, err) = self.harness(pod, argv, stdin, TRANSFER_DEADLINE).await?;
        self.upload_ended(pod, end, &err)
    }

    /// What an upload step that ended `end` (stderr `err`) did.
    fn upload_ended(&self, pod: &str, end: RawEnd, err: &[u8]) -> Result<(), SandboxError> {
        match end {
            RawEnd::Exited(0) => Ok(()),
            // The container's own filesystem would not let them go: the agent's doing.
            RawEnd::Exited(NOT_REMOVED) => Err(SandboxError::Refused {
                op: "replace",
                message: String::from_utf8_lossy(err)
                    .trim()
                    .chars()
                    .take(400)
                    .collect(),
            }),
            other => Err(KubeError::Transfer {
                op: "upload",
                pod: pod.to_string(),
                message: format!(
                    "{} ({other:?})",
                    String::from_utf8_lossy(err)
                        .trim()
                        .chars()
                        .take(400)
                        .collect::<String>()
                ),
            }
            .into()),
        }
    }

    /// [`Sandbox::download`](crate::sandbox::Sandbox::download) (`entry_only`: the path's own
    /// entry, not what is beneath it).
    pub(super) async fn download_tar(
        &self,
        pod: &str,
        path: &str,
        to: &Path,
        limit: u64,
        entry_only: bool,
    ) -> Result<Fetched, SandboxError> {
        // What the pod's stop sent of `/logs`, when that can say (after_stop.rs).
        let extent = if entry_only {
            crate::sandbox::Extent::Entry
        } else {
            crate::sandbox::Extent::Whole
        };
        let want = crate::sandbox::Download {
            path,
            to,
            limit,
            extent,
        };
        if let Some(made) = self.stopped_logs.download(pod, want) {
            return made;
        }
        // A pod created and not started yet (an image's index reads one): wait until it runs.
        self.await_started(pod).await?;
        let flags = if entry_only { "--no-recursion" } else { "" };
        let max = limit.saturating_add(1).to_string();
        let argv = toolbox_argv(
            "sh",
            &["-c", DOWNLOAD, "arbiter-download", path, flags, &max],
        );
        let got = self
            .tar_to_file(pod, &argv, None, to, limit, TRANSFER_DEADLINE)
            .await?;
        let (written, counted, stderr) = (got.written, got.counted, got.stderr);
        let discard = |to: &Path| {
            let _ = std::fs::remove_file(to);
        };
        let end = match got.end {
            Ok(end) => end,
            Err(e) => {
                discard(to);
                return Err(e);
            }
        };
        if got.over {
            discard(to);
            return Ok(Fetched::TooLarge { limit });
        }
        let mut file = got.file;
        use tokio::io::AsyncWriteExt;
        file.flush().await.map_err(SandboxError::io(to))?;
        drop(file);
        let failed = |message: String| download_failed(pod, message);
        match end {
            RawEnd::Exited(0) if counted == Some(written) => {
                Ok(Fetched::Archive { bytes: written })
            }
            // The archive command ended well and its bytes did not arrive whole even from
            // the pod's copy: the harness's failure.
            RawEnd::Exited(0) => {
                discard(to);
                Err(SandboxError::Lost {
                    op: format!("download in pod {pod}"),
                    message: format!(
                        "{path}: received {written} bytes, the pod sent {}",
                        counted.map_or("an unknown number".to_string(), |c| c.to_string())
                    ),
                })
            }
            RawEnd::Exited(NOT_FOUND) => {
                discard(to);
                Ok(Fetched::NotFound)
            }
            other => {
                discard(to);
                Err(failed(format!(
                    "{path}: {} ({other:?})",
                    stderr.trim().chars().take(400).collect::<String>()
                )))
            }
        }
    }

    /// Runs `argv`, a `tar` to stdout, with its stdout into a new file `to` of at most
    /// `limit` bytes (the file is not flushed), checked against the pod's count (`kept.rs`):
    /// kept whole in the pod first when `limit` allows ([`KEEP_FILE_MAX`]), so a stream that
    /// comes short is completed from there.
    pub(super) async fn tar_to_file(
        &self,
        pod: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
        to: &Path,
        limit: u64,
        deadline: Duration,
    ) -> Result<Received, SandboxError> {
        let mut file = tokio::fs::File::create(to)
            .await
            .map_err(SandboxError::io(to))?;
        let mut out = Sink::Limited {
            file: &mut file,
            path: to,
            written: 0,
            limit,
            over: false,
        };
        let keep = if limit <= KEEP_FILE_MAX {
            Keep::File
        } else {
            Keep::Stream
        };
        let kept = self
            .run_kept(
                pod,
                argv,
                stdin,
                (&mut out, keep),
                64 * 1024,
                (Some(deadline), Duration::from_secs(2)),
            )
            .await;
        let Sink::Limited { written, over, .. } = out else {
            unreachable!("the sink stays what it was made")
        };
        let (end, stderr, over) = match kept {
            Ok(kept) => (
                Ok(kept.end),
                String::from_utf8_lossy(&kept.err).into_owned(),
                over || kept.over,
            ),
            Err(e) => (Err(e), String::new(), over),
        };
        // An exit is checked against the pod's copy: what arrived is what it counted.
        let counted = matches!(end, Ok(RawEnd::Exited(_)))
            .then_some(written)
            .filter(|_| !over);
        Ok(Received {
            file,
            end,
            written,
            over,
            counted,
            stderr,
        })
    }
}

/// What [`KubernetesSandbox::tar_to_file`] received.
pub(super) struct Received {
    /// The file, not flushed yet.
    pub file: tokio::fs::File,
    pub end: Result<RawEnd, SandboxError>,
    /// Bytes written to the file.
    pub written: u64,
    /// More than the limit came (the rest was not written).
    pub over: bool,
    /// The bytes the pod counted (its kept copy's size), when the command exited.
    pub counted: Option<u64>,
    pub stderr: String,
}

/// A failed download from `pod`.
pub(super) fn download_failed(pod: &str, message: String) -> SandboxError {
    KubeError::Transfer {
        op: "download",
        pod: pod.to_string(),
        message,
    }
    .into()
}
