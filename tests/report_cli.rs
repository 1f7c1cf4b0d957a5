//! `arbiter report`, `compare` and `check` over synthetic job directories (no engine needed).

mod report_support;

use report_support::{Kind, T, arbiter, s, stderr, stdout, write_grid, write_job};
use serde_json::Value;

fn t<'a>(task: &'a str, agent: &'a str, variant: &'a str, attempt: u32, kind: Kind) -> T<'a> {
    T {
        task,
        agent,
        variant,
        attempt,
        kind,
        agent_seconds: 10.0 + attempt as f64,
    }
}

fn report_json(dir: &std::path::Path) -> Value {
    let out = arbiter(&["report", &s(dir), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("report --format json prints JSON")
}

fn arm<'a>(report: &'a Value, label: &str) -> &'a Value {
    report["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .find(|a| a["arm"] == label)
        .unwrap_or_else(|| panic!("no arm {label}"))
}

#[test]
fn infra_errors_are_excluded_from_rates_and_counted_apart() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("infra");
    use Kind::*;
    write_job(
        &dir,
        &[
            t("a", "ag", "default", 1, Pass),
            t("a", "ag", "default", 2, Infra),
            t("b", "ag", "default", 1, Fail),
            t("b", "ag", "default", 2, Infra),
            t("c", "ag", "default", 1, VerifierError),
            t("c", "ag", "default", 2, Pass),
        ],
        &["ag"],
        &["default"],
        2,
    );
    let r = report_json(&dir);
    let a = arm(&r, "ag/default");
    assert_eq!(a["trials"], 6);
    assert_eq!(a["infra"], 2);
    assert_eq!(a["scored"], 4);
    assert_eq!(a["passed"], 2);
    // the verifier error is scored and not passed
    assert_eq!(a["unverified"], 1);
    assert_eq!(
        a["pass_rate"], 0.5,
        "2 passed of 4 scored; infra not in the denominator"
    );
    // pass@1 averages per-task fractions over tasks with >= 1 scored attempt: (1 + 0 + 0.5) / 3
    let p1 = a["pass_at_k"][0]["value"].as_f64().expect("pass@1");
    assert!((p1 - 0.5).abs() < 1e-12, "{p1}");
    // pass@2 only over tasks with two scored attempts: task c alone (1 of 2 passed) → 1.0
    assert_eq!(a["pass_at_k"][1]["tasks"], 1);
    assert_eq!(a["pass_at_k"][1]["value"], 1.0);
    assert_eq!(a["verdicts"]["unverifiable"], 1);
    assert_eq!(r["totals"]["infra"], 2);

    let table = arbiter(&["report", &s(&dir)]);
    let text = stdout(&table);
    assert!(
        text.contains("2 infra error(s) (harness/engine failures) are excluded from every rate"),
        "{text}"
    );
    assert!(
        text.contains("1 scored trial(s) without a reward"),
        "{text}"
    );
    for f in ["report.md", "report.json", "report.html", "junit.xml"] {
        assert!(dir.join(f).is_file(), "{f} written");
    }
}

