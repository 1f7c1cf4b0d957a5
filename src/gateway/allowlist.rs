//! The egress allowlist proxy (`network_mode = "allowlist"` with `allowed_hosts`, SPEC §11).
//!
//! An HTTP proxy served on the container's own loopback (a listener from
//! [`super::listen_in_netns`]): `CONNECT host:port` tunnels (HTTPS) and absolute-form plain
//! HTTP requests (`GET http://host/…`) are admitted only for listed hosts; anything else is
//! answered `403` **before any connection or name lookup is attempted**. The tunnel's
//! destination is fixed when it opens, so later bytes on it cannot reach another host.
//! The container gets `HTTPS_PROXY`/`HTTP_PROXY` (and lower-case) pointing at it.
//!
//! An entry is `host` (ports 443 and 80), `host:port`, or `*.domain` (any subdomain of
//! `domain`, not `domain` itself). Host names compare case-insensitively.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// Largest request head accepted from a client.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send its request head, and a connect to the destination.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// An `allowed_hosts` entry that does not parse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("allowed_hosts[{index}]: {message}")]
pub struct AllowlistError {
    pub index: usize,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Exact(String),
    /// `*.domain`: stored as `.domain`.
    Suffix(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    host: HostPattern,
    port: Option<u16>,
}

/// A parsed `allowed_hosts` list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Allowlist {
    entries: Vec<Entry>,
}

impl Allowlist {
    pub fn parse<S: AsRef<str>>(hosts: &[S]) -> Result<Allowlist, AllowlistError> {
        let mut entries = Vec::new();
        for (index, raw) in hosts.iter().enumerate() {
            let raw = raw.as_ref().trim();
            let bad = |message: String| AllowlistError { index, message };
            let (host, port) = match raw.rsplit_once(':') {
                Some((h, p)) if !h.contains(':') => {
                    let port: u16 = p
                        .parse()
                        .ok()
                        .filter(|&p| p != 0)
                        .ok_or_else(|| bad(format!("{p:?} is not a port")))?;
                    (h, Some(port))
                }
                _ => (raw, None),
            };
            let host = host.to_ascii_lowercase();
            let valid_name = |s: &str| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            };
            let pattern = match host.strip_prefix("*.") {
                Some(domain) if valid_name(domain) => HostPattern::Suffix(format!(".{domain}")),
                None if valid_name(&host) => HostPattern::Exact(host),
                _ => {
                    return Err(bad(format!(
                        "{raw:?} is not a host name, host:port or *.domain"
                    )));
                }
            };
            entries.push(Entry {
                host: pattern,
                port,
            });
        }
        Ok(Allowlist { entries })
    }

    /// Whether `host:port` may be reached.
    pub fn admits(&self, host: &str, port: u16) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.entries.iter().any(|e| {
            let port_ok = match e.port {
                Some(p) => p == port,
                None => port == 443 || port == 80,
            };
            let host_ok = match &e.host {
                HostPattern::Exact(h) => *h == host,
                HostPattern::Suffix(s) => host.ends_with(s.as_str()),
            };
            port_ok && host_ok
        })
    }
}

/// One connection attempt through the proxy, for the trial record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EgressEvent {
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// Set when an admitted destination could not be reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A running proxy.
#[derive(Debug)]
pub struct ProxyHandle {
    pub addr: SocketAddr,
    events: Arc<Mutex<Vec<EgressEvent>>>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl ProxyHandle {
    /// Connections seen so far, in order.
    pub fn events(&self) -> Vec<EgressEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Stop accepting (open tunnels end with their connections) and return the events.
    pub async fn shutdown(mut self) -> Vec<EgressEvent> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
        self.events()
    }
}

/// Serve the allowlist proxy on `listener` (must be called in a tokio runtime).
pub fn serve_allowlist(
    listener: std::net::TcpListener,
    allowlist: Allowlist,
) -> std::io::Result<ProxyHandle> {
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let events = Arc::new(Mutex::new(Vec::new()));
    let (stop, mut stopped) = oneshot::channel::<()>();
    let allowlist = Arc::new(allowlist);
    let task_events = events.clone();
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                accepted = listener.accept() => match accepted {
                    Ok((client, _)) => {
                        let allowlist = allowlist.clone();
                        let events = task_events.clone();
                        tokio::spawn(async move {
                            if let Err(e) = handle(client, &allowlist, &events).await {
                                tracing::debug!(error = %e, "allowlist proxy connection ended");
                            }
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "allowlist proxy accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    });
    Ok(ProxyHandle {
        addr,
        events,
        stop: Some(stop),
        task,
    })
}

/// Where a request wants to go.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
    /// `CONNECT` (a tunnel) rather than a plain HTTP request to forward.
    tunnel: bool,
}

fn split_host_port(authority: &str, default_port: u16) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        // [v6]:port
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => default_port,
        };
        return Some((h.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), p.parse().ok()?)),
        None => Some((authority.to_string(), default_port)),
    }
}

