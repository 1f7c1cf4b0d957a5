//! A verifier that could not fetch its tools (issue 23): most real verifiers download their
//! test runner when they run (`apt-get install curl`, the uv installer piped to `sh`,
//! `uvx … pytest`, `pip install pytest`). When those downloads fail, the script usually still
//! writes `reward.txt = 0` — a verdict on the harness's network, not on the agent.
//!
//! What decides it is what the harness saw, never what the script or its tools printed: every
//! verifier with a network runs behind arbiter's egress proxy (an observer that admits what
//! the verifier could reach anyway; `gateway::Observe`), which records each attempt and
//! whether the destination could be reached. A verifier that did not pass is a bootstrap
//! failure when one of its attempts failed at the connection (name resolution, connect,
//! timeout) to a host that the verifier's own tooling is known to fetch from:
//!
//! - a host named in the task's tests (`https://astral.sh/…` in `test.sh`), on a port written
//!   with it or 80/443;
//! - a package index or tool host on 80/443 (PyPI, the uv installer and its GitHub releases,
//!   Debian's and Ubuntu's archives, npm, …), which the tools reach on their own.
//!
//! Anything else the verifier failed to reach (a host only the agent's code names) leaves the
//! verdict alone, so an agent cannot turn a failed trial into an unscored one by making its own
//! code try an unreachable name; nor can it make a listed host unreachable without changing
//! what steers downloads (hosts, resolver, proxy and index configuration), which the integrity
//! classifier reports. Tools that ignore the proxy variables are not seen: their failures stay
//! the verifier's verdict, as before.
//!
//! A verifier with no network (issue 37) runs behind the same proxy with nothing admitted: each
//! attempt is refused and recorded, and a refused attempt counts as a failed download under
//! the same rule — except that a tool's own host counts only when the tests install something,
//! since offline any code the tests run (the agent's) fails at PyPI too.

use std::path::Path;

use crate::gateway::EgressEvent;

/// Hosts the usual test tooling downloads from, by exact name or `.suffix`.
const TOOL_HOSTS: &[&str] = &[
    "pypi.org",
    "files.pythonhosted.org",
    "bootstrap.pypa.io",
    "astral.sh",
    "github.com",
    "codeload.github.com",
    ".githubusercontent.com",
    "deb.debian.org",
    "security.debian.org",
    ".debian.org",
    "archive.ubuntu.com",
    "security.ubuntu.com",
    "ports.ubuntu.com",
    ".ubuntu.com",
    "dl-cdn.alpinelinux.org",
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "nodejs.org",
    "download.pytorch.org",
    "conda.anaconda.org",
    "repo.anaconda.com",
    "static.crates.io",
    "index.crates.io",
    "proxy.golang.org",
    "sum.golang.org",
    "repo.maven.apache.org",
    "repo1.maven.org",
    "huggingface.co",
];

/// Text files of the tests read for host names (anything larger is not a script).
const MAX_SCRIPT_BYTES: u64 = 1024 * 1024;
const MAX_SCRIPTS: usize = 200;

fn is_tool_host(host: &str) -> bool {
    TOOL_HOSTS
        .iter()
        .any(|known| match known.strip_prefix('.') {
            Some(suffix) => host.ends_with(known) || host == suffix,
            None => host == *known,
        })
}

/// `(host, port)` of every `http(s)://` URL in `text`, with the line it is on.
fn urls(text: &str) -> Vec<(String, Option<u16>, &str)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut rest = line;
        while let Some(at) = rest.find("://") {
            let scheme_ok = rest[..at].ends_with("http") || rest[..at].ends_with("https");
            let after = &rest[at + 3..];
            rest = after;
            if !scheme_ok {
                continue;
            }
            let authority: String = after
                .chars()
                .take_while(|c| !matches!(c, '/' | '?' | '#' | '"' | '\'' | ' ' | '\t' | ')' | '`'))
                .collect();
            let authority = authority.rsplit('@').next().unwrap_or_default();
            let (host, port) = match authority.rsplit_once(':') {
                Some((h, p)) if !h.contains(']') || h.ends_with(']') => match p.parse() {
                    Ok(p) => (h, Some(p)),
                    Err(_) => (authority, None),
                },
                _ => (authority, None),
            };
            let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
            // A shell variable is not a host.
            if !host.is_empty() && !host.contains('$') && !host.contains('{') {
                out.push((host, port, line.trim()));
            }
        }
    }
    out
}

