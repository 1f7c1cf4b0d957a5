//! The stop's exec kept open for the pod's next command.
//!
//! What follows the stop of an agent's pod is, in a trial, one more command in it: the
//! verifier's (or the change set's read of what it cannot tell from the walk). Opening an
//! exec is the dear part of a command (the apiserver, the kubelet, containerd and runc each
//! start something, over two new TLS connections), so the stop does not end once its parts
//! are sent (after_stop.rs): it prints an end line after them and becomes hot.rs's
//! trampoline, which says it runs and waits for the argv of the pod's next command on its
//! stdin. That command (`exec.rs`'s `run_attempt`, as a claimed warm pod's first) runs in it,
//! one exec and one request fewer per trial.
//!
//! Nothing else runs in the pod meanwhile: the stop killed every process first, so the
//! waiting shell is the harness's own, as a fresh exec's would be. Its output is read as the
//! stop's always was: each part checked against the size and sha256 the pod wrote before it.
//! A stop that does not end as it should (a part short, anything but the trampoline's word
//! on stderr, its stream ended, a minute passed) is closed, and the stop is run again the old
//! way: it is idempotent. A pod removed, or stopped again, closes the exec it kept.

use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::KubernetesSandbox;
use super::after_stop::part_size;
use super::hot::{HotExec, READY};
use crate::sandbox::SandboxError;

/// The line that ends a parked stop's own output on stdout.
pub(super) const END: &str = "arbiter-stop-end";

/// How long a parked stop may take to end its output (the stop's own limit).
const STOP_WAIT: Duration = Duration::from_secs(60);

/// How long a parked stop that did not end as it should is given to end once its stdin is
/// closed (the trampoline then exits), before the stop is run again: never two at once.
const END_WAIT: Duration = Duration::from_secs(10);

/// The most bytes of stderr a parked stop may say before its trampoline's word.
const ERR_CAP: usize = 64 * 1024;

/// Shell lines after the stop's parts when it parks (`$_pk` set): its end line, then the
/// trampoline (hot.rs).
pub(super) fn park_lines() -> String {
    format!(
        "[ -n \"$_pk\" ] || exit 0\necho {END}\n{}",
        super::hot::TRAMPOLINE
    )
}

/// How far a stop's stdout has come.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Scan {
    /// Not at its end yet.
    More,
    /// Its end line starts at this byte, and is the last thing that came.
    End(usize),
    /// Something came after the end line: not a stop's output.
    Foreign,
}

/// Reads a stop's stdout as it comes: lines, and after a part's head line its bytes.
#[derive(Debug, Default)]
pub(super) struct Scanner {
    /// Where the next line starts (all before it read).
    at: usize,
}

impl Scanner {
    pub(super) fn scan(&mut self, out: &[u8]) -> Scan {
        loop {
            let Some(nl) = out[self.at..].iter().position(|&b| b == b'\n') else {
                return Scan::More;
            };
            let line = &out[self.at..self.at + nl];
            if line == END.as_bytes() {
                return if self.at + nl + 1 == out.len() {
                    Scan::End(self.at)
                } else {
                    Scan::Foreign
                };
            }
            let next = self.at + nl + 1;
            match part_size(line) {
                Some(size) if out.len() < next + size => return Scan::More,
                Some(size) => self.at = next + size,
                None => self.at = next,
            }
        }
    }
}

/// Why a parked stop did not end as it should.
type Failed = String;

impl KubernetesSandbox {
    /// Run the stop's `argv` (`$5` set: it parks) in `pod`: its stdout up to its end line,
    /// and its exec, the trampoline waiting for the pod's next command; `Ok(None)` when it did
    /// not end as it should (the exec is closed: the caller stops the pod again the old way),
    /// an error when no exec could be opened (as the old way's would be).
    pub(super) async fn stop_parked(
        &self,
        pod: &str,
        argv: &[String],
        out_cap: usize,
    ) -> Result<Option<(Vec<u8>, HotExec)>, SandboxError> {
        let mut exec = HotExec::of(self.attach(pod, argv, true).await?);
        let why = match tokio::time::timeout(STOP_WAIT, read_parked(&mut exec, out_cap)).await {
            Ok(Ok(out)) => return Ok(Some((out, exec))),
            Ok(Err(why)) => why,
            Err(_) => format!("not within {STOP_WAIT:?}"),
        };
        tracing::debug!(pod, "a parked stop did not end as it should: {why}");
        // It may still run (its kills would kill the next stop's process as it starts):
        // its stdin closed, it is given a while to end.
        if tokio::time::timeout(END_WAIT, ended(&mut exec))
            .await
            .is_err()
        {
            tracing::debug!(
                pod,
                "a parked stop did not end within {END_WAIT:?} of its stdin closed"
            );
        }
        exec.abort();
        Ok(None)
    }
}

/// Close the exec's stdin, then read its streams to their ends.
async fn ended(exec: &mut HotExec) {
    use tokio::io::AsyncWriteExt;
    if let Some(stdin) = exec.stdin.as_mut() {
        let _ = stdin.shutdown().await;
    }
    tokio::join!(drain(exec.stdout.as_mut()), drain(exec.stderr.as_mut()));
    if let Some(status) = exec.status.as_mut() {
        let _ = status.await;
    }
}

