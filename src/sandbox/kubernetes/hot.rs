//! A warm pod's first exec, opened before the pod is claimed (warm.rs): the claiming trial's
//! first command runs in it without waiting for an exec to be opened.
//!
//! Opening an exec is the slow part of a command in a pod that runs: the apiserver, the
//! kubelet, containerd and runc start a process in the container (under load, most of half a
//! second). A warm pod's pool opens one once the pod started, running [`TRAMPOLINE`]: it says
//! it runs (a marker line on stderr, read here and nowhere else), then waits for its argv on
//! stdin. The first exec of the claimed pod (`exec.rs`) sends its argv, waits
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

/// Says it runs, reads its argv (shell words ending with a NUL, read by the shell itself:
/// no process of its own), says it took it, then runs it in its own place. End of stdin
/// first (the pool dropped it): exits, having run nothing.
pub(super) const TRAMPOLINE: &str = r#"printf '\037arbiter-hot\n' >&2
IFS= read -r -d '' s || exit 0
printf '\037arbiter-go\n' >&2
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

/// What makes the trampoline run `argv`: its words, each quoted for the shell (`'…'`, a `'`
/// as `'\''`), then a NUL (no argument of an exec holds one).
pub(super) fn argv_line(argv: &[String]) -> Vec<u8> {
    let words: Vec<String> = argv
        .iter()
        .map(|a| super::base64_lines::quoted(a))
        .collect();
    let mut line = words.join(" ").into_bytes();
    line.push(0);
    line
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn the_argv_line_is_the_shells_words_ending_with_a_nul() {
        let argv = vec![
            "/.arbiter/toolbox/busybox".to_string(),
            "it's".to_string(),
            "two\nlines".to_string(),
            String::new(),
        ];
        let line = argv_line(&argv);
        assert_eq!(line.last(), Some(&0));
        assert_eq!(
            String::from_utf8(line[..line.len() - 1].to_vec()).unwrap(),
            "'/.arbiter/toolbox/busybox' 'it'\\''s' 'two\nlines' ''"
        );
    }

    /// The toolbox's file `name` (its busybox: the shell every harness script runs in, in a
    /// pod), or `None` (skip) when no toolbox is built and Docker is not required
    /// (scripts/bootstrap builds it; CI requires it).
    pub(in super::super) fn toolbox_file(name: &str) -> Option<std::path::PathBuf> {
        match crate::sandbox::toolbox::locate_toolbox() {
            Ok(tb) => Some(tb.dir.join(name)),
            Err(e) if std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() != Ok("1") => {
                eprintln!("skipping: {e}");
                None
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// A toolbox shell running `script` (its `/.arbiter/toolbox/` this host's toolbox
    /// directory) with `args`; `None`: no toolbox (skip).
    pub(in super::super) fn toolbox_sh(
        script: &str,
        args: &[&str],
    ) -> Option<std::process::Command> {
        let busybox = toolbox_file("busybox")?;
        let dir = busybox.parent()?.to_string_lossy().to_string();
        let mut cmd = std::process::Command::new(&busybox);
        cmd.args([
            "sh",
            "-c",
            &script.replace("/.arbiter/toolbox/", &format!("{dir}/")),
        ])
        .args(args);
        Some(cmd)
    }

    /// `script` (ending in the trampoline) run by the toolbox's shell with `args`, sent
    /// `argv`'s words and then `rest` on its stdin, to its end; `None`: no toolbox (skip).
    pub(in super::super) fn sent_to(
        script: &str,
        args: &[&str],
        argv: &[String],
        rest: &[u8],
    ) -> Option<std::process::Output> {
        fed(script, args, &[&argv_line(argv)[..], rest].concat())
    }

    /// `script` run by the toolbox's shell with `args`, `stdin` on its stdin, to its end.
    fn fed(script: &str, args: &[&str], stdin: &[u8]) -> Option<std::process::Output> {
        use std::io::Write;
        use std::process::Stdio;
        let mut child = toolbox_sh(script, args)?
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        Some(child.wait_with_output().unwrap())
    }

    /// The trampoline, run by the toolbox's shell: it says it runs, then runs the argv it is
    /// sent, word for word, with the rest of its stdin as the command's.
    #[test]
    fn the_trampoline_runs_what_it_is_sent() {
        let argv = vec![
            "sh".to_string(),
            "-c".to_string(),
            "printf '%s|' \"$@\"; cat".to_string(),
            "x".to_string(),
            "it's".to_string(),
            "two\nlines".to_string(),
            String::new(),
        ];
        let Some(out) = sent_to(TRAMPOLINE, &[], &argv, b"rest of stdin") else {
            return;
        };
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
        // Dropped before its argv, or in the middle of it: it runs nothing.
        for sent in [&b""[..], b"'sh' '-c' 'echo ran'"] {
            let out = fed(TRAMPOLINE, &[], sent).unwrap();
            assert!(out.status.success());
            assert!(out.stdout.is_empty(), "{:?}", out.stdout);
            assert_eq!(out.stderr, READY);
        }
    }
}
