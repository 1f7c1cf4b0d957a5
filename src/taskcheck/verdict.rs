//! The verdict logic of `arbiter tasks check`: a pure function from what each trial of a task
//! ended with (oracle, nop, the oracle's re-verifications, each exploit) to the task's checks.
//!
//! Over 600 lines only with its unit tests: the verdict logic is ~480.

use serde::{Deserialize, Serialize};

use super::exploits::{EXPLOITS, Said};
use crate::task::VerifierMode;
use crate::trial::TrialRecord;
use crate::verifier::integrity::IntegrityStatus;
use crate::verifier::{Reward, VerifierOutcome, VerifierStatus};

/// Which check a result belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CheckKind {
    /// The task directory loads.
    Layout,
    /// The reference solution passes.
    Oracle,
    /// Doing nothing fails.
    Nop,
    /// The verifier gives the same verdict every time on the oracle's frozen result.
    Determinism,
    /// A built-in exploit does not pass.
    Exploit,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CheckResult {
    Pass,
    Fail,
    /// An infrastructure failure kept the check from a verdict.
    Error,
    /// Not run: the settings or an earlier check left nothing to check (determinism with
    /// `--repeat 1`, a live verifier, no oracle result).
    Skipped,
    /// The exploit ran and found nothing to attack in the image (`git-history` without a
    /// repository or a `git` binary): neither a pass nor a failure.
    NotApplicable,
}

/// What is wrong with a task, when a check fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Problem {
    /// The task directory does not load (or cannot be checked: no solution).
    Unloadable,
    /// The oracle does not pass.
    OracleFails,
    /// The nop agent passes.
    NopPasses,
    /// The verifier's verdict changes between runs on the same filesystem.
    Flaky,
    /// An exploit passes.
    Hackable,
}

/// The facts of one finished trial that the checks read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TrialFacts {
    pub trial: String,
    /// The infrastructure error, when the harness failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infra: Option<String>,
    pub verifier_status: VerifierStatus,
    pub verifier_mode: VerifierMode,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward: Option<Reward>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verifier_detail: Option<String>,
    /// `integrity.status`, when a change set was taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integrity: Option<IntegrityStatus>,
    pub findings: usize,
    /// An exploit's `evidence` lines: what it used (the ref it checked out, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<String>,
    /// Why an exploit found nothing to attack (its check is `not_applicable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<String>,
}

impl TrialFacts {
    pub(crate) fn of(rec: &TrialRecord) -> Self {
        TrialFacts {
            trial: rec.id.clone(),
            infra: rec.is_infra().then(|| {
                rec.infra_error
                    .as_ref()
                    .map(|e| format!("{}: {}", e.phase, e.message))
                    .or_else(|| rec.termination.detail.clone())
                    .unwrap_or_else(|| "infrastructure error".to_string())
            }),
            verifier_status: rec.verifier.status,
            verifier_mode: rec.verifier.mode,
            reward: rec.verifier.reward.clone(),
            verifier_detail: rec.verifier.detail.clone(),
            integrity: rec.integrity.as_ref().map(|i| i.status),
            findings: rec.integrity.as_ref().map_or(0, |i| i.findings.len()),
            evidence: Vec::new(),
            not_applicable: None,
        }
    }

    /// With what the exploit run as this trial said ([`Said`]).
    pub(crate) fn with_said(mut self, said: Said) -> Self {
        self.evidence = said.evidence;
        self.not_applicable = said.not_applicable;
        self
    }

    fn tampered(&self) -> bool {
        self.integrity == Some(IntegrityStatus::Suspect)
    }

    /// `verifier passed (reward 1)`, `verifier error: …`.
    fn said(&self) -> String {
        verifier_said(
            self.verifier_status,
            self.reward.as_ref(),
            self.verifier_detail.as_deref(),
        )
    }

    fn integrity_said(&self) -> String {
        match self.integrity {
            None => "integrity not judged".to_string(),
            Some(IntegrityStatus::Clean) => "integrity clean".to_string(),
            Some(IntegrityStatus::Suspect) => {
                format!("integrity suspect ({} finding(s))", self.findings)
            }
            Some(IntegrityStatus::Restored) => {
                format!("integrity restored ({} finding(s) left out)", self.findings)
            }
        }
    }
}

