//! Which process owns a container or image: `<host>/<pid>/<start time>` in the
//! `arbiter.owner` label. `arbiter gc` removes only what belongs to processes that are gone.

use std::collections::BTreeMap;

pub(crate) const LABEL_OWNER: &str = "arbiter.owner";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub host: String,
    pub pid: u32,
    /// Process start time (clock ticks since boot, /proc/<pid>/stat field 22): guards
    /// against a recycled pid.
    pub start: u64,
}

impl Owner {
    pub(crate) fn current() -> Owner {
        let pid = std::process::id();
        Owner {
            host: hostname(),
            pid,
            start: start_time(pid).unwrap_or(0),
        }
    }

    pub(crate) fn label(&self) -> String {
        format!("{}/{}/{}", self.host, self.pid, self.start)
    }

    pub(crate) fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(LABEL_OWNER.to_string(), self.label())])
    }

    pub(crate) fn parse(label: &str) -> Option<Owner> {
        let mut parts = label.rsplitn(3, '/');
        let start = parts.next()?.parse().ok()?;
        let pid = parts.next()?.parse().ok()?;
        let host = parts.next()?.to_string();
        Some(Owner { host, pid, start })
    }

    /// `Some(alive)` for an owner on this host; `None` when it ran elsewhere (cannot tell).
    pub(crate) fn is_alive(&self) -> Option<bool> {
        if self.host != hostname() {
            return None;
        }
        Some(start_time(self.pid).is_some_and(|start| start == self.start))
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".to_string())
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_process_is_alive_and_round_trips() {
        let me = Owner::current();
        assert!(me.start > 0);
        assert_eq!(Owner::parse(&me.label()), Some(me.clone()));
        assert_eq!(me.is_alive(), Some(true));
        let recycled = Owner {
            start: me.start + 1,
            ..me.clone()
        };
        assert_eq!(recycled.is_alive(), Some(false));
        let elsewhere = Owner {
            host: "another-host".into(),
            ..me
        };
        assert_eq!(elsewhere.is_alive(), None);
    }
}
