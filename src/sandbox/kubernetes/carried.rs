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
/// flag `p`, the start's proofs (a base64 line on stdin: the script must exit 0 and print its
/// proof line); flag `u`, an upload (a line `SIZE SHA256`, the directory to unpack into and
/// the paths to remove first as base64 lines ending with `.`, then the archive to the end of
/// stdin). When one did not hold the command is not run: the facts line says why
/// (`x<code> <message>`) and the exit code is 125. A macro, so that `concat!` takes it into
/// the wrapper.
macro_rules! carried_prelude {
    () => {
        r#"_z=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
_no() { m=$(printf %s "$2" | $B head -c 300 | $B tr '\n\037' '  ')
  f="arbiter-kept 125 0 0 $_z $_z x$1 $m"; printf '%s\n' "$f" >"$_k.f"; printf '\037%s\n' "$f" >&2; exit 125; }
case $fl in *p*)
  IFS= read -r l; s=$(printf %s "$l" | $B base64 -d) || _no 93 "the proofs did not arrive"
  o=$( (eval "$s") </dev/null 2>&1 ); r=$?
  case $r in
    0) case $o in *arbiter-proven*) ;; *) _no 93 "exit 0 without the proof's line";; esac;;
    100) _no 100 "not handed over yet";;
    *) _no 99 "$o";;
  esac;;
esac
_in() { IFS=' ' read -r n h || _no 97 "no upload header"; IFS= read -r l; d=$(printf %s "$l" | $B base64 -d)
  set --
  while IFS= read -r l; do [ "$l" = . ] && break; p=$(printf %s "$l" | $B base64 -d; echo x); set -- "$@" "${p%x}"; done
  f=$_k.in
  $B cat >"$f" || _no 97 "cannot write $f"
  got=$($B wc -c <"$f"); got=$((got+0))
  [ "$got" = "$n" ] || { $B rm -f "$f"; _no 98 "the pod received $got bytes of $n"; }
  sum=$($B sha256sum "$f"); sum=${sum%% *}
  [ "$sum" = "$h" ] || { $B rm -f "$f"; _no 98 "the pod received sha256 $sum, sent $h"; }
  [ -d "$d" ] || { $B rm -f "$f"; _no 96 "$d is not a directory"; }
  [ $# = 0 ] || $B rm -rf -- "$@" 2>"$f.e" || { $B rm -f "$f"; _no 95 "removing $* failed: $($B cat "$f.e")"; }
  $B tar -x --numeric-owner -f "$f" -C "$d" 2>"$f.e" || { $B rm -f "$f"; _no 94 "unpacking into $d failed: $($B cat "$f.e")"; }
  $B rm -f "$f" "$f.e"; }
case $fl in *u*) _in;; esac
"#
    };
}
pub(super) use carried_prelude;
