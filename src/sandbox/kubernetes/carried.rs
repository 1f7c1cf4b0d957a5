//! What a command carries into a pod and what it says when that did not hold: the types,
//! and the wrapper's lines that receive it (`exec.rs` wraps, `carry.rs` holds and sends).

use std::sync::Arc;

/// An archive held back for a pod's next command: unpacked at `dest` once `replacing` are
/// removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HeldUpload {
    pub dest: String,
    pub replacing: Vec<String>,
    pub tar: Arc<Vec<u8>>,
}

/// What one command carries (`exec.rs`'s wrapper runs it first): the start's proofs (their
/// script, `proof.rs`) and an upload; and what it does after: `halt`, the pod's processes
/// killed once the command ended, and the path named sent along (`exec.rs`'s `HALT`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Carried<'a> {
    pub proofs: Option<&'a str>,
    pub upload: Option<&'a HeldUpload>,
    pub halt: Option<&'a str>,
}

impl Carried<'_> {
    pub(super) fn is_empty(&self) -> bool {
        self.proofs.is_none() && self.upload.is_none()
    }
}

/// What a command carried did not hold (the wrapper's `x<code> <message>`): the command was
/// not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Unplaced {
    pub code: i64,
    pub message: String,
}

/// The exec wrapper's lines (`exec.rs`) that run what a command carries before it, as root:
/// flag `p`, the start's proofs (their script on stdin, ending with a NUL: it must exit 0 and
/// print its proof line); flag `u`, an upload (shell lines ending with a NUL, setting its
/// sha256 and directory and the paths to remove first, `exec.rs`'s `upload_head`; then the
/// archive to the end of stdin, checked against its sha256 before anything is removed).
/// Stdin is read by the shell itself, and applets named bare run in the shell or a fork of
/// it (the toolbox's busybox prefers its applets): a carried command costs few processes.
/// When one did not hold the command is not run: the facts line says why
/// (`x<code> <message>`) and the exit code is 125. A macro, so that `concat!` takes it into
/// the wrapper.
macro_rules! carried_prelude {
    () => {
        r#"_z=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
_no() { m=$(printf %s "$2" | $B head -c 300 | $B tr '\n\037' '  ')
  f="arbiter-kept 125 0 0 $_z $_z x$1 $m"; printf '%s\n' "$f" >"$_k.f"; printf '\037%s\n' "$f" >&2; exit 125; }
case $fl in *p*)
  IFS= read -r -d '' s || _no 93 "the proofs did not arrive"
  o=$(eval "$s" </dev/null 2>&1); r=$?
  case $r in
    0) case $o in *arbiter-proven*) ;; *) _no 93 "exit 0 without the proof's line";; esac;;
    100) _no 100 "not handed over yet";;
    *) _no 99 "$o";;
  esac;;
esac
_in() { IFS= read -r -d '' l || _no 97 "no upload header"; eval "$l" || _no 97 "a bad upload header"
  f=$_k.in
  $B cat >"$f" || _no 97 "cannot write $f"
  sum=$(sha256sum "$f"); sum=${sum%% *}
  [ "$sum" = "$h" ] || { got=$(wc -c <"$f"); unlink "$f"; _no 98 "the pod received $((got+0)) bytes with sha256 $sum, sent $h"; }
  [ -d "$d" ] || { unlink "$f"; _no 96 "$d is not a directory"; }
  [ $# = 0 ] || rm -rf -- "$@" 2>"$f.e" || { unlink "$f"; _no 95 "removing $* failed: $($B cat "$f.e")"; }
  $B tar -x --numeric-owner -f "$f" -C "$d" 2>"$f.e" || { unlink "$f"; _no 94 "unpacking into $d failed: $($B cat "$f.e")"; }
  unlink "$f"; unlink "$f.e" 2>/dev/null; }
case $fl in *u*) _in;; esac
"#
    };
}
pub(super) use carried_prelude;
