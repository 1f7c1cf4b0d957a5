//! The egress allowlist proxy (`network_mode = "allowlist"` with `allowed_hosts`, SPEC §11).
//!
//! An HTTP proxy served on the container's own loopback (a listener from
//! [`super::listen_in_netns`]): `CONNECT host:port` tunnels (HTTPS) and absolute-form plain
//! HTTP requests (`GET http://host/…`) are admitted only for listed hosts; anything else is
//! answered `403` **before any connection or name lookup is attempted**. The tunnel's
//! destination is fixed when it opens, so later bytes on it cannot reach another host.
//! The container gets `HTTPS_PROXY`/`HTTP_PROXY` (and lower-case) pointing at it.
//!
//! An entry is a host name, `*.domain` (any subdomain of `domain`, not `domain` itself), an IP
//! address or a CIDR range — each admitting every port, as Harbor's host-level entries do — or
//! `host:port` (that port only). Host names compare case-insensitively; names are never
//! resolved to be checked, so IP and CIDR entries admit destinations written as addresses.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
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
    /// An IP address: matches destinations written as that address.
    Ip(IpAddr),
    /// `address/prefix`: matches destinations written as an address in the range.
    Cidr(IpAddr, u8),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    host: HostPattern,
    /// `None`: any port.
    port: Option<u16>,
}

/// A parsed `allowed_hosts` list — or, for a phase with a network of its own, an observer
/// that admits every destination (the phase could reach it directly anyway) so that its
/// attempts, and which of them failed, are seen by the harness rather than told by the tools.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Allowlist {
    entries: Vec<Entry>,
    observe: Option<Observe>,
}

/// What an observer admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observe {
    /// Everything (the phase shares the host's network: its loopback is the phase's own).
    Everything,
    /// Everything but this host's own loopback and unspecified addresses, checked on the
    /// addresses a name resolves to (the proxy runs on the host: a container on a bridge
    /// must not reach the host's loopback services through it).
    NotLoopback,
}

fn in_range(address: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (address, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) if prefix <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) if prefix <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

impl Allowlist {
    /// Parse `allowed_hosts` entries: a host name, `*.domain`, an IP address or a CIDR range
    /// (each admitting every port), or `host:port` / `[v6]:port` (that port only).
    pub fn parse<S: AsRef<str>>(hosts: &[S]) -> Result<Allowlist, AllowlistError> {
        let mut entries = Vec::new();
        for (index, raw) in hosts.iter().enumerate() {
            let raw = raw.as_ref().trim();
            let bad = |message: String| AllowlistError { index, message };
            let shape = || bad(format!("{raw:?} is not a host name, host:port or *.domain"));
            let lower = raw.to_ascii_lowercase();
            let lower = lower.trim_end_matches('.');
            if let Some((address, prefix)) = lower.split_once('/') {
                let address: IpAddr = address.parse().map_err(|_| shape())?;
                let prefix: u8 = prefix.parse().map_err(|_| shape())?;
                let max = if address.is_ipv4() { 32 } else { 128 };
                if prefix > max {
                    return Err(shape());
                }
                entries.push(Entry {
                    host: HostPattern::Cidr(address, prefix),
                    port: None,
                });
                continue;
            }
            if let Ok(address) = lower.parse::<IpAddr>() {
                entries.push(Entry {
                    host: HostPattern::Ip(address),
                    port: None,
                });
                continue;
            }
            let port_of = |p: &str| {
                p.parse::<u16>()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| bad(format!("{p:?} is not a port")))
            };
            let (host, port) = if let Some(rest) = lower.strip_prefix('[') {
                let (h, after) = rest.split_once(']').ok_or_else(shape)?;
                let port = match after.strip_prefix(':') {
                    Some(p) => Some(port_of(p)?),
                    None if after.is_empty() => None,
                    None => return Err(shape()),
                };
                (h, port)
            } else {
                match lower.rsplit_once(':') {
                    Some((h, p)) if !h.contains(':') => (h, Some(port_of(p)?)),
                    _ => (lower, None),
                }
            };
            let valid_name = |s: &str| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            };
            let pattern = if let Ok(address) = host.parse::<IpAddr>() {
                HostPattern::Ip(address)
            } else {
                match host.strip_prefix("*.") {
                    Some(domain) if valid_name(domain) => HostPattern::Suffix(format!(".{domain}")),
                    None if valid_name(host) => HostPattern::Exact(host.to_string()),
                    _ => return Err(shape()),
                }
            };
            entries.push(Entry {
                host: pattern,
                port,
            });
        }
        Ok(Allowlist {
            entries,
            observe: None,
        })
    }

    /// An observer: admits what `observe` says, and records every attempt.
    pub fn observer(observe: Observe) -> Allowlist {
        Allowlist {
            entries: Vec::new(),
            observe: Some(observe),
        }
    }

    /// Whether `host:port` may be reached. Decided on the text alone: a name is never
    /// resolved to be checked, so IP and CIDR entries admit only destinations written as
    /// addresses.
    pub fn admits(&self, host: &str, port: u16) -> bool {
        if self.observe.is_some() {
            return true;
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let address = host.parse::<IpAddr>().ok();
        self.entries.iter().any(|e| {
            let port_ok = e.port.is_none_or(|p| p == port);
            let host_ok = match (&e.host, address) {
                (HostPattern::Exact(h), None) => *h == host,
                (HostPattern::Suffix(s), None) => host.ends_with(s.as_str()),
                (HostPattern::Ip(ip), Some(a)) => *ip == a,
                (HostPattern::Cidr(net, prefix), Some(a)) => in_range(a, *net, *prefix),
                _ => false,
            };
            port_ok && host_ok
        })
    }
}

