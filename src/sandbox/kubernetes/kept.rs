//! Output kept in the pod: a harness command's output lands in the pod's root-only scratch
//! first, then is sent, and what arrived is checked against the pod's copy.
//!
//! An exec stream cannot be trusted to deliver all of an exited command's output: under load
//! the apiserver and the kubelet have been seen to end stdout or stderr early and still send
//! exit 0 (kubernetes/kubernetes#124571; 4 in 1,000 execs of the stress test beside a CI run
//! lost a tail). So the command's stdout and stderr go to files, their sizes and stdout's
//! sha256 to a facts file, and only then are the facts, stderr and stdout sent. A stream that
//! arrived short is completed from the kept file (`tail -c +N`: a read again, never the
//! command run again and never the trial retried); facts that did not arrive are read from
//! their file. What still differs after [`REREADS`] reads is [`SandboxError::Lost`], an infra
//! error.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::KubernetesSandbox;
use super::carried::Unplaced;
use super::exec::{RawEnd, Sink};
use super::names::is_sidecar;
use crate::digest::{hex, sha256_hex};
use crate::sandbox::SandboxError;
use crate::sandbox::sink::CappedSink;
use crate::sandbox::toolbox::toolbox_argv;

/// The keeping wrapper of a harness command: `$1` the kept files' stem, `$2` the mode
/// ([`Keep`]: `file` or `stream`), `$3` how many stale stems follow (removed first), then the
/// command. `file`: its stdout and stderr go to `$1.o` and `$1.e`, the facts line to `$1.f`;
/// then the facts and stderr are sent on stderr, stdout on stdout. `stream`: stdout is sent
/// as it comes and counted, its first [`KEEP_FILE_MAX`] bytes kept in `$1.o` too (its digest
/// in the facts, or `-` when it was more: then only counted), stderr goes to `$1.e`; then the
/// facts and stderr are sent on stderr. The command's exit code is the exec's.
const KEEP: &str = concat!(
    r#"B=/.arbiter/toolbox/busybox; k=$1 m=$2 n=$3; shift 3
while [ "$n" -gt 0 ]; do for x in o e f c; do unlink "$1.$x"; done 2>/dev/null; shift; n=$((n-1)); done
: >"$k.o" && : >"$k.e" || { echo "cannot keep output in $k" >&2; exit 125; }
if [ "$m" = file ]; then
"$@" >"$k.o" 2>"$k.e"; rc=$?
"#,
    super::exec::facts_line!(),
    r#"
$B cat "$k.f" "$k.e" >&2; $B cat "$k.o"; exit "$rc"
fi
mkfifo "$k.p" || { echo "cannot keep output in $k" >&2; exit 125; }
{ head -c 67108864 >"$k.o"; $B cat >/dev/null; } <"$k.p" &
{ { "$@" 2>"$k.e"; echo $? >"$k.r"; } | $B tee /dev/fd/3 "$k.p" | $B wc -c >"$k.n"; } 3>&1
wait
rc=; read -r rc 2>/dev/null <"$k.r"; o=; read -r o 2>/dev/null <"$k.n"; o=$((o+0)); e=$($B wc -c <"$k.e"); se=$(sha256sum <"$k.e")
so=-; if [ "$o" -le 67108864 ]; then so=$(sha256sum <"$k.o"); so=${so%% *}; fi
f="arbiter-kept $rc $o $((e+0)) $so ${se%% *}"; printf '%s\n' "$f" >"$k.f"; for x in r n p; do unlink "$k.$x"; done 2>/dev/null
$B cat "$k.f" "$k.e" >&2; exit "$rc""#
);

/// How a harness command's stdout is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Keep {
    /// Whole in the pod before it is sent: a stream that came short is completed from it.
    File,
    /// Sent as it comes and counted in the pod (output that may be too large to hold in the
    /// pod's ephemeral storage), its first [`KEEP_FILE_MAX`] bytes kept: a stream that came
    /// short is completed from them when that was all of it, else [`SandboxError::Lost`].
    Stream,
}

/// Output a [`Keep::File`] may hold, at most (the pod's ephemeral storage has 256 MiB for
/// the harness).
pub(super) const KEEP_FILE_MAX: u64 = 64 << 20;

