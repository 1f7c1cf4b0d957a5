//! What the verifier measured, and the pass rule.

use serde::{Deserialize, Serialize};

use crate::task::VerifierMode;

use super::reward::{Reward, RewardError, primary_value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerifierStatus {
    Passed,
    Failed,
    Error,
    Skipped,
}

/// What the verifier measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifierOutcome {
    pub status: VerifierStatus,
    pub mode: VerifierMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward: Option<Reward>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl VerifierOutcome {
    pub fn skipped(mode: VerifierMode, why: &str) -> Self {
        VerifierOutcome {
            status: VerifierStatus::Skipped,
            mode,
            reward: None,
            exit_code: None,
            detail: Some(why.to_string()),
        }
    }

    /// The verifier could not give a verdict.
    pub fn error(mode: VerifierMode, exit_code: Option<i64>, detail: String) -> Self {
        VerifierOutcome {
            status: VerifierStatus::Error,
            mode,
            reward: None,
            exit_code,
            detail: Some(detail),
        }
    }
}

/// The pass rule (SPEC §7): a reward exists and its primary value (the `reward` key, else the
/// mean of all values) is at least `threshold`. A reward that could not be read is an error,
/// never a zero.
pub fn judge(
    mode: VerifierMode,
    reward: Result<Reward, RewardError>,
    exit_code: Option<i64>,
    threshold: f64,
) -> VerifierOutcome {
    match reward {
        Ok(reward) => VerifierOutcome {
            status: if primary_value(&reward) >= threshold {
                VerifierStatus::Passed
            } else {
                VerifierStatus::Failed
            },
            mode,
            reward: Some(reward),
            exit_code,
            detail: None,
        },
        Err(e) => VerifierOutcome::error(
            mode,
            exit_code,
            format!(
                "{e} (test.sh exited with {})",
                exit_code
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "no exit code".to_string())
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reward(pairs: &[(&str, f64)]) -> Reward {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn pass_rule_uses_the_reward_key_else_the_mean() {
        let snap = VerifierMode::Snapshot;
        let pass = |r: Reward, t| judge(snap, Ok(r), Some(0), t).status;
        assert_eq!(
            pass(reward(&[("reward", 1.0)]), 1.0),
            VerifierStatus::Passed
        );
        assert_eq!(
            pass(reward(&[("reward", 0.99)]), 1.0),
            VerifierStatus::Failed
        );
        assert_eq!(
            pass(reward(&[("reward", 0.0), ("a", 1.0), ("b", 1.0)]), 1.0),
            VerifierStatus::Failed
        );
        assert_eq!(
            pass(reward(&[("a", 1.0), ("b", 0.0)]), 0.5),
            VerifierStatus::Passed
        );
        assert_eq!(
            pass(reward(&[("a", 1.0), ("b", 0.0)]), 0.6),
            VerifierStatus::Failed
        );
    }

    #[test]
    fn no_reward_is_an_error_not_a_zero() {
        let out = judge(VerifierMode::Live, Err(RewardError::Missing), Some(2), 1.0);
        assert_eq!(out.status, VerifierStatus::Error);
        assert_eq!(out.reward, None);
        assert_eq!(
            out.detail.as_deref(),
            Some("the verifier wrote no reward.json or reward.txt (test.sh exited with 2)")
        );
    }
}
