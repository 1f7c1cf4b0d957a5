//! What a pod's next command carries: an upload held back for it, and the proofs its start
//! left, run as root in the command's own exec before the command (one request, not two or
//! three).
//!
//! [`Sandbox::upload`](crate::sandbox::Sandbox::upload) of a small archive to a pod is held
//! (`PodState::held`) until the pod's next command, whose wrapper (`exec.rs`) receives it on
//! stdin after the environment, checks its size and sha256, removes what it replaces and
//! unpacks it, and runs the command only if all of that held; a failure is the call's error,
//! as the upload's would have been. Anything else that reads the pod's files (a download,
//! the change set, a freeze, the mounts read back) sends what is held first, on its own. So
//! a trial's files go in with its agent's command, and the verifier's tests with the
//! verifier's: what a claimed warm pod waits for before its agent runs is one exec.

use std::sync::Arc;

use super::KubernetesSandbox;
use super::carried::{Carried, HeldUpload, Unplaced};
use super::error::KubeError;
use super::names::is_sidecar;
use super::proof::{NOT_HANDED_OVER, Proofs, no_network_proof};
use super::transfer::CHUNK;
use crate::sandbox::{ExecOutcome, ExecSpec, SandboxError, concat_archives};

/// The proofs exited 0 without their line: no answer to trust (asked again alone).
const UNCLEAR: i64 = 93;
/// The proofs failed (network `none` not in place, or the handover not seen).
const REFUSED: i64 = 99;
/// The paths to replace could not be removed: the agent's doing.
const NOT_REMOVED: i64 = 95;

/// A command with a shorter deadline carries nothing: what is held goes first on its own.
const CARRY_MIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// An archive up to this size is held for the next command (a larger one goes in chunks,
/// `transfer.rs`).
const HOLD_MAX: usize = CHUNK;

impl KubernetesSandbox {
    /// [`Sandbox::upload`](crate::sandbox::Sandbox::upload) and
    /// [`upload_replacing`](crate::sandbox::Sandbox::upload_replacing): held for the pod's
    /// next command when small, merged with one held already when both unpack at `/` and the
    /// new one replaces nothing; otherwise what is held goes first, then this one.
    pub(super) async fn upload_or_hold(
        &self,
        pod: &str,
        dest: &str,
        tar: Vec<u8>,
        replacing: &[&str],
    ) -> Result<(), SandboxError> {
        if is_sidecar(pod) || tar.len() > HOLD_MAX {
            self.send_held(pod).await?;
            return self.upload_tar(pod, dest, &tar, replacing).await;
        }
        let new = HeldUpload {
            dest: dest.to_string(),
            replacing: replacing.iter().map(|p| p.to_string()).collect(),
            tar: Arc::new(tar),
        };
        let before = {
            let mut states = self.states.lock().await;
            let Some(state) = states.get_mut(pod) else {
                drop(states);
                return self.upload_tar(pod, dest, &new.tar, replacing).await;
            };
            match state.held.take() {
                None => {
                    state.held = Some(new);
                    return Ok(());
                }
                Some(old)
                    if old.dest == "/"
                        && new.dest == "/"
                        && new.replacing.is_empty()
                        && old.tar.len() + new.tar.len() <= HOLD_MAX =>
                {
                    let tar = concat_archives(&[&old.tar, &new.tar]).map_err(|e| {
                        KubeError::Transfer {
                            op: "upload",
                            pod: pod.to_string(),
                            message: format!("the archives to send do not join: {e}"),
                        }
                    })?;
                    state.held = Some(HeldUpload {
                        tar: Arc::new(tar),
                        ..old
                    });
                    return Ok(());
                }
                Some(old) => old,
            }
        };
        self.upload_held(pod, &before).await?;
        if let Some(state) = self.states.lock().await.get_mut(pod) {
            state.held = Some(new);
            return Ok(());
        }
        self.upload_tar(pod, dest, &new.tar, replacing).await
    }

    /// What is held for `pod`'s next command, taken.
    async fn take_held(&self, pod: &str) -> Option<HeldUpload> {
        self.states.lock().await.get_mut(pod)?.held.take()
    }

    /// Send what is held for `pod` now, on its own: before anything that reads its files.
    pub(super) async fn send_held(&self, pod: &str) -> Result<(), SandboxError> {
        match self.take_held(pod).await {
            Some(held) => self.upload_held(pod, &held).await,
            None => Ok(()),
        }
    }

    async fn upload_held(&self, pod: &str, held: &HeldUpload) -> Result<(), SandboxError> {
        let replacing: Vec<&str> = held.replacing.iter().map(String::as_str).collect();
        self.upload_tar(pod, &held.dest, &held.tar, &replacing)
            .await
    }

