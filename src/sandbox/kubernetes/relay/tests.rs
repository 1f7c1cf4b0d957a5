use super::*;

#[tokio::test]
async fn frames_round_trip_and_bad_ones_are_errors() {
    let mut bytes = frame(DATA, 7, b"hello");
    bytes.extend(frame(EOF, u32::MAX, b""));
    let mut r = &bytes[..];
    assert_eq!(
        read_frame(&mut r).await.unwrap(),
        Some((DATA, 7, b"hello".to_vec()))
    );
    assert_eq!(
        read_frame(&mut r).await.unwrap(),
        Some((EOF, u32::MAX, vec![]))
    );
    assert_eq!(read_frame(&mut r).await.unwrap(), None);
    // Truncated in the head, truncated in the payload, oversized.
    let whole = frame(DATA, 1, b"abc");
    for cut in [&whole[..4], &whole[..10]] {
        let mut r = cut;
        assert!(read_frame(&mut r).await.is_err(), "{cut:?}");
    }
    let mut huge = vec![DATA, 0, 0, 0, 1];
    huge.extend_from_slice(&((MAX_FRAME as u32) + 1).to_be_bytes());
    let mut r = &huge[..];
    assert!(read_frame(&mut r).await.is_err());
}

#[test]
fn the_host_side_keeps_the_port_on_another_loopback_address() {
    let a = host_listener(0).unwrap();
    let port = a.local_addr().unwrap().port();
    assert_eq!(a.local_addr().unwrap().ip(), Ipv4Addr::LOCALHOST);
    // Another listener on the same port: 127.0.0.1 is taken, 127.a.b.c is not.
    let b = host_listener(port).unwrap();
    let addr = b.local_addr().unwrap();
    assert_eq!(addr.port(), port);
    let SocketAddr::V4(v4) = addr else {
        panic!("{addr}")
    };
    assert_eq!(v4.ip().octets()[0], 127);
    assert_ne!(v4.ip().octets()[..3], [127, 0, 0]);
}

/// The toolbox's real relay binary, or `None` (skip) when no toolbox is built and Docker is
/// not required (scripts/bootstrap builds it; CI requires it).
fn relay_binary() -> Option<std::path::PathBuf> {
    super::super::hot::tests::toolbox_file("relay")
}

/// The real relay run on this host (its "pod" is this machine's loopback), carried by
/// [`serve`] to a host-side server at `addr`: the port the relay listens on.
async fn local_relay(
    addr: SocketAddr,
) -> Option<(u16, tokio::process::Child, tokio::task::JoinHandle<()>)> {
    let (port, child, stdout, stdin) = spawned_relay(&relay_binary()?, &[]).await;
    let served = tokio::spawn(serve(stdout, stdin, addr, None));
    Some((port, child, served))
}

/// The real relay `bin` listening on a free port of this host, `args` after the port, its
/// greeting read: the port, the process and its stdout and stdin.
async fn spawned_relay(
    bin: &std::path::Path,
    args: &[&str],
) -> (
    u16,
    tokio::process::Child,
    tokio::process::ChildStdout,
    tokio::process::ChildStdin,
) {
    let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(bin)
        .arg(port.to_string())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    let hello = read_frame(&mut stdout).await.unwrap().unwrap();
    assert_eq!(
        hello,
        (HELLO, 0, format!("arbiter-relay 2 {port}").into_bytes())
    );
    (port, child, stdout, stdin)
}

fn sha(bytes: &[u8]) -> String {
    crate::digest::sha256_hex(bytes)
}

fn pattern(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 7 + seed) % 251) as u8).collect()
}