/// Reads of a kept file's missing part (or of the facts), at most.
const REREADS: usize = 3;
/// Kept output of more bytes is removed from the pod as soon as it arrived whole (the
/// scratch volume counts toward the pod's ephemeral storage, which must never fill on the
/// harness's account); smaller ones go with the pod's next kept exec.
const REMOVE_NOW: u64 = 16 << 20;
/// How often the facts of an exec whose status was lost are looked for.
const FACTS_POLL: Duration = Duration::from_millis(500);
/// Deadline of one read of a kept file.
const REREAD_DEADLINE: Duration = Duration::from_secs(600);

/// Kept files per pod and what re-reading them did.
#[derive(Default)]
pub(super) struct KeptFiles {
    /// Stems of kept files read whole, by pod: removed by the pod's next kept exec.
    stale: std::sync::Mutex<HashMap<String, Vec<String>>>,
    /// Reads that completed a short stream (or fetched lost facts) from a kept file.
    rereads: AtomicU64,
}

impl KeptFiles {
    fn take_stale(&self, pod: &str) -> Vec<String> {
        let mut stale = self.stale.lock().unwrap_or_else(|e| e.into_inner());
        stale.remove(pod).unwrap_or_default()
    }

    fn add_stale(&self, pod: &str, stem: String) {
        let mut stale = self.stale.lock().unwrap_or_else(|e| e.into_inner());
        stale.entry(pod.to_string()).or_default().push(stem);
    }

    /// A pod that is gone keeps nothing.
    pub(super) fn forget(&self, pod: &str) {
        self.take_stale(pod);
    }

    /// Streams completed (or facts fetched) from kept files so far.
    pub(super) fn rereads(&self) -> u64 {
        self.rereads.load(Ordering::Relaxed)
    }
}

/// The facts the keeping wrapper wrote after the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Facts {
    pub code: i64,
    /// Bytes of the kept stdout and stderr.
    out: u64,
    err: u64,
    /// `None`: stdout was only counted ([`Keep::Stream`]).
    sha_out: Option<String>,
    sha_err: String,
    /// Bytes the command wrote to stdout and stderr in all, counted in the pod (the exec
    /// wrapper's `t<OUT>:<ERR>`).
    totals: Option<(u64, u64)>,
    /// What the command carried did not hold, and it was not run (`carry.rs`).
    unplaced: Option<Unplaced>,
    /// A halting command's pod was halted after it (`s0`): what was sent along, when it
    /// arrived whole (`l…`; `exec.rs`'s `halt_send!`).
    pub halted: Option<Option<Vec<u8>>>,
}

fn parse_facts(line: &[u8]) -> Option<Facts> {
    let text = std::str::from_utf8(line).ok()?;
    let mut fields = text.strip_prefix("arbiter-kept ")?.split(' ');
    let code = fields.next()?.parse().ok()?;
    let out = fields.next()?.parse().ok()?;
    let err = fields.next()?.parse().ok()?;
    let sha = |s: &str| {
        (s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())).then(|| s.to_string())
    };
    let sha_out = match fields.next()? {
        "-" => None,
        given => Some(sha(given)?),
    };
    let sha_err = sha(fields.next()?)?;
    let mut next = fields.next();
    // `t<out>:<err>`: the streams' bytes in all.
    let totals = match next.and_then(|w| w.strip_prefix('t')) {
        Some(both) => {
            let (out, err) = both.split_once(':')?;
            next = fields.next();
            Some((out.parse().ok()?, err.parse().ok()?))
        }
        None => None,
    };
    // `s<0|1>`: the pod halted after the command (0: every process gone), then perhaps
    // `l<size>:<sha256>:<base64>`, the archive sent along.
    let mut halted = None;
    if let Some(done) = next.and_then(|w| w.strip_prefix('s')) {
        next = fields.next();
        let sent = match next.and_then(|w| w.strip_prefix('l')) {
            Some(sent) => {
                next = fields.next();
                checked_sent(sent)
            }
            None => None,
        };
        halted = (done == "0").then_some(sent);
    }
    // `x<code> <message>`: what the command carried did not hold (the message is the rest of
    // the line).
    let unplaced = match next {
        None => None,
        Some(word) => Some(Unplaced {
            code: word.strip_prefix('x')?.parse().ok()?,
            message: fields.collect::<Vec<_>>().join(" ").trim().to_string(),
        }),
    };
    Some(Facts {
        code,
        out,
        err,
        sha_out,
        sha_err,
        totals,
        unplaced,
        halted,
    })
}

