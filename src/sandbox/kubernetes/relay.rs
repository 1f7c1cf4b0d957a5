//! A listener "on a pod's loopback" served from arbiter's host, carried over one pods/exec
//! stream (SPEC §11, §14): how a pod with network `none` reaches the model gateway and the
//! egress allowlist proxy, with no ingress to this machine and no egress from the pod.
//!
//! Inside the pod the toolbox's static `relay` (`docker/toolbox/relay`, run as root from the
//! read-only toolbox volume, as the busybox is) listens on `127.0.0.1:PORT` and multiplexes
//! every connection made to it over its stdin and stdout: frames of `kind: u8`, `id: u32`,
//! `len: u32` (big-endian), `len` bytes. Here each `OPEN` (with what the client sent first,
//! so a new HTTP connection is one write, not two: see the relay) becomes a TCP connection to
//! the host-side listener (what the gateway serves), and bytes, half-closes (`EOF`) and
//! failures (`GONE`) are carried both ways. One exec per relay, none per connection.
//!
//! The port is the same on both sides: the host-side listener binds the requested port on an
//! address of the host's loopback (`127.a.b.c`) picked at random, so an agent's configuration
//! naming the port (Codex's `config.toml`) stays right; where that port is taken on every
//! address tried it listens on an ephemeral port of 127.0.0.1 and the pod's relay uses that
//! one (the caller's port rewrite covers it).
//!
//! What the agent could forge: frames on the exec's stdout, were it to take over the relay's
//! process. Nothing follows from one but another connection to the same host-side listener —
//! which the agent may open anyway through the relay — and at most [`MAX_CONNECTIONS`] are
//! carried at once; an oversized or unknown frame ends the relay. A relay holds a clone of
//! its host listener, so its address is never free for another process while the pod may
//! still connect; it ends with its pod (the exec's stream ends).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadHalf, SimplexStream, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinSet;

use super::KubernetesSandbox;
use super::ended::Ended;
use super::exit_status::{exit_code_of, not_running_yet, status_of};
use super::hot::HotExec;
use crate::sandbox::{ContainerId, SandboxError};

/// Connections one relay carries at once; further ones are refused (`GONE`) at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// How long the in-pod relay may take to listen.
const READY_WAIT: Duration = Duration::from_secs(30);
/// Random host-loopback addresses tried for the requested port before an ephemeral port.
const ADDRESS_TRIES: usize = 8;
/// The largest frame accepted from the pod (the relay sends at most 64 KiB).
const MAX_FRAME: usize = 1 << 20;
/// How much of the host side one frame to the pod carries at most.
const CHUNK: usize = 64 * 1024;

pub(crate) const HELLO: u8 = 0;
pub(crate) const OPEN: u8 = 1;
pub(crate) const DATA: u8 = 2;
pub(crate) const EOF: u8 = 3;
pub(crate) const GONE: u8 = 4;
pub(crate) const OUT: u8 = 5;
pub(crate) const ERR: u8 = 6;
pub(crate) const EXIT: u8 = 7;
/// The id of the command a relay carries (connections have ids from 1).
pub(crate) const COMMAND: u32 = 0;

/// Why a relay could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("cannot listen on the host's loopback: {0}")]
    Bind(#[source] std::io::Error),
    #[error("port {port} is taken inside pod {pod}")]
    Busy { pod: String, port: u16 },
    #[error("the relay into pod {pod} did not start: {message}")]
    Start { pod: String, message: String },
}

impl From<RelayError> for SandboxError {
    fn from(e: RelayError) -> Self {
        SandboxError::Refused {
            op: "loopback listener",
            message: e.to_string(),
        }
    }
}

/// One frame, encoded.
pub(crate) fn frame(kind: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    f.push(kind);
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The next frame from `r`: `Ok(None)` at a clean end between frames; an error for a
/// truncated or oversized one.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
) -> std::io::Result<Option<(u8, u32, Vec<u8>)>> {
    let mut head = [0u8; 9];
    match r.read_exact(&mut head[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    r.read_exact(&mut head[1..]).await?;
    let id = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    let len = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!("a frame of {len} bytes")));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await?;
    Ok(Some((head[0], id, payload)))
}

