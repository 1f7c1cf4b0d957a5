//! Many paths out of a pod in one exec ([`Sandbox::download_many`]): each archived by its
//! own `tar` (so a hard link never points into another path's archive), at most its limit
//! plus one byte, one after the other on stdout, each after a line `arbiter-part I SIZE
//! CODE` (`-` for a path that does not exist). The whole output is received as one download
//! is (`tar_to_file`: kept in the pod and checked), then split on the host. Anything wrong
//! with the whole, and each path is downloaded on its own instead.
//!
//! [`Sandbox::download_many`]: crate::sandbox::Sandbox::download_many

use std::io::{BufRead, Read, Write};
use std::path::Path;
use std::time::Duration;

use super::KubernetesSandbox;
use super::exec::RawEnd;
use super::transfer::download_failed;
use crate::sandbox::toolbox::toolbox_argv;
use crate::sandbox::{Download, Extent, Fetched, SandboxError};

/// The script: `$1` the scratch file, then per path its name, tar's flag (`-` none) and the
/// most bytes of its archive plus one.
const MANY: &str = r#"B=/.arbiter/toolbox/busybox; t=$1; shift; i=0; set -o pipefail
while [ $# -ge 3 ]; do p=$1 f=$2 max=$3; shift 3
  [ "$f" = - ] && f=
  if [ -e "$p" ] || [ -L "$p" ]; then
    p=${p%/}; dir=${p%/*}; name=${p##*/}; [ -n "$dir" ] || dir=/
    case $name in -*) name=./$name;; esac
    $B tar -c -f - -C "$dir" $f "$name" 2>/dev/null | $B head -c "$max" >"$t"; r=$?
    n=$($B wc -c <"$t"); echo "arbiter-part $i $((n+0)) $r"; $B cat "$t"
  else
    echo "arbiter-part $i - 44"
  fi
  i=$((i+1))
done
$B rm -f "$t""#;

/// Deadline of the one exec.
const DEADLINE: Duration = Duration::from_secs(600);

