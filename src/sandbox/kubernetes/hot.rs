//! A warm pod's first exec, opened before the pod is claimed (warm.rs): the claiming trial's
//! first command runs in it without waiting for an exec to be opened.
//!
//! Opening an exec is the slow part of a command in a pod that runs: the apiserver, the
//! kubelet, containerd and runc start a process in the container (under load, most of half a
//! second). A warm pod's pool opens one once the pod started, running [`TRAMPOLINE`]: it says
//! it runs (a marker line on stderr, read here and nowhere else), then waits for one line on
//! stdin. The first exec of the claimed pod (`exec.rs`) sends its argv as that line, waits
//! for the trampoline to say it took it (a second marker line), then sends its own stdin; the
//! trampoline replaces itself with that argv, so what runs, and what the streams carry from
//! then on, is what a freshly opened exec would have run and carried.
//!
//! The request count does not change (the open exec is the first command's). A trampoline
//! whose stream ended before the claim is dropped and the command opens its own exec; one
//! that does not say it took the argv fails the command as the harness's error (it may have
//! run it: never asked again elsewhere). Dropping one closes its stdin and the trampoline
//! exits without running anything.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams, AttachedProcess};
use tokio::io::{AsyncReadExt, ReadHalf, SimplexStream, WriteHalf};

use crate::sandbox::toolbox::toolbox_argv;

/// What the trampoline prints on stderr once it runs (nothing else comes before its argv).
pub(super) const READY: &[u8] = b"\x1farbiter-hot\n";

/// What it prints on stderr once it read its argv, before it runs it.
pub(super) const TAKEN: &[u8] = b"\x1farbiter-go\n";

/// How long the trampoline may take to say it runs, or that it took its argv.
const READY_WAIT: Duration = Duration::from_secs(30);

/// Says it runs, reads one line (the argv: base64 of shell words), says it took it, then runs
/// it in its own place. End of stdin first (the pool dropped it): exits, having run nothing.
pub(super) const TRAMPOLINE: &str = r#"B=/.arbiter/toolbox/busybox
printf '\037arbiter-hot\n' >&2
IFS= read -r l || exit 0
printf '\037arbiter-go\n' >&2
s=$(printf %s "$l" | $B base64 -d) || exit 125
eval "set -- $s" || exit 125
exec "$@""#;

/// A command's end as its exec reports it.
pub(super) type StatusFuture = Pin<Box<dyn Future<Output = Option<Status>> + Send>>;

/// An exec opened ahead, its streams taken.
pub(super) struct HotExec {
    /// The exec (none for a command a loopback relay carries: the relay's task holds its
    /// exec, `relay.rs`).
    pub process: Option<AttachedProcess>,
    pub stdin: Option<WriteHalf<SimplexStream>>,
    pub stdout: Option<ReadHalf<SimplexStream>>,
    pub stderr: Option<ReadHalf<SimplexStream>>,
    pub status: Option<StatusFuture>,
}

/// The parameters of every exec of a command (`exec.rs`'s and the trampoline's): its
/// output's buffers.
pub(super) fn attach_params(container: &str, stdin: bool) -> AttachParams {
    AttachParams::default()
        .container(container)
        .stdin(stdin)
        .stdout(true)
        .stderr(true)
        .max_stdin_buf_size(256 * 1024)
        .max_stdout_buf_size(256 * 1024)
        .max_stderr_buf_size(64 * 1024)
}

impl std::fmt::Debug for HotExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HotExec")
    }
}

impl HotExec {
    /// An opened exec, its streams and status taken.
    pub(super) fn of(mut process: AttachedProcess) -> HotExec {
        HotExec {
            stdin: process.stdin(),
            stdout: process.stdout(),
            stderr: process.stderr(),
            status: process.take_status().map(|f| Box::pin(f) as StatusFuture),
            process: Some(process),
        }
    }

    /// Open the trampoline in `container` of `pod`, and read its marker; why not.
    pub(super) async fn open(
        pods: &Api<Pod>,
        pod: &str,
        container: &str,
    ) -> Result<HotExec, String> {
        let argv = toolbox_argv("sh", &["-c", TRAMPOLINE]);
        let process = pods
            .exec(pod, argv, &attach_params(container, true))
            .await
            .map_err(|e| e.to_string())?;
        let mut hot = HotExec::of(process);
        hot.expect(READY).await?;
        Ok(hot)
    }