/// The host side: `port` on a random `127.a.b.c` (`a`, `b` non-zero so it is never
/// 127.0.0.x), else an ephemeral port of 127.0.0.1.
pub(crate) fn host_listener(port: u16) -> std::io::Result<TcpListener> {
    if port != 0 {
        for _ in 0..ADDRESS_TRIES {
            let mut r = [0u8; 3];
            if getrandom::fill(&mut r).is_err() {
                break;
            }
            let ip = Ipv4Addr::new(127, r[0].max(1), r[1].max(1), r[2].clamp(1, 254));
            match TcpListener::bind((ip, port)) {
                Ok(l) => return Ok(l),
                Err(e) => tracing::debug!(%ip, port, "host side of a relay: {e}"),
            }
        }
    }
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
}

/// The argv of the in-pod relay listening on `port`: the toolbox's own file, run as it is.
fn relay_argv(port: u16) -> Vec<String> {
    vec![super::toolbox_maps::relay_path(), port.to_string()]
}

/// What the pod sent for one connection.
enum Up {
    Data(Vec<u8>),
    Eof,
    Gone,
}

/// A loopback listener whose relay is not started yet (`Sandbox::loopback_listener` on a pod
/// that runs): the pod's next command starts it and is carried by it, one exec for both
/// (`exec.rs`). Dropped unused, the listener's pod end never listens.
#[derive(Debug)]
pub(super) struct Carrier {
    /// A clone of the host listener, so its address stays taken while the pod may connect.
    keep: TcpListener,
    addr: SocketAddr,
}

impl Carrier {
    /// The argv of the relay carrying `command`.
    pub(super) fn argv(&self, command: &[String]) -> Vec<String> {
        let mut argv = relay_argv(self.addr.port());
        argv.push("--".to_string());
        argv.extend(command.iter().cloned());
        argv
    }
}

/// Why a relay's exec did not greet.
pub(super) enum Ungreeted {
    /// Its container does not run yet: nothing ran (the exec's status says so).
    NotRunning(String),
    Failed(SandboxError),
}

impl From<SandboxError> for Ungreeted {
    fn from(e: SandboxError) -> Self {
        Ungreeted::Failed(e)
    }
}

impl KubernetesSandbox {
    /// [`Sandbox::loopback_listener`](crate::sandbox::Sandbox::loopback_listener): a relay
    /// from `127.0.0.1:port` inside the pod to the returned listener on this host. Started by
    /// the pod's next command (a [`Carrier`]) when the pod runs and has none waiting yet; else
    /// in an exec of its own now.
    pub(super) async fn relay_listener(
        &self,
        id: &ContainerId,
        port: u16,
    ) -> Result<TcpListener, SandboxError> {
        let pod = id.as_str().to_string();
        let listener = host_listener(port).map_err(RelayError::Bind)?;
        let addr = listener.local_addr().map_err(RelayError::Bind)?;
        let keep = listener.try_clone().map_err(RelayError::Bind)?;
        let carrier = Carrier { keep, addr };
        if !super::names::is_sidecar(&pod) && !self.is_unconfirmed(&pod).await {
            let mut waiting = self.carriers.lock().unwrap_or_else(|e| e.into_inner());
            if let std::collections::hash_map::Entry::Vacant(e) = waiting.entry(pod.clone()) {
                tracing::debug!(%pod, %addr, "loopback relay: started by the next command");
                e.insert(carrier);
                return Ok(listener);
            }
        }
        self.start_relay(&pod, carrier).await?;
        Ok(listener)
    }

