//! The hand-over of an image's ENTRYPOINT to arbiter's keep-alive, as both backends check it
//! (SPEC §2: Harbor runs the ENTRYPOINT with a keep-alive command as its arguments; it must
//! end with `exec "$@"`).

use std::time::Duration;

/// The keep-alive's `$0`: what its command line ends with.
pub(crate) const KEEPALIVE_MARKER: &str = "arbiter-keepalive";

/// How long an image's ENTRYPOINT may take to hand over to the keep-alive (its `exec "$@"`).
pub(crate) const HANDOVER_WAIT: Duration = Duration::from_secs(30);

/// A shell script that exits 0 when a process of the container runs arbiter's keep-alive
/// (its command line starts with `keepalive`), 1 otherwise. Its own command line starts
/// differently, so it never finds itself.
pub(crate) fn handover_probe(keepalive: &[String], tool: impl Fn(&str) -> String) -> String {
    let prefix = keepalive.join(" ");
    let quoted = prefix.replace('\'', "'\\''");
    format!(
        "for f in /proc/[0-9]*/cmdline; do c=$({tr} '\\000' ' ' < \"$f\" 2>/dev/null) || continue; case \"$c\" in '{quoted}'*) exit 0;; esac; done; exit 1",
        tr = tool("tr"),
    )
}
