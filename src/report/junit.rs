//! `junit.xml`: one `<testsuite>` per arm, one `<testcase>` per trial (classname = task, name =
//! agent/variant/attempt). A failed verifier is a `<failure>`; an infra error, a verifier error
//! or a skipped verifier is an `<error>` (its `type` says which). Claim, audit verdict and
//! termination are testcase `<properties>` (the convention pytest's `record_property` writes)
//! and are repeated in `<system-out>` with the paths of the trial's logs.
//!
//! Apart from testcase-level `<properties>`, the document follows the Jenkins xunit plugin's
//! `junit-10.xsd` (checked in the tests).

use std::fmt::Write as _;
use std::path::Path;

use super::load::{JobData, Outcome, Trial};
use super::markup::escape_markup;
use super::model::Report;

/// Escape text for XML content or attribute values, dropping characters XML 1.0 forbids.
pub(crate) fn xml(s: &str) -> String {
    escape_markup(s, "&apos;", &['\t', '\n', '\r'], &['\u{FFFE}', '\u{FFFF}'])
}

fn secs(x: f64) -> String {
    format!("{:.3}", x.max(0.0))
}

fn prop(out: &mut String, name: &str, value: &str) {
    let _ = writeln!(
        out,
        "        <property name=\"{}\" value=\"{}\"/>",
        xml(name),
        xml(value)
    );
}

fn testcase(out: &mut String, job: &JobData, logs_root: &Path, t: &Trial) {
    let arm = &job.arms[t.arm as usize];
    let task = &job.tasks[t.task as usize];
    let _ = writeln!(
        out,
        "    <testcase classname=\"{}\" name=\"{}\" time=\"{}\">",
        xml(task),
        xml(&format!("{}/{}/{}", arm.agent, arm.variant, t.attempt)),
        secs(t.seconds)
    );
    out.push_str("      <properties>\n");
    prop(out, "trial.id", &t.id);
    prop(out, "outcome", t.outcome.as_str());
    prop(out, "claim.status", claim_status(t));
    prop(
        out,
        "claim.semantic_status",
        t.semantic_status.as_deref().unwrap_or(""),
    );
    prop(out, "audit.verdict", verdict_word(t, "none (not scored)"));
    prop(out, "audit.violations", &t.violation_kinds().join(","));
    prop(out, "termination", &termination(t));
    if let Some(r) = t.reward {
        prop(out, "reward", &format!("{r}"));
    }
    if let Some(i) = t.integrity {
        prop(out, "integrity", i.as_str());
    }
    if let Some(u) = &t.usage {
        prop(out, "usage.requests", &u.requests.to_string());
        prop(out, "usage.input_tokens", &u.input_tokens.to_string());
        prop(out, "usage.output_tokens", &u.output_tokens.to_string());
        prop(out, "usage.cost_usd", &format!("{:.4}", u.cost_usd));
        prop(out, "usage.upstream_errors", &u.upstream_errors.to_string());
    }
    out.push_str("      </properties>\n");
    let detail = t.detail.as_deref().unwrap_or("");
    match t.outcome {
        Outcome::Passed => {}
        Outcome::Cancelled => {
            out.push_str("      <skipped message=\"cancelled by the user (not scored)\"/>\n");
        }
        Outcome::Failed => {
            let (kind, message) = match t.reward {
                _ if t.tampered => (
                    "tampered",
                    "tampered: the agent changed what the verifier runs (integrity suspect); never counted as passed".to_string(),
                ),
                Some(r) => (
                    "verifier_failed",
                    format!("verifier failed: reward {r} below the pass threshold"),
                ),
                None => ("verifier_failed", "verifier failed".to_string()),
            };
            let _ = writeln!(
                out,
                "      <failure type=\"{kind}\" message=\"{}\">{}</failure>",
                xml(&message),
                xml(detail)
            );
        }
        Outcome::VerifierError | Outcome::Skipped | Outcome::Infra => {
            let (kind, what) = match t.outcome {
                Outcome::Infra => ("infra_error", "infrastructure error (not scored)"),
                Outcome::Skipped => ("verifier_skipped", "verifier skipped: no reward"),
                _ => ("verifier_error", "verifier error: no reward"),
            };
            let message = if detail.is_empty() {
                what.to_string()
            } else {
                format!("{what}: {detail}")
            };
            let _ = writeln!(
                out,
                "      <error type=\"{kind}\" message=\"{}\">{}</error>",
                xml(&message),
                xml(detail)
            );
        }
    }
    let dir = logs_root.join("trials").join(&*t.id);
    let d = dir.display();
    let _ = writeln!(
        out,
        "      <system-out>{}</system-out>",
        xml(&format!(
            "{outcome}; claim {claim}{sem}; audit {verdict}; termination {term}\n\
             logs: {d}/ (result.json, agent/stdout.log, agent/stderr.log, verifier/stdout.log, verifier/stderr.log)\n",
            outcome = t.outcome.as_str(),
            claim = claim_status(t),
            sem = t
                .semantic_status
                .as_deref()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default(),
            verdict = verdict_word(t, "none"),
            term = termination(t),
        ))
    );
    out.push_str("    </testcase>\n");
}

