//! `arbiter-relay PORT`: the in-pod end of a loopback relay (SPEC §11, §14).
//!
//! A pod with network `none` has only its loopback. This program, run by arbiter over one
//! pods/exec stream from the read-only harness toolbox, listens on `127.0.0.1:PORT` inside the
//! pod and carries every connection made to it over its own stdin and stdout, multiplexed,
//! to arbiter's host, which connects each one to the one endpoint it serves there (the model
//! gateway, the egress allowlist proxy). Nothing needs ingress to arbiter's machine or egress
//! from the pod; one exec carries every connection (none is set up per connection).
//!
//! Frames, both ways: `kind: u8`, `id: u32` big-endian, `len: u32` big-endian, `len` bytes.
//! - to arbiter (stdout): `HELLO` once listening (id 0, payload `arbiter-relay 1 PORT`);
//!   `OPEN id bytes` for a new connection, with what its client sent first (or nothing);
//!   `DATA id bytes`; `EOF id` when the pod's client
//!   half-closed; `GONE id` when its socket failed.
//! - from arbiter (stdin): `DATA id bytes`; `EOF id` (arbiter's side ended: the socket is
//!   shut for writing, a real half-close); `GONE id` (shut both ways).
//!
//! The end of stdin (arbiter or its exec gone) ends the process and every connection. A
//! malformed frame from stdin ends it too. Exit codes: 0 stdin ended, 2 usage, 3 the port is
//! taken in the pod, 4 another listen error.

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

fn main() {
    let port: u16 = match std::env::args().nth(1).map(|p| p.parse()) {
        Some(Ok(p)) => p,
        _ => {
            eprintln!("usage: arbiter-relay PORT");
            std::process::exit(2);
        }
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
    send(&out, HELLO, 0, format!("arbiter-relay 1 {port}").as_bytes());
    {
        let (out, conns) = (out.clone(), conns.clone());
        thread::spawn(move || accept(listener, out, conns));
    }
    demux(&conns);
    std::process::exit(0);
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
