use crate::trial::{TrialRecord, VerifierStatus};

/// Counts for one agent × variant.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ArmSummary {
    pub agent: String,
    pub variant: String,
    pub trials: usize,
    pub passed: usize,
    /// Scored and not passed (failed reward, or verifier error: an agent can break its verifier).
    pub failed: usize,
    /// Of `failed`: the verifier gave no reward.
    pub unverified: usize,
    /// Harness / engine failures: excluded from the rate.
    pub infra: usize,
    /// Stopped by the user (`arbiter serve`'s per-trial cancel): excluded from the rate too.
    pub cancelled: usize,
}

impl ArmSummary {
    /// Passed ÷ scored (infra errors excluded); `None` when nothing was scored.
    pub(crate) fn pass_rate(&self) -> Option<f64> {
        let scored = self.passed + self.failed;
        (scored > 0).then(|| self.passed as f64 / scored as f64)
    }
}

/// What the summary needs of one finished trial (kept instead of whole records, so a job's
/// memory stays flat however many trials it has).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Brief {
    pub id: String,
    pub agent: String,
    pub variant: String,
    pub infra: bool,
    pub cancelled: bool,
    pub passed: bool,
    pub unverified: bool,
}

impl Brief {
    pub(crate) fn of(r: &TrialRecord) -> Brief {
        Brief {
            id: r.id.clone(),
            agent: r.agent.clone(),
            variant: r.variant.clone(),
            infra: r.is_infra(),
            cancelled: r.is_cancelled(),
            passed: r.passed(),
            unverified: matches!(
                r.verifier.status,
                VerifierStatus::Error | VerifierStatus::Skipped
            ),
        }
    }
}

/// One row per agent × variant, in first-seen order.
pub(crate) fn summarize<'a>(records: impl IntoIterator<Item = &'a Brief>) -> Vec<ArmSummary> {
    let mut arms: Vec<ArmSummary> = Vec::new();
    for r in records {
        let idx = match arms
            .iter()
            .position(|a| a.agent == r.agent && a.variant == r.variant)
        {
            Some(i) => i,
            None => {
                arms.push(ArmSummary {
                    agent: r.agent.clone(),
                    variant: r.variant.clone(),
                    trials: 0,
                    passed: 0,
                    failed: 0,
                    unverified: 0,
                    infra: 0,
                    cancelled: 0,
                });
                arms.len() - 1
            }
        };
        let arm = &mut arms[idx];
        arm.trials += 1;
        if r.infra {
            arm.infra += 1;
        } else if r.cancelled {
            arm.cancelled += 1;
        } else if r.passed {
            arm.passed += 1;
        } else {
            arm.failed += 1;
            arm.unverified += usize::from(r.unverified);
        }
    }
    arms
}
