//! A listening socket inside another process's network namespace (a container's own
//! loopback), served from the host.
//!
//! A short-lived OS thread enters the namespace (`setns(CLONE_NEWNET)` affects only the calling
//! thread), binds `127.0.0.1:PORT` there and ends; the socket stays in that namespace while
//! arbiter's runtime accepts on it. A container with network `none` thereby reaches exactly
//! this one endpoint and nothing else. Needs root (CAP_SYS_ADMIN) and the engine on this host.

use std::net::TcpListener;

/// Why a listener could not be opened in the namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error(
        "opening a listener inside a container's network namespace needs root (arbiter runs as uid {uid})"
    )]
    NotRoot { uid: u32 },
    #[error("process {pid} is gone (no /proc/{pid}/ns/net)")]
    ProcessGone { pid: u32 },
    #[error("cannot open /proc/{pid}/ns/net: {source}")]
    Open {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot enter the network namespace of process {pid}: {source}")]
    Setns {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot listen on 127.0.0.1:{port} in the network namespace of process {pid}: {source}"
    )]
    Bind {
        pid: u32,
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("network namespaces are Linux-only; use a reachable gateway address instead")]
    Unsupported,
    #[error("the namespace thread panicked")]
    Thread,
}

/// Bind `127.0.0.1:port` (0 = any free port there) inside the network namespace of `pid` and
/// return the listener (blocking mode; [`super::Gateway::serve_trial`] makes it non-blocking).
///
/// For a container: `pid` is the engine's `State.Pid` of the running container.
#[cfg(target_os = "linux")]
pub fn listen_in_netns(pid: u32, port: u16) -> Result<TcpListener, NetnsError> {
    use std::os::fd::AsRawFd;

    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        return Err(NetnsError::NotRoot { uid });
    }
    let path = format!("/proc/{pid}/ns/net");
    let ns = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(NetnsError::ProcessGone { pid });
        }
        Err(source) => return Err(NetnsError::Open { pid, source }),
    };
    let thread = std::thread::Builder::new()
        .name(format!("arbiter-netns-{pid}"))
        .spawn(move || {
            // SAFETY: `ns` is an open namespace file descriptor owned by this closure; setns
            // changes only this thread's network namespace, and the thread ends right after.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            if rc != 0 {
                return Err(NetnsError::Setns {
                    pid,
                    source: std::io::Error::last_os_error(),
                });
            }
            TcpListener::bind(("127.0.0.1", port)).map_err(|source| NetnsError::Bind {
                pid,
                port,
                source,
            })
        })
        .map_err(|_| NetnsError::Thread)?;
    thread.join().map_err(|_| NetnsError::Thread)?
}

#[cfg(not(target_os = "linux"))]
pub fn listen_in_netns(_pid: u32, _port: u16) -> Result<TcpListener, NetnsError> {
    Err(NetnsError::Unsupported)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_gone_process_is_a_typed_error() {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            let e = listen_in_netns(1, 0).unwrap_err();
            assert!(matches!(e, NetnsError::NotRoot { .. }), "{e}");
            return;
        }
        // pid_max is at most 2^22: this pid cannot exist.
        let e = listen_in_netns(u32::MAX - 1, 0).unwrap_err();
        assert!(matches!(e, NetnsError::ProcessGone { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "process {} is gone (no /proc/{}/ns/net)",
                u32::MAX - 1,
                u32::MAX - 1
            )
        );
    }

    #[test]
    fn own_namespace_binds() {
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: not root");
            return;
        }
        let l = listen_in_netns(std::process::id(), 0).unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
    }
}