#[test]
fn arms_with_unequal_task_sets_are_reported_not_silently_dropped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("unequal");
    use Kind::*;
    write_job(
        &dir,
        &[
            t("a", "ag", "base", 1, Pass),
            t("b", "ag", "base", 1, Pass),
            t("c", "ag", "base", 1, Fail),
            t("d", "ag", "base", 1, Pass),
            t("a", "ag", "new", 1, Pass),
            t("b", "ag", "new", 1, Fail),
            t("c", "ag", "new", 1, Infra),
            // d: no trial in `new`
            t("e", "ag", "new", 1, Pass),
        ],
        &["ag"],
        &["base", "new"],
        1,
    );
    let r = report_json(&dir);
    let warnings = r["warnings"].to_string();
    assert!(
        warnings.contains("ag/new has trials for 4 of the job's 5 tasks"),
        "{warnings}"
    );
    assert!(
        warnings.contains("ag/base has trials for 4 of the job's 5 tasks"),
        "{warnings}"
    );
    let out = arbiter(&["compare", &s(&dir), "--by", "variant", "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let set: Value = serde_json::from_slice(&out.stdout).expect("json");
    let c = &set["results"][0];
    assert_eq!(c["a"], "ag/base");
    assert_eq!(c["b"], "ag/new");
    assert_eq!(c["tasks_paired"], 2, "only a and b are scored in both");
    let unpaired: Vec<(String, String)> = c["unpaired"]
        .as_array()
        .expect("unpaired")
        .iter()
        .map(|u| {
            (
                u["task"].as_str().unwrap_or_default().to_string(),
                u["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        unpaired,
        vec![
            ("c".to_string(), "only infra errors in ag/new".to_string()),
            ("d".to_string(), "no trial in ag/new".to_string()),
            ("e".to_string(), "no trial in ag/base".to_string()),
        ]
    );
    assert_eq!(c["flipped_to_fail"], serde_json::json!(["b"]));
    let text = stdout(&arbiter(&["compare", &s(&dir)]));
    assert!(text.contains("not paired: c (only infra errors in ag/new), d (no trial in ag/new), e (no trial in ag/base)"), "{text}");
}

#[test]
fn compare_calls_a_clear_difference_and_is_deterministic_under_a_seed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("ablation");
    let arms = [
        ("agent", "base", 0.0),
        ("agent", "same", 0.0),
        ("agent", "better", 0.45),
    ];
    let rows = report_support::grid(120, &arms, 3, 7);
    write_grid(&dir, &rows, &["agent"], &["base", "same", "better"], 3);
    let run = |seed: &str| {
        let out = arbiter(&[
            "compare",
            &s(&dir),
            "--by",
            "variant",
            "--seed",
            seed,
            "--resamples",
            "2000",
            "--format",
            "json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_slice::<Value>(&out.stdout).expect("json")
    };
    let a = run("11");
    let b = run("11");
    assert_eq!(a, b, "same seed, same output");
    let results = a["results"].as_array().expect("results");
    assert_eq!(
        results.len(),
        2,
        "each arm against the control, not all pairs"
    );
    let better = results
        .iter()
        .find(|r| r["b"] == "agent/better")
        .expect("better");
    assert_eq!(better["significant"], true, "{better}");
    let verdict = better["verdict"].as_str().expect("verdict");
    assert!(
        verdict.starts_with("agent/better better than agent/base by +"),
        "{verdict}"
    );
    assert!(verdict.contains("(Holm-adjusted)"), "{verdict}");
    // Holm never lowers a p-value
    for r in results {
        assert!(r["p_adjusted"].as_f64() >= r["p"].as_f64(), "{r}");
    }
    let same = results
        .iter()
        .find(|r| r["b"] == "agent/same")
        .expect("same");
    assert_eq!(same["significant"], false, "{same}");
    assert!(
        same["verdict"]
            .as_str()
            .expect("verdict")
            .starts_with("no detectable difference"),
        "{same}"
    );
    // the control can be chosen
    let out = arbiter(&[
        "compare",
        &s(&dir),
        "--control",
        "better",
        "--resamples",
        "200",
    ]);
    let text = stdout(&out);
    assert!(
        text.contains("agent/base worse than agent/better by −"),
        "{text}"
    );
}

#[test]
fn compare_two_jobs_pairs_single_arms_and_reports_unmatched_arms() {
    let tmp = tempfile::tempdir().expect("tmp");
    use Kind::*;
    let a = tmp.path().join("before");
    let b = tmp.path().join("after");
    write_job(
        &a,
        &[
            t("x", "ag", "default", 1, Pass),
            t("y", "ag", "default", 1, Fail),
        ],
        &["ag"],
        &["default"],
        1,
    );
    write_job(
        &b,
        &[
            t("x", "ag", "default", 1, Fail),
            t("y", "ag", "default", 1, Pass),
        ],
        &["ag"],
        &["default"],
        1,
    );
    let out = arbiter(&["compare", &s(&a), &s(&b), "--resamples", "100"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("no detectable difference between after:ag/default and before:ag/default"),
        "{text}"
    );
    assert!(text.contains("pass → fail: x"), "{text}");
    assert!(text.contains("fail → pass: y"), "{text}");
    let out = arbiter(&["compare", &s(&a), &s(&b), "--by", "agent"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim(),
        "error: --by: applies to one job; two jobs are compared arm by arm"
    );
}

#[test]
fn check_exits_4_on_a_seeded_regression_and_0_on_an_identical_run() {
    let tmp = tempfile::tempdir().expect("tmp");
    let arms = [("ag", "default", 0.3)];
    let rows = report_support::grid(40, &arms, 3, 99);
    let base_dir = tmp.path().join("base");
    write_grid(&base_dir, &rows, &["ag"], &["default"], 3);
    // identical run
    let same_dir = tmp.path().join("same");
    write_grid(&same_dir, &rows, &["ag"], &["default"], 3);
    // the baseline file is what `report --format json` prints
    let baseline = tmp.path().join("baseline.json");
    let out = arbiter(&["report", &s(&base_dir), "--format", "json"]);
    assert_eq!(out.status.code(), Some(0));
    std::fs::write(&baseline, &out.stdout).expect("write baseline");

    let out = arbiter(&["check", &s(&same_dir), "--baseline", &s(&baseline)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("check passed: no regression"),
        "{}",
        stdout(&out)
    );
    let out = arbiter(&["check", &s(&same_dir), "--baseline", &s(&base_dir)]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a job dir works as a baseline too"
    );

    // seeded regression: every solved task of the first five now fails every attempt
    let solved: Vec<String> = {
        let r: Value =
            serde_json::from_slice(&std::fs::read(&baseline).expect("read")).expect("json");
        r["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .filter(|t| {
                let c = &t["cells"][0];
                c["scored"].as_u64() > Some(0)
                    && 2 * c["passed"].as_u64().unwrap_or(0) >= c["scored"].as_u64().unwrap_or(0)
            })
            .map(|t| t["task"].as_str().unwrap_or_default().to_string())
            .take(5)
            .collect()
    };
    assert_eq!(solved.len(), 5, "the synthetic baseline solves some tasks");
    let regressed: Vec<_> = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if solved.contains(&r.0) {
                r.4 = Kind::Fail;
            }
            r
        })
        .collect();
    let worse_dir = tmp.path().join("worse");
    write_grid(&worse_dir, &regressed, &["ag"], &["default"], 3);
    let out = arbiter(&["check", &s(&worse_dir), "--baseline", &s(&baseline)]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(text.contains("REGRESSED ag/default"), "{text}");
    for task in &solved {
        assert!(
            text.contains(&format!("  regressed: {task} (baseline ")),
            "{task} listed: {text}"
        );
    }
    // a generous tolerance lets it pass: 5 of 40 tasks = 12.5 pts
    let out = arbiter(&[
        "check",
        &s(&worse_dir),
        "--baseline",
        &s(&baseline),
        "--max-drop",
        "13",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    // bad arguments
    let out = arbiter(&[
        "check",
        &s(&worse_dir),
        "--baseline",
        &s(&baseline),
        "--pass-k",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).trim(), "error: --pass-k: must be at least 1");
    let bogus = tmp.path().join("bogus.json");
    std::fs::write(&bogus, "{\"hello\": 1}").expect("write");
    let out = arbiter(&["check", &s(&worse_dir), "--baseline", &s(&bogus)]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {}: schema: missing: not an arbiter report (write one with `arbiter report JOB_DIR --format json`)",
            bogus.display()
        )
    );
}

#[test]
fn check_counts_missing_tasks_and_leaves_infra_only_tasks_unchecked() {
    let tmp = tempfile::tempdir().expect("tmp");
    use Kind::*;
    let base = tmp.path().join("base");
    write_job(
        &base,
        &[
            t("a", "ag", "default", 1, Pass),
            t("b", "ag", "default", 1, Pass),
            t("c", "ag", "default", 1, Pass),
        ],
        &["ag"],
        &["default"],
        1,
    );
    let now = tmp.path().join("now");
    write_job(
        &now,
        &[
            t("a", "ag", "default", 1, Pass),
            t("b", "ag", "default", 1, Infra),
        ],
        &["ag"],
        &["default"],
        1,
    );
    let out = arbiter(&["check", &s(&now), "--baseline", &s(&base)]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(
        text.contains("regressed: c (baseline 1/1 passed, now missing)"),
        "{text}"
    );
    assert!(
        text.contains("not checked (only infra errors): b"),
        "{text}"
    );
}

#[test]
fn report_errors_are_one_line_with_exit_2() {
    let tmp = tempfile::tempdir().expect("tmp");
    let out = arbiter(&["report", &s(tmp.path())]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "error: {}/trials.jsonl: file: missing (not a job directory, or no trial has finished yet)\n",
            tmp.path().display()
        )
    );
    std::fs::write(tmp.path().join("trials.jsonl"), "not json\n").expect("write");
    let out = arbiter(&["report", &s(tmp.path())]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).lines().last().unwrap_or_default(),
        format!(
            "error: {}/trials.jsonl: line 1: not a trial record (no readable line in the file)",
            tmp.path().display()
        )
    );
}

#[test]
fn a_torn_last_line_is_skipped_and_reported() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("torn");
    write_job(
        &dir,
        &[t("a", "ag", "default", 1, Kind::Pass)],
        &["ag"],
        &["default"],
        1,
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("trials.jsonl"))
        .expect("open");
    std::io::Write::write_all(&mut f, b"{\"schema\":\"arbiter.trial.v1\",\"id\":\"b__ag")
        .expect("write");
    let r = report_json(&dir);
    assert_eq!(r["totals"]["trials"], 1);
    assert!(
        r["warnings"][0]
            .as_str()
            .expect("warning")
            .starts_with("1 unreadable line(s) in trials.jsonl skipped (line 2)"),
        "{}",
        r["warnings"]
    );
}

#[test]
fn multi_key_rewards_get_per_key_means() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("keys");
    write_job(
        &dir,
        &[
            t("a", "ag", "default", 1, Kind::Pass),
            t("b", "ag", "default", 1, Kind::Fail),
        ],
        &["ag"],
        &["default"],
        1,
    );
    // give the records two reward keys
    let text = std::fs::read_to_string(dir.join("trials.jsonl")).expect("read");
    let text = text
        .replace(
            "\"reward\":{\"reward\":1.0}",
            "\"reward\":{\"accuracy\":1.0,\"style\":0.5}",
        )
        .replace(
            "\"reward\":{\"reward\":0.0}",
            "\"reward\":{\"accuracy\":0.0,\"style\":0.25}",
        );
    std::fs::write(dir.join("trials.jsonl"), text).expect("write");
    let r = report_json(&dir);
    let a = arm(&r, "ag/default");
    assert_eq!(a["reward_keys"]["accuracy"]["mean"], 0.5);
    assert_eq!(a["reward_keys"]["style"]["mean"], 0.375);
    // the primary value is the mean of the keys: (0.75 + 0.125) / 2
    assert_eq!(a["mean_reward"], 0.4375);
}

#[test]
fn compare_with_nothing_to_pair_is_a_usage_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("single");
    write_job(
        &dir,
        &[t("a", "ag", "default", 1, Kind::Pass)],
        &["ag"],
        &["default"],
        1,
    );
    let out = arbiter(&["compare", &s(&dir)]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {}: nothing to compare by agent: no two arms share a variant (arms: ag/default)",
            dir.display()
        )
    );
}

#[test]
fn check_exits_3_when_only_infra_errors_keep_it_from_judging() {
    let tmp = tempfile::tempdir().expect("tmp");
    use Kind::*;
    let base = tmp.path().join("base");
    write_job(
        &base,
        &[
            t("a", "ag", "default", 1, Pass),
            t("b", "ag", "default", 1, Fail),
        ],
        &["ag"],
        &["default"],
        1,
    );
    let now = tmp.path().join("now");
    write_job(
        &now,
        &[
            t("a", "ag", "default", 1, Infra),
            t("b", "ag", "default", 1, Fail),
        ],
        &["ag"],
        &["default"],
        1,
    );
    let out = arbiter(&["check", &s(&now), "--baseline", &s(&base)]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains("not checked (only infra errors): a"),
        "{text}"
    );
    assert!(text.contains("1 task(s) had only infra errors"), "{text}");
}