/// The tests' text files (`tests/…`), as `(relative name, text)`.
fn scripts(tests_dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![tests_dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if out.len() >= MAX_SCRIPTS {
                return out;
            }
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                dirs.push(entry.path());
            } else if meta.is_file()
                && meta.len() <= MAX_SCRIPT_BYTES
                && let Ok(text) = std::fs::read_to_string(entry.path())
            {
                let name = entry
                    .path()
                    .strip_prefix(tests_dir.parent().unwrap_or(tests_dir))
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                out.push((name, text));
            }
        }
    }
    out.sort();
    out
}

/// What a refused attempt of an offline verifier is reported as.
const NO_NETWORK: &str = "the verifier has no network";

/// The evidence of a bootstrap failure among `seen` (the verifier's attempts), or `None`:
/// the failing host and port with the error, and the line of the tests that names the host
/// (or, for a tool's own host, the first line of the tests that installs something). A host
/// the tests name is quoted before a tool's own host, whatever the order of the attempts.
///
/// `offline`: the verifier had no network, and its proxy admitted nothing, so every attempt
/// it refused failed; a tool's own host then counts only when the tests install something
/// (code the tests merely run could otherwise turn a failure into an unscored trial by
/// asking for PyPI).
pub(crate) fn bootstrap_failure(
    seen: &[EgressEvent],
    tests_dir: &Path,
    offline: bool,
) -> Option<String> {
    let failed: Vec<(&EgressEvent, &str)> = seen
        .iter()
        .filter_map(|e| match (&e.error, e.allowed) {
            (Some(error), true) => Some((e, error.as_str())),
            (None, false) if offline => Some((e, NO_NETWORK)),
            _ => None,
        })
        .collect();
    if failed.is_empty() {
        return None;
    }
    let scripts = scripts(tests_dir);
    let named: Vec<(String, Option<u16>, String, String)> = scripts
        .iter()
        .flat_map(|(file, text)| {
            urls(text)
                .into_iter()
                .map(move |(h, p, line)| (h, p, file.clone(), line.to_string()))
        })
        .collect();
    let host_of = |event: &EgressEvent| event.host.trim_end_matches('.').to_ascii_lowercase();
    let web = |event: &EgressEvent| matches!(event.port, 80 | 443);
    for &(event, error) in &failed {
        let host = host_of(event);
        let by_tests = named.iter().find(|(h, p, _, _)| {
            *h == host && (p.is_some_and(|p| p == event.port) || (p.is_none() && web(event)))
        });
        if let Some((_, _, file, line)) = by_tests {
            return Some(format!(
                "{host}:{} unreachable ({error}); {file}: {line}",
                event.port
            ));
        }
    }
    let install = scripts.iter().find_map(|(file, text)| {
        text.lines()
            .map(str::trim)
            .find(|l| {
                !l.starts_with('#')
                    && [
                        "apt-get", "apt ", "pip", "uv", "npm", "curl", "wget", "git ",
                    ]
                    .iter()
                    .any(|tool| l.contains(tool))
            })
            .map(|l| format!("; {file}: {l}"))
    });
    if offline && install.is_none() {
        return None;
    }
    for &(event, error) in &failed {
        let host = host_of(event);
        if web(event) && is_tool_host(&host) {
            return Some(format!(
                "{host}:{} unreachable ({error}){}",
                event.port,
                install.clone().unwrap_or_default()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(host: &str, port: u16) -> EgressEvent {
        EgressEvent {
            host: host.to_string(),
            port,
            allowed: true,
            error: Some("failed to lookup address information".to_string()),
        }
    }

    /// A verifier with a network (its observer admits everything).
    fn bootstrap_failure_on(seen: &[EgressEvent], dir: &Path) -> Option<String> {
        bootstrap_failure(seen, dir, false)
    }

    /// An attempt the offline verifier's proxy refused.
    fn refused(host: &str, port: u16) -> EgressEvent {
        EgressEvent {
            host: host.to_string(),
            port,
            allowed: false,
            error: None,
        }
    }

    fn tests_dir(test_sh: &str) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(tmp.path().join("tests")).expect("tests");
        std::fs::write(tmp.path().join("tests/test.sh"), test_sh).expect("test.sh");
        tmp
    }

    const TB2: &str = "#!/bin/bash\napt-get update\napt-get install -y curl\ncurl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\nsource $HOME/.local/bin/env\nuvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py\n";

    #[test]
    fn a_host_the_tests_name_or_a_tool_host_that_failed_is_a_bootstrap_failure() {
        let tmp = tests_dir(TB2);
        let dir = tmp.path().join("tests");
        let e = bootstrap_failure_on(&[failed("astral.sh", 443)], &dir).expect("evidence");
        assert!(e.contains("astral.sh:443 unreachable"), "{e}");
        assert!(
            e.contains("tests/test.sh: curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh"),
            "{e}"
        );
        // apt's own host, named nowhere in the tests: the install line is quoted.
        let e = bootstrap_failure_on(&[failed("deb.debian.org", 80)], &dir).expect("evidence");
        assert!(e.starts_with("deb.debian.org:80 unreachable"), "{e}");
        assert!(e.contains("tests/test.sh: apt-get update"), "{e}");
        // uv's downloads from GitHub's release assets.
        assert!(
            bootstrap_failure_on(&[failed("release-assets.githubusercontent.com", 443)], &dir)
                .is_some()
        );
    }

    #[test]
    fn what_only_the_agents_code_could_have_tried_leaves_the_verdict_alone() {
        let tmp = tests_dir(TB2);
        let dir = tmp.path().join("tests");
        // Nothing failed.
        let ok = EgressEvent {
            error: None,
            ..failed("pypi.org", 443)
        };
        assert_eq!(bootstrap_failure_on(&[ok], &dir), None);
        // A name no tooling uses, a tool host on an odd port, a refused (not admitted) host.
        assert_eq!(
            bootstrap_failure_on(&[failed("nonexistent.invalid", 443)], &dir),
            None
        );
        assert_eq!(
            bootstrap_failure_on(&[failed("pypi.org", 9999)], &dir),
            None
        );
        let refused = EgressEvent {
            allowed: false,
            ..failed("pypi.org", 443)
        };
        assert_eq!(bootstrap_failure_on(&[refused], &dir), None);
    }

    #[test]
    fn a_port_written_with_the_host_counts_and_variables_are_not_hosts() {
        let tmp =
            tests_dir("curl -fsS http://127.0.0.1:8765/runner.sh | sh\ncurl https://$MIRROR/x\n");
        let dir = tmp.path().join("tests");
        assert!(bootstrap_failure_on(&[failed("127.0.0.1", 8765)], &dir).is_some());
        assert_eq!(
            bootstrap_failure_on(&[failed("127.0.0.1", 8766)], &dir),
            None
        );
        assert_eq!(urls("curl https://$MIRROR/x").len(), 0);
        assert_eq!(
            urls("pip install --index-url https://user:pw@[::1]:3141/simple x")[0].0,
            "::1"
        );
    }

    #[test]
    fn offline_a_refused_attempt_at_a_host_the_tests_name_is_a_bootstrap_failure() {
        let tmp = tests_dir(TB2);
        let dir = tmp.path().join("tests");
        // apt's host first, then the runner's: the host the tests name is the one quoted.
        let seen = [refused("deb.debian.org", 80), refused("astral.sh", 443)];
        let e = bootstrap_failure(&seen, &dir, true).expect("evidence");
        assert_eq!(
            e,
            "astral.sh:443 unreachable (the verifier has no network); tests/test.sh: curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh"
        );
        // Only apt's: a tool host, with the tests' first install line.
        let e = bootstrap_failure(&seen[..1], &dir, true).expect("evidence");
        assert_eq!(
            e,
            "deb.debian.org:80 unreachable (the verifier has no network); tests/test.sh: apt-get update"
        );
        // With a network, a refusal is the allowlist's decision, not a failed download.
        assert_eq!(bootstrap_failure(&seen, &dir, false), None);
    }

    #[test]
    fn offline_no_attempt_or_an_attempt_only_the_agents_code_could_make_leaves_the_verdict_alone() {
        let tmp = tests_dir(TB2);
        let dir = tmp.path().join("tests");
        assert_eq!(bootstrap_failure(&[], &dir, true), None);
        assert_eq!(
            bootstrap_failure(&[refused("nonexistent.invalid", 443)], &dir, true),
            None
        );
        assert_eq!(
            bootstrap_failure(&[refused("pypi.org", 8443)], &dir, true),
            None
        );
        // Tests that install nothing: a tool host asked for can only come from the code they
        // run (the agent's), so it is no evidence.
        let quiet = tests_dir(
            "#!/bin/sh
python3 -m pytest /tests/test_outputs.py
",
        );
        let dir = quiet.path().join("tests");
        assert_eq!(
            bootstrap_failure(&[refused("pypi.org", 443)], &dir, true),
            None
        );
        // With a network the same attempt, failed at the connection, still counts (issue 23).
        assert!(bootstrap_failure(&[failed("pypi.org", 443)], &dir, false).is_some());
    }
}
