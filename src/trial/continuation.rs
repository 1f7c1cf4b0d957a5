//! Goal continuation's records and its one decision (SPEC §15, issue 29): after each attempt,
//! whether the next one starts. The attempt loop itself is `phases::attempts`.
//!
//! The decision reads only what the agent said (its typed claim) and what arbiter measured
//! itself with the task's *declared* validation commands — never the hidden verifier, which
//! runs once after the last attempt. A claim of success that arbiter's own receipts contradict
//! is not a typed success: an attempt never becomes complete because its final message says
//! so. The limit without a typed success is `budget_limited`, which keeps the unsuccessful
//! outcome (the verifier still measures whatever is there).

use crate::outcome::{Claim, ClaimStatus, Receipt};

pub(crate) use super::record::{AttemptRecord, AttemptUsage, ContinuationRecord, GoalStatus};
use super::record::{Termination, TerminationKind};

/// After an attempt: start the next one (and why), or stop with the goal's status.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Decision {
    Continue(String),
    Stop(GoalStatus, Option<String>),
}

/// How an attempt's run ended, for [`decide`]: `Err(why)` when nothing is left to continue in.
pub(crate) fn run_ended(termination: &Termination, ran: bool) -> Result<(), String> {
    if !ran {
        return Err("the agent runs nothing".to_string());
    }
    match termination.kind {
        TerminationKind::Exited => Ok(()),
        TerminationKind::Timeout => Err("the trial's agent deadline was reached".to_string()),
        TerminationKind::Oom => Err("the attempt was killed by the kernel OOM killer".to_string()),
        TerminationKind::Killed => Err(termination
            .detail
            .clone()
            .unwrap_or_else(|| "the attempt was killed".to_string())),
        TerminationKind::Cancelled => Err("stopped by the user".to_string()),
        TerminationKind::InfraError => Err("an infrastructure error".to_string()),
    }
}

/// Whether attempt `attempt` of `max` is followed by another. Only the agent's own typed
/// claim and arbiter's receipts of the declared validation commands count.
pub(crate) fn decide(
    attempt: u32,
    max: u32,
    ended: Result<(), String>,
    claim: &Claim,
    receipts: &[Receipt],
) -> Decision {
    if let Err(why) = ended {
        return Decision::Stop(
            GoalStatus::Stopped,
            Some(format!("attempt {attempt}: {why}")),
        );
    }
    let failed = receipts
        .iter()
        .find(|r| r.timed_out || r.exit_code != Some(0));
    let unsuccessful = match (claim.claims_success(), failed) {
        (true, None) => return Decision::Stop(GoalStatus::ClaimedSuccess, None),
        (true, Some(r)) => format!(
            "attempt {attempt} claimed succeeded, but the validation command {} {}",
            r.id,
            if r.timed_out {
                "timed out".to_string()
            } else {
                format!(
                    "exited {}",
                    r.exit_code
                        .map_or_else(|| "with no exit code".to_string(), |c| c.to_string())
                )
            }
        ),
        (false, _) => format!("attempt {attempt} {}", claim_words(claim)),
    };
    if attempt >= max {
        return Decision::Stop(
            GoalStatus::BudgetLimited,
            Some(format!(
                "{unsuccessful}; the limit of {max} attempt{} was reached",
                if max == 1 { "" } else { "s" }
            )),
        );
    }
    Decision::Continue(unsuccessful)
}

/// The claim in words: `claimed task_failed`, `wrote no outcome record`, …
fn claim_words(claim: &Claim) -> String {
    match claim.status {
        ClaimStatus::Present => format!(
            "claimed {}",
            claim.semantic_status.as_deref().unwrap_or("nothing")
        ),
        ClaimStatus::Missing => "wrote no outcome record".to_string(),
        ClaimStatus::Invalid => format!(
            "wrote an invalid outcome record ({})",
            claim.error.as_deref().unwrap_or("unreadable")
        ),
        ClaimStatus::Unknown => "made a claim not known to arbiter".to_string(),
    }
}

