//! The proofs of a pod's start, from inside it, before anything of a trial runs there: the
//! image's ENTRYPOINT handed over to the keep-alive (Harbor's tasks), and network `none` in
//! place (only loopback). One script carries both.
//!
//! The answer is the script's exit code *and* a line it prints last: the API was seen
//! reporting exit 0 for a command that exited 3 (kept.rs), and a proof must never pass on a
//! status alone. A pod, cold or a claimed warm one (`warm.rs`), is proved by its first
//! command, which carries the script (`carry.rs`), or by an exec of its own just before
//! (`lifecycle.rs`'s `ensure_proven`).

use super::error::KubeError;
use super::exec::RawEnd;
use crate::sandbox::SandboxError;
use crate::sandbox::handover::{KEEPALIVE_MARKER, handover_probe};
use crate::sandbox::toolbox::{keepalive_argv, toolbox_argv};

/// Proof, from inside, that a pod with network `none` has only loopback: no other interface
/// up, no address but loopback's, no route, and the API service unreachable.
const PROVE_NO_NETWORK: &str = r#"B=/.arbiter/toolbox/busybox
for d in /sys/class/net/*; do i=${d##*/}; [ "$i" = lo ] && continue
  s=$($B cat "$d/operstate" 2>/dev/null); [ "$s" = down ] || { echo "interface $i is ${s:-unknown}" >&2; exit 1; }
done
a=$($B ip -o addr show | $B grep -v ': lo ')
[ -z "$a" ] || { echo "addresses besides loopback: $a" >&2; exit 1; }
r=$($B ip route show)
[ -z "$r" ] || { echo "routes: $r" >&2; exit 1; }
if [ -n "$KUBERNETES_SERVICE_HOST" ]; then
  $B nc -w 2 "$KUBERNETES_SERVICE_HOST" "${KUBERNETES_SERVICE_PORT:-443}" </dev/null >/dev/null 2>&1 && { echo "the API service answered" >&2; exit 1; }
fi"#;

/// The exit code of the proof when the keep-alive does not run yet.
pub(super) const NOT_HANDED_OVER: i64 = 100;

/// The line the proof prints last, once everything it proves holds.
const PROVEN: &str = "arbiter-proven";

/// How many times an unclear answer (a stream cut, exit 0 without the proof's line) is asked
/// again before the start fails.
pub(super) const UNCLEAR_TRIES: u32 = 3;

/// What a pod's start must prove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Proofs {
    /// The image's ENTRYPOINT runs first and must hand over to the keep-alive.
    pub handover: bool,
    /// Network `none`: only loopback.
    pub no_network: bool,
}

impl Proofs {
    /// The proof's command (a toolbox shell as root), or `None` when there is nothing to
    /// prove.
    pub(super) fn argv(self) -> Option<Vec<String>> {
        self.script()
            .map(|script| toolbox_argv("sh", &["-c", &script]))
    }

    /// The proof as shell lines that print [`PROVEN`] last, for a script to run first (the
    /// first upload's: one exec, not two); `None` when there is nothing to prove.
    pub(super) fn script(self) -> Option<String> {
        let mut script = String::new();
        if self.handover {
            let mut keepalive = keepalive_argv();
            keepalive.push(KEEPALIVE_MARKER.to_string());
            let tool = |applet: &str| toolbox_argv(applet, &[]).join(" ");
            let probe = handover_probe(&keepalive, tool);
            script.push_str(&format!("( {probe} ) || exit {NOT_HANDED_OVER}\n"));
        }
        if self.no_network {
            script.push_str(PROVE_NO_NETWORK);
            script.push('\n');
        }
        if script.is_empty() {
            return None;
        }
        script.push_str(&format!("echo {PROVEN}"));
        Some(script)
    }
}

/// What one run of the proof answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Answer {
    Proven,
    /// The keep-alive does not run yet: ask again.
    NotYet,
    /// Network `none` is not in place (what the proof saw).
    Refused(String),
    /// No answer to trust (a stream cut, exit 0 without the proof's line): ask again.
    Unclear(String),
}

/// Whether `out` holds the line the proof prints once everything it proves holds (what a
/// script that ran the proof first did next is its own exit code's to say).
pub(super) fn proved(out: &[u8]) -> bool {
    String::from_utf8_lossy(out)
        .lines()
        .any(|l| l.trim() == PROVEN)
}

/// The answer of a proof that ended `end` with `out` and `err`.
pub(super) fn answer(end: RawEnd, out: &[u8], err: &[u8]) -> Answer {
    let proven = proved(out);
    let err = String::from_utf8_lossy(err).trim().to_string();
    match end {
        RawEnd::Exited(0) if proven => Answer::Proven,
        RawEnd::Exited(0) => Answer::Unclear("exit 0 without the proof's line".to_string()),
        RawEnd::Exited(NOT_HANDED_OVER) => Answer::NotYet,
        RawEnd::Exited(code) if proven => {
            Answer::Unclear(format!("exit {code} after the proof's line"))
        }
        RawEnd::Exited(code) => Answer::Refused(if err.is_empty() {
            format!("the proof exited {code}")
        } else {
            err
        }),
        RawEnd::TimedOut => Answer::Unclear("the proof did not end".to_string()),
        RawEnd::Cut => Answer::Unclear("the proof's stream ended without a status".to_string()),
    }
}

/// The start's failure when network `none` could not be proved.
pub(super) fn no_network_proof(pod: &str, why: &str) -> SandboxError {
    KubeError::NotStarted {
        pod: pod.to_string(),
        why: format!("network none not in place: {why}"),
        events: String::new(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_to_prove_is_no_command() {
        let none = Proofs {
            handover: false,
            no_network: false,
        };
        assert_eq!(none.argv(), None);
        let both = Proofs {
            handover: true,
            no_network: true,
        }
        .argv()
        .expect("a command");
        let script = both.last().expect("the script");
        assert!(script.contains(KEEPALIVE_MARKER), "{script}");
        assert!(script.contains("ip route show"), "{script}");
        assert!(script.ends_with(&format!("echo {PROVEN}")), "{script}");
    }

    #[test]
    fn a_proof_passes_only_on_exit_zero_with_its_line() {
        let line = format!("{PROVEN}\n");
        assert_eq!(
            answer(RawEnd::Exited(0), line.as_bytes(), b""),
            Answer::Proven
        );
        // The API's status alone is not trusted: exit 0 with the line lost is unclear.
        assert!(matches!(
            answer(RawEnd::Exited(0), b"", b""),
            Answer::Unclear(_)
        ));
        assert_eq!(
            answer(RawEnd::Exited(NOT_HANDED_OVER), b"", b""),
            Answer::NotYet
        );
        assert_eq!(
            answer(RawEnd::Exited(1), b"", b"routes: default via 10.0.0.1\n"),
            Answer::Refused("routes: default via 10.0.0.1".to_string())
        );
        assert!(matches!(
            answer(RawEnd::Exited(1), line.as_bytes(), b""),
            Answer::Unclear(_)
        ));
        assert!(matches!(answer(RawEnd::Cut, b"", b""), Answer::Unclear(_)));
        assert!(matches!(
            answer(RawEnd::TimedOut, line.as_bytes(), b""),
            Answer::Unclear(_)
        ));
    }
}
