//! `arbiter-relay PORT [-- ARGV...]`: the in-pod end of a loopback relay (SPEC §11, §14).
//!
//! A pod with network `none` has only its loopback. This program, run by arbiter over one
//! pods/exec stream from the read-only harness toolbox, listens on `127.0.0.1:PORT` inside the
//! pod and carries every connection made to it over its own stdin and stdout, multiplexed,
//! to arbiter's host, which connects each one to the one endpoint it serves there (the model
//! gateway, the egress allowlist proxy). Nothing needs ingress to arbiter's machine or egress
//! from the pod; one exec carries every connection (none is set up per connection).
//!
//! With an `ARGV` after `--` the relay also carries that command, so the exec that starts the
//! relay is the command's own too (one exec fewer in the pod): the command's stdin, stdout,
//! stderr and exit code travel as frames of id 0 beside the connections'. The relay serves
//! on once the command ended (a later command of the pod may use its port), until its stdin
//! ends.
//!
//! Frames, both ways: `kind: u8`, `id: u32` big-endian, `len: u32` big-endian, `len` bytes.
//! Connections have ids from 1; id 0 is the carried command's.
//! - to arbiter (stdout): `HELLO` once listening (id 0, payload `arbiter-relay 2 PORT`);
//!   `OPEN id bytes` for a new connection, with what its client sent first (or nothing);
//!   `DATA id bytes`; `EOF id` when the pod's client
//!   half-closed; `GONE id` when its socket failed; `OUT 0 bytes` and `ERR 0 bytes`, what
//!   the carried command wrote to its stdout and stderr; `EXIT 0 code` (decimal; 128 + the
//!   signal that killed it) once it exited and both its streams ended.
//! - from arbiter (stdin): `DATA id bytes`; `EOF id` (arbiter's side ended: the socket is
//!   shut for writing, a real half-close); `GONE id` (shut both ways). For id 0: the carried
//!   command's stdin, closed at `EOF` or `GONE`.
//!
//! The relay makes itself non-dumpable first: no process of the pod without `CAP_SYS_PTRACE`
//! can trace it or write its memory, though they run as the same user (a carried command's
//! wrapper spares the relay when it kills what the command left behind). It blocks SIGTERM,
//! SIGINT and SIGHUP (a deadline's `kill -TERM -1` leaves it serving through the grace
//! period); SIGKILL ends it.
//!
//! `arbiter-relay keep CAP STEM -- ARGV...` is another tool in the same file (`keep.rs`): the
//! Kubernetes backend's exec wrapper runs a command through it to keep its output in the pod.
//! `arbiter-relay walk FORMAT [ROOT]` is a third (`walk.rs`): the walk of a root filesystem
//! the backend's change set reads.
//!
//! The end of stdin (arbiter or its exec gone) ends the process and every connection. A
//! malformed frame from stdin ends it too. Exit codes: 0 stdin ended, 2 usage, 3 the port is
//! taken in the pod, 4 another listen error.

mod keep;
mod sha256;
mod walk;

use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

const HELLO: u8 = 0;
const OPEN: u8 = 1;
const DATA: u8 = 2;
const EOF: u8 = 3;
const GONE: u8 = 4;
const OUT: u8 = 5;
const ERR: u8 = 6;
const EXIT: u8 = 7;
/// The carried command's id.
const COMMAND: u32 = 0;
/// The largest frame either side sends (arbiter sends at most 64 KiB).
const MAX_FRAME: usize = 1 << 20;
/// How much of a socket one DATA frame carries at most.
const CHUNK: usize = 64 * 1024;
/// How long a new connection's first bytes are waited for, to go with its `OPEN`.
const FIRST_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

/// What arbiter sent for one connection.
enum Down {
    Data(Vec<u8>),
    Eof,
    Gone,
}

/// stdout as a plain file (a dup of fd 1): one `write` per frame. `io::stdout()` is
/// line-buffered, which would split a frame holding a newline into two writes.
type Out = Arc<Mutex<std::fs::File>>;
type Conns = Arc<Mutex<HashMap<u32, Sender<Down>>>>;