/// The previous attempt's error in its own words: the record's `failure`, else its
/// `AWORLD_RUN_FAILURE=` payload, else why its record could not be read.
pub(crate) fn claim_error(claim: &Claim) -> Option<serde_json::Value> {
    claim
        .record
        .as_ref()
        .and_then(|r| r.get("failure"))
        .filter(|f| !f.is_null())
        .cloned()
        .or_else(|| claim.run_failure.clone())
        .or_else(|| claim.error.clone().map(serde_json::Value::String))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::collect_claim;

    fn claim(status: &str) -> Claim {
        let record = format!(
            r#"{{"schema_version":"aworld.run.outcome.v1","semantic_status":"{status}","failure":{{"stage":"agent","error_code":"tests_fail"}}}}"#
        );
        collect_claim(Some(record.as_bytes()), b"")
    }

    fn receipt(id: &str, exit_code: Option<i64>, timed_out: bool) -> Receipt {
        Receipt {
            id: id.to_string(),
            argv: vec!["true".to_string()],
            exit_code,
            seconds: 0.1,
            timed_out,
            stdout_sha256: String::new(),
            stderr_sha256: String::new(),
            stdout_bytes: 0,
            stderr_bytes: 0,
        }
    }

    #[test]
    fn a_typed_success_with_passing_receipts_stops_the_goal() {
        let ok = [receipt("unit", Some(0), false)];
        assert_eq!(
            decide(1, 3, Ok(()), &claim("succeeded"), &ok),
            Decision::Stop(GoalStatus::ClaimedSuccess, None)
        );
        // No declared validation: the claim alone.
        assert_eq!(
            decide(3, 3, Ok(()), &claim("succeeded"), &[]),
            Decision::Stop(GoalStatus::ClaimedSuccess, None)
        );
    }

    #[test]
    fn anything_but_a_typed_success_continues_until_the_limit() {
        for (c, words) in [
            (claim("task_failed"), "attempt 1 claimed task_failed"),
            (claim("recoverable"), "attempt 1 claimed recoverable"),
            (
                claim("infrastructure_failed"),
                "attempt 1 claimed infrastructure_failed",
            ),
            (Claim::missing(), "attempt 1 wrote no outcome record"),
            (
                collect_claim(Some(b"{not json"), b""),
                "attempt 1 wrote an invalid outcome record (not valid JSON",
            ),
        ] {
            match decide(1, 2, Ok(()), &c, &[]) {
                Decision::Continue(why) => assert!(why.starts_with(words), "{why}"),
                other => panic!("{other:?}"),
            }
        }
        match decide(2, 2, Ok(()), &claim("task_failed"), &[]) {
            Decision::Stop(GoalStatus::BudgetLimited, Some(why)) => {
                assert_eq!(
                    why,
                    "attempt 2 claimed task_failed; the limit of 2 attempts was reached"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_success_claim_contradicted_by_a_receipt_is_not_a_typed_success() {
        let failing = [
            receipt("lint", Some(0), false),
            receipt("unit", Some(1), false),
        ];
        match decide(1, 2, Ok(()), &claim("succeeded"), &failing) {
            Decision::Continue(why) => assert_eq!(
                why,
                "attempt 1 claimed succeeded, but the validation command unit exited 1"
            ),
            other => panic!("{other:?}"),
        }
        let slow = [receipt("unit", None, true)];
        assert!(matches!(
            decide(1, 1, Ok(()), &claim("succeeded"), &slow),
            Decision::Stop(GoalStatus::BudgetLimited, Some(why)) if why.contains("unit timed out")
        ));
    }

    #[test]
    fn an_attempt_that_did_not_exit_stops_the_goal_whatever_it_claimed() {
        let timeout = Termination {
            kind: TerminationKind::Timeout,
            exit_code: None,
            detail: None,
        };
        let ended = run_ended(&timeout, true);
        assert_eq!(
            decide(1, 3, ended, &claim("succeeded"), &[]),
            Decision::Stop(
                GoalStatus::Stopped,
                Some("attempt 1: the trial's agent deadline was reached".to_string())
            )
        );
        let exited = Termination {
            kind: TerminationKind::Exited,
            exit_code: Some(1),
            detail: None,
        };
        assert_eq!(run_ended(&exited, true), Ok(()));
        assert!(run_ended(&exited, false).is_err());
    }

    #[test]
    fn the_error_handed_on_is_the_agents_own() {
        let c = claim("task_failed");
        assert_eq!(
            claim_error(&c).expect("error")["error_code"],
            "tests_fail",
            "the record's failure"
        );
        let stderr = b"AWORLD_RUN_FAILURE={\"stage\":\"llm\"}\n";
        let c = collect_claim(None, stderr);
        assert_eq!(claim_error(&c).expect("error")["stage"], "llm");
        assert_eq!(
            claim_error(&collect_claim(Some(b"{"), b""))
                .and_then(|v| v.as_str().map(str::len))
                .map(|n| n > 0),
            Some(true)
        );
        assert_eq!(claim_error(&Claim::missing()), None);
    }
}