/// Parse the request line of a proxy request.
fn parse_target(head: &str) -> Option<Target> {
    let line = head.lines().next()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?;
    let uri = parts.next()?;
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_host_port(uri, 443)?;
        return Some(Target {
            host,
            port,
            tunnel: true,
        });
    }
    let rest = uri.strip_prefix("http://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let (host, port) = split_host_port(authority, 80)?;
    Some(Target {
        host,
        port,
        tunnel: false,
    })
}

async fn respond(client: &mut TcpStream, status: &str, message: &str) -> std::io::Result<()> {
    let body = format!("arbiter allowlist proxy: {message}\n");
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await?;
    client.write_all(body.as_bytes()).await?;
    client.shutdown().await
}

async fn handle(
    mut client: TcpStream,
    allowlist: &Allowlist,
    events: &Mutex<Vec<EgressEvent>>,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 2048];
    let end = loop {
        let n = tokio::time::timeout(IO_TIMEOUT, client.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::other("request head timed out"))??;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(pos) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        if head.len() > MAX_HEAD {
            return respond(
                &mut client,
                "431 Request Header Fields Too Large",
                "request head too large",
            )
            .await;
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let Some(target) = parse_target(&text) else {
        return respond(
            &mut client,
            "400 Bad Request",
            "only CONNECT host:port and absolute http:// requests are proxied",
        )
        .await;
    };
    let record = |allowed: bool, error: Option<String>| {
        events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(EgressEvent {
                host: target.host.clone(),
                port: target.port,
                allowed,
                error,
            });
    };
    if !allowlist.admits(&target.host, target.port) {
        record(false, None);
        tracing::info!(host = %target.host, port = target.port, "egress refused by the allowlist");
        return respond(
            &mut client,
            "403 Forbidden",
            &format!("{}:{} is not in allowed_hosts", target.host, target.port),
        )
        .await;
    }
    let upstream = tokio::time::timeout(
        IO_TIMEOUT,
        TcpStream::connect((target.host.as_str(), target.port)),
    )
    .await
    .map_err(|_| std::io::Error::other("connect timed out"))
    .and_then(|r| r);
    let mut upstream = match upstream {
        Ok(s) => s,
        Err(e) => {
            record(true, Some(e.to_string()));
            return respond(
                &mut client,
                "502 Bad Gateway",
                &format!("cannot reach {}:{}: {e}", target.host, target.port),
            )
            .await;
        }
    };
    record(true, None);
    if target.tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
        // Bytes the client sent after the head belong to the tunnel.
        upstream.write_all(&head[end..]).await?;
    } else {
        upstream.write_all(&head).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_matching() {
        let a =
            Allowlist::parse(&["PyPI.org", "*.githubusercontent.com", "localhost:8080"]).unwrap();
        assert!(a.admits("pypi.org", 443));
        assert!(a.admits("PYPI.ORG.", 80));
        assert!(!a.admits("pypi.org", 22));
        assert!(!a.admits("evilpypi.org", 443));
        assert!(!a.admits("pypi.org.evil.com", 443));
        assert!(a.admits("raw.githubusercontent.com", 443));
        assert!(!a.admits("githubusercontent.com", 443));
        assert!(a.admits("localhost", 8080));
        assert!(!a.admits("localhost", 443));
        assert_eq!(
            Allowlist::parse(&["ok.com", "bad host"])
                .unwrap_err()
                .to_string(),
            "allowed_hosts[1]: \"bad host\" is not a host name, host:port or *.domain"
        );
        assert_eq!(
            Allowlist::parse(&["a.com:0"]).unwrap_err().to_string(),
            "allowed_hosts[0]: \"0\" is not a port"
        );
        assert!(Allowlist::parse(&["*."]).is_err());
    }

    #[test]
    fn request_lines() {
        assert_eq!(
            parse_target("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n"),
            Some(Target {
                host: "pypi.org".into(),
                port: 443,
                tunnel: true
            })
        );
        assert_eq!(
            parse_target("GET http://user@example.com:8080/x?y HTTP/1.1\r\n\r\n"),
            Some(Target {
                host: "example.com".into(),
                port: 8080,
                tunnel: false
            })
        );
        assert_eq!(
            parse_target("GET http://example.com/x HTTP/1.1\r\n\r\n").map(|t| t.port),
            Some(80)
        );
        assert_eq!(
            parse_target("CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").map(|t| (t.host, t.port)),
            Some(("::1".into(), 8443))
        );
        assert_eq!(parse_target("GET /relative HTTP/1.1\r\n\r\n"), None);
        assert_eq!(parse_target("CONNECT host:notaport HTTP/1.1\r\n\r\n"), None);
    }
}