const BODY: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_real_relay_carries_bytes_and_half_closes_both_ways_for_many_connections() {
    // The host side: reads to the client's half-close, answers the length and sha256 of
    // what it read and a megabyte of pattern, then ends its side.
    let server = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = server.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut got = Vec::new();
                conn.read_to_end(&mut got).await.unwrap();
                let head = format!("{} {}\n", got.len(), sha(&got));
                conn.write_all(head.as_bytes()).await.unwrap();
                conn.write_all(&pattern(BODY, 0)).await.unwrap();
                conn.shutdown().await.unwrap();
            });
        }
    });
    let Some((port, _child, _served)) = local_relay(addr).await else {
        return;
    };
    let mut clients = JoinSet::new();
    for i in 0..24usize {
        clients.spawn(async move {
            let data = pattern(100_000 + i * 4099, i);
            let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                .await
                .unwrap();
            c.write_all(&data).await.unwrap();
            c.shutdown().await.unwrap();
            let mut got = Vec::new();
            c.read_to_end(&mut got).await.unwrap();
            let at = got.iter().position(|b| *b == b'\n').unwrap();
            let head = String::from_utf8(got[..at].to_vec()).unwrap();
            assert_eq!(
                head,
                format!("{} {}", data.len(), sha(&data)),
                "connection {i}"
            );
            assert_eq!(got.len() - at - 1, BODY, "connection {i}");
            assert_eq!(
                sha(&got[at + 1..]),
                sha(&pattern(BODY, 0)),
                "connection {i}"
            );
        });
    }
    while let Some(done) = clients.join_next().await {
        done.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_http_exchange_on_a_kept_alive_connection_gets_its_responses() {
    // What an HTTP client does: no half-close; the server answers each request with a
    // Content-Length and keeps the connection open.
    let server = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut conn, _) = server.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let mut answered = 0;
        loop {
            let n = conn.read(&mut chunk).await.unwrap();
            if n == 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n]);
            while let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                buf.drain(..at + 4);
                answered += 1;
                let body = format!("answer {answered}");
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                conn.write_all(reply.as_bytes()).await.unwrap();
            }
        }
    });
    let Some((port, _child, _served)) = local_relay(addr).await else {
        return;
    };
    let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .unwrap();
    for k in 1..=3 {
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let want = format!("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nanswer {k}");
        let mut got = vec![0u8; want.len()];
        tokio::time::timeout(Duration::from_secs(30), c.read_exact(&mut got))
            .await
            .expect("the response came back")
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&got), want);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_side_that_refuses_ends_the_pod_connection_and_the_relay_ends_with_its_stream() {
    // Nothing listens at `addr`: the pod's connection is shut at once, the relay stays up.
    let addr = {
        let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        l.local_addr().unwrap()
    };
    let Some((port, mut child, served)) = local_relay(addr).await else {
        return;
    };
    for _ in 0..2 {
        let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .unwrap();
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(30), c.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "the refused connection was ended");
        assert!(got.is_empty());
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the relay ended with a refusal"
    );
    // The end of the relay's stdin (arbiter's side gone) ends the relay.
    served.abort();
    let ended = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    assert!(ended.is_ok(), "the relay did not end with its stdin");
}

