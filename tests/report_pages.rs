//! Trial pages (`trials/<id>/trial.html`), usage and integrity in reports, and the reader
//! defects of issue 15, over synthetic job directories (no engine needed).

mod report_support;

use std::path::Path;

use report_support::{
    HOSTILE, Kind, T, arbiter, edit_record, page_section, record, s, stderr, stdout, usage,
    write_change_set, write_job, write_rich_trial,
};
use serde_json::{Value, json};

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

fn report_ok(dir: &Path, format: &str) -> String {
    let out = arbiter(&["report", &s(dir), "--format", format]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out)
}

#[test]
fn md_and_html_say_that_trials_without_a_reward_count_as_not_passed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("unverified");
    use Kind::*;
    write_job(
        &dir,
        &[
            t("a", "ag", "default", 1, Pass),
            t("b", "ag", "default", 1, VerifierError),
            t("c", "ag", "default", 1, VerifierError),
        ],
        &["ag"],
        &["default"],
        1,
    );
    let line = "2 scored trial(s) without a reward (verifier error or skipped) count as not passed";
    assert!(report_ok(&dir, "table").contains(line));
    let md = std::fs::read_to_string(dir.join("report.md")).expect("md");
    assert!(md.contains(line), "{md}");
    let html = std::fs::read_to_string(dir.join("report.html")).expect("html");
    assert!(html.contains(line), "report.html states it");
}

#[test]
fn warnings_name_arms_that_scored_fewer_tasks_than_they_ran() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("scored-fewer");
    use Kind::*;
    write_job(
        &dir,
        &[
            t("a", "ag", "default", 1, Pass),
            t("b", "ag", "default", 1, Pass),
            t("a", "ag", "flaky-infra", 1, Pass),
            t("b", "ag", "flaky-infra", 1, Infra),
        ],
        &["ag"],
        &["default", "flaky-infra"],
        1,
    );
    let json: Value = serde_json::from_str(&report_ok(&dir, "json")).expect("json");
    let warnings: Vec<&str> = json["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let expected = "ag/flaky-infra scored 1 of the 2 tasks it ran: 1 had only infra errors (rates cover different task sets)";
    assert_eq!(warnings, vec![expected]);
    let html = std::fs::read_to_string(dir.join("report.html")).expect("html");
    let box_start = html.find("<section class=\"warn\">").expect("warnings box");
    let warn_box = &html[box_start..box_start + html[box_start..].find("</section>").expect("end")];
    assert!(
        warn_box.contains("ag/flaky-infra scored 1 of the 2 tasks it ran"),
        "{warn_box}"
    );
    assert!(report_ok(&dir, "table").contains(&format!("warning: {expected}")));
}

#[test]
fn tasks_are_listed_in_natural_case_insensitive_order() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("order");
    use Kind::*;
    let names = ["Zeta-Upper", "task-10", "alpha", "task-2", "Beta", "task-1"];
    let trials: Vec<T<'_>> = names
        .iter()
        .flat_map(|n| [t(n, "ag", "a", 1, Pass), t(n, "ag", "b", 1, Fail)])
        .collect();
    write_job(&dir, &trials, &["ag"], &["a", "b"], 1);
    let json: Value = serde_json::from_str(&report_ok(&dir, "json")).expect("json");
    let tasks: Vec<&str> = json["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .filter_map(|t| t["task"].as_str())
        .collect();
    let want = vec!["alpha", "Beta", "task-1", "task-2", "task-10", "Zeta-Upper"];
    assert_eq!(tasks, want);
    // the heat map's rows follow it
    let html = std::fs::read_to_string(dir.join("report.html")).expect("html");
    let rows: Vec<usize> = want
        .iter()
        .map(|n| html.find(&format!("<tr><th title=\"{n}\">")).expect("row"))
        .collect();
    assert!(rows.windows(2).all(|w| w[0] < w[1]), "{rows:?}");
    // and comparisons pair every task, whatever the order (the merge walks the same order)
    let set: Value = serde_json::from_str(&stdout(&arbiter(&[
        "compare",
        &s(&dir),
        "--format",
        "json",
    ])))
    .expect("compare json");
    assert_eq!(set["results"][0]["tasks_paired"], 6);
    assert_eq!(
        set["results"][0]["flipped_to_fail"],
        json!(["alpha", "Beta", "task-1", "task-2", "task-10", "Zeta-Upper"])
    );
}