    /// [`Sandbox::exec`](crate::sandbox::Sandbox::exec): the command carries what is held
    /// for its pod and the proofs its start left; when the proofs did not hold yet (the
    /// image's ENTRYPOINT has not handed over) or gave no answer to trust, nothing was
    /// unpacked and nothing run: they are asked alone until they hold, then the command
    /// runs with the upload.
    pub(super) async fn exec_carrying(
        &self,
        pod: &str,
        spec: &ExecSpec,
        halt: Option<&str>,
    ) -> Result<ExecOutcome, SandboxError> {
        if is_sidecar(pod) || !carries(spec) {
            if !is_sidecar(pod) {
                self.send_held(pod).await?;
                self.ensure_proven(pod).await?;
            }
            let only = Carried {
                halt: halt.filter(|_| !is_sidecar(pod)),
                ..Carried::default()
            };
            return self
                .exec_spec(pod, spec, only)
                .await?
                .map_err(|why| unplaced_error(pod, why, None));
        }
        let held = self.take_held(pod).await;
        let proof = self.pending_proof(pod).await;
        let proofs = proof.as_ref().map(|(p, _)| *p);
        let script = proofs.and_then(Proofs::script);
        let carried = Carried {
            proofs: script.as_deref(),
            upload: held.as_ref(),
            halt,
        };
        match self.exec_spec(pod, spec, carried).await? {
            Ok(outcome) => {
                if let Some((_, cell)) = proof {
                    // Made by this command's wrapper; another caller may have made them too.
                    let _ = cell.set(());
                    tracing::debug!(pod, carried = true, "start proved");
                }
                return Ok(outcome);
            }
            Err(why) => {
                if !proves_again(&why, proofs) {
                    return Err(unplaced_error(pod, why, proofs));
                }
                tracing::debug!(
                    pod,
                    code = why.code,
                    why.message,
                    "start proofs asked again"
                );
            }
        }
        self.ensure_proven(pod).await?;
        let carried = Carried {
            proofs: None,
            upload: held.as_ref(),
            halt,
        };
        self.exec_spec(pod, spec, carried)
            .await?
            .map_err(|why| unplaced_error(pod, why, None))
    }
}

/// Whether a command carries what is held and the proofs: not one whose deadline is short,
/// which the unpacking, on a loaded node, would eat into (a command must never time out for
/// the harness's work).
fn carries(spec: &ExecSpec) -> bool {
    spec.timeout.is_none_or(|t| t >= CARRY_MIN_DEADLINE)
}

/// Whether the proofs a command carried are to be asked again alone: not handed over yet,
/// no answer to trust, or (only the handover to prove) a probe that did not see it yet.
fn proves_again(why: &Unplaced, proofs: Option<Proofs>) -> bool {
    let Some(proofs) = proofs else {
        return false;
    };
    match why.code {
        NOT_HANDED_OVER | UNCLEAR => true,
        REFUSED => !proofs.no_network,
        _ => false,
    }
}

/// The error of a command whose carried proofs or upload did not hold.
fn unplaced_error(pod: &str, why: Unplaced, proofs: Option<Proofs>) -> SandboxError {
    match why.code {
        REFUSED if proofs.is_some_and(|p| p.no_network) => no_network_proof(pod, &why.message),
        // The container's own filesystem would not let them go: the agent's doing.
        NOT_REMOVED => SandboxError::Refused {
            op: "replace",
            message: why.message,
        },
        code => KubeError::Transfer {
            op: "upload",
            pod: pod.to_string(),
            message: format!("{} (exit {code})", why.message),
        }
        .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(code: i64) -> Unplaced {
        Unplaced {
            code,
            message: "m".into(),
        }
    }

    #[test]
    fn a_command_with_a_short_deadline_carries_nothing() {
        let spec = |timeout| ExecSpec {
            argv: vec!["true".into()],
            env: Vec::new(),
            user: None,
            workdir: None,
            stdout: None,
            stderr: None,
            cap_bytes: 1,
            timeout,
            grace: std::time::Duration::ZERO,
        };
        assert!(carries(&spec(None)));
        assert!(carries(&spec(Some(CARRY_MIN_DEADLINE))));
        assert!(!carries(&spec(Some(std::time::Duration::from_secs(5)))));
    }

    #[test]
    fn only_the_proofs_not_holding_yet_are_asked_again() {
        let both = Proofs {
            handover: true,
            no_network: true,
        };
        let handover = Proofs {
            handover: true,
            no_network: false,
        };
        assert!(proves_again(&why(NOT_HANDED_OVER), Some(both)));
        assert!(proves_again(&why(UNCLEAR), Some(both)));
        assert!(
            !proves_again(&why(REFUSED), Some(both)),
            "network none refused"
        );
        assert!(proves_again(&why(REFUSED), Some(handover)));
        assert!(
            !proves_again(&why(NOT_HANDED_OVER), None),
            "nothing was proved"
        );
        assert!(!proves_again(&why(NOT_REMOVED), Some(both)));
        assert!(matches!(
            unplaced_error("p", why(NOT_REMOVED), None),
            SandboxError::Refused { op: "replace", .. }
        ));
        let transfer = unplaced_error("p", why(98), Some(both)).to_string();
        assert!(transfer.contains("(exit 98)"), "{transfer}");
    }
}
