//! Harbor's classification of trial failures by exception type
//! (`harbor/models/trial/error_policy.py`), and the exception arbiter writes for each way a
//! trial of its own can end.
//!
//! Harbor decides from the type name whether a failure is retried, whether the trial is still
//! graded, and whether its reward counts (`has_valid_reward`). Job statistics, pass@k and the
//! leaderboard read it that way: an agent's failure (its timeout, a non-zero exit) keeps a valid
//! reward and counts; a harness failure (a sandbox that did not build) is not graded and is left
//! out. arbiter's own rule is the same split (SPEC §1: `infra_error` is never a score), so each
//! arbiter ending maps to a Harbor type of the matching group, or to an arbiter type with an
//! explicit `policy_override` where Harbor has no type that means the same.

use super::model::{ErrorPolicy, ErrorPolicyOverride};
use crate::trial::{InfraError, Phase, Termination, TerminationKind};

const fn policy(should_retry: bool, should_grade: bool, has_valid_reward: bool) -> ErrorPolicy {
    ErrorPolicy {
        should_retry,
        should_grade,
        has_valid_reward,
    }
}

/// Harbor's policy of a type it does not list.
pub(crate) const UNKNOWN: ErrorPolicy = policy(true, true, true);

/// Harbor 0.26's table, group by group.
const GROUPS: &[(ErrorPolicy, &[&str])] = &[
    (
        policy(true, false, false),
        &[
            "EnvironmentStartTimeoutError",
            "SandboxBuildFailedError",
            "AgentSetupTimeoutError",
            "HealthcheckError",
            "SandboxLikelyOutOfMemoryError",
            "MemoryLimitExceededError",
            "SSHAccessError",
            "GKEExecStreamClosedError",
            "GKEPodNotFoundError",
            "RuntimeRequestError",
            "AddTestsDirError",
            "DownloadVerifierDirError",
        ],
    ),
    (
        policy(true, true, false),
        &[
            "ApiError",
            "ApiRateLimitError",
            "ApiInternalServerError",
            "ApiOverloadedError",
            "ApiConnectionClosedError",
            "ApiResponseStalledError",
            "UnknownApiError",
            "NetworkConnectionError",
            "ApiConnectionError",
            "ApiUsageLimitError",
            "RateLimitError",
            "InternalServerError",
            "ServiceUnavailableError",
            "APIConnectionError",
            "APIError",
            "Timeout",
        ],
    ),
    (
        policy(false, true, false),
        &[
            "UnsupportedModelParametersError",
            "BadRequestError",
            "UnprocessableEntityError",
            "UnsupportedParamsError",
            "APIResponseValidationError",
            "BudgetExceededError",
            "VerifierTimeoutError",
            "RewardFileNotFoundError",
            "RewardFileEmptyError",
            "VerifierOutputParseError",
        ],
    ),
    (
        policy(false, false, false),
        &[
            "AgentAuthenticationError",
            "ModelNotFoundError",
            "ApiProviderResourceNotFoundError",
            "AuthenticationError",
            "PermissionDeniedError",
            "NotFoundError",
            "ServiceOperationsUnsupportedError",
            "VercelScopeError",
            "DspyImportError",
            "MissingExtraError",
            "RegradeError",
            "CancelledError",
        ],
    ),
    (
        policy(false, true, true),
        &[
            "NonZeroAgentExitCodeError",
            "AgentTimeoutError",
            "ContextWindowExceededError",
            "OutputTokenExceededError",
            "ContextLengthExceededError",
            "OutputLengthExceededError",
            "AgentSafetyRefusalError",
            "ContentPolicyViolationError",
        ],
    ),
];

/// Harbor's `policy_for(exception_type, override)`.
pub(crate) fn policy_for(exception_type: &str, over: Option<&ErrorPolicyOverride>) -> ErrorPolicy {
    let base = GROUPS
        .iter()
        .find(|(_, names)| names.contains(&exception_type))
        .map_or(UNKNOWN, |(p, _)| *p);
    match over {
        None => base,
        Some(o) => ErrorPolicy {
            should_retry: o.should_retry.unwrap_or(base.should_retry),
            should_grade: o.should_grade.unwrap_or(base.should_grade),
            has_valid_reward: o.has_valid_reward.unwrap_or(base.has_valid_reward),
        },
    }
}

/// A harness failure for which Harbor has no type of its own: not graded, no valid reward,
/// retried (arbiter retries infra errors).
pub(crate) const ARBITER_INFRA: &str = "ArbiterInfraError";
/// The agent was killed by a signal arbiter did not send for a deadline (a storage or file
/// bound, an outside kill): the agent's result, scored.
pub(crate) const ARBITER_KILLED: &str = "AgentKilledError";