/// The archive of `<size>:<sha256>:<base64>`, when it decodes to that size and digest.
fn checked_sent(field: &str) -> Option<Vec<u8>> {
    let (size, rest) = field.split_once(':')?;
    let (sha, text) = rest.split_once(':')?;
    let bytes = super::base64_lines::decode(text)?;
    (bytes.len().to_string() == size && crate::digest::sha256_hex(&bytes) == sha).then_some(bytes)
}

/// The facts line at the head of the wrapper's stderr and the command's own stderr after
/// it; `None` when the head is not a whole facts line.
fn split_facts(err: &[u8]) -> Option<(Facts, &[u8])> {
    let end = err.iter().position(|&b| b == b'\n')?;
    Some((parse_facts(&err[..end])?, &err[end + 1..]))
}

/// How a kept command ended.
pub(super) struct Kept {
    pub end: RawEnd,
    /// The command's stderr: whole when it exited (at most the cap asked for).
    pub err: Vec<u8>,
    /// Its stdout was more than the sink takes (not checked then, and not all of it kept).
    pub over: bool,
}

impl Sink<'_> {
    /// Bytes this sink kept (`None`: it keeps nothing to check).
    fn received(&self) -> Option<u64> {
        match self {
            Sink::Memory { buf, .. } => Some(buf.len() as u64),
            Sink::Limited { written, .. } => Some(*written),
            Sink::Capped(sink) => sink.path().map(|_| sink.kept),
            Sink::Held { .. } => None,
        }
    }

    /// Whether `bytes` of output are more than this sink keeps.
    fn too_small_for(&self, bytes: u64) -> bool {
        match self {
            Sink::Memory { cap, .. } => bytes > *cap as u64,
            Sink::Limited { limit, over, .. } => *over || bytes > *limit,
            Sink::Capped(_) | Sink::Held { .. } => false,
        }
    }

    /// SHA-256 of what this sink kept (a file's is flushed and read back).
    async fn sha256(&mut self) -> Result<Option<String>, SandboxError> {
        match self {
            Sink::Memory { buf, .. } => Ok(Some(sha256_hex(buf))),
            Sink::Limited { file, path, .. } => {
                file.flush()
                    .await
                    .map_err(SandboxError::io(path.to_path_buf()))?;
                file_sha256(path).await.map(Some)
            }
            Sink::Capped(sink) => {
                sink.flush().await?;
                match sink.path() {
                    Some(path) => file_sha256(path).await.map(Some),
                    None => Ok(None),
                }
            }
            Sink::Held { .. } => Ok(None),
        }
    }
}

/// The end of an exec that exited `code` by the API's word, given the facts its wrapper
/// wrote: the facts' code. Under load the API was seen to report exit 0 for a command that
/// exited 3, with its stream cut (the apiserver's copy failed and it sent success); the
/// facts are written in the pod's root-only scratch after the command ended.
fn settled_end(pod: &str, code: i64, facts: &Facts) -> RawEnd {
    if facts.code != code {
        tracing::warn!(
            pod,
            reported = code,
            kept = facts.code,
            "the exec's status differs from the exit code kept in the pod; the pod's stands"
        );
    }
    RawEnd::Exited(facts.code)
}

/// The facts line a keeping exec wrapper ended its stderr with (after a `\x1f`), and the
/// command's own stderr before it.
fn split_trailer(held: &[u8]) -> Option<(Facts, &[u8])> {
    let body = held.strip_suffix(b"\n")?;
    let at = body.iter().rposition(|&b| b == 0x1f)?;
    Some((parse_facts(&body[at + 1..])?, &held[..at]))
}