/// The real relay carrying a command beside a connection: the command's stdin (a megabyte
/// and more) arrives whole, its stdout and stderr come back apart and whole, its exit code
/// after both, and the relay serves on once the command ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_real_relay_carries_a_command_beside_its_connections() {
    let Some(bin) = relay_binary() else { return };
    // The host side of connections: echoes what it reads until the client's half-close.
    let host = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = host.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = host.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    let script =
        "sha256sum | cut -d' ' -f1; printf 'to stderr' >&2; head -c 300000 /dev/zero; exit 7";
    let (port, mut child, stdout, stdin) = spawned_relay(&bin, &["--", "sh", "-c", script]).await;
    let (out_r, out_w) = tokio::io::simplex(64 * 1024);
    let (err_r, err_w) = tokio::io::simplex(64 * 1024);
    let (in_r, mut in_w) = tokio::io::simplex(64 * 1024);
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
    let command = Command {
        stdin: Some(in_r),
        out: out_w,
        err: err_w,
        exit: exit_tx,
    };
    let served = tokio::spawn(serve(stdout, stdin, addr, Some(command)));
    let input = pattern(1_500_000, 3);
    let want_sum = sha(&input);
    let feed = tokio::spawn(async move {
        in_w.write_all(&input).await.unwrap();
        in_w.shutdown().await.unwrap();
    });
    // A connection through the relay while the command runs.
    let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .unwrap();
    c.write_all(b"ping through the relay").await.unwrap();
    c.shutdown().await.unwrap();
    let mut echoed = Vec::new();
    c.read_to_end(&mut echoed).await.unwrap();
    assert_eq!(echoed, b"ping through the relay");
    let read_all = |mut r: tokio::io::ReadHalf<tokio::io::SimplexStream>| async move {
        let mut v = Vec::new();
        r.read_to_end(&mut v).await.unwrap();
        v
    };
    let (out, err) = tokio::join!(read_all(out_r), read_all(err_r));
    feed.await.unwrap();
    let code = tokio::time::timeout(Duration::from_secs(30), exit_rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(code, 7);
    assert_eq!(err, b"to stderr");
    let line = format!("{want_sum}\n");
    assert_eq!(&out[..line.len()], line.as_bytes());
    assert_eq!(out.len(), line.len() + 300_000);
    assert!(out[line.len()..].iter().all(|&b| b == 0));
    // The command ended; the relay serves on.
    let mut c = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .unwrap();
    c.write_all(b"again").await.unwrap();
    c.shutdown().await.unwrap();
    let mut echoed = Vec::new();
    c.read_to_end(&mut echoed).await.unwrap();
    assert_eq!(echoed, b"again");
    assert!(child.try_wait().unwrap().is_none(), "the relay serves on");
    served.abort();
    let ended = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    assert!(ended.is_ok(), "the relay did not end with its stdin");
}

/// A relay whose stream ends before the command's exit code: its streams end, and no exit
/// code comes (the command's end is read from the pod, as for an exec that lost its status).
#[tokio::test]
async fn a_relay_stream_that_ends_first_gives_no_exit_code() {
    let (from_pod, mut pod_w) = tokio::io::simplex(64 * 1024);
    let (out_r, out_w) = tokio::io::simplex(1024);
    let (err_r, err_w) = tokio::io::simplex(1024);
    let (exit_tx, exit_rx) = tokio::sync::oneshot::channel();
    let command = Command {
        stdin: None,
        out: out_w,
        err: err_w,
        exit: exit_tx,
    };
    let addr = "127.0.0.1:9".parse().unwrap();
    let (mut sent, to_pod) = tokio::io::simplex(64 * 1024);
    let served = tokio::spawn(serve(from_pod, to_pod, addr, Some(command)));
    // The command has no stdin: it is closed at once.
    let mut first = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(10), sent.read_exact(&mut first))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, &frame(EOF, COMMAND, &[])[..]);
    pod_w
        .write_all(&frame(OUT, COMMAND, b"half"))
        .await
        .unwrap();
    // A truncated frame, then the end.
    pod_w
        .write_all(&frame(ERR, COMMAND, b"cut short")[..6])
        .await
        .unwrap();
    pod_w.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), served)
        .await
        .unwrap()
        .unwrap();
    let mut out = Vec::new();
    let mut out_r = out_r;
    out_r.read_to_end(&mut out).await.unwrap();
    assert_eq!(out, b"half");
    let mut err = Vec::new();
    let mut err_r = err_r;
    err_r.read_to_end(&mut err).await.unwrap();
    assert!(err.is_empty());
    assert!(exit_rx.await.is_err(), "no exit code");
}