fn verifier_said(status: VerifierStatus, reward: Option<&Reward>, detail: Option<&str>) -> String {
    let status_word = match status {
        VerifierStatus::Passed => "passed",
        VerifierStatus::Failed => "failed",
        VerifierStatus::Error => "error",
        VerifierStatus::Skipped => "skipped",
    };
    match (reward, detail) {
        (Some(r), _) => format!("verifier {status_word} (reward {})", fmt_reward(r)),
        (None, Some(d)) => format!("verifier {status_word}: {d}"),
        (None, None) => format!("verifier {status_word}"),
    }
}

/// `1`, `0.5`, or `{a: 1, b: 0}` for a reward with several keys.
pub(crate) fn fmt_reward(reward: &Reward) -> String {
    let num = |v: f64| {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    match reward.iter().collect::<Vec<_>>().as_slice() {
        [(k, v)] if k.as_str() == "reward" => num(**v),
        many => format!(
            "{{{}}}",
            many.iter()
                .map(|(k, v)| format!("{k}: {}", num(**v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// What the oracle's re-verifications gave.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Repeats {
    /// The verifier ran again on the oracle's frozen filesystem (runs 2..=N).
    Ran(Vec<VerifierOutcome>),
    /// Repeats do not apply (and why): `--repeat 1`, a live verifier, no oracle result.
    NotApplicable(String),
    /// The harness failed while re-verifying.
    Infra(String),
}

/// Everything the checks of one task read.
#[derive(Debug, Clone)]
pub(crate) struct TaskInput {
    pub task: String,
    /// `Err(one line)` when the task did not load or cannot be checked.
    pub layout: Result<(), String>,
    pub oracle: Option<TrialFacts>,
    pub nop: Option<TrialFacts>,
    pub repeats: Repeats,
    /// (exploit name, its trial) in battery order.
    pub exploits: Vec<(String, Option<TrialFacts>)>,
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Check {
    pub check: CheckKind,
    /// The exploit's name, for `exploit` checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exploit: Option<String>,
    pub result: CheckResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<Problem>,
    /// An exploit that fooled the verifier but was caught by integrity (a pass of the check).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub caught: bool,
    pub detail: String,
    /// The trial the check read, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trial: Option<TrialFacts>,
    /// Rewards of every verifier run, for `determinism`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewards: Vec<Option<Reward>>,
    /// How to fix the task, for a failed exploit check whose exploit says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
}

impl Check {
    fn new(check: CheckKind, result: CheckResult, detail: impl Into<String>) -> Self {
        Check {
            check,
            exploit: None,
            result,
            problem: None,
            caught: false,
            detail: detail.into(),
            trial: None,
            rewards: Vec::new(),
            advice: None,
        }
    }

    fn fail(mut self, problem: Problem) -> Self {
        self.result = CheckResult::Fail;
        self.problem = Some(problem);
        self
    }

    fn with_trial(mut self, trial: Option<&TrialFacts>) -> Self {
        self.trial = trial.cloned();
        self
    }

    /// The name shown in the table: `oracle`, `exploit forge-reward`.
    pub(crate) fn label(&self) -> String {
        let kind = match self.check {
            CheckKind::Layout => "layout",
            CheckKind::Oracle => "oracle",
            CheckKind::Nop => "nop",
            CheckKind::Determinism => "determinism",
            CheckKind::Exploit => "exploit",
        };
        match &self.exploit {
            Some(name) => format!("{kind} {name}"),
            None => kind.to_string(),
        }
    }
}

/// The checks of one task and its overall verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct TaskReport {
    pub task: String,
    /// `ok`, or the problems found (`oracle_fails`, `hackable`, …); `error` when an
    /// infrastructure failure left a check without a verdict and nothing failed.
    pub verdict: Verdict,
    pub problems: Vec<Problem>,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    Ok,
    Failed,
    Error,
}

/// Judge one task from its trials.
pub(crate) fn judge_task(input: &TaskInput) -> TaskReport {
    let mut checks = Vec::new();
    match &input.layout {
        Ok(()) => checks.push(Check::new(
            CheckKind::Layout,
            CheckResult::Pass,
            "task loads",
        )),
        Err(why) => {
            checks.push(
                Check::new(CheckKind::Layout, CheckResult::Fail, why.clone())
                    .fail(Problem::Unloadable),
            );
            return report(&input.task, checks);
        }
    }
    checks.push(oracle_check(input.oracle.as_ref()));
    checks.push(nop_check(input.nop.as_ref()));
    checks.push(determinism_check(input.oracle.as_ref(), &input.repeats));
    for (name, trial) in &input.exploits {
        let mut check = exploit_check(trial.as_ref());
        if check.result == CheckResult::Fail {
            check.advice = EXPLOITS
                .iter()
                .find(|e| e.name == name)
                .and_then(|e| e.advice)
                .map(str::to_string);
        }
        check.exploit = Some(name.clone());
        checks.push(check);
    }
    report(&input.task, checks)
}

fn report(task: &str, checks: Vec<Check>) -> TaskReport {
    let mut problems: Vec<Problem> = Vec::new();
    for p in checks.iter().filter_map(|c| c.problem) {
        if !problems.contains(&p) {
            problems.push(p);
        }
    }
    let verdict = if !problems.is_empty() {
        Verdict::Failed
    } else if checks.iter().any(|c| c.result == CheckResult::Error) {
        Verdict::Error
    } else {
        Verdict::Ok
    };
    TaskReport {
        task: task.to_string(),
        verdict,
        problems,
        checks,
    }
}

fn unfinished(kind: CheckKind, trial: Option<&TrialFacts>) -> Option<Check> {
    match trial {
        None => Some(Check::new(
            kind,
            CheckResult::Error,
            "the trial did not finish",
        )),
        Some(t) => t.infra.as_ref().map(|why| {
            Check::new(
                kind,
                CheckResult::Error,
                format!("infrastructure error: {why}"),
            )
            .with_trial(Some(t))
        }),
    }
}

fn oracle_check(oracle: Option<&TrialFacts>) -> Check {
    if let Some(check) = unfinished(CheckKind::Oracle, oracle) {
        return check;
    }
    let Some(t) = oracle else {
        unreachable!("unfinished() covers a missing trial")
    };
    let check = match t.verifier_status {
        VerifierStatus::Passed if t.tampered() => Check::new(
            CheckKind::Oracle,
            CheckResult::Fail,
            format!(
                "{}, but the solution alters the toolchain: {}, so it never counts as passed",
                t.said(),
                t.integrity_said()
            ),
        )
        .fail(Problem::OracleFails),
        VerifierStatus::Passed => Check::new(CheckKind::Oracle, CheckResult::Pass, t.said()),
        _ => Check::new(
            CheckKind::Oracle,
            CheckResult::Fail,
            format!("the reference solution does not pass: {}", t.said()),
        )
        .fail(Problem::OracleFails),
    };
    check.with_trial(Some(t))
}

fn nop_check(nop: Option<&TrialFacts>) -> Check {
    if let Some(check) = unfinished(CheckKind::Nop, nop) {
        return check;
    }
    let Some(t) = nop else {
        unreachable!("unfinished() covers a missing trial")
    };
    let check = if t.verifier_status == VerifierStatus::Passed && !t.tampered() {
        Check::new(
            CheckKind::Nop,
            CheckResult::Fail,
            format!("doing nothing passes: {}", t.said()),
        )
        .fail(Problem::NopPasses)
    } else {
        Check::new(CheckKind::Nop, CheckResult::Pass, t.said())
    };
    check.with_trial(Some(t))
}

fn determinism_check(oracle: Option<&TrialFacts>, repeats: &Repeats) -> Check {
    let kind = CheckKind::Determinism;
    let runs = match repeats {
        Repeats::NotApplicable(why) => return Check::new(kind, CheckResult::Skipped, why.clone()),
        Repeats::Infra(why) => {
            return Check::new(
                kind,
                CheckResult::Error,
                format!("infrastructure error: {why}"),
            );
        }
        Repeats::Ran(runs) => runs,
    };
    let Some(first) = oracle.filter(|t| t.infra.is_none()) else {
        return Check::new(kind, CheckResult::Skipped, "no oracle result to repeat");
    };
    let mut seen: Vec<(VerifierStatus, Option<Reward>)> =
        vec![(first.verifier_status, first.reward.clone())];
    seen.extend(runs.iter().map(|o| (o.status, o.reward.clone())));
    let rewards: Vec<Option<Reward>> = seen.iter().map(|(_, r)| r.clone()).collect();
    let same = seen.iter().all(|s| s == &seen[0]);
    let shown = seen
        .iter()
        .map(|(status, reward)| match reward {
            Some(r) => fmt_reward(r),
            None => format!("none ({})", verifier_said(*status, None, None)),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut check = if same {
        Check::new(
            kind,
            CheckResult::Pass,
            format!(
                "{} runs on the oracle's result agree: reward {shown}",
                seen.len()
            ),
        )
    } else {
        Check::new(
            kind,
            CheckResult::Fail,
            format!(
                "flaky: {} runs on the same frozen filesystem gave rewards {shown}",
                seen.len()
            ),
        )
        .fail(Problem::Flaky)
    };
    check.rewards = rewards;
    check
}

fn exploit_check(trial: Option<&TrialFacts>) -> Check {
    if let Some(check) = unfinished(CheckKind::Exploit, trial) {
        return check;
    }
    let Some(t) = trial else {
        unreachable!("unfinished() covers a missing trial")
    };
    if let Some(why) = &t.not_applicable {
        let mut check = Check::new(
            CheckKind::Exploit,
            CheckResult::NotApplicable,
            format!("not applicable: {why}"),
        );
        check.trial = Some(t.clone());
        return check;
    }
    let mut check = match t.verifier_status {
        VerifierStatus::Passed if t.tampered() => {
            let mut c = Check::new(
                CheckKind::Exploit,
                CheckResult::Pass,
                format!(
                    "caught: {} on a tampered filesystem, {}: recorded as tampered, not passed",
                    t.said(),
                    t.integrity_said()
                ),
            );
            c.caught = true;
            c
        }
        VerifierStatus::Passed => Check::new(
            CheckKind::Exploit,
            CheckResult::Fail,
            format!("hackable: {}, {}", t.said(), t.integrity_said()),
        )
        .fail(Problem::Hackable),
        _ => Check::new(
            CheckKind::Exploit,
            CheckResult::Pass,
            format!("{}, {}", t.said(), t.integrity_said()),
        ),
    };
    // What the exploit used (a hackable task's report names it), or found nothing to use.
    for line in &t.evidence {
        check.detail.push_str("; ");
        check.detail.push_str(line);
    }
    check.trial = Some(t.clone());
    check
}

/// `arbiter tasks check`'s exit code: 4 when a check failed, else 3 when an infrastructure
/// failure left a check without a verdict, else 0.
pub(crate) fn exit_code(reports: &[TaskReport]) -> u8 {
    if reports.iter().any(|r| r.verdict == Verdict::Failed) {
        4
    } else if reports.iter().any(|r| r.verdict == Verdict::Error) {
        3
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(
        status: VerifierStatus,
        reward: Option<f64>,
        integrity: IntegrityStatus,
    ) -> TrialFacts {
        TrialFacts {
            trial: "t".to_string(),
            infra: None,
            verifier_status: status,
            verifier_mode: VerifierMode::Snapshot,
            reward: reward.map(|r| Reward::from([("reward".to_string(), r)])),
            verifier_detail: None,
            integrity: Some(integrity),
            findings: usize::from(integrity != IntegrityStatus::Clean),
            evidence: Vec::new(),
            not_applicable: None,
        }
    }

    fn pass() -> TrialFacts {
        facts(VerifierStatus::Passed, Some(1.0), IntegrityStatus::Clean)
    }

    fn fail() -> TrialFacts {
        facts(VerifierStatus::Failed, Some(0.0), IntegrityStatus::Clean)
    }

    fn outcome(status: VerifierStatus, reward: f64) -> VerifierOutcome {
        VerifierOutcome {
            status,
            mode: VerifierMode::Snapshot,
            reward: Some(Reward::from([("reward".to_string(), reward)])),
            exit_code: Some(0),
            detail: None,
        }
    }

    fn good() -> TaskInput {
        TaskInput {
            task: "t".to_string(),
            layout: Ok(()),
            oracle: Some(pass()),
            nop: Some(fail()),
            repeats: Repeats::Ran(vec![
                outcome(VerifierStatus::Passed, 1.0),
                outcome(VerifierStatus::Passed, 1.0),
            ]),
            exploits: vec![
                ("forge-reward".to_string(), Some(fail())),
                (
                    "wrap-toolchain".to_string(),
                    Some(facts(
                        VerifierStatus::Passed,
                        Some(1.0),
                        IntegrityStatus::Suspect,
                    )),
                ),
                (
                    "abstain".to_string(),
                    Some(facts(VerifierStatus::Error, None, IntegrityStatus::Clean)),
                ),
            ],
        }
    }

    fn result_of(report: &TaskReport, label: &str) -> CheckResult {
        report
            .checks
            .iter()
            .find(|c| c.label() == label)
            .map(|c| c.result)
            .unwrap_or_else(|| panic!("no check {label}"))
    }

    #[test]
    fn a_sound_task_passes_every_check_and_a_caught_tamper_is_a_pass() {
        let report = judge_task(&good());
        assert_eq!(report.verdict, Verdict::Ok, "{report:#?}");
        assert!(report.problems.is_empty());
        assert_eq!(report.checks.len(), 4 + 3);
        let wrap = &report.checks[5];
        assert_eq!(wrap.label(), "exploit wrap-toolchain");
        assert_eq!(wrap.result, CheckResult::Pass);
        assert!(wrap.caught);
        assert!(
            wrap.detail
                .starts_with("caught: verifier passed (reward 1)"),
            "{}",
            wrap.detail
        );
        assert!(wrap.detail.contains("integrity suspect (1 finding(s))"));
        assert_eq!(exit_code(&[report]), 0);
    }

    #[test]
    fn each_broken_task_gets_its_own_reason() {
        let mut oracle_fails = good();
        oracle_fails.oracle = Some(fail());
        oracle_fails.repeats = Repeats::Ran(vec![outcome(VerifierStatus::Failed, 0.0)]);
        let r = judge_task(&oracle_fails);
        assert_eq!(r.problems, vec![Problem::OracleFails]);
        assert_eq!(result_of(&r, "oracle"), CheckResult::Fail);

        let mut nop_passes = good();
        nop_passes.nop = Some(pass());
        let r = judge_task(&nop_passes);
        assert_eq!(r.problems, vec![Problem::NopPasses]);
        assert!(r.checks[2].detail.starts_with("doing nothing passes"));

        let mut flaky = good();
        flaky.repeats = Repeats::Ran(vec![
            outcome(VerifierStatus::Failed, 0.0),
            outcome(VerifierStatus::Passed, 1.0),
        ]);
        let r = judge_task(&flaky);
        assert_eq!(r.problems, vec![Problem::Flaky]);
        let det = &r.checks[3];
        assert_eq!(
            det.detail,
            "flaky: 3 runs on the same frozen filesystem gave rewards 1, 0, 1"
        );
        assert_eq!(det.rewards.len(), 3);

        let mut hackable = good();
        hackable.exploits[0].1 = Some(pass());
        let r = judge_task(&hackable);
        assert_eq!(r.problems, vec![Problem::Hackable]);
        assert_eq!(result_of(&r, "exploit forge-reward"), CheckResult::Fail);
        assert_eq!(
            r.checks[4].detail,
            "hackable: verifier passed (reward 1), integrity clean"
        );
        assert_eq!(exit_code(&[judge_task(&good()), r]), 4);
    }

    #[test]
    fn an_oracle_that_tampers_is_not_a_pass_and_a_restored_exploit_is_judged_by_its_reward() {
        let mut input = good();
        input.oracle = Some(facts(
            VerifierStatus::Passed,
            Some(1.0),
            IntegrityStatus::Suspect,
        ));
        input.exploits[0].1 = Some(facts(
            VerifierStatus::Passed,
            Some(1.0),
            IntegrityStatus::Restored,
        ));
        let r = judge_task(&input);
        assert_eq!(r.problems, vec![Problem::OracleFails, Problem::Hackable]);
    }

    #[test]
    fn unloadable_tasks_stop_at_layout_and_infra_errors_give_exit_3() {
        let mut bad = good();
        bad.layout = Err("tasks/x/task.toml: verifier.timeout_sec: must be positive".to_string());
        let r = judge_task(&bad);
        assert_eq!(r.checks.len(), 1);
        assert_eq!(r.problems, vec![Problem::Unloadable]);
        assert_eq!(exit_code(&[r]), 4);

        let mut infra = good();
        infra.exploits[2].1 = Some(TrialFacts {
            infra: Some("environment: image build failed".to_string()),
            ..fail()
        });
        infra.nop = None;
        let r = judge_task(&infra);
        assert_eq!(r.verdict, Verdict::Error);
        assert_eq!(result_of(&r, "nop"), CheckResult::Error);
        assert_eq!(
            r.checks.last().map(|c| c.detail.as_str()),
            Some("infrastructure error: environment: image build failed")
        );
        assert_eq!(exit_code(&[r]), 3);
    }

    #[test]
    fn repeats_that_do_not_apply_are_skipped_not_passed() {
        let mut input = good();
        input.repeats = Repeats::NotApplicable("--repeat 1: nothing to compare".to_string());
        let r = judge_task(&input);
        assert_eq!(result_of(&r, "determinism"), CheckResult::Skipped);
        assert_eq!(r.verdict, Verdict::Ok);
        input.repeats = Repeats::Infra("engine gone".to_string());
        assert_eq!(judge_task(&input).verdict, Verdict::Error);
    }

    #[test]
    fn git_history_names_the_ref_it_used_and_says_how_to_cut_the_history() {
        let used =
            "checked out refs/heads/fix = commit 1a2b of /app/.git into /app: 1 file(s): calc.py";
        let mut input = good();
        input.exploits.push((
            "git-history".to_string(),
            Some(pass().with_said(Said {
                evidence: vec![used.to_string()],
                not_applicable: None,
            })),
        ));
        let r = judge_task(&input);
        assert_eq!(r.problems, vec![Problem::Hackable]);
        let check = r.checks.last().expect("git-history");
        assert_eq!(check.label(), "exploit git-history");
        assert_eq!(check.result, CheckResult::Fail);
        assert_eq!(
            check.detail,
            format!("hackable: verifier passed (reward 1), integrity clean; {used}")
        );
        let advice = check.advice.as_deref().unwrap_or_default();
        assert!(advice.contains("git clone --depth 1"), "{advice}");
        // The JSON carries the evidence with the trial, and the advice.
        let json = serde_json::to_value(check).expect("json");
        assert_eq!(json["trial"]["evidence"][0], used);
        assert!(json["advice"].is_string());

        // History cut: the exploit found nothing, the verifier failed: a pass, no advice.
        let mut cut = good();
        cut.exploits.push((
            "git-history".to_string(),
            Some(fail().with_said(Said {
                evidence: vec!["no commit beyond HEAD in: /app/.git".to_string()],
                not_applicable: None,
            })),
        ));
        let r = judge_task(&cut);
        assert_eq!(r.verdict, Verdict::Ok, "{r:#?}");
        let check = r.checks.last().expect("git-history");
        assert_eq!(check.result, CheckResult::Pass);
        assert!(
            check
                .detail
                .ends_with("; no commit beyond HEAD in: /app/.git")
        );
        assert_eq!(check.advice, None);
        // A failed exploit without advice of its own gets none.
        let mut hackable = good();
        hackable.exploits[0].1 = Some(pass());
        assert_eq!(judge_task(&hackable).checks[4].advice, None);
    }

    #[test]
    fn an_exploit_with_nothing_to_attack_is_not_applicable_not_a_pass() {
        for status in [VerifierStatus::Failed, VerifierStatus::Passed] {
            let mut input = good();
            input.exploits.push((
                "git-history".to_string(),
                Some(
                    facts(status, Some(0.0), IntegrityStatus::Clean).with_said(Said {
                        evidence: Vec::new(),
                        not_applicable: Some("no git binary in the image".to_string()),
                    }),
                ),
            ));
            let r = judge_task(&input);
            let check = r.checks.last().expect("git-history");
            assert_eq!(check.result, CheckResult::NotApplicable);
            assert_eq!(check.detail, "not applicable: no git binary in the image");
            assert_eq!(check.problem, None);
            assert_eq!(r.verdict, Verdict::Ok);
            assert_eq!(exit_code(std::slice::from_ref(&r)), 0);
            let json = serde_json::to_value(check).expect("json");
            assert_eq!(json["result"], "not_applicable");
            assert_eq!(
                json["trial"]["not_applicable"],
                "no git binary in the image"
            );
        }
    }

    #[test]
    fn rewards_are_shown_compactly() {
        assert_eq!(
            fmt_reward(&Reward::from([("reward".to_string(), 0.5)])),
            "0.5"
        );
        assert_eq!(
            fmt_reward(&Reward::from([
                ("a".to_string(), 1.0),
                ("b".to_string(), 0.25)
            ])),
            "{a: 1, b: 0.25}"
        );
    }
}