#[test]
fn compare_says_which_side_has_no_trial_and_which_only_infra_errors() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("unpaired");
    use Kind::*;
    write_job(
        &dir,
        &[
            t("a", "ag", "base", 1, Pass),
            t("a", "ag", "new", 1, Pass),
            // only in new, and only infra errors there
            t("b", "ag", "new", 1, Infra),
        ],
        &["ag"],
        &["base", "new"],
        1,
    );
    let set: Value = serde_json::from_str(&stdout(&arbiter(&[
        "compare",
        &s(&dir),
        "--format",
        "json",
    ])))
    .expect("compare json");
    assert_eq!(
        set["results"][0]["unpaired"],
        json!([{"task": "b", "reason": "no trial in ag/base, only infra errors in ag/new"}])
    );
    let table = stdout(&arbiter(&["compare", &s(&dir)]));
    assert!(
        table.contains("not paired: b (no trial in ag/base, only infra errors in ag/new)"),
        "{table}"
    );
}

#[test]
fn usage_and_tampered_counts_appear_per_arm_when_records_have_them_and_not_otherwise() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("gateway");
    use Kind::*;
    write_job(
        &dir,
        &[
            t("a", "ag", "default", 1, Pass),
            t("b", "ag", "default", 1, Pass),
            t("c", "ag", "default", 1, Fail),
        ],
        &["ag"],
        &["default"],
        1,
    );
    // without usage/integrity in the records: no such columns anywhere
    let plain = report_ok(&dir, "json");
    assert!(
        !plain.contains("usage") && !plain.contains("tampered"),
        "{plain}"
    );
    assert!(
        !std::fs::read_to_string(dir.join("report.html"))
            .expect("html")
            .contains("cost / solved task")
    );

    edit_record(&dir, "a__ag__default__1", |r| {
        r["usage"] = usage(0.5, 20_000, 2);
        r["integrity"] = json!({"status": "clean", "findings": []});
    });
    edit_record(&dir, "b__ag__default__1", |r| {
        // the verifier passed, but the agent replaced the test runner
        r["usage"] = usage(0.25, 10_000, 0);
        r["integrity"] = json!({"status": "suspect", "findings": [
            {"path": "/usr/bin/python3", "class": "toolchain_modified", "why": "replaced"}]});
        r["audit"]["verdict"] = json!("tampered");
    });
    edit_record(&dir, "c__ag__default__1", |r| {
        r["usage"] = usage(0.25, 5_000, 1);
    });
    let json: Value = serde_json::from_str(&report_ok(&dir, "json")).expect("json");
    let a = &json["arms"][0];
    assert_eq!(a["passed"], 1, "a tampered trial never counts as passed");
    assert_eq!(a["tampered"], 1);
    assert_eq!(a["verdicts"]["tampered"], 1);
    assert_eq!(a["verdicts"]["certified"], 1);
    let u = &a["usage"];
    assert_eq!(u["trials"], 3);
    assert_eq!(u["input_tokens"], 35_000);
    assert_eq!(u["upstream_errors"], 3);
    assert_eq!(u["solved_tasks"], 1);
    assert_eq!(u["cost_usd"], 1.0);
    assert_eq!(u["cost_per_solved_task_usd"], 1.0);

    let table = report_ok(&dir, "table");
    assert!(table.contains("cost / solved task"), "{table}");
    assert!(table.contains("tampered"), "{table}");
    let md = std::fs::read_to_string(dir.join("report.md")).expect("md");
    assert!(
        md.contains("## Usage (counted by the model gateway)"),
        "{md}"
    );
    assert!(
        md.contains("| ag/default | 3 | 9 | 35.0k | 300 | 0 | $1.00 | $1.00 | 3 | 0 |"),
        "{md}"
    );
    let html = std::fs::read_to_string(dir.join("report.html")).expect("html");
    assert!(html.contains("<th>cost / solved task</th>") && html.contains("<th>tampered</th>"));
    let junit = std::fs::read_to_string(dir.join("junit.xml")).expect("junit");
    assert!(
        junit.contains("<property name=\"usage.cost_usd\" value=\"1.0000\"/>"),
        "{junit}"
    );
    assert!(junit.contains("<property name=\"tampered\" value=\"1\"/>"));
    assert!(junit.contains("<failure type=\"tampered\""), "{junit}");
}

