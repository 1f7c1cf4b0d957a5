//! A trial record's first state and its last: the record before any phase ran
//! ([`initial_record`]), and the audit, finish time and secret scrub once its facts are in
//! ([`finish`]). Regrading judges a new verifier outcome with the same [`audit_of`].

use std::collections::BTreeMap;

use crate::agent::redact_env;
use crate::outcome::{AuditInput, Claim, CompletionRecord, audit};
use crate::timefmt::now_rfc3339;

use super::phases;
use super::plan::DEFAULT_STORAGE_LIMIT_MB;
use super::plan::TrialPlan;
use super::record::{Limits, OutputStats, TRIAL_SCHEMA, Termination, TerminationKind, TrialRecord};
use super::scrub;
use crate::verifier::{VerifierOutcome, VerifierStatus};

pub(crate) fn initial_record(plan: &TrialPlan) -> TrialRecord {
    let task = &plan.task;
    let env = &task.environment;
    TrialRecord {
        schema: TRIAL_SCHEMA.to_string(),
        id: plan.id.clone(),
        job: plan.job.clone(),
        task: task.name.clone(),
        agent: plan.agent.name.clone(),
        variant: plan.variant.clone(),
        attempt: plan.attempt,
        task_checksum: task.checksum.clone(),
        image: None,
        termination: Termination {
            kind: TerminationKind::InfraError,
            exit_code: None,
            detail: Some("the agent phase did not run".to_string()),
        },
        claim: Claim::missing(),
        verifier: VerifierOutcome::skipped(task.verifier.mode, "the verifier did not run"),
        audit: None,
        phases: BTreeMap::new(),
        retries: 0,
        previous_errors: Vec::new(),
        artifacts: Vec::new(),
        overrides: redact_env(&plan.overrides),
        infra_error: None,
        limits: Limits {
            cpus: env.cpus,
            memory_mb: env.memory_mb,
            pids_limit: env.pids_limit,
            network: phases::egress::agent_network(plan).0,
            storage_mb: env.storage_mb,
            storage_enforced: false,
            storage_limit_mb: env.storage_mb.unwrap_or(DEFAULT_STORAGE_LIMIT_MB),
            storage_used_mb: None,
            max_files: env.max_files,
            files_limit: env.max_files.unwrap_or(phases::agent::DEFAULT_MAX_FILES),
            files_used: None,
            files_counted: None,
        },
        output: OutputStats::default(),
        harness_overrides: Vec::new(),
        agent_deadline_epoch: None,
        control_root: None,
        trajectory: None,
        deliverables: Vec::new(),
        observed_files: Vec::new(),
        validation: Vec::new(),
        completion: None,
        changes: None,
        integrity: None,
        usage: None,
        change_content: None,
        verifier_history: Vec::new(),
        regrade: None,
        steps: Vec::new(),
        continuation: None,
        attempts: Vec::new(),
        sandbox: Some(super::record::SandboxInfo {
            backend: plan.settings.backend.to_string(),
        }),
        network: None,
        started_at: now_rfc3339(),
        finished_at: String::new(),
    }
}

/// The record of a trial the user stopped on its own (`arbiter serve`'s trial cancel): nothing
/// of it was judged, its termination says `cancelled`, and it does not run again on resume.
pub(crate) fn cancelled_record(plan: &TrialPlan) -> TrialRecord {
    let mut rec = initial_record(plan);
    rec.termination = Termination {
        kind: TerminationKind::Cancelled,
        exit_code: None,
        detail: Some("cancelled by the user".to_string()),
    };
    rec.finished_at = now_rfc3339();
    rec
}

/// The audit, the finish time, and the secrets scrubbed from the trial's files and record.
pub(super) fn finish(
    mut rec: TrialRecord,
    plan: &TrialPlan,
    completion: Option<&CompletionRecord>,
    secrets: &[String],
) -> TrialRecord {
    rec.audit = audit_of(&rec, completion);
    rec.finished_at = now_rfc3339();
    if !secrets.is_empty() {
        let scrubbed = scrub::scrub_dir(&plan.dir, secrets);
        if !scrubbed.is_empty() {
            tracing::warn!(
                trial = plan.id,
                files = ?scrubbed,
                "a secret value was found in the trial's files and replaced by ***"
            );
        }
        // A scrubbed archive no longer unpacks: the trial cannot be regraded from it.
        if let Some(content) = rec.change_content.as_mut() {
            super::content::after_scrub(&plan.dir, content, &scrubbed);
        }
        if let Ok(mut bytes) = serde_json::to_vec(&rec)
            && scrub::scrub_bytes(&mut bytes, secrets)
        {
            match serde_json::from_slice(&bytes) {
                Ok(clean) => rec = clean,
                Err(e) => tracing::warn!(trial = plan.id, "scrubbing the record: {e}"),
            }
        }
    }
    rec
}

/// The audit of a record whose facts are in (SPEC §6; none for an infrastructure error).
/// Regrading (`crate::regrade`) judges a new verifier outcome with this same function.
pub(crate) fn audit_of(
    rec: &TrialRecord,
    completion: Option<&CompletionRecord>,
) -> Option<crate::outcome::Audit> {
    let passed = match rec.verifier.status {
        VerifierStatus::Passed => Some(true),
        VerifierStatus::Failed => Some(false),
        VerifierStatus::Error | VerifierStatus::Skipped => None,
    };
    let tampered: Vec<String> = rec
        .integrity
        .as_ref()
        .filter(|_| rec.is_tampered())
        .map(|i| {
            i.findings
                .iter()
                .map(|f| format!("{}: {}", f.path, f.why))
                .collect()
        })
        .unwrap_or_default();
    let mut audit = if rec.is_infra() {
        None
    } else {
        let answer = rec.claim.record.as_ref().and_then(|r| {
            r.get("final_answer")
                .or_else(|| r.get("answer"))
                .and_then(|a| a.as_str())
        });
        Some(audit(&AuditInput {
            claim: &rec.claim,
            passed,
            deliverables: &rec.deliverables,
            observed: &rec.observed_files,
            receipts: &rec.validation,
            completion,
            tampered: &tampered,
            final_answer: answer,
        }))
    };
    if let (Some(audit), Some(note)) = (
        audit.as_mut(),
        call_count_note(&rec.claim, rec.usage.as_ref()),
    ) {
        audit.evidence.push(note);
    }
    audit
}

/// Audit evidence when the claim's own `llm_call_count` disagrees with the model calls the
/// gateway counted (`usage.requests`).
pub(super) fn call_count_note(
    claim: &Claim,
    usage: Option<&crate::gateway::Usage>,
) -> Option<String> {
    let usage = usage?;
    let claimed = claim.record.as_ref()?.get("llm_call_count")?.as_u64()?;
    (claimed != usage.requests).then(|| {
        format!(
            "the claim counts {claimed} model calls; the gateway counted {}",
            usage.requests
        )
    })
}