    /// The relay waiting for `pod`'s next command (only a pod that runs has one), taken.
    pub(super) fn take_carrier(&self, pod: &str) -> Option<Carrier> {
        self.carriers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pod)
    }

    /// A pod that stopped or is gone has no relay to start (the stop ends every process).
    pub(super) fn forget_carrier(&self, pod: &str) {
        self.carriers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pod);
    }

    /// The relay of `carrier` in an exec of its own.
    async fn start_relay(&self, pod: &str, carrier: Carrier) -> Result<(), SandboxError> {
        let argv = relay_argv(carrier.addr.port());
        // A relay that did not start is an error: a pod handed over early is confirmed first.
        self.ensure_confirmed(pod).await?;
        let mut exec = HotExec::of(self.attach(pod, &argv, true).await?);
        match self.greeted(pod, carrier.addr.port(), &mut exec).await {
            Ok(()) => {}
            Err(Ungreeted::Failed(e)) => return Err(e),
            Err(Ungreeted::NotRunning(message)) => {
                return Err(RelayError::Start {
                    pod: pod.to_string(),
                    message,
                }
                .into());
            }
        }
        let Some((stdout, stdin)) = both(&mut exec) else {
            return Err(no_streams(pod).into());
        };
        tracing::debug!(%pod, addr = %carrier.addr, "loopback relay ready");
        let pod = pod.to_string();
        tokio::spawn(async move {
            serve(stdout, stdin, carrier.addr, None).await;
            tracing::debug!(%pod, addr = %carrier.addr, "loopback relay ended");
            drop((exec, carrier.keep));
        });
        Ok(())
    }

    /// The exec of a command carried by `carrier`'s relay (opened with [`Carrier::argv`]),
    /// greeted: the relay serves its connections from now on, and what is returned carries
    /// the command's streams and exit code as an exec's own would. `stdin`: the command reads
    /// one (else its stdin is closed at once).
    pub(super) async fn carried(
        &self,
        pod: &str,
        carrier: &Carrier,
        mut exec: HotExec,
        stdin: bool,
    ) -> Result<HotExec, Ungreeted> {
        self.greeted(pod, carrier.addr.port(), &mut exec).await?;
        let Some((stdout, to_pod)) = both(&mut exec) else {
            return Err(Ungreeted::Failed(no_streams(pod).into()));
        };
        let keep = carrier
            .keep
            .try_clone()
            .map_err(|e| SandboxError::from(RelayError::Bind(e)))?;
        let (out_r, out_w) = tokio::io::simplex(256 * 1024);
        let (err_r, err_w) = tokio::io::simplex(64 * 1024);
        let (in_r, in_w) = tokio::io::simplex(256 * 1024);
        let (exit_tx, exit_rx) = tokio::sync::oneshot::channel::<i64>();
        let command = Command {
            stdin: stdin.then_some(in_r),
            out: out_w,
            err: err_w,
            exit: exit_tx,
        };
        let (addr, pod) = (carrier.addr, pod.to_string());
        tracing::debug!(%pod, %addr, "loopback relay ready, carrying a command");
        tokio::spawn(async move {
            serve(stdout, to_pod, addr, Some(command)).await;
            tracing::debug!(%pod, %addr, "loopback relay ended");
            drop((exec, keep));
        });
        Ok(HotExec {
            process: None,
            stdin: stdin.then_some(in_w),
            stdout: Some(out_r),
            stderr: Some(err_r),
            status: Some(Box::pin(async move { exit_rx.await.ok().map(status_of) })),
        })
    }

    /// Read the relay's greeting from `exec`'s stdout; why it did not come.
    async fn greeted(&self, pod: &str, inside: u16, exec: &mut HotExec) -> Result<(), Ungreeted> {
        let Some(stdout) = exec.stdout.as_mut().filter(|_| exec.stdin.is_some()) else {
            return Err(Ungreeted::Failed(no_streams(pod).into()));
        };
        let pod = pod.to_string();
        let hello = tokio::time::timeout(READY_WAIT, read_frame(stdout)).await;
        let expected = format!("arbiter-relay 2 {inside}");
        let failed = |e: SandboxError| Err(Ungreeted::Failed(e));
        match hello {
            Ok(Ok(Some((HELLO, 0, payload)))) if payload == expected.as_bytes() => Ok(()),
            Ok(Ok(Some((kind, _, _)))) => failed(
                RelayError::Start {
                    pod,
                    message: format!("its first frame was of kind {kind}, not its greeting"),
                }
                .into(),
            ),
            Ok(Ok(None) | Err(_)) => {
                // The relay ended before it listened: its stderr says why, or its status
                // that it never ran.
                let mut why = String::new();
                if let Some(stderr) = exec.stderr.as_mut() {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(5),
                        stderr.take(4096).read_to_string(&mut why),
                    )
                    .await;
                }
                if why.starts_with("busy") {
                    return failed(RelayError::Busy { pod, port: inside }.into());
                }
                if why.is_empty()
                    && let Some(status) = exec.status.as_mut()
                    && let Ok(Some(status)) =
                        tokio::time::timeout(Duration::from_secs(5), status).await
                    && let Err(message) = exit_code_of(&status)
                    && not_running_yet(&message)
                {
                    return Err(Ungreeted::NotRunning(message));
                }
                if let Some(how) = self.pod_ended(&pod).await {
                    let why = match how {
                        Ended::ByWorkload(lost) => lost.to_string(),
                        Ended::ByCluster(why) => why,
                    };
                    return failed(super::KubeError::PodGone { pod, why }.into());
                }
                let why = why.trim();
                failed(
                    RelayError::Start {
                        pod,
                        message: if why.is_empty() {
                            "it ended at once".to_string()
                        } else {
                            why.to_string()
                        },
                    }
                    .into(),
                )
            }
            Err(_) => failed(
                RelayError::Start {
                    pod,
                    message: format!("not listening after {}s", READY_WAIT.as_secs()),
                }
                .into(),
            ),
        }
    }
}