/// The deadline's SIGTERM to every process leaves the relay serving (the command it carries
/// has its grace period), while the command itself starts with no signal blocked and gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_relay_outlives_a_sigterm_its_command_does_not() {
    let Some(bin) = relay_binary() else { return };
    // The command signals its relay, says whether it still runs, then what its own mask
    // blocks, then is ended by its own SIGTERM.
    let script = "kill -TERM $PPID; sleep 0.3; kill -0 $PPID && echo relay-alive; \
                  grep SigBlk /proc/self/status; kill -TERM $$; sleep 5; echo not-ended";
    let (_, mut child, mut stdout, _stdin) = spawned_relay(&bin, &["--", "sh", "-c", script]).await;
    let (mut out, mut code) = (Vec::new(), None);
    while code.is_none() {
        let frame = tokio::time::timeout(Duration::from_secs(30), read_frame(&mut stdout))
            .await
            .unwrap()
            .unwrap()
            .expect("the relay's stream ended");
        match frame {
            (OUT, COMMAND, bytes) => out.extend(bytes),
            (EXIT, COMMAND, bytes) => code = Some(String::from_utf8(bytes).unwrap()),
            _ => {}
        }
    }
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("relay-alive"), "{out}");
    assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
    assert!(!out.contains("not-ended"), "{out}");
    assert_eq!(code.as_deref(), Some("143"), "128 + SIGTERM");
    assert!(child.try_wait().unwrap().is_none(), "the relay serves on");
}

/// The relay's `keep` (the exec wrapper's keeper), the real binary: the streams passed on
/// whole, the first CAP bytes of each kept, every byte counted, the kept bytes' sha256 as
/// the `sha2` crate makes it, the exit code (128 + a signal); a command that cannot run is
/// 127 with the reason kept as its stderr.
#[test]
fn keep_passes_on_keeps_counts_and_digests() {
    use crate::digest::sha256_hex;
    let Some(relay) = relay_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let stem = dir.path().join("k");
    let stem = stem.to_str().unwrap();
    let facts = || -> Vec<String> {
        let text = std::fs::read_to_string(format!("{stem}.n")).unwrap();
        assert!(text.ends_with('\n'));
        text.split_whitespace().map(String::from).collect()
    };
    // 200,001 bytes of stdout (past several 64 KiB reads and the cap), 7 of stderr.
    let script = "i=0; while [ $i -lt 3 ]; do head -c 66667 /dev/urandom; i=$((i+1)); done | tee /tmp/.keep-all-$$; printf 'stderr!' >&2; cat /tmp/.keep-all-$$ > \"$0.all\"; rm /tmp/.keep-all-$$; exit 7";
    let out = std::process::Command::new(&relay)
        .args(["keep", "70000", stem, "--", "sh", "-c", script, stem])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let all = std::fs::read(format!("{stem}.all")).unwrap();
    assert_eq!(all.len(), 200_001);
    assert_eq!(out.stdout, all, "stdout passed on whole");
    assert_eq!(out.stderr, b"stderr!");
    let kept = std::fs::read(format!("{stem}.o")).unwrap();
    assert_eq!(kept, all[..70_000]);
    assert_eq!(std::fs::read(format!("{stem}.e")).unwrap(), b"stderr!");
    assert_eq!(
        facts(),
        [
            "7".to_string(),
            "70000".into(),
            "7".into(),
            sha256_hex(&all[..70_000]),
            sha256_hex(b"stderr!"),
            "200001".into(),
            "7".into()
        ]
    );
    // Killed by a signal: 128 + it.
    let out = std::process::Command::new(&relay)
        .args(["keep", "10", stem, "--", "sh", "-c", "kill -9 $$"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(137));
    assert_eq!(facts()[0], "137");
    // Nothing to run: 127, and why, as its stderr.
    let out = std::process::Command::new(&relay)
        .args(["keep", "1000", stem, "--", "/nonexistent/cmd"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let why = std::fs::read(format!("{stem}.e")).unwrap();
    assert!(why.starts_with(b"/nonexistent/cmd: "), "{why:?}");
    assert_eq!(out.stderr, why);
    assert_eq!(facts()[2], why.len().to_string());
}