fn frame(kind: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    f.push(kind);
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// One whole frame to stdout; a failure means arbiter is gone: the process ends.
fn send(out: &Out, kind: u8, id: u32, payload: &[u8]) {
    send_all(out, &[frame(kind, id, payload)]);
}

/// Whole frames to stdout in one write.
fn send_all(out: &Out, frames: &[Vec<u8>]) {
    let bytes = frames.concat();
    let mut o = out.lock().unwrap_or_else(PoisonError::into_inner);
    if o.write_all(&bytes).and_then(|()| o.flush()).is_err() {
        std::process::exit(0);
    }
}

/// The C library's `sigset_t` on Linux (musl's, as glibc's): 1024 bits.
#[repr(C)]
struct SigSet([u64; 16]);

unsafe extern "C" {
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
    fn sigemptyset(set: *mut SigSet) -> i32;
    fn sigaddset(set: *mut SigSet, signal: i32) -> i32;
    fn pthread_sigmask(how: i32, set: *const SigSet, old: *mut SigSet) -> i32;
}
const PR_SET_DUMPABLE: i32 = 4;
const SIG_BLOCK: i32 = 0;
const SIGHUP: i32 = 1;
const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

fn main() {
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) changes only this process's dumpable flag.
    if unsafe { prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        eprintln!("cannot make the relay non-dumpable");
        std::process::exit(4);
    }
    // The deadline's SIGTERM to every process (`kill -TERM -1`) must not end the relay while
    // the command it carries (and the model gateway) have their grace period: blocked, here
    // and in every thread started after. A carried command starts with no signal blocked
    // (std empties the mask of what it spawns), so it gets the SIGTERM; SIGKILL ends both.
    // SAFETY: the set is initialised by sigemptyset before use; only this thread's mask
    // changes, before any other thread exists.
    unsafe {
        let mut set = SigSet([0; 16]);
        sigemptyset(&mut set);
        for signal in [SIGHUP, SIGINT, SIGTERM] {
            sigaddset(&mut set, signal);
        }
        pthread_sigmask(SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "keep") {
        keep::run(&args[1..]);
    }
    if args.first().is_some_and(|a| a == "walk") {
        walk::run(&args[1..]);
    }
    let (port, command) = match args.split_first() {
        Some((p, rest)) => match (p.parse::<u16>(), rest) {
            (Ok(p), []) => (p, None),
            (Ok(p), [dash, argv @ ..]) if dash == "--" && !argv.is_empty() => {
                (p, Some(argv.to_vec()))
            }
            _ => usage(),
        },
        None => usage(),
    };
    let listener = match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
        Ok(l) => l,
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            eprintln!("busy: 127.0.0.1:{port} is taken in the pod");
            std::process::exit(3);
        }
        Err(e) => {
            eprintln!("cannot listen on 127.0.0.1:{port}: {e}");
            std::process::exit(4);
        }
    };
    let out = match io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) => {
            eprintln!("cannot use stdout: {e}");
            std::process::exit(4);
        }
    };
    let out: Out = Arc::new(Mutex::new(out));
    let conns: Conns = Arc::new(Mutex::new(HashMap::new()));
    send(&out, HELLO, 0, format!("arbiter-relay 2 {port}").as_bytes());
    if let Some(argv) = command {
        carry(&argv, &out, &conns);
    }
    {
        let (out, conns) = (out.clone(), conns.clone());
        thread::spawn(move || accept(listener, out, conns));
    }
    demux(&conns);
    std::process::exit(0);
}

fn usage() -> ! {
    eprintln!(
        "usage: arbiter-relay PORT [-- ARGV...] | arbiter-relay keep CAP STEM -- ARGV... | arbiter-relay walk FORMAT [ROOT]"
    );
    std::process::exit(2);
}