/// The relay exec's stdout and stdin, taken (both or neither).
fn both(exec: &mut HotExec) -> Option<(ReadHalf<SimplexStream>, WriteHalf<SimplexStream>)> {
    if exec.stdout.is_none() || exec.stdin.is_none() {
        return None;
    }
    exec.stdout.take().zip(exec.stdin.take())
}

fn no_streams(pod: &str) -> RelayError {
    RelayError::Start {
        pod: pod.to_string(),
        message: "the exec has no stdin or stdout".to_string(),
    }
}

/// The carried command's end of a relay: its stdin (`None`: closed at once), and where its
/// output and exit code go.
pub(crate) struct Command {
    stdin: Option<ReadHalf<SimplexStream>>,
    out: WriteHalf<SimplexStream>,
    err: WriteHalf<SimplexStream>,
    exit: tokio::sync::oneshot::Sender<i64>,
}

/// Carry every connection the pod opens until the relay's stream ends (the pod stopped or
/// is gone, or the relay ended), and the `command` the relay carries.
pub(crate) async fn serve<R, W>(
    mut from_pod: R,
    mut to_pod: W,
    addr: SocketAddr,
    command: Option<Command>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        // Frames ready together go in one write (one message of the exec stream).
        while let Some(mut batch) = rx.recv().await {
            while batch.len() < 4 * CHUNK {
                match rx.try_recv() {
                    Ok(f) => batch.extend_from_slice(&f),
                    Err(_) => break,
                }
            }
            if to_pod.write_all(&batch).await.is_err() || to_pod.flush().await.is_err() {
                return;
            }
        }
    });
    // Frames are read by a task of their own: reading one is not cancel-safe, so it must
    // never be a `select!` branch that another branch can interrupt mid-frame.
    let (frames_tx, mut frames) = tokio::sync::mpsc::channel(64);
    let reader = tokio::spawn(async move {
        loop {
            match read_frame(&mut from_pod).await {
                Ok(Some(f)) => {
                    if frames_tx.send(f).await.is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(%addr, "loopback relay: {e}; ending it");
                    return;
                }
            }
        }
    });
    let mut conns: HashMap<u32, UnboundedSender<Up>> = HashMap::new();
    let mut carried: JoinSet<u32> = JoinSet::new();
    // The carried command's output, in order, to a task of its own: a command's reader that
    // is slow never holds up the connections.
    let mut output = None;
    let mut feeder = None;
    if let Some(command) = command {
        let (out_tx, out_rx) = unbounded_channel();
        output = Some(out_tx);
        tokio::spawn(command_output(
            out_rx,
            command.out,
            command.err,
            command.exit,
        ));
        feeder = Some(tokio::spawn(feed_command(command.stdin, tx.clone())));
    }
    loop {
        tokio::select! {
            got = frames.recv() => {
                let Some((kind, id, payload)) = got else { break };
                if id == COMMAND && matches!(kind, OUT | ERR | EXIT) {
                    if let Some(output) = &output {
                        let _ = output.send((kind, payload));
                    }
                    continue;
                }
                let up = match kind {
                    OPEN => {
                        if conns.len() >= MAX_CONNECTIONS || conns.contains_key(&id) {
                            tracing::warn!(%addr, id, "loopback relay: a surplus or duplicate connection refused");
                            let _ = tx.send(frame(GONE, id, &[]));
                            continue;
                        }
                        let (up_tx, up_rx) = unbounded_channel();
                        // What the pod's client sent first comes with its OPEN.
                        if !payload.is_empty() {
                            let _ = up_tx.send(Up::Data(payload));
                        }
                        conns.insert(id, up_tx);
                        let tx = tx.clone();
                        carried.spawn(async move {
                            carry(id, addr, up_rx, tx).await;
                            id
                        });
                        continue;
                    }
                    DATA => Up::Data(payload),
                    EOF => Up::Eof,
                    GONE => Up::Gone,
                    other => {
                        tracing::warn!(%addr, kind = other, "loopback relay: an unknown frame; ending it");
                        break;
                    }
                };
                let last = !matches!(up, Up::Data(_));
                if let Some(conn) = conns.get(&id) {
                    let _ = conn.send(up);
                }
                if last {
                    conns.remove(&id);
                }
            }
            Some(done) = carried.join_next(), if !carried.is_empty() => {
                if let Ok(id) = done {
                    conns.remove(&id);
                }
            }
        }
    }
    carried.abort_all();
    drop(tx);
    reader.abort();
    writer.abort();
    if let Some(feeder) = feeder {
        feeder.abort();
    }
}

