//! What a command carries into a pod and what it says when that did not hold (the types
//! only: `carry.rs` holds and sends, `exec.rs` wraps).

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
/// script, `proof.rs`) and an upload.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Carried<'a> {
    pub proofs: Option<&'a str>,
    pub upload: Option<&'a HeldUpload>,
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