/// Start the carried command: its stdin fed from id 0's frames, its stdout and stderr sent
/// as `OUT` and `ERR`, then `EXIT` once it exited and both streams ended.
fn carry(argv: &[String], out: &Out, conns: &Conns) {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let spawned = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let why = format!("the relay could not run {}: {e}\n", argv[0]);
            send_all(
                out,
                &[
                    frame(ERR, COMMAND, why.as_bytes()),
                    frame(EXIT, COMMAND, b"127"),
                ],
            );
            return;
        }
    };
    let (tx, rx) = channel::<Down>();
    conns
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(COMMAND, tx);
    if let Some(mut stdin) = child.stdin.take() {
        thread::spawn(move || {
            for msg in rx {
                match msg {
                    // A command that closed its stdin drops the rest.
                    Down::Data(bytes) => {
                        if stdin.write_all(&bytes).is_err() {
                            return;
                        }
                    }
                    Down::Eof | Down::Gone => return,
                }
            }
        });
    }
    let pipe = |r: Option<Box<dyn Read + Send>>, kind: u8| {
        let out = out.clone();
        thread::spawn(move || {
            let Some(mut r) = r else { return };
            let mut buf = vec![0u8; CHUNK];
            loop {
                match r.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => send(&out, kind, COMMAND, &buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        })
    };
    let stdout = pipe(child.stdout.take().map(|s| Box::new(s) as _), OUT);
    let stderr = pipe(child.stderr.take().map(|s| Box::new(s) as _), ERR);
    let out = out.clone();
    thread::spawn(move || {
        let _ = stdout.join();
        let _ = stderr.join();
        let code = match child.wait() {
            Ok(status) => status
                .code()
                .or_else(|| status.signal().map(|s| 128 + s))
                .unwrap_or(125),
            Err(_) => 125,
        };
        send(&out, EXIT, COMMAND, code.to_string().as_bytes());
    });
}

/// Every new connection: announced, then a reader (socket → stdout) and a writer (what
/// arbiter sends → socket) of its own, so one slow client never holds up another.
fn accept(listener: TcpListener, out: Out, conns: Conns) {
    let mut next: u32 = 0;
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let Ok(writer) = conn.try_clone() else {
            continue;
        };
        next = next.checked_add(1).unwrap_or(1);
        let id = next;
        let (tx, rx) = channel::<Down>();
        conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, tx);
        thread::spawn(move || {
            let mut w = writer;
            for msg in rx {
                match msg {
                    Down::Data(bytes) => {
                        if w.write_all(&bytes).is_err() {
                            let _ = w.shutdown(Shutdown::Both);
                            return;
                        }
                    }
                    Down::Eof => {
                        let _ = w.shutdown(Shutdown::Write);
                        return;
                    }
                    Down::Gone => {
                        let _ = w.shutdown(Shutdown::Both);
                        return;
                    }
                }
            }
        });
        let out = out.clone();
        thread::spawn(move || read_socket(conn, id, &out));
    }
}

/// A connection's reader. `OPEN` carries what the client sent first, when it sent it within
/// [`FIRST_WAIT`] (an HTTP client writes its request at once): one write to stdout rather than
/// two, since two small writes in a row can wait out a delayed ACK (~40 ms) on a hop of the
/// exec stream. A client that waits for the server to speak first gets an empty `OPEN` then.
fn read_socket(mut conn: TcpStream, id: u32, out: &Out) {
    let mut buf = vec![0u8; CHUNK];
    let _ = conn.set_read_timeout(Some(FIRST_WAIT));
    let first = loop {
        match conn.read(&mut buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => break other,
        }
    };
    let _ = conn.set_read_timeout(None);
    match first {
        Ok(0) => return send_all(out, &[frame(OPEN, id, &[]), frame(EOF, id, &[])]),
        Ok(n) => send(out, OPEN, id, &buf[..n]),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            send(out, OPEN, id, &[]);
        }
        Err(_) => return send_all(out, &[frame(OPEN, id, &[]), frame(GONE, id, &[])]),
    }
    loop {
        match conn.read(&mut buf) {
            Ok(0) => return send(out, EOF, id, &[]),
            Ok(n) => send(out, DATA, id, &buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return send(out, GONE, id, &[]),
        }
    }
}

/// Frames from arbiter, until stdin ends or a frame is malformed.
fn demux(conns: &Conns) {
    let mut input = BufReader::with_capacity(CHUNK + 9, io::stdin().lock());
    let mut head = [0u8; 9];
    loop {
        if input.read_exact(&mut head).is_err() {
            return;
        }
        let kind = head[0];
        let id = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        let len = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) as usize;
        if len > MAX_FRAME {
            return;
        }
        let mut payload = vec![0u8; len];
        if input.read_exact(&mut payload).is_err() {
            return;
        }
        let msg = match kind {
            DATA => Down::Data(payload),
            EOF => Down::Eof,
            GONE => Down::Gone,
            _ => return,
        };
        let mut map = conns.lock().unwrap_or_else(PoisonError::into_inner);
        let last = !matches!(msg, Down::Data(_));
        if let Some(tx) = map.get(&id) {
            // A writer that already ended (its socket failed) drops what comes after.
            let _ = tx.send(msg);
        }
        if last {
            map.remove(&id);
        }
    }
}