/// The carried command's stdin into frames of its id; its end (or none) an `EOF`.
async fn feed_command(stdin: Option<ReadHalf<SimplexStream>>, to_pod: UnboundedSender<Vec<u8>>) {
    if let Some(mut stdin) = stdin {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_pod.send(frame(DATA, COMMAND, &buf[..n])).is_err() {
                        return;
                    }
                }
            }
        }
    }
    let _ = to_pod.send(frame(EOF, COMMAND, &[]));
}

/// The carried command's output frames into its streams, then its exit code; the relay's
/// stream ending first ends the streams with no exit code (as an exec that lost its status).
async fn command_output(
    mut frames: UnboundedReceiver<(u8, Vec<u8>)>,
    mut out: WriteHalf<SimplexStream>,
    mut err: WriteHalf<SimplexStream>,
    exit: tokio::sync::oneshot::Sender<i64>,
) {
    // A stream whose reader is gone drops what follows.
    let (mut out_open, mut err_open) = (true, true);
    let mut code = None;
    while let Some((kind, bytes)) = frames.recv().await {
        match kind {
            OUT if out_open => out_open = out.write_all(&bytes).await.is_ok(),
            ERR if err_open => err_open = err.write_all(&bytes).await.is_ok(),
            EXIT => {
                code = std::str::from_utf8(&bytes)
                    .ok()
                    .and_then(|c| c.trim().parse::<i64>().ok());
                if code.is_none() {
                    tracing::warn!("loopback relay: an exit frame without a code");
                }
                break;
            }
            _ => {}
        }
    }
    let _ = out.shutdown().await;
    let _ = err.shutdown().await;
    if let Some(code) = code {
        let _ = exit.send(code);
    }
}

/// One connection: the pod's side through the frames, the host's over TCP to `addr`.
async fn carry(
    id: u32,
    addr: SocketAddr,
    mut from_pod: UnboundedReceiver<Up>,
    to_pod: UnboundedSender<Vec<u8>>,
) {
    let tcp = match TcpStream::connect(addr).await {
        Ok(tcp) => tcp,
        Err(e) => {
            tracing::debug!(id, %addr, "loopback relay: not carried: {e}");
            let _ = to_pod.send(frame(GONE, id, &[]));
            return;
        }
    };
    let _ = tcp.set_nodelay(true);
    let (mut host_read, mut host_write) = tcp.into_split();
    // Pod → host: true once the pod half-closed cleanly, false when its side failed.
    let up = async {
        while let Some(msg) = from_pod.recv().await {
            match msg {
                Up::Data(bytes) => {
                    if host_write.write_all(&bytes).await.is_err() {
                        return false;
                    }
                }
                Up::Eof => {
                    let _ = host_write.shutdown().await;
                    return true;
                }
                Up::Gone => return false,
            }
        }
        false
    };
    // Host → pod: true once the host's side ended cleanly.
    let down = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match host_read.read(&mut buf).await {
                Ok(0) => {
                    let _ = to_pod.send(frame(EOF, id, &[]));
                    return true;
                }
                Ok(n) => {
                    if to_pod.send(frame(DATA, id, &buf[..n])).is_err() {
                        return false;
                    }
                }
                Err(_) => return false,
            }
        }
    };
    tokio::pin!(up, down);
    let (mut up_done, mut down_done) = (false, false);
    let clean = loop {
        tokio::select! {
            ok = &mut up, if !up_done => {
                if !ok { break false }
                up_done = true;
            }
            ok = &mut down, if !down_done => {
                if !ok { break false }
                down_done = true;
            }
        }
        if up_done && down_done {
            break true;
        }
    };
    if !clean {
        // Either side failed: the pod's socket is shut both ways (the TCP one drops here).
        let _ = to_pod.send(frame(GONE, id, &[]));
    }
    tracing::debug!(id, clean, "loopback relay: connection ended");
}

#[cfg(test)]
mod tests;