/// The Harbor exception of an arbiter trial's end: type, message and the override that states
/// arbiter's rule where Harbor's default for that type differs. `None`: it ended without one
/// (the agent exited 0).
pub(crate) fn exception_of(
    termination: &Termination,
    infra: Option<&InfraError>,
) -> Option<(String, String, Option<ErrorPolicyOverride>)> {
    let detail = || termination.detail.clone().unwrap_or_default();
    if let Some(e) = infra {
        return Some(infra_exception(e));
    }
    match termination.kind {
        TerminationKind::Exited => match termination.exit_code {
            Some(0) => None,
            Some(code) => Some((
                "NonZeroAgentExitCodeError".into(),
                format!("the agent exited with code {code}"),
                None,
            )),
            None => Some((
                "NonZeroAgentExitCodeError".into(),
                format!("the agent exited without an exit code: {}", detail()),
                None,
            )),
        },
        TerminationKind::Timeout => Some((
            "AgentTimeoutError".into(),
            nonempty(detail(), "the agent phase's deadline fired"),
            None,
        )),
        // Harbor retries a memory kill as the sandbox's; arbiter scores it as the agent's
        // (the task's own memory limit), so its reward stands.
        TerminationKind::Oom => Some((
            "MemoryLimitExceededError".into(),
            nonempty(detail(), "the agent was killed by the out-of-memory killer"),
            Some(ErrorPolicyOverride {
                should_retry: Some(false),
                should_grade: Some(true),
                has_valid_reward: Some(true),
            }),
        )),
        TerminationKind::Killed => Some((
            ARBITER_KILLED.into(),
            nonempty(detail(), "the agent was killed"),
            Some(ErrorPolicyOverride {
                should_retry: Some(false),
                should_grade: Some(true),
                has_valid_reward: Some(true),
            }),
        )),
        TerminationKind::Cancelled => Some((
            "CancelledError".into(),
            nonempty(detail(), "stopped by the user"),
            None,
        )),
        TerminationKind::InfraError => Some((
            ARBITER_INFRA.into(),
            nonempty(detail(), "the harness failed"),
            Some(harness_override()),
        )),
    }
}

fn nonempty(s: String, otherwise: &str) -> String {
    if s.trim().is_empty() {
        otherwise.to_string()
    } else {
        s
    }
}

fn harness_override() -> ErrorPolicyOverride {
    ErrorPolicyOverride {
        should_retry: Some(true),
        should_grade: Some(false),
        has_valid_reward: Some(false),
    }
}

/// An arbiter infra error as Harbor's exception: Harbor's own type where one means the same,
/// else [`ARBITER_INFRA`] with the harness-error policy spelled out.
fn infra_exception(e: &InfraError) -> (String, String, Option<ErrorPolicyOverride>) {
    let message = format!("{}: {}", e.phase.as_str(), e.message);
    if e.message.starts_with("model_unavailable") {
        // Harbor's API connection failure is graded, with no valid reward: left out of scores
        // as arbiter leaves it out. arbiter does not grade it; said so.
        return (
            "ApiConnectionError".into(),
            message,
            Some(ErrorPolicyOverride {
                should_grade: Some(false),
                ..ErrorPolicyOverride::default()
            }),
        );
    }
    if e.phase == Phase::Environment && e.message.to_ascii_lowercase().contains("build") {
        return ("SandboxBuildFailedError".into(), message, None);
    }
    (ARBITER_INFRA.into(), message, Some(harness_override()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(kind: TerminationKind, code: Option<i64>) -> Termination {
        Termination {
            kind,
            exit_code: code,
            detail: None,
        }
    }

    #[test]
    fn harbor_table_is_read_as_harbor_reads_it() {
        assert_eq!(
            policy_for("AgentTimeoutError", None),
            policy(false, true, true)
        );
        assert_eq!(
            policy_for("SandboxBuildFailedError", None),
            policy(true, false, false)
        );
        assert_eq!(policy_for("SomethingNew", None), UNKNOWN);
        let over = ErrorPolicyOverride {
            has_valid_reward: Some(false),
            ..Default::default()
        };
        assert_eq!(
            policy_for("AgentTimeoutError", Some(&over)),
            policy(false, true, false)
        );
    }

    #[test]
    fn agent_endings_keep_a_valid_reward_and_harness_failures_do_not() {
        assert_eq!(
            exception_of(&ended(TerminationKind::Exited, Some(0)), None),
            None
        );
        for (kind, code, ty) in [
            (
                TerminationKind::Exited,
                Some(3),
                "NonZeroAgentExitCodeError",
            ),
            (TerminationKind::Timeout, None, "AgentTimeoutError"),
            (TerminationKind::Oom, Some(137), "MemoryLimitExceededError"),
            (TerminationKind::Killed, Some(137), ARBITER_KILLED),
        ] {
            let (t, _, over) = exception_of(&ended(kind, code), None).expect("an exception");
            assert_eq!(t, ty);
            let p = policy_for(&t, over.as_ref());
            assert!(p.should_grade && p.has_valid_reward, "{ty}: {p:?}");
        }
        let infra = |phase, message: &str| InfraError {
            phase,
            message: message.to_string(),
        };
        for (e, ty) in [
            (
                infra(Phase::Environment, "image build failed: step 2"),
                "SandboxBuildFailedError",
            ),
            (
                infra(Phase::Agent, "model_unavailable: connection refused"),
                "ApiConnectionError",
            ),
            (infra(Phase::Collect, "engine gone"), ARBITER_INFRA),
        ] {
            let (t, message, over) =
                exception_of(&ended(TerminationKind::InfraError, None), Some(&e)).expect("one");
            assert_eq!(t, ty);
            assert!(message.starts_with(e.phase.as_str()), "{message}");
            let p = policy_for(&t, over.as_ref());
            assert!(!p.should_grade && !p.has_valid_reward, "{ty}: {p:?}");
        }
        let cancelled = exception_of(&ended(TerminationKind::Cancelled, None), None);
        assert_eq!(cancelled.expect("one").0, "CancelledError");
    }
}