async fn file_sha256(path: &Path) -> Result<String, SandboxError> {
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(SandboxError::io(path.to_path_buf()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .await
            .map_err(SandboxError::io(path.to_path_buf()))?;
        if n == 0 {
            return Ok(hex(&hasher.finalize()));
        }
        hasher.update(&buf[..n]);
    }
}

fn lost(pod: &str, message: String) -> SandboxError {
    SandboxError::Lost {
        op: format!("exec in pod {pod}"),
        message,
    }
}

impl KubernetesSandbox {
    /// A toolbox command as root, its output in memory (at most 1 MiB each), under `timeout`:
    /// kept in the pod and checked, so an exit comes with all of its output (`kept.rs`).
    pub(super) async fn harness(
        &self,
        pod: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
        timeout: Duration,
    ) -> Result<(RawEnd, Vec<u8>, Vec<u8>), SandboxError> {
        let mut out = Vec::new();
        let kept = self
            .run_kept(
                pod,
                argv,
                stdin,
                (
                    &mut Sink::Memory {
                        buf: &mut out,
                        cap: 1 << 20,
                    },
                    Keep::File,
                ),
                1 << 20,
                (Some(timeout), Duration::from_secs(1)),
            )
            .await?;
        Ok((kept.end, out, kept.err))
    }

    /// Run the harness command `argv` as [`run`](Self::run) does, its output kept in the pod
    /// and checked: on exit, the sink holds all of stdout (unless it is too small, `over`)
    /// and the returned stderr all of stderr (at most `err_cap` bytes). A sidecar (no scratch
    /// volume) is read as it comes.
    pub(super) async fn run_kept(
        &self,
        pod: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
        (out, keep): (&mut Sink<'_>, Keep),
        err_cap: usize,
        limits: (Option<Duration>, Duration),
    ) -> Result<Kept, SandboxError> {
        let mut err = Vec::new();
        if is_sidecar(pod) {
            let end = {
                let mut err_sink = Sink::Memory {
                    buf: &mut err,
                    cap: err_cap,
                };
                self.run(pod, argv, stdin, out, &mut err_sink, limits)
                    .await?
            };
            let over = matches!(out, Sink::Limited { over: true, .. });
            return Ok(Kept { end, err, over });
        }
        let stem = super::exec::new_stem();
        let stale = self.kept.take_stale(pod);
        let count = stale.len().to_string();
        let mode = match keep {
            Keep::File => "file",
            Keep::Stream => "stream",
        };
        let mut args: Vec<&str> = vec!["-c", KEEP, "arbiter-keep", &stem, mode, &count];
        args.extend(stale.iter().map(String::as_str));
        let mut kept_argv = toolbox_argv("sh", &args);
        kept_argv.extend(argv.iter().cloned());
        let started = tokio::time::Instant::now();
        let ran = {
            let mut err_sink = Sink::Memory {
                buf: &mut err,
                // The facts line comes first.
                cap: err_cap + 256,
            };
            self.run_reporting(pod, &kept_argv, stdin, out, &mut err_sink, limits)
                .await
        };
        let mut known = None;
        let end = match ran {
            Ok(Ok(end)) => end,
            Ok(Err(why)) => match self.await_facts(pod, &stem, started, limits).await? {
                Some(facts) => {
                    let end = RawEnd::Exited(facts.code);
                    known = Some(facts);
                    end
                }
                None if limits.0.is_some() => RawEnd::TimedOut,
                None => return Err(lost(pod, why)),
            },
            Err(e) => {
                // Whether the wrapper ran (and removed the stale stems) is not known: they
                // go with the next one again (`rm -f` of what is gone is harmless).
                for old in stale {
                    self.kept.add_stale(pod, old);
                }
                self.kept.add_stale(pod, stem);
                return Err(e);
            }
        };
        let RawEnd::Exited(code) = end else {
            // Timed out or cut: what arrived is all there is (no facts to check it by).
            let over = matches!(out, Sink::Limited { over: true, .. });
            if over {
                self.remove_kept(pod, &stem).await;
            } else {
                self.kept.add_stale(pod, stem);
            }
            return Ok(Kept { end, err, over });
        };
        let (facts, own_err) = match (known, split_facts(&err)) {
            (Some(facts), Some((_, rest))) | (None, Some((facts, rest))) => (facts, rest.to_vec()),
            (Some(facts), None) => (facts, Vec::new()),
            // Killed by a signal, the wrapper most likely was too (the container's OOM kill,
            // its end): no facts were written, and the caller reads the exit as before.
            (None, None) if code >= 128 => {
                self.kept.add_stale(pod, stem);
                return Ok(Kept {
                    end,
                    err,
                    over: false,
                });
            }
            (None, None) => (self.kept_facts(pod, &stem, &err).await?, Vec::new()),
        };
        let end = settled_end(pod, code, &facts);
        let over = out.too_small_for(facts.out);
        match (&facts.sha_out, over) {
            (_, true) => {}
            (Some(sha_out), false) => {
                self.complete(pod, &format!("{stem}.o"), facts.out, out)
                    .await?;
                if out.sha256().await?.is_some_and(|sha| &sha != sha_out) {
                    return Err(lost(
                        pod,
                        format!("stdout arrived with sha256 other than the pod's copy ({sha_out})"),
                    ));
                }
            }
            // Only counted in the pod: nothing to read again.
            (None, false) => {
                let got = out.received().unwrap_or(facts.out);
                if got != facts.out {
                    return Err(lost(
                        pod,
                        format!("{got} bytes of stdout arrived, the pod sent {}", facts.out),
                    ));
                }
            }
        }
        let mut err = own_err;
        if facts.err <= err_cap as u64 {
            let mut sink = Sink::Memory {
                buf: &mut err,
                cap: err_cap,
            };
            self.complete(pod, &format!("{stem}.e"), facts.err, &mut sink)
                .await?;
            if sink.sha256().await?.is_some_and(|sha| sha != facts.sha_err) {
                return Err(lost(
                    pod,
                    format!(
                        "stderr arrived with sha256 other than the pod's copy ({})",
                        facts.sha_err
                    ),
                ));
            }
        }
        if facts.out + facts.err > REMOVE_NOW {
            self.remove_kept(pod, &stem).await;
        } else {
            self.kept.add_stale(pod, stem);
        }
        Ok(Kept { end, err, over })
    }

    /// Read the kept `file` on into `sink` until it holds `size` bytes.
    async fn complete(
        &self,
        pod: &str,
        file: &str,
        size: u64,
        sink: &mut Sink<'_>,
    ) -> Result<(), SandboxError> {
        let Some(mut got) = sink.received() else {
            return Ok(());
        };
        let mut reads = 0;
        while got < size && reads < REREADS {
            reads += 1;
            self.kept.rereads.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                pod,
                file,
                got,
                size,
                "an exec stream arrived short; reading the rest from the pod's copy"
            );
            let offset = format!("+{}", got + 1);
            let argv = toolbox_argv("tail", &["-c", &offset, file]);
            let mut err = Vec::new();
            let end = self
                .run(
                    pod,
                    &argv,
                    None,
                    sink,
                    &mut Sink::Memory {
                        buf: &mut err,
                        cap: 4096,
                    },
                    (Some(REREAD_DEADLINE), Duration::from_secs(1)),
                )
                .await?;
            if end != RawEnd::Exited(0) {
                return Err(lost(
                    pod,
                    format!(
                        "reading {file} again: {} ({end:?})",
                        String::from_utf8_lossy(&err).trim()
                    ),
                ));
            }
            got = sink.received().unwrap_or(got);
        }
        if got != size {
            return Err(lost(
                pod,
                format!("{got} bytes of {file} arrived, the pod kept {size}"),
            ));
        }
        Ok(())
    }

    /// The facts of a kept exec, read from their file (`None`: no whole facts after `tries`
    /// reads).
    async fn facts_file(
        &self,
        pod: &str,
        stem: &str,
        tries: usize,
    ) -> Result<Option<Facts>, SandboxError> {
        let file = format!("{stem}.f");
        let argv = toolbox_argv("cat", &[&file]);
        for _ in 0..tries {
            let (end, out, _) = self.harness_streamed(pod, &argv).await?;
            if end == RawEnd::Exited(0)
                && let Some((facts, _)) = split_facts(&out)
            {
                return Ok(Some(facts));
            }
        }
        Ok(None)
    }

    /// The facts of a kept exec whose stream ended without its status while the pod runs:
    /// the command goes on in the pod (or has ended), so its facts are awaited until the
    /// exec's deadline (`limits`, from `started`), then it gets the deadline's signals.
    /// `None`: the deadline passed first (the command was killed), or no deadline and the
    /// facts did not come within a day.
    pub(super) async fn await_facts(
        &self,
        pod: &str,
        stem: &str,
        started: tokio::time::Instant,
        (timeout, grace): (Option<Duration>, Duration),
    ) -> Result<Option<Facts>, SandboxError> {
        self.kept.rereads.fetch_add(1, Ordering::Relaxed);
        let deadline = started + timeout.unwrap_or(Duration::from_secs(24 * 3600));
        loop {
            match self.facts_file(pod, stem, 1).await {
                Ok(Some(facts)) => {
                    tracing::warn!(
                        pod,
                        "an exec's status did not arrive; its end read from the pod"
                    );
                    return Ok(Some(facts));
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(pod, "reading an exec's facts: {e}"),
            }
            if let Some(how) = self.pod_ended(pod).await {
                return Err(match super::exec::gone(pod, how) {
                    Err(e) => e,
                    Ok(_) => lost(pod, "its pod ended while the exec's status was lost".into()),
                });
            }
            if tokio::time::Instant::now() >= deadline {
                if timeout.is_some() {
                    self.signal_all(pod, "-TERM").await;
                    tokio::time::sleep(grace).await;
                    self.signal_all(pod, "-KILL").await;
                }
                return Ok(None);
            }
            tokio::time::sleep(FACTS_POLL).await;
        }
    }

    /// The facts of a kept harness command whose stream lost them, read from their file.
    async fn kept_facts(
        &self,
        pod: &str,
        stem: &str,
        received: &[u8],
    ) -> Result<Facts, SandboxError> {
        self.kept.rereads.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            pod,
            "an exec's facts did not arrive; reading them from the pod"
        );
        if let Some(facts) = self.facts_file(pod, stem, REREADS).await? {
            return Ok(facts);
        }
        let file = format!("{stem}.f");
        Err(lost(
            pod,
            format!(
                "the command's facts arrived neither on its stream nor from {file}; stderr: {}",
                String::from_utf8_lossy(received)
                    .trim()
                    .chars()
                    .take(400)
                    .collect::<String>()
            ),
        ))
    }

    /// Check an exec's streams (run by the exec wrapper keeping its output under `stem`)
    /// against the pod's copy and complete them from it; `held` is what [`Sink::Held`] held
    /// back of stderr. An exec that did not exit, or whose facts are nowhere (the wrapper
    /// ended before writing them: a user or working dir refused, a command not found, the
    /// wrapper killed), is taken as it arrived.
    pub(super) async fn check_kept_exec(
        &self,
        pod: &str,
        stem: String,
        (end, known): (RawEnd, Option<Facts>),
        held: &[u8],
        stdout: &mut CappedSink,
        stderr: &mut CappedSink,
    ) -> Result<(RawEnd, Option<Unplaced>), SandboxError> {
        let RawEnd::Exited(code) = end else {
            stderr.write(held).await?;
            self.kept.add_stale(pod, stem);
            return Ok((end, None));
        };
        let facts = match (known, split_trailer(held)) {
            (known, Some((facts, own))) => {
                stderr.write(own).await?;
                known.unwrap_or(facts)
            }
            (Some(facts), None) => {
                stderr.write(held).await?;
                facts
            }
            (None, None) => {
                stderr.write(held).await?;
                // Killed by a signal, the wrapper itself most likely was (an OOM kill, an
                // eviction, a root agent's `kill -9 -1`): no facts were written. A read that
                // fails (the container ended) leaves the streams as they came, too.
                let facts = if code >= 128 {
                    None
                } else {
                    self.facts_file(pod, &stem, 1).await.unwrap_or(None)
                };
                match facts {
                    Some(facts) => {
                        self.kept.rereads.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            pod,
                            "an exec's facts did not arrive; read them from the pod"
                        );
                        facts
                    }
                    None => {
                        self.kept.add_stale(pod, stem);
                        return Ok((end, None));
                    }
                }
            }
        };
        let end = settled_end(pod, code, &facts);
        let Some(sha_out) = facts.sha_out.as_ref() else {
            self.kept.add_stale(pod, stem);
            if let Some(sent) = facts.halted {
                self.stopped_logs.halted(pod, sent);
            }
            return Ok((end, facts.unplaced));
        };
        for (stream, sink, size, sha) in [
            ("o", &mut *stdout, facts.out, sha_out),
            ("e", &mut *stderr, facts.err, &facts.sha_err),
        ] {
            let mut sink = Sink::Capped(sink);
            if sink.received().is_none() {
                continue;
            }
            self.complete(pod, &format!("{stem}.{stream}"), size, &mut sink)
                .await?;
            if sink.sha256().await?.is_some_and(|got| &got != sha) {
                return Err(lost(
                    pod,
                    format!("an exec's output arrived other than the pod's copy (sha256 {sha})"),
                ));
            }
        }
        // Past the cap nothing is kept to read again: the counts are the pod's.
        if let Some((out, err)) = facts.totals {
            for (sink, total) in [(stdout, out), (stderr, err)] {
                if sink.total < total {
                    tracing::debug!(
                        pod,
                        got = sink.total,
                        total,
                        "a stream lost bytes past the cap"
                    );
                    sink.total = total;
                }
            }
        }
        if facts.out + facts.err > REMOVE_NOW {
            self.remove_kept(pod, &stem).await;
        } else {
            self.kept.add_stale(pod, stem);
        }
        // Last: any exec into the pod forgets what a halt sent.
        if let Some(sent) = facts.halted {
            self.stopped_logs.halted(pod, sent);
        }
        Ok((end, facts.unplaced))
    }

    /// Remove the kept files of `stem` now (best effort: they go with the pod anyway).
    async fn remove_kept(&self, pod: &str, stem: &str) {
        let files = [
            format!("{stem}.o"),
            format!("{stem}.e"),
            format!("{stem}.f"),
            // A claimed exec's claim (`exec.rs`).
            format!("{stem}.c"),
        ];
        let mut args = vec!["-f"];
        args.extend(files.iter().map(String::as_str));
        let argv = toolbox_argv("rm", &args);
        let removed = self.harness_streamed(pod, &argv).await;
        if !matches!(removed, Ok((RawEnd::Exited(0), _, _))) {
            tracing::debug!(pod, stem, "removing kept output: {removed:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_read_only_whole() {
        let sha = "a".repeat(64);
        let line = format!("arbiter-kept 0 12 3 {sha} {sha}\nboom\n");
        let (facts, rest) = split_facts(line.as_bytes()).expect("facts");
        assert_eq!(
            facts,
            Facts {
                code: 0,
                out: 12,
                err: 3,
                sha_out: Some(sha.clone()),
                sha_err: sha.clone(),
                totals: None,
                unplaced: None,
                halted: None,
            }
        );
        assert_eq!(rest, b"boom\n");
        // The exec wrapper's: the streams' bytes in all, past the cap too.
        let line = format!("arbiter-kept 0 1000 3 {sha} {sha} t60000000:3\n");
        let (facts, _) = split_facts(line.as_bytes()).expect("facts");
        assert_eq!(facts.totals, Some((60_000_000, 3)));
        assert_eq!(facts.unplaced, None);
        let torn = format!("arbiter-kept 0 1000 3 {sha} {sha} t60000000\n");
        assert!(split_facts(torn.as_bytes()).is_none());
        // What a command carried and did not hold: its code, then the rest of the line.
        let line = format!("arbiter-kept 125 0 0 {sha} {sha} x95 removing /tests failed: busy\n");
        let (facts, _) = split_facts(line.as_bytes()).expect("facts");
        assert_eq!(
            facts.unplaced,
            Some(Unplaced {
                code: 95,
                message: "removing /tests failed: busy".into()
            })
        );
        // Cut anywhere before its newline, the line is no facts.
        let whole = format!("arbiter-kept 44 0 0 {sha} {sha}\n");
        for cut in 0..whole.len() {
            assert!(split_facts(&whole.as_bytes()[..cut]).is_none(), "{cut}");
        }
        assert!(split_facts(whole.as_bytes()).is_some());
        // The command's own stderr never stands in for the facts.
        assert!(split_facts(format!("arbiter-kept 0 1 2 {sha} nothex\n").as_bytes()).is_none());
        // A stream's stdout is counted, not digested; its stderr always is.
        let counted = format!("arbiter-kept 0 1 2 - {sha}\n");
        let counted = split_facts(counted.as_bytes());
        assert_eq!(counted.map(|(f, _)| f.sha_out), Some(None));
        assert!(split_facts(format!("arbiter-kept 0 1 2 {sha} -\n").as_bytes()).is_none());
        assert!(split_facts(format!("arbiter-kept 0 1 2 {sha}\n").as_bytes()).is_none());
        assert!(
            split_facts(format!("oops\narbiter-kept 0 1 2 {sha} {sha}\n").as_bytes()).is_none()
        );
        assert!(split_facts(format!("arbiter-kept 0 1 2 {sha} {sha} x\n").as_bytes()).is_none());
    }

    #[test]
    fn a_halting_commands_facts_say_whether_it_halted_and_carry_what_it_sent() {
        use super::super::base64_lines::encode;
        let sha = "a".repeat(64);
        let archive = b"an archive of /logs/verifier".to_vec();
        let digest = crate::digest::sha256_hex(&archive);
        let sent = format!("l{}:{digest}:{}", archive.len(), encode(&archive));
        let facts = |tail: &str| {
            let line = format!("arbiter-kept 0 1 2 {sha} {sha} t1:2{tail}\n");
            split_facts(line.as_bytes()).map(|(f, _)| f)
        };
        assert_eq!(facts("").unwrap().halted, None, "not a halting command");
        assert_eq!(
            facts(" s0").unwrap().halted,
            Some(None),
            "halted, nothing sent"
        );
        assert_eq!(facts(" s1").unwrap().halted, None, "processes were left");
        let got = facts(&format!(" s0 {sent}")).unwrap();
        assert_eq!(got.halted, Some(Some(archive.clone())));
        assert_eq!(got.totals, Some((1, 2)));
        // Sent other than announced: halted, the archive not used.
        let short = format!("l{}:{digest}:{}", archive.len(), encode(&archive[1..]));
        assert_eq!(facts(&format!(" s0 {short}")).unwrap().halted, Some(None));
        let other = format!("l{}:{}:{}", archive.len(), "b".repeat(64), encode(&archive));
        assert_eq!(facts(&format!(" s0 {other}")).unwrap().halted, Some(None));
        assert_eq!(facts(" s0 lnonsense").unwrap().halted, Some(None));
        // A carried failure still reads after them.
        let unplaced = facts(" s0 x95 busy").unwrap();
        assert_eq!(unplaced.unplaced.map(|u| u.code), Some(95));
    }

    #[test]
    fn base64_decodes_what_the_toolbox_writes() {
        use super::super::base64_lines::{decode, encode};
        for n in 0..70 {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(decode(&encode(&bytes)), Some(bytes), "{n}");
        }
        assert_eq!(decode("aGk="), Some(b"hi".to_vec()));
        for bad in ["aGk", "a===", "aG=k", "aGk=aGk=", "aG!="] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }

    /// KEEP run by the toolbox's shell, in both modes: the facts line gives the exit code,
    /// and each file's size and sha256 (file mode: one `wc` and one `sha256sum` of both
    /// files); stale stems are removed first and its own files are gone after it.
    #[test]
    fn the_facts_line_counts_and_digests_both_kept_files() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join("keep-old");
        for ext in ["o", "e", "f", "c"] {
            std::fs::write(stale.with_extension(ext), b"x").unwrap();
        }
        for (mode, stem) in [("file", "keep-x"), ("stream", "keep-y")] {
            let stem = dir.path().join(stem);
            let args = [
                stem.to_str().unwrap(),
                mode,
                "1",
                stale.to_str().unwrap(),
                "sh",
                "-c",
                "printf hello; printf err >&2; exit 3",
            ];
            let Some(mut cmd) = super::super::hot::tests::toolbox_sh(KEEP, &["keep"]) else {
                return;
            };
            let out = cmd.args(args).output().unwrap();
            assert_eq!(out.status.code(), Some(3), "{mode}");
            let (facts, rest) = split_facts(&out.stderr).expect("a facts line");
            assert_eq!(facts.code, 3);
            assert_eq!((facts.out, facts.err), (5, 3));
            let sha = crate::digest::sha256_hex;
            assert_eq!(facts.sha_out, Some(sha(b"hello")));
            assert_eq!(facts.sha_err, sha(b"err"));
            assert_eq!(rest, b"err");
            assert_eq!(out.stdout, b"hello");
        }
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "keep-x.e", "keep-x.f", "keep-x.o", "keep-y.e", "keep-y.f", "keep-y.o"
            ],
            "the stale stem's files and the stream's own are gone"
        );
    }

    #[test]
    fn a_streamed_output_is_kept_up_to_the_file_bound() {
        let bound = KEEP_FILE_MAX.to_string();
        assert_eq!(KEEP.matches(bound.as_str()).count(), 2, "{KEEP}");
    }

    #[test]
    fn stale_stems_are_handed_over_once() {
        let kept = KeptFiles::default();
        kept.add_stale("p", "a".into());
        kept.add_stale("p", "b".into());
        kept.add_stale("q", "c".into());
        assert_eq!(kept.take_stale("p"), ["a", "b"]);
        assert!(kept.take_stale("p").is_empty());
        kept.forget("q");
        assert!(kept.take_stale("q").is_empty());
    }
}