    /// Send the trampoline `line` (its argv, `exec.rs`) and wait until it says it took it;
    /// why not. Past this, what the streams carry is the command's.
    pub(super) async fn hand(&mut self, line: &[u8]) -> Result<(), String> {
        use tokio::io::AsyncWriteExt;
        let Some(stdin) = self.stdin.as_mut() else {
            return Err("no stdin".to_string());
        };
        stdin.write_all(line).await.map_err(|e| e.to_string())?;
        self.expect(TAKEN).await
    }

    /// Read `marker` from stderr, byte by byte up to its end (nothing of what follows is
    /// read here), within [`READY_WAIT`].
    async fn expect(&mut self, marker: &[u8]) -> Result<(), String> {
        let Some(stderr) = self.stderr.as_mut() else {
            return Err("no stderr".to_string());
        };
        let mut got = Vec::with_capacity(marker.len());
        let read = async {
            while got.len() < marker.len() {
                let mut b = [0u8; 1];
                match stderr.read(&mut b).await {
                    Ok(1) => got.push(b[0]),
                    _ => break,
                }
                if b[0] == b'\n' {
                    break;
                }
            }
        };
        if tokio::time::timeout(READY_WAIT, read).await.is_err() {
            return Err(format!("no word from it within {}s", READY_WAIT.as_secs()));
        }
        if got != marker {
            return Err(format!(
                "it said {:?}",
                String::from_utf8_lossy(&got).trim()
            ));
        }
        Ok(())
    }

    /// Close its exec, if it has one of its own.
    pub(super) fn abort(self) {
        if let Some(process) = self.process {
            process.abort();
        }
    }

    /// Whether its stream still runs: no status came (a trampoline that ended, or a
    /// connection that was lost, has one, or none for good).
    pub(super) fn alive(&mut self) -> bool {
        use futures_util::FutureExt;
        match self.status.as_mut() {
            Some(status) => status.as_mut().now_or_never().is_none(),
            None => false,
        }
    }
}

/// The line that makes the trampoline run `argv`: base64 of its words, each quoted for the
/// shell (`'…'`, a `'` as `'\''`), then a newline.
pub(super) fn argv_line(argv: &[String]) -> Vec<u8> {
    let words: Vec<String> = argv
        .iter()
        .map(|a| super::base64_lines::quoted(a))
        .collect();
    let mut line = super::base64_lines::encode(words.join(" ").as_bytes()).into_bytes();
    line.push(b'\n');
    line
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn the_argv_line_is_the_shells_words_in_base64() {
        let argv = vec![
            "/.arbiter/toolbox/busybox".to_string(),
            "it's".to_string(),
            "two\nlines".to_string(),
            String::new(),
        ];
        let line = argv_line(&argv);
        assert_eq!(line.last(), Some(&b'\n'));
        let text = String::from_utf8(line[..line.len() - 1].to_vec()).unwrap();
        assert!(!text.contains('\n'), "one line");
        let words = super::super::base64_lines::decode(&text).unwrap();
        assert_eq!(
            String::from_utf8(words).unwrap(),
            "'/.arbiter/toolbox/busybox' 'it'\\''s' 'two\nlines' ''"
        );
    }

    /// `script` (ending in the trampoline, the toolbox's `base64` the host's) run by a real
    /// shell with `args`, sent `argv`'s line and then `rest` on its stdin, to its end.
    pub(in super::super) fn sent_to(
        script: &str,
        args: &[&str],
        argv: &[String],
        rest: &[u8],
    ) -> std::process::Output {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let script = script.replace("$B base64", "base64");
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&argv_line(argv)).unwrap();
        stdin.write_all(rest).unwrap();
        drop(stdin);
        child.wait_with_output().unwrap()
    }

    /// The trampoline, run by a real shell: it says it runs, then runs the argv it is sent,
    /// word for word, with the rest of its stdin as the command's.
    #[test]
    fn the_trampoline_runs_what_it_is_sent() {
        use std::process::{Command, Stdio};
        let argv = vec![
            "sh".to_string(),
            "-c".to_string(),
            "printf '%s|' \"$@\"; cat".to_string(),
            "x".to_string(),
            "it's".to_string(),
            "two\nlines".to_string(),
            String::new(),
        ];
        let out = sent_to(TRAMPOLINE, &[], &argv, b"rest of stdin");
        assert!(out.status.success());
        assert_eq!(
            out.stderr,
            [READY, TAKEN].concat(),
            "its two words, and nothing else"
        );
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "it's|two\nlines||rest of stdin"
        );
        // Dropped before its argv: it runs nothing.
        let out = Command::new("sh")
            .args(["-c", &TRAMPOLINE.replace("$B base64", "base64")])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success());
        assert!(out.stdout.is_empty());
    }
}
