//! `network_mode` + `allowed_hosts` of `[environment]`, `[agent]`,
//! `[verifier]` and their `[steps.*]` forms (Harbor's network policy).
//!
//! Rules (Harbor's): `allowed_hosts` without `network_mode` means
//! `allowlist`; `allowed_hosts` with any other mode is a conflict. Entries are
//! host names, `*.suffix` wildcards, IP addresses or CIDR ranges — never URLs,
//! ports or paths — and are normalized (lowercase, no trailing dot, no
//! duplicates).

use std::net::IpAddr;

use super::super::error::{TaskErrorKind, quote};
use super::super::model::NetworkMode;
use super::super::toml_read::{Table, string_list};
use super::{Parser, Policy, Result};

impl Parser<'_> {
    /// The table's network policy when it sets `network_mode` or
    /// `allowed_hosts`; the hosts are empty unless the mode is `Allowlist`.
    pub(super) fn network_policy(&mut self, t: &Table<'_>) -> Result<Option<Policy>> {
        let mode = t.network_mode("network_mode")?;
        let hosts_key = t.key("allowed_hosts");
        let hosts = match t.get("allowed_hosts") {
            Some(v) => {
                let mut out: Vec<String> = Vec::new();
                for (i, host) in string_list(&t.ctx, &hosts_key, v)?.iter().enumerate() {
                    let host = check_host(host)
                        .map_err(|what| t.ctx.value(&format!("{hosts_key}[{i}]"), what))?;
                    if !out.contains(&host) {
                        out.push(host);
                    }
                }
                Some(out)
            }
            None => None,
        };
        match (mode, hosts) {
            (None, None) => Ok(None),
            (None, Some(hosts)) if hosts.is_empty() => Ok(None),
            (None, Some(hosts)) => Ok(Some((NetworkMode::Allowlist, hosts))),
            (Some(NetworkMode::Allowlist), hosts) => {
                let hosts = hosts.unwrap_or_default();
                if hosts.is_empty() {
                    self.warn(
                        &t.key("network_mode"),
                        "\"allowlist\" with no allowed_hosts: no host is reachable",
                    );
                }
                Ok(Some((NetworkMode::Allowlist, hosts)))
            }
            (Some(mode), Some(hosts)) if !hosts.is_empty() => Err(t.ctx.err(
                TaskErrorKind::Conflict,
                &hosts_key,
                format!(
                    "only used with network_mode = \"allowlist\" (network_mode is \"{}\")",
                    mode.as_str()
                ),
            )),
            (Some(mode), _) => Ok(Some((mode, Vec::new()))),
        }
    }
}

/// One `allowed_hosts` entry, normalized; or what is wrong with it.
pub(crate) fn check_host(raw: &str) -> std::result::Result<String, String> {
    let host = raw.trim().to_ascii_lowercase();
    let host = host.trim_end_matches('.');
    let bad = |why: &str| Err(format!("{why} (got {})", quote(raw)));
    if host.is_empty() {
        return bad("must be a host name, not empty");
    }
    if host.contains("://") || host.contains('@') {
        return bad("must be a host name, IP address or CIDR range, not a URL");
    }
    if let Some((address, prefix)) = host.split_once('/') {
        return match cidr(address, prefix) {
            Some(normalized) => Ok(normalized),
            None => bad("not a valid CIDR range (like \"203.0.113.0/24\"; host bits must be 0)"),
        };
    }
    if host.contains(':') {
        return match host.parse::<std::net::Ipv6Addr>() {
            Ok(address) => Ok(address.to_string()),
            Err(_) => bad("must be a host name or IP address, without a port"),
        };
    }
    if host.parse::<std::net::Ipv4Addr>().is_ok() {
        return Ok(host.to_string());
    }
    let name = match host.strip_prefix("*.") {
        Some(suffix) if suffix.parse::<std::net::Ipv4Addr>().is_ok() => {
            return bad("a wildcard must name a domain, not an IP address");
        }
        Some(suffix) => suffix,
        None if host.contains('*') => return bad("a wildcard must be a leading \"*.\""),
        None => host,
    };
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return bad("not a valid host name (letters, digits, hyphens and dots)");
    }
    Ok(host.to_string())
}

/// `address/prefix` with every host bit 0, in canonical text.
fn cidr(address: &str, prefix: &str) -> Option<String> {
    let address: IpAddr = address.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    let ok = match address {
        IpAddr::V4(a) => {
            prefix <= 32 && u32::from(a).checked_shl(u32::from(prefix)).unwrap_or(0) == 0
        }
        IpAddr::V6(a) => {
            prefix <= 128 && u128::from(a).checked_shl(u32::from(prefix)).unwrap_or(0) == 0
        }
    };
    ok.then(|| format!("{address}/{prefix}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_validated_and_normalized() {
        let cases: &[(&str, std::result::Result<&str, &str>)] = &[
            ("PyPI.org.", Ok("pypi.org")),
            ("*.githubusercontent.com", Ok("*.githubusercontent.com")),
            ("203.0.113.7", Ok("203.0.113.7")),
            ("2001:DB8::1", Ok("2001:db8::1")),
            ("198.51.100.0/24", Ok("198.51.100.0/24")),
            ("2001:db8::/32", Ok("2001:db8::/32")),
            ("0.0.0.0/0", Ok("0.0.0.0/0")),
            ("localhost", Ok("localhost")),
            (
                "https://pypi.org",
                Err(
                    "must be a host name, IP address or CIDR range, not a URL (got \"https://pypi.org\")",
                ),
            ),
            (
                "pypi.org:443",
                Err("must be a host name or IP address, without a port (got \"pypi.org:443\")"),
            ),
            (
                "198.51.100.1/24",
                Err(
                    "not a valid CIDR range (like \"203.0.113.0/24\"; host bits must be 0) (got \"198.51.100.1/24\")",
                ),
            ),
            (
                "pypi.org/simple",
                Err(
                    "not a valid CIDR range (like \"203.0.113.0/24\"; host bits must be 0) (got \"pypi.org/simple\")",
                ),
            ),
            (
                "a*.example.com",
                Err("a wildcard must be a leading \"*.\" (got \"a*.example.com\")"),
            ),
            (
                "*.203.0.113.7",
                Err("a wildcard must name a domain, not an IP address (got \"*.203.0.113.7\")"),
            ),
            (
                "under_score.org",
                Err(
                    "not a valid host name (letters, digits, hyphens and dots) (got \"under_score.org\")",
                ),
            ),
            ("  ", Err("must be a host name, not empty (got \"  \")")),
        ];
        for (raw, expected) in cases {
            assert_eq!(
                check_host(raw),
                expected.map(str::to_string).map_err(str::to_string),
                "{raw:?}"
            );
        }
    }
}