/// The stop's stdout up to its end line (the line left out), once the trampoline said it
/// runs (its word the end of stderr: what the stop's own commands said comes before it, and
/// is only logged, as the old way's stderr of a stop that held).
async fn read_parked(exec: &mut HotExec, out_cap: usize) -> Result<Vec<u8>, Failed> {
    let (Some(stdout), Some(stderr)) = (exec.stdout.as_mut(), exec.stderr.as_mut()) else {
        return Err("no stdout or stderr".to_string());
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut scanner = Scanner::default();
    let mut end = None;
    let mut buf_out = vec![0u8; 64 * 1024];
    let mut buf_err = vec![0u8; 1024];
    while end.is_none() || !err.ends_with(READY) {
        tokio::select! {
            got = stdout.read(&mut buf_out), if end.is_none() => {
                let n = got_some(got, "stdout")?;
                out.extend_from_slice(&buf_out[..n]);
                if out.len() > out_cap {
                    return Err(format!("more than {out_cap} bytes on stdout"));
                }
                match scanner.scan(&out) {
                    Scan::More => {}
                    Scan::End(at) => end = Some(at),
                    Scan::Foreign => return Err("more after its end line".to_string()),
                }
            }
            got = stderr.read(&mut buf_err), if !err.ends_with(READY) => {
                let n = got_some(got, "stderr")?;
                err.extend_from_slice(&buf_err[..n]);
                if err.len() > ERR_CAP {
                    return Err(format!("more than {ERR_CAP} bytes on stderr"));
                }
            }
        }
    }
    if !err.is_empty() && err != READY {
        tracing::debug!(
            "a parked stop said on stderr: {:?}",
            String::from_utf8_lossy(&err[..err.len() - READY.len()]).trim()
        );
    }
    out.truncate(end.unwrap_or(out.len()));
    Ok(out)
}

/// Read `stream` to its end, dropping what comes.
async fn drain<R: tokio::io::AsyncRead + Unpin>(stream: Option<&mut R>) {
    if let Some(stream) = stream {
        let _ = tokio::io::copy(stream, &mut tokio::io::sink()).await;
    }
}

/// The bytes a read brought; an error when the stream ended or failed.
fn got_some(got: std::io::Result<usize>, stream: &str) -> Result<usize, Failed> {
    match got {
        Ok(0) => Err(format!("its {stream} ended")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("its {stream}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::sha256_hex;

    fn part(head: &str, body: &[u8]) -> Vec<u8> {
        let mut v = format!("{head}{} {}\n", body.len(), sha256_hex(body)).into_bytes();
        v.extend_from_slice(body);
        v
    }

    /// The end line is found only where a line starts outside every part, and only as the
    /// last thing that came; a part's bytes that look like it are skipped by their size.
    #[test]
    fn the_end_line_is_found_outside_the_parts_only() {
        let tricky = format!("x\n{END}\nmore").into_bytes();
        let mut out = b"oom_kill=0\n".to_vec();
        out.extend(part("arbiter-logs ", &tricky));
        out.extend(part("arbiter-walk ", b"walk\n"));
        let before_end = out.len();
        out.extend(format!("{END}\n").as_bytes());
        // Byte by byte, as a stream may bring it: nothing ends early.
        let mut scanner = Scanner::default();
        for n in 1..out.len() {
            assert_eq!(scanner.scan(&out[..n]), Scan::More, "at {n}");
        }
        assert_eq!(scanner.scan(&out), Scan::End(before_end));
        // The same all at once.
        assert_eq!(Scanner::default().scan(&out), Scan::End(before_end));
        // Anything after the end line: not a stop's.
        let mut more = out.clone();
        more.extend(b"x");
        assert_eq!(Scanner::default().scan(&more), Scan::Foreign);
        // A part cut short never ends.
        let mut cut = b"oom_kill=0\n".to_vec();
        cut.extend(&part("arbiter-logs ", &tricky)[..30]);
        cut.extend(format!("{END}\n").as_bytes());
        assert_eq!(Scanner::default().scan(&cut), Scan::More);
    }

    /// The stop's script with its park lines, run by the toolbox's shell: the end line after what
    /// it sent, the trampoline's word on stderr, and then the command it is sent runs in its
    /// place with the rest of stdin; without `$_pk` it ends after its parts.
    #[test]
    fn a_parked_stop_runs_the_next_command_it_is_sent() {
        let script = format!("_pk=$1\necho oom_kill=0\n{}", park_lines());
        let argv = vec![
            "sh".to_string(),
            "-c".to_string(),
            "printf 'ran %s|' \"$1\"; cat".to_string(),
            "x".to_string(),
            "it's".to_string(),
        ];
        let sent_to = super::super::hot::tests::sent_to;
        let Some(out) = sent_to(&script, &["arbiter-stop", "1"], &argv, b"its stdin") else {
            return;
        };
        assert!(out.status.success());
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert_eq!(stdout, format!("oom_kill=0\n{END}\nran it's|its stdin"));
        let end = stdout.find("ran").unwrap();
        assert_eq!(
            Scanner::default().scan(&stdout.as_bytes()[..end]),
            Scan::End("oom_kill=0\n".len())
        );
        assert_eq!(
            out.stderr,
            [READY, super::super::hot::TAKEN].concat(),
            "the trampoline's two words, and nothing else"
        );
        // Not parked: it ends after its parts, with nothing of the trampoline.
        let out = super::super::hot::tests::toolbox_sh(&script, &["arbiter-stop", ""])
            .unwrap()
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout, b"oom_kill=0\n");
        assert!(out.stderr.is_empty());
    }
}
