//! Reports over real jobs run by the real binary on the engine, and the `--fail-under` gate.

mod common;

use common::{arbiter, docker_available, fixture, run_job, stderr, stdout};

#[test]
fn fail_under_exits_4_naming_the_arms_below_and_reports_read_the_job() {
    if !docker_available() {
        return;
    }
    let quick = fixture("quick");
    let forge = fixture("forge");
    let (out, dir, _tmp) = run_job(&[
        quick.to_str().expect("utf8"),
        forge.to_str().expect("utf8"),
        "--agent",
        "oracle",
        "--agent",
        "nop",
        "-k",
        "2",
        "--fail-under",
        "40%",
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(4), "{text}{}", stderr(&out));
    assert!(
        text.contains("gate failed: nop/default pass rate 0.0% is under --fail-under 40.0%"),
        "{text}"
    );
    assert!(!text.contains("gate failed: oracle/default"), "{text}");

    // report over the real job dir
    let d = dir.to_str().expect("utf8");
    let out = arbiter(&["report", d, "--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(r["totals"]["trials"], 8);
    let arms: Vec<&str> = r["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .map(|a| a["arm"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(arms, ["oracle/default", "nop/default"], "job order");
    let quick_row = r["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .find(|t| t["task"] == "quick")
        .expect("quick");
    assert_eq!(
        quick_row["cells"][0]["outcomes"],
        serde_json::json!(["pass", "pass"])
    );
    assert_eq!(
        quick_row["cells"][1]["outcomes"],
        serde_json::json!(["fail", "fail"])
    );
    let junit = std::fs::read_to_string(dir.join("junit.xml")).expect("junit.xml");
    assert_eq!(junit.matches("<testcase ").count(), 8);
    assert!(
        junit.contains("classname=\"quick\" name=\"oracle/default/1\""),
        "{junit}"
    );
    for f in ["report.md", "report.html"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    // the job checked against itself: no regression
    let out = arbiter(&["check", d, "--baseline", d]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let out = arbiter(&["compare", d, "--by", "agent", "--resamples", "200"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("nop/default and oracle/default"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn fail_under_passes_with_exit_0_when_every_arm_reaches_it() {
    if !docker_available() {
        return;
    }
    let quick = fixture("quick");
    let (out, _dir, _tmp) = run_job(&[
        quick.to_str().expect("utf8"),
        "--agent",
        "oracle",
        "--fail-under",
        "1.0",
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("gate passed"), "{text}");
}

#[test]
fn fail_under_rejects_a_rate_outside_0_to_1() {
    let out = arbiter(&["run", "tasks", "--fail-under", "1.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out)
            .contains("invalid value '1.5' for '--fail-under <RATE>': \"1.5\" is outside 0..1"),
        "{}",
        stderr(&out)
    );
}