#[test]
fn trial_pages_show_every_fact_escape_agent_text_and_are_linked_from_the_report() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("pages");
    use Kind::*;
    write_job(
        &dir,
        &[
            t("hello", "ag", "default", 1, Pass),
            t("hello", "ag", "default", 2, Fail),
            t("web", "ag", "default", 1, Infra),
        ],
        &["ag"],
        &["default"],
        2,
    );
    let rich = "hello__ag__default__2";
    write_rich_trial(&dir, rich, 0);
    edit_record(&dir, rich, |r| {
        r["claim"]["record"] = json!({"schema_version": "aworld.run.outcome.v1",
            "semantic_status": "task_failed", "final_answer": format!("Done {HOSTILE}")});
        r["usage"] = usage(0.2004, 51_234, 2);
        r["changes"] = json!({"added": 2, "modified": 1, "deleted": 1, "outside_workdir": 2, "file": "agent/changes.json"});
        r["integrity"] = json!({"status": "suspect", "findings": [
            {"path": "/usr/bin/python3", "class": "toolchain_modified", "why": format!("replaced {HOSTILE}")}]});
        r["audit"]["verdict"] = json!("tampered");
        r["audit"]["evidence"] = json!([format!("evidence {HOSTILE}")]);
        r["validation"] = json!([{"id": "unit", "argv": ["pytest", "-q"], "exit_code": 1, "seconds": 1.5,
            "timed_out": false, "stdout_sha256": "ab", "stderr_sha256": "cd", "stdout_bytes": 10, "stderr_bytes": 0}]);
        r["artifacts"] = json!([{"path": "/app/out.txt", "status": "ok", "size": 12, "sha256": "ef"},
                                {"path": "/app/missing.txt", "status": "missing"}]);
        r["retries"] = json!(1);
        r["previous_errors"] = json!([{"phase": "environment", "message": "engine gone"}]);
    });
    let out = arbiter(&["report", &s(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("3 trial page(s)"), "{}", stderr(&out));

    // every trial has a page, today's records (no newer fields) included
    for id in ["hello__ag__default__1", rich, "web__ag__default__1"] {
        let page = std::fs::read_to_string(dir.join("trials").join(id).join("trial.html"))
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        assert!(
            page.contains("<h2>Facts</h2>") && page.contains("</html>"),
            "{id}"
        );
        assert!(
            !page.contains("<script") && !page.contains("<img"),
            "{id}: escaped"
        );
    }
    let plain =
        std::fs::read_to_string(dir.join("trials/hello__ag__default__1/trial.html")).expect("page");
    assert!(plain.contains("No trajectory in this trial"));
    assert!(plain.contains("No model-call ledger"));
    assert!(plain.contains("none (no model call through the gateway)"));
    let infra =
        std::fs::read_to_string(dir.join("trials/web__ag__default__1/trial.html")).expect("page");
    assert!(
        infra.contains("container create failed: engine gone"),
        "the infra error is shown"
    );

    let page =
        std::fs::read_to_string(dir.join("trials").join(rich).join("trial.html")).expect("page");
    assert!(!page.contains("<script") && !page.contains("<img") && !page.contains("</script>"));
    assert!(page.contains("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;&quot;&#39;&amp;"));
    for fact in [
        "Done &lt;/script&gt;", // the final answer
        "toolchain_modified",   // the integrity finding
        "tampered",             // the audit verdict
        "51.2k",                // usage tokens
        "$0.2004",
        "429: 2",
        "engine gone", // the previous error of the retry
        "<tr><th>reward</th><td>0 · from reward.txt or reward.json (not kept in the trial dir)</td></tr>",
    ] {
        assert!(page.contains(fact), "page shows {fact}");
    }
    assert!(
        !page.contains("reward · reward"),
        "the reward is shown once"
    );
    // trajectory: steps, tool calls, outputs (long ones folded)
    assert!(page.contains("claude-code 2.1.332 claude-sonnet-4-5"));
    assert!(page.contains("→ <b>bash</b>"));
    assert!(
        page.contains("<details class=\"fold\"><summary><code>xxxxxxxx"),
        "the 5000-char output is folded"
    );
    // model calls: a row per call, the 429 marked
    assert!(page.contains("<td>tool_use</td>") && page.contains("<td class=\"n\">0.81 s</td>"));
    assert!(page.contains("<tr class=\"finding\"><td class=\"n\">2</td>"));
    // change set: the finding marked, the tree grouped by directory
    assert!(page.contains("<tr class=\"finding\"><td>&nbsp;&nbsp;python3</td><td>modified</td>"));
    assert!(page.contains("<tr class=\"dir\"><td colspan=\"7\">/usr/local/bin/</td></tr>"));
    // logs: tails, with the full files linked
    assert!(page.contains("<a href=\"agent/stderr.log\">agent/stderr.log</a> <span class=\"muted\">(195.3 KiB, last 64.0 KiB shown)</span>"));
    assert!(page.len() < 400_000, "capped: {} bytes", page.len());
    // validation receipt and artifacts
    assert!(page.contains("<code>pytest -q</code>"));
    assert!(page.contains("/app/missing.txt"));

    // report.html links each heat-map cell (the first attempt that did not pass) and the
    // trials table to the pages
    let html = std::fs::read_to_string(dir.join("report.html")).expect("html");
    assert!(
        html.contains(&format!("<a href=\"trials/{rich}/trial.html\">1/2</a>")),
        "heat-map cell links the failed attempt"
    );
    for id in ["hello__ag__default__1", rich, "web__ag__default__1"] {
        assert!(
            html.contains(&format!("<a href=\"trials/{id}/trial.html\">{id}</a>")),
            "trials table links {id}"
        );
    }
}

#[test]
fn trial_pages_skip_symlinked_logs_and_ids_that_are_not_file_names() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("links");
    use Kind::*;
    write_job(
        &dir,
        &[t("a", "ag", "default", 1, Pass)],
        &["ag"],
        &["default"],
        1,
    );
    let id = "a__ag__default__1";
    let secret = tmp.path().join("secret.txt");
    std::fs::write(&secret, "host-secret-value").expect("secret");
    std::fs::create_dir_all(dir.join("trials").join(id).join("agent")).expect("dir");
    std::os::unix::fs::symlink(
        &secret,
        dir.join("trials").join(id).join("agent/stdout.log"),
    )
    .expect("symlink");
    // a record whose id would climb out of trials/
    let mut line = record(&t("b", "ag", "default", 1, Fail), "links");
    line["id"] = json!("../../escape");
    let mut jsonl = std::fs::read_to_string(dir.join("trials.jsonl")).expect("jsonl");
    jsonl.push_str(&(line.to_string() + "\n"));
    std::fs::write(dir.join("trials.jsonl"), jsonl).expect("write");

    let out = arbiter(&["report", &s(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: no trial page for ../../escape: the id is not a file name"),
        "{}",
        stderr(&out)
    );
    let page =
        std::fs::read_to_string(dir.join("trials").join(id).join("trial.html")).expect("page");
    assert!(
        !page.contains("host-secret-value"),
        "a symlinked log is not followed"
    );
    assert!(
        page.contains(
            "agent/stdout.log <span class=\"muted\">(not a regular file (not read))</span>"
        )
    );
    assert!(!tmp.path().join("escape").exists() && !dir.join("escape").exists());
    let html = std::fs::read_to_string(dir.join("report.html")).expect("html");
    assert!(!html.contains("href=\"trials/../"), "no link for it either");
}

/// What a page looks like on disk: its bytes and inode (a rewrite renames a new file in).
fn page_state(dir: &Path, id: &str) -> (Vec<u8>, u64) {
    use std::os::unix::fs::MetadataExt;
    let p = dir.join("trials").join(id).join("trial.html");
    (
        std::fs::read(&p).expect("page"),
        std::fs::metadata(&p).expect("page").ino(),
    )
}

#[test]
fn unchanged_trial_pages_are_left_alone_and_changed_ones_are_rewritten() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("incremental");
    use Kind::*;
    write_job(
        &dir,
        &[
            t("a", "ag", "default", 1, Pass),
            t("b", "ag", "default", 1, Fail),
            t("c", "ag", "default", 1, Pass),
        ],
        &["ag"],
        &["default"],
        1,
    );
    let rich = "b__ag__default__1";
    write_rich_trial(&dir, rich, 0);
    let words = |out: &std::process::Output| stderr(out).lines().next().unwrap_or("").to_string();

    let out = arbiter(&["report", &s(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        words(&out).contains("and 3 trial page(s) ("),
        "{}",
        words(&out)
    );
    let first: Vec<_> = ["a__ag__default__1", rich]
        .iter()
        .map(|id| page_state(&dir, id))
        .collect();
    let head = String::from_utf8_lossy(&first[0].0[..120]).into_owned();
    assert!(
        head.starts_with("<!DOCTYPE html>\n<!-- arbiter-page "),
        "{head}"
    );

    // nothing changed: nothing rewritten
    let out = arbiter(&["report", &s(&dir)]);
    assert!(
        words(&out).contains("and 0 trial page(s) (3 unchanged left as they were)"),
        "{}",
        words(&out)
    );
    assert_eq!(page_state(&dir, "a__ag__default__1"), first[0]);
    assert_eq!(page_state(&dir, rich), first[1]);

    // a log of one trial grows, another trial's record changes: those two are redone
    let log = dir.join("trials").join(rich).join("agent/stdout.log");
    let mut text = std::fs::read_to_string(&log).expect("log");
    text.push_str("one more line from a regrade\n");
    std::fs::write(&log, text).expect("log");
    edit_record(&dir, "c__ag__default__1", |r| {
        r["claim"]["record"]["final_answer"] = json!("changed after the fact");
    });
    let out = arbiter(&["report", &s(&dir)]);
    assert!(
        words(&out).contains("and 2 trial page(s) (1 unchanged left as they were)"),
        "{}",
        words(&out)
    );
    let page = String::from_utf8(page_state(&dir, rich).0).expect("utf8");
    assert!(page.contains("one more line from a regrade"));
    let page = String::from_utf8(page_state(&dir, "c__ag__default__1").0).expect("utf8");
    assert!(page.contains("changed after the fact"));
    assert_eq!(page_state(&dir, "a__ag__default__1"), first[0]);

    // a page edited by hand (or by an older arbiter without a fingerprint) is redone
    let a = dir.join("trials/a__ag__default__1/trial.html");
    std::fs::write(&a, "<!DOCTYPE html>\n<p>stale</p>\n").expect("write");
    let out = arbiter(&["report", &s(&dir)]);
    assert!(
        words(&out).contains("and 1 trial page(s) (2 unchanged"),
        "{}",
        words(&out)
    );
    assert_eq!(page_state(&dir, "a__ag__default__1").0, first[0].0);

    // --pages all rewrites every page; --pages none writes none. (Marked by an old mtime, not
    // by its inode: a busy filesystem may hand the new file the old file's inode.)
    let epoch = std::time::SystemTime::UNIX_EPOCH;
    std::fs::File::options()
        .write(true)
        .open(&a)
        .and_then(|f| f.set_modified(epoch))
        .expect("mark the page");
    let out = arbiter(&["report", &s(&dir), "--pages", "all"]);
    assert!(
        words(&out).contains("and 3 trial page(s) ("),
        "{}",
        words(&out)
    );
    let modified = std::fs::metadata(&a)
        .and_then(|m| m.modified())
        .expect("mtime");
    assert_ne!(modified, epoch, "a new file");
    std::fs::remove_file(&a).expect("rm");
    let out = arbiter(&["report", &s(&dir), "--pages", "none"]);
    assert!(
        words(&out).contains("and 0 trial page(s) ("),
        "{}",
        words(&out)
    );
    assert!(!a.exists(), "--pages none writes no page");
}

/// Goal continuation in the HTML pages: report.html's "Goal continuation" section lists each
/// arm (a one-shot arm as one attempt each) with attempts used, pass rate by attempts used and
/// cost per solved task; each continued trial's page lists its attempts, the agent's own
/// words escaped.
#[test]
fn continuation_is_shown_per_arm_in_the_report_and_per_attempt_on_trial_pages() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("goal");
    use Kind::*;
    write_job(
        &dir,
        &[
            t("a", "cc", "one-shot", 1, Fail),
            t("b", "cc", "one-shot", 1, Pass),
            t("a", "cc", "continue", 1, Pass),
            t("b", "cc", "continue", 1, Pass),
        ],
        &["cc"],
        &["one-shot", "continue"],
        1,
    );
    for id in [
        "a__cc__one-shot__1",
        "b__cc__one-shot__1",
        "a__cc__continue__1",
        "b__cc__continue__1",
    ] {
        edit_record(&dir, id, |r| r["usage"] = usage(0.5, 1000, 0));
    }
    let attempt = |k: u32, semantic: &str, because: Option<&str>| {
        json!({"attempt": k, "id": format!("a__cc__continue__1/attempt-{k}"),
               "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:05Z",
               "seconds": 5.0, "remaining_seconds": 60.0,
               "termination": {"kind": "exited", "exit_code": if k == 1 { 1 } else { 0 }},
               "claim": {"status": "present", "semantic_status": semantic,
                         "record": {"failure": {"message": format!("not yet {HOSTILE}")}}},
               "validation": [{"id": "answer", "argv": ["test", "-s", "/app/answer.txt"],
                               "exit_code": if k == 1 { 1 } else { 0 }, "seconds": 0.1, "timed_out": false,
                               "stdout_sha256": "a", "stderr_sha256": "b", "stdout_bytes": 0, "stderr_bytes": 0}],
               "usage": {"requests": 2, "input_tokens": 500, "output_tokens": 50},
               "trajectory": format!("attempts/{k}/trajectory.json"),
               "saved_to": format!("attempts/{k}"),
               "continued_because": because,
               "cleared": if k == 1 { json!(["/logs/agent/outcome.json"]) } else { json!([]) }})
    };
    edit_record(&dir, "a__cc__continue__1", |r| {
        r["continuation"] =
            json!({"max_attempts": 3, "attempts_used": 2, "status": "claimed_success"});
        r["attempts"] = json!([
            attempt(1, "task_failed", Some("attempt 1 claimed task_failed")),
            attempt(2, "succeeded", None)
        ]);
    });
    edit_record(&dir, "b__cc__continue__1", |r| {
        r["continuation"] =
            json!({"max_attempts": 3, "attempts_used": 1, "status": "claimed_success"});
        r["attempts"] = json!([attempt(1, "succeeded", None)]);
    });
    report_ok(&dir, "table");
    let html = std::fs::read_to_string(dir.join("report.html")).expect("report.html");
    let section = html
        .split("<section id=\"continuation\">")
        .nth(1)
        .and_then(|s| s.split("</section>").next())
        .expect("a goal continuation section");
    // The continuing arm: 2 trials, 1.5 attempts, one solved with 1 attempt, one with 2;
    // $1.00 over 2 solved tasks. The one-shot arm: 1 of 2, $1.00 for its 1 solved task.
    assert!(
        section.contains("<td class=\"l\">continue</td>"),
        "{section}"
    );
    assert!(section.contains("<td>1.50</td>"), "{section}");
    assert!(
        section.contains("1: 1/1 (100.0%), 2: 1/1 (100.0%)"),
        "{section}"
    );
    assert!(
        section.contains("<td class=\"l\">one-shot</td>"),
        "{section}"
    );
    assert!(section.contains("1 (one shot)"), "{section}");
    assert!(section.contains("1: 1/2 (50.0%)"), "{section}");
    assert!(
        section.contains("$0.50") && section.contains("$1.00"),
        "{section}"
    );

    let page = std::fs::read_to_string(dir.join("trials/a__cc__continue__1/trial.html"))
        .expect("trial page");
    let attempts = page
        .split("<section id=\"attempts\">")
        .nth(1)
        .and_then(|s| s.split("</section>").next())
        .expect("an attempts section");
    assert!(
        attempts.contains("2 of at most 3 attempt(s) used"),
        "{attempts}"
    );
    assert!(attempts.contains("a__cc__continue__1/attempt-1"));
    assert!(attempts.contains("a__cc__continue__1/attempt-2"));
    assert!(attempts.contains("answer exit 1") && attempts.contains("answer exit 0"));
    assert!(attempts.contains("<a href=\"attempts/1/trajectory.json\">trajectory</a>"));
    assert!(attempts.contains("attempt 1 claimed task_failed"));
    assert!(attempts.contains("task_failed: not yet &lt;/script&gt;&lt;script&gt;"));
    assert!(
        !page.contains("<script") && !page.contains("<img"),
        "escaped"
    );
    assert!(page.contains("<a href=\"#attempts\">attempts</a>"));
    // A one-shot trial has no attempts section and no link to one.
    let plain =
        std::fs::read_to_string(dir.join("trials/a__cc__one-shot__1/trial.html")).expect("page");
    assert!(!plain.contains("id=\"attempts\"") && !plain.contains("#attempts"));
}

/// The facts card and the change-set table count a change set the same way, the way the
/// record does: the parent directories the engine lists only because something beneath them
/// changed are not counted (they were: "12 modified" above the table, "4" on the card). The
/// facts read as words: limits, budget and overrides without raw JSON, the reward once with
/// the file it came from.
#[test]
fn trial_pages_count_changes_as_the_record_does_and_show_facts_as_words() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("pages");
    write_job(
        &dir,
        &[t("edits", "ag", "default", 1, Kind::Pass)],
        &["ag"],
        &["default"],
        1,
    );
    let id = "edits__ag__default__1";
    let summary = write_change_set(&dir, id);
    assert_eq!(
        summary,
        json!({"added": 1, "modified": 4, "deleted": 1, "outside_workdir": 3, "file": "agent/changes.json"})
    );
    std::fs::create_dir_all(dir.join("trials").join(id).join("verifier")).expect("mkdir");
    std::fs::write(
        dir.join("trials").join(id).join("verifier/reward.txt"),
        "1\n",
    )
    .expect("reward");
    edit_record(&dir, id, |r| {
        r["changes"] = summary.clone();
        r["usage"] = usage(0.5, 1_000, 0);
        r["overrides"] = json!({"agent.timeout_sec": "600"});
        r["limits"] = json!({"cpus": 2.0, "memory_mb": 4096, "pids_limit": 1024, "network": "no-network",
            "storage_enforced": true, "storage_limit_mb": 10240, "storage_used_mb": 3,
            "files_limit": 100000, "files_used": 14, "files_counted": "watchdog"});
    });
    let out = arbiter(&["report", &s(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page =
        std::fs::read_to_string(dir.join("trials").join(id).join("trial.html")).expect("page");

    let counts = "1 added, 4 modified, 1 deleted; 3 outside the working dir";
    let facts = page_section(&page, "facts");
    let card = facts
        .split("<tr><th>changes</th><td>")
        .nth(1)
        .and_then(|rest| rest.split("</td>").next())
        .expect("the facts card counts the changes");
    let changes = page_section(&page, "changes");
    let header = changes
        .split("<span class=\"counts\">")
        .nth(1)
        .and_then(|rest| rest.split("</span>").next())
        .expect("the table's header counts the changes");
    assert_eq!(card, header, "one count on the card and above the table");
    assert_eq!(card, counts);
    assert!(
        changes.contains("Not counted or listed: 8 parent directories the engine lists only because something beneath changed."),
        "{changes}"
    );
    assert!(changes.contains("(working dir <code>/workspace</code>)"));
    // the table lists what it counts: 6 rows, the implied directories only as group headings
    let rows = changes.matches("<tr><td>&nbsp;&nbsp;").count();
    assert_eq!(rows, 6, "{changes}");
    assert_eq!(changes.matches("<td>modified</td>").count(), 4);
    assert!(changes.contains("<tr><td>&nbsp;&nbsp;site.py</td><td>modified</td><td>file</td><td class=\"n\">120 B</td><td>0644</td>"), "{changes}");

    assert!(!facts.contains("{\""), "no raw JSON in the facts: {facts}");
    assert!(!facts.contains("reward · reward"));
    for fact in [
        "<tr><th>reward</th><td>1 · from verifier/reward.txt</td></tr>",
        "<tr><th>limits</th><td>cpus 2 · memory 4 GiB · pids 1024 · network none · disk 10 GiB (enforced, 3 MiB used) · files 100000 (14 used, counted by the watchdog)</td></tr>",
        "<tr><th>budget</th><td>max cost $2.00 · not exhausted</td></tr>",
        "<tr><th>overrides</th><td>agent.timeout_sec = 600</td></tr>",
    ] {
        assert!(facts.contains(fact), "facts show {fact}: {facts}");
    }
}