impl KubernetesSandbox {
    /// [`Sandbox::download_many`](crate::sandbox::Sandbox::download_many).
    pub(super) async fn download_tars(
        &self,
        pod: &str,
        wants: &[Download<'_>],
        scratch: &Path,
    ) -> Vec<Result<Fetched, SandboxError>> {
        // What the pod's stop sent along answers what it can (after_stop.rs); the pod the rest.
        let mut got: Vec<Option<Result<Fetched, SandboxError>>> = wants
            .iter()
            .map(|w| self.stopped_logs.download(pod, *w))
            .collect();
        let left: Vec<Download<'_>> = wants
            .iter()
            .zip(&got)
            .filter(|(_, g)| g.is_none())
            .map(|(w, _)| *w)
            .collect();
        if left.len() < wants.len() {
            tracing::debug!(
                pod,
                sent = wants.len() - left.len(),
                "downloads from what the stop sent"
            );
        }
        let mut asked = self.download_asked(pod, &left, scratch).await.into_iter();
        got.iter_mut()
            .map(|g| match g.take() {
                Some(made) => made,
                None => asked.next().unwrap_or_else(|| {
                    Err(SandboxError::Refused {
                        op: "download",
                        message: "a download was not answered".to_string(),
                    })
                }),
            })
            .collect()
    }

    async fn download_asked(
        &self,
        pod: &str,
        wants: &[Download<'_>],
        scratch: &Path,
    ) -> Vec<Result<Fetched, SandboxError>> {
        if wants.is_empty() {
            return Vec::new();
        }
        // One path, or the root (whose archive leaves out the kernel's filesystems: the
        // single download's script knows how): each on its own.
        if wants.len() > 1
            && wants
                .iter()
                .all(|w| !w.path.trim_end_matches('/').is_empty())
        {
            match self.download_together(pod, wants, scratch).await {
                Ok(got) => return got,
                Err(e) => tracing::debug!(pod, "downloads in one exec: {e}; one by one"),
            }
        }
        let each = wants
            .iter()
            .map(|w| self.download_tar(pod, w.path, w.to, w.limit, w.extent == Extent::Entry));
        futures_util::future::join_all(each).await
    }

    async fn download_together(
        &self,
        pod: &str,
        wants: &[Download<'_>],
        scratch: &Path,
    ) -> Result<Vec<Result<Fetched, SandboxError>>, SandboxError> {
        self.await_started(pod).await?;
        let file = format!(
            "{}/many-{}.tar",
            super::names::SCRATCH,
            super::names::random_suffix()
        );
        let mut args: Vec<String> = vec![
            "-c".into(),
            MANY.into(),
            "arbiter-download-many".into(),
            file,
        ];
        let mut total = 0u64;
        for w in wants {
            let flag = match w.extent {
                Extent::Entry => "--no-recursion",
                Extent::Whole => "-",
            };
            let max = w.limit.saturating_add(1);
            total = total.saturating_add(max).saturating_add(64);
            args.extend([w.path.to_string(), flag.to_string(), max.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let argv = toolbox_argv("sh", &args);
        let got = self
            .tar_to_file(pod, &argv, None, scratch, total, DEADLINE)
            .await?;
        let (written, counted) = (got.written, got.counted);
        let end = got.end;
        let mut file = got.file;
        use tokio::io::AsyncWriteExt;
        file.flush().await.map_err(SandboxError::io(scratch))?;
        drop(file);
        let whole = matches!(end, Ok(RawEnd::Exited(0))) && !got.over && counted == Some(written);
        let split = if whole {
            split_parts(scratch, wants).map_err(SandboxError::io(scratch))
        } else {
            Err(download_failed(
                pod,
                format!(
                    "{} paths in one exec: {end:?}, {written} bytes of {counted:?}: {}",
                    wants.len(),
                    got.stderr.trim()
                ),
            ))
        };
        let _ = std::fs::remove_file(scratch);
        let parts = split?;
        Ok(parts
            .into_iter()
            .zip(wants)
            .map(|(part, w)| match part {
                Part::Missing => Ok(Fetched::NotFound),
                Part::Archive { bytes, .. } if bytes > w.limit => {
                    let _ = std::fs::remove_file(w.to);
                    Ok(Fetched::TooLarge { limit: w.limit })
                }
                Part::Archive { bytes, code: 0 } => Ok(Fetched::Archive { bytes }),
                Part::Archive { code, .. } => {
                    let _ = std::fs::remove_file(w.to);
                    Err(download_failed(
                        pod,
                        format!("{}: tar exited {code}", w.path),
                    ))
                }
            })
            .collect())
    }
}

/// What the script sent for one path.
#[derive(Debug, PartialEq, Eq)]
enum Part {
    Missing,
    /// Its archive (written to its `to`), and the archive pipeline's exit code.
    Archive {
        bytes: u64,
        code: i64,
    },
}

/// Split the script's output in `from` into each path's archive file; an error when it is
/// not every part, in order, whole.
fn split_parts(from: &Path, wants: &[Download<'_>]) -> std::io::Result<Vec<Part>> {
    let bad = |why: String| std::io::Error::other(format!("parts of the downloads: {why}"));
    let mut input = std::io::BufReader::new(std::fs::File::open(from)?);
    let mut parts = Vec::with_capacity(wants.len());
    for (i, w) in wants.iter().enumerate() {
        let mut line = String::new();
        input.read_line(&mut line)?;
        let fields: Vec<&str> = line.trim_end_matches('\n').split(' ').collect();
        let ["arbiter-part", index, size, code] = fields[..] else {
            return Err(bad(format!("no head of part {i}: {line:?}")));
        };
        if index != i.to_string() {
            return Err(bad(format!("part {index} where {i} was due")));
        }
        let code: i64 = code.parse().map_err(|_| bad(format!("code {code:?}")))?;
        if size == "-" {
            parts.push(Part::Missing);
            continue;
        }
        let bytes: u64 = size.parse().map_err(|_| bad(format!("size {size:?}")))?;
        let mut out = std::io::BufWriter::new(std::fs::File::create(w.to)?);
        let copied = std::io::copy(&mut (&mut input).take(bytes), &mut out)?;
        out.flush()?;
        if copied != bytes {
            return Err(bad(format!("part {i}: {copied} bytes of {bytes}")));
        }
        parts.push(Part::Archive { bytes, code });
    }
    let mut rest = Vec::new();
    input.read_to_end(&mut rest)?;
    if !rest.is_empty() {
        return Err(bad(format!("{} bytes after the last part", rest.len())));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_splits_into_each_paths_archive_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let to: Vec<_> = (0..3)
            .map(|i| dir.path().join(format!("{i}.tar")))
            .collect();
        let wants: Vec<Download<'_>> = ["/a", "/b", "/c"]
            .iter()
            .zip(&to)
            .map(|(p, t)| Download::whole(p, t, 100))
            .collect();
        let from = dir.path().join("all");
        std::fs::write(
            &from,
            b"arbiter-part 0 3 0\nAAAarbiter-part 1 - 44\narbiter-part 2 2 1\nCC",
        )
        .unwrap();
        let parts = split_parts(&from, &wants).unwrap();
        assert_eq!(
            parts,
            [
                Part::Archive { bytes: 3, code: 0 },
                Part::Missing,
                Part::Archive { bytes: 2, code: 1 }
            ]
        );
        assert_eq!(std::fs::read(&to[0]).unwrap(), b"AAA");
        assert_eq!(std::fs::read(&to[2]).unwrap(), b"CC");
        for broken in [
            &b"arbiter-part 0 3 0\nAAAarbiter-part 1 - 44\narbiter-part 2 2 1\nC"[..],
            b"arbiter-part 0 3 0\nAAAarbiter-part 1 - 44\narbiter-part 2 2 1\nCCX",
            b"arbiter-part 0 3 0\nAAAarbiter-part 2 - 44\narbiter-part 1 2 1\nCC",
            b"arbiter-part 0 3 0\nAAA",
            b"garbage",
        ] {
            std::fs::write(&from, broken).unwrap();
            assert!(split_parts(&from, &wants).is_err(), "{broken:?}");
        }
    }
}