/// Container port of the egress proxy on a container's own loopback.
pub const PROXY_PORT: u16 = 3128;

/// The env that points a container's HTTP clients at the proxy on `port` of its loopback
/// (its own loopback — the model gateway — is reached directly).
pub fn proxy_env(port: u16) -> Vec<(String, String)> {
    proxy_env_bypassing(port, &[])
}

/// [`proxy_env`], with `local` hosts also bypassing the proxy: names that resolve to the
/// container's own loopback (a compose task's service names), where the proxy, serving from
/// outside, could not reach the server they name.
pub fn proxy_env_bypassing(port: u16, local: &[String]) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let mut bypass = "127.0.0.1,localhost".to_string();
    for host in local {
        bypass.push(',');
        bypass.push_str(host);
    }
    let mut env: Vec<(String, String)> = ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"]
        .iter()
        .map(|k| (k.to_string(), url.clone()))
        .collect();
    for key in ["NO_PROXY", "no_proxy"] {
        env.push((key.to_string(), bypass.clone()));
    }
    env
}

/// One connection attempt through the proxy, for the trial record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressEvent {
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// Set when an admitted destination could not be reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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

    /// Stop accepting, close every open connection and tunnel, and return the events.
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
        // Open connections end with the proxy: nothing left behind by the phase (a background
        // process holding a tunnel) keeps a way out once it is shut down.
        let mut connections = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((client, _)) => {
                        let allowlist = allowlist.clone();
                        let events = task_events.clone();
                        connections.spawn(async move {
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
        connections.shutdown().await;
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

/// A connection to the target; an observer that keeps the host's loopback out resolves the
/// name itself and connects only to addresses that are not loopback or unspecified.
async fn connect(allowlist: &Allowlist, target: &Target) -> std::io::Result<TcpStream> {
    if allowlist.observe != Some(Observe::NotLoopback) {
        return TcpStream::connect((target.host.as_str(), target.port)).await;
    }
    let host = target.host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, target.port))
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("name resolution failed: {e}")))?
        .collect();
    let usable: Vec<SocketAddr> = addresses
        .iter()
        .copied()
        .filter(|a| !a.ip().is_loopback() && !a.ip().is_unspecified())
        .collect();
    if usable.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "refused: resolves to this host's loopback",
        ));
    }
    let mut last = None;
    for address in usable {
        match TcpStream::connect(address).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no address to connect to")))
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
        let why = if allowlist.entries.is_empty() {
            "refused: there is no network here"
        } else {
            "is not in allowed_hosts"
        };
        return respond(
            &mut client,
            "403 Forbidden",
            &format!("{}:{} {why}", target.host, target.port),
        )
        .await;
    }
    let upstream = tokio::time::timeout(IO_TIMEOUT, connect(allowlist, &target))
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
        assert!(
            a.admits("pypi.org", 22),
            "a host without a port: every port"
        );
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
    fn addresses_and_ranges_match_addresses_only() {
        let a = Allowlist::parse(&[
            "203.0.113.7",
            "198.51.100.0/24",
            "2001:DB8::1",
            "[2001:db8::2]:8443",
            "127.0.0.1:8080",
        ])
        .unwrap();
        assert!(a.admits("203.0.113.7", 22));
        assert!(a.admits("198.51.100.200", 443));
        assert!(!a.admits("198.51.101.1", 443));
        assert!(a.admits("2001:db8::1", 443), "canonical form compared");
        assert!(a.admits("2001:0db8:0:0::1", 443));
        assert!(a.admits("2001:db8::2", 8443));
        assert!(!a.admits("2001:db8::2", 443));
        assert!(a.admits("127.0.0.1", 8080));
        assert!(!a.admits("127.0.0.1", 8081));
        // A name is never resolved to be checked against addresses.
        assert!(!a.admits("localhost", 8080));
        assert!(
            !Allowlist::parse(&["localhost"])
                .unwrap()
                .admits("127.0.0.1", 80)
        );
        assert!(Allowlist::parse(&["10.0.0.0/33"]).is_err());
        assert!(Allowlist::parse(&["[::1"]).is_err());
        let all = Allowlist::parse(&["0.0.0.0/0"]).unwrap();
        assert!(all.admits("192.0.2.1", 1) && !all.admits("example.com", 443));
    }

    #[tokio::test]
    async fn an_observer_admits_and_records_everything_but_the_hosts_loopback_on_a_bridge() {
        let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = upstream.local_addr().unwrap().port();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let ask = |proxy: std::net::SocketAddr, target: String| async move {
            let mut client = TcpStream::connect(proxy).await.unwrap();
            client
                .write_all(format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut head = [0u8; 12];
            client.read_exact(&mut head).await.unwrap();
            String::from_utf8_lossy(&head).into_owned()
        };
        // Sharing the host's network: loopback is the phase's own, admitted; a closed port is
        // an admitted attempt that failed, with the error kept.
        let proxy = serve_allowlist(
            std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            Allowlist::observer(Observe::Everything),
        )
        .unwrap();
        assert!(
            ask(proxy.addr, format!("127.0.0.1:{port}"))
                .await
                .ends_with("200")
        );
        assert!(
            ask(proxy.addr, format!("127.0.0.1:{closed}"))
                .await
                .ends_with("502")
        );
        let events = proxy.shutdown().await;
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|e| e.allowed));
        assert_eq!(events[0].error, None);
        assert!(events[1].error.is_some(), "{events:?}");

        // On a bridge the proxy runs on the host: its loopback, by address or by name, is
        // refused before any connection.
        let proxy = serve_allowlist(
            std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            Allowlist::observer(Observe::NotLoopback),
        )
        .unwrap();
        for target in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
            assert!(
                ask(proxy.addr, target.clone()).await.ends_with("502"),
                "{target}"
            );
        }
        let events = proxy.shutdown().await;
        assert_eq!(events.len(), 2);
        assert!(
            events
                .iter()
                .all(|e| e.error.as_deref().is_some_and(|m| m.contains("loopback"))),
            "{events:?}"
        );
    }

    #[tokio::test]
    async fn shutdown_closes_open_tunnels() {
        let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = upstream.local_addr().unwrap().port();
        // Accept and hold the tunnel's far end open.
        let held = tokio::spawn(async move { upstream.accept().await.map(|(s, _)| s) });
        let list = Allowlist::parse(&[format!("127.0.0.1:{port}")]).unwrap();
        let proxy =
            serve_allowlist(std::net::TcpListener::bind("127.0.0.1:0").unwrap(), list).unwrap();
        let mut client = TcpStream::connect(proxy.addr).await.unwrap();
        client
            .write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = [0u8; 39];
        client.read_exact(&mut head).await.unwrap();
        assert!(head.starts_with(b"HTTP/1.1 200"));
        let _far_end = held.await.unwrap().unwrap();
        let events = proxy.shutdown().await;
        assert_eq!(events.len(), 1);
        assert!(events[0].allowed);
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest))
            .await
            .expect("the tunnel is closed, not left open")
            .unwrap_or(0);
        assert_eq!(n, 0, "nothing more comes through a closed tunnel");
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
