//! `arbiter-relay keep CAP STEM -- ARGV...`: runs ARGV with this process's stdin, passes its
//! stdout and stderr on as they come, keeps the first CAP bytes of each in `STEM.o` and
//! `STEM.e`, and once it exited and both streams ended writes `STEM.n`:
//! `CODE KEPT_OUT KEPT_ERR SHA256_OUT SHA256_ERR TOTAL_OUT TOTAL_ERR` (CODE: the exit code,
//! 128 + the signal that killed it; 127 when ARGV could not be run, 126 when it was not
//! executable). One process for what the Kubernetes backend's exec wrapper did with a fifo,
//! two `tee`s, two `dd`s, two `wc`s and the facts' `wc` and `sha256sum`.
//!
//! A stream whose receiver went away (the exec's stream cut) is still read to its end, kept
//! and counted. SIGHUP, SIGINT and SIGTERM are blocked here (main), not in ARGV: the
//! deadline's SIGTERM reaches the command, and what it writes in its grace period is kept.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::thread;

use crate::sha256::Sha256;

/// What one stream came to.
struct Kept {
    kept: u64,
    total: u64,
    sha: String,
}

pub fn run(args: &[String]) -> ! {
    let (cap, stem, argv) = match args {
        [cap, stem, dash, argv @ ..] if dash == "--" && !argv.is_empty() => match cap.parse() {
            Ok(cap) => (cap, stem, argv),
            Err(_) => usage(),
        },
        _ => usage(),
    };
    let open = |ext: &str| match File::create(format!("{stem}.{ext}")) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot keep output in {stem}.{ext}: {e}");
            std::process::exit(125);
        }
    };
    let (out_file, err_file) = (open("o"), open("e"));
    let spawned = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let (code, out, err) = match spawned {
        Ok(mut child) => {
            let out = child.stdout.take().map(|s| {
                let to = dup(io::stdout().as_fd());
                thread::spawn(move || pump(s, to, out_file, cap))
            });
            let err = child.stderr.take().map(|s| {
                let to = dup(io::stderr().as_fd());
                thread::spawn(move || pump(s, to, err_file, cap))
            });
            let joined = |h: Option<thread::JoinHandle<Kept>>| {
                h.and_then(|h| h.join().ok()).unwrap_or_else(nothing)
            };
            let (out, err) = (joined(out), joined(err));
            let code = match child.wait() {
                Ok(status) => {
                    use std::os::unix::process::ExitStatusExt;
                    status
                        .code()
                        .or_else(|| status.signal().map(|s| 128 + s))
                        .unwrap_or(125)
                }
                Err(_) => 125,
            };
            (code, out, err)
        }
        Err(e) => {
            // As a shell says it: on stderr, kept and counted like the command's own.
            let code = if e.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            let why = format!("{}: {e}\n", argv[0]);
            let to = dup(io::stderr().as_fd());
            (code, nothing(), pump(why.as_bytes(), to, err_file, cap))
        }
    };
    let facts = format!(
        "{code} {} {} {} {} {} {}\n",
        out.kept, err.kept, out.sha, err.sha, out.total, err.total
    );
    if let Err(e) = std::fs::write(format!("{stem}.n"), facts) {
        eprintln!("cannot write {stem}.n: {e}");
        std::process::exit(125);
    }
    std::process::exit(code)
}

fn usage() -> ! {
    eprintln!("usage: arbiter-relay keep CAP STEM -- ARGV...");
    std::process::exit(2);
}

fn nothing() -> Kept {
    Kept {
        kept: 0,
        total: 0,
        sha: Sha256::new().hex(),
    }
}

/// A file of its own on `fd` (one `write` per chunk, never buffered).
fn dup(fd: std::os::fd::BorrowedFd<'_>) -> Option<File> {
    fd.try_clone_to_owned().ok().map(File::from)
}

/// Everything `from` gives, on to `to` (until it fails) and its first `cap` bytes into `file`.
fn pump(mut from: impl Read, mut to: Option<File>, mut file: File, cap: u64) -> Kept {
    let mut buf = vec![0u8; 64 * 1024];
    let (mut kept, mut total, mut sha) = (0u64, 0u64, Sha256::new());
    let mut keeping = true;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        if to.as_mut().is_some_and(|t| t.write_all(chunk).is_err()) {
            to = None;
        }
        let room = cap.saturating_sub(kept).min(n as u64) as usize;
        if keeping && room > 0 {
            if file.write_all(&chunk[..room]).is_ok() {
                sha.update(&chunk[..room]);
                kept += room as u64;
            } else {
                // What the file holds is unknown now: its digest will not match, and the
                // host reads it as lost.
                keeping = false;
            }
        }
        total += n as u64;
    }
    Kept {
        kept,
        total,
        sha: sha.hex(),
    }
}