fn verdict_word(t: &Trial, none: &'static str) -> &'static str {
    match t.verdict {
        Some(v) => v.as_str(),
        None if t.tampered => super::load::TAMPERED,
        None => none,
    }
}

fn claim_status(t: &Trial) -> &'static str {
    match t.claim {
        crate::outcome::ClaimStatus::Present => "present",
        crate::outcome::ClaimStatus::Missing => "missing",
        crate::outcome::ClaimStatus::Invalid => "invalid",
        crate::outcome::ClaimStatus::Unknown => "unknown",
    }
}

fn termination(t: &Trial) -> String {
    use crate::trial::TerminationKind as K;
    let kind = match t.termination {
        K::Exited => "exited",
        K::Timeout => "timeout",
        K::Oom => "oom",
        K::Killed => "killed",
        K::Cancelled => "cancelled",
        K::InfraError => "infra_error",
    };
    match t.exit_code {
        Some(c) => format!("{kind} ({c})"),
        None => kind.to_string(),
    }
}

/// Stream `junit.xml` into `w` (a job of 100,000 trials makes a file of ~100 MB: it is never
/// held in memory whole).
pub(crate) fn write_junit<W: std::io::Write + ?Sized>(
    w: &mut W,
    job: &JobData,
    report: &Report,
    logs_root: &Path,
) -> std::io::Result<()> {
    let mut out = String::with_capacity(1 << 20);
    let failures: usize = job
        .trials
        .iter()
        .filter(|t| t.outcome == Outcome::Failed)
        .count();
    let total_time: f64 = job.trials.iter().map(|t| t.seconds).sum();
    out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{}\">",
        xml(&format!("arbiter {}", job.name)),
        job.trials.len(),
        failures,
        job.trials.len() - failures - report.totals.passed,
        secs(total_time)
    );
    for (a, arm, trials) in job.trials_by_arm() {
        let stats = &report.arms[a];
        let failures = trials
            .iter()
            .filter(|t| t.outcome == Outcome::Failed)
            .count();
        let errors = trials.len() - failures - stats.passed;
        let time: f64 = trials.iter().map(|t| t.seconds).sum();
        let timestamp = job.first_started[a]
            .as_deref()
            .map(|s| format!(" timestamp=\"{}\"", xml(s.trim_end_matches('Z'))))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" time=\"{}\"{timestamp}>",
            xml(&arm.label()),
            trials.len(),
            failures,
            errors,
            secs(time)
        );
        out.push_str("    <properties>\n");
        let p = |out: &mut String, n: &str, v: &str| {
            let _ = writeln!(
                out,
                "      <property name=\"{}\" value=\"{}\"/>",
                xml(n),
                xml(v)
            );
        };
        p(&mut out, "agent", &arm.agent);
        p(&mut out, "variant", &arm.variant);
        p(&mut out, "scored", &stats.scored.to_string());
        p(&mut out, "infra_errors_excluded", &stats.infra.to_string());
        p(
            &mut out,
            "pass_rate",
            &stats
                .pass_rate
                .map(|r| format!("{r:.4}"))
                .unwrap_or_default(),
        );
        if let Some(u) = &stats.usage {
            p(&mut out, "usage.input_tokens", &u.input_tokens.to_string());
            p(
                &mut out,
                "usage.output_tokens",
                &u.output_tokens.to_string(),
            );
            p(&mut out, "usage.cost_usd", &format!("{:.4}", u.cost_usd));
            p(
                &mut out,
                "usage.cost_per_solved_task_usd",
                &u.cost_per_solved_task_usd
                    .map(|c| format!("{c:.4}"))
                    .unwrap_or_default(),
            );
            p(
                &mut out,
                "usage.upstream_errors",
                &u.upstream_errors.to_string(),
            );
        }
        if let Some(n) = stats.tampered {
            p(&mut out, "tampered", &n.to_string());
        }
        out.push_str("    </properties>\n");
        for t in trials {
            testcase(&mut out, job, logs_root, t);
            if out.len() > (1 << 20) - 8192 {
                w.write_all(out.as_bytes())?;
                out.clear();
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    w.write_all(out.as_bytes())
}
