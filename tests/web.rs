//! The web page of `arbiter serve` in a real browser: headless Chromium driven over its
//! DevTools protocol (`headless_chrome`), against the real binary on a real engine. The jobs
//! list shows a running job and updates without a reload when a trial finishes; its cancel
//! button (with the token typed into the page) cancels the job; the history page plots one
//! point per indexed job from the store given with `--db`, with the tasks that flipped; the
//! report and trial pages are made from the job dir; the compare page shows the paired
//! comparison of two jobs.
//!
//! Waits are on DOM conditions with generous deadlines; nothing asserts how long anything took.

mod common;
mod report_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use headless_chrome::{Browser, LaunchOptions, Tab};
use serde_json::{Value, json};

use common::serve::*;
use common::*;

/// Headless Chromium, or `None` (skipped) when it is missing outside CI.
fn browser() -> Option<Browser> {
    let bin = report_support::tool("chromium", "chromium")?;
    let options = LaunchOptions::default_builder()
        .path(Some(bin))
        .headless(true)
        // Tests run as root, where Chromium's sandbox cannot start.
        .sandbox(false)
        .window_size(Some((1400, 1000)))
        .idle_browser_timeout(Duration::from_secs(900))
        .build()
        .expect("launch options");
    Some(Browser::new(options).expect("start chromium"))
}

/// Evaluate `js` in the page; its value as JSON (`Null` when it has none).
fn eval(tab: &Tab, js: &str) -> Value {
    tab.evaluate(js, false)
        .expect("evaluate")
        .value
        .unwrap_or(Value::Null)
}

/// Wait until `js` evaluates to something truthy in the page; give it.
fn wait_for(tab: &Tab, what: &str, js: &str) -> Value {
    eprintln!("web: waiting for {what}");
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let v = eval(tab, js);
        let truthy = match &v {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::String(s) => !s.is_empty(),
            Value::Number(n) => n.as_f64() != Some(0.0),
            _ => true,
        };
        if truthy {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: never true in the page; body: {}",
            eval(tab, "document.body.innerText")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn open(tab: &Arc<Tab>, url: &str) {
    eprintln!("web: opening {url}");
    tab.navigate_to(url).expect("navigate");
    tab.wait_until_navigated().expect("navigated");
}

/// A picture of the page for a person to look at (target/tmp/report-tests/web/NAME.png); a
/// failure to take it fails nothing.
fn screenshot(tab: &Tab, name: &str) {
    use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
    if let Ok(png) = tab.capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true) {
        let _ = std::fs::write(
            report_support::output_dir("web").join(format!("{name}.png")),
            png,
        );
    }
}

fn job_id(text: &str) -> String {
    serde_json::from_str::<Value>(text).expect("json")["id"]
        .as_str()
        .expect("id")
        .to_string()
}

/// Two agents: `fast`'s trial ends after a few seconds, `slow`'s runs until stopped.
const FAST_AND_SLOW: &str = "tasks: [tasks/quick]\nconcurrency: 2\nagents:\n  - name: fast\n    kind: command\n    run: [sh, -c, \"sleep 8\"]\n  - name: slow\n    kind: command\n    run: [sh, -c, \"sleep 300\"]\n";

#[test]
fn the_jobs_list_updates_live_and_its_cancel_button_cancels() {
    if !docker_available() {
        return;
    }
    let Some(browser) = browser() else {
        return;
    };
    let (_tmp, root, db) = dirs();
    copy_dir(&fixture("quick"), &root.join("tasks/quick"));
    let server = start(&root, &db, &["--token", "web-tok"]);
    let a = &server.addr;
    let tab = browser.new_tab().expect("tab");
    open(&tab, &format!("http://{a}/"));
    wait_for(
        &tab,
        "the empty list",
        "!document.getElementById('empty').hidden",
    );
    // Set in this page load; a reload would lose it.
    eval(&tab, "window.loadedOnce = 'yes'");

    let (status, text) = post(
        a,
        "/api/jobs",
        Some("web-tok"),
        &json!({ "config": FAST_AND_SLOW, "job_dir": "jobs/live" }),
    );
    assert_eq!(status, 201, "{text}");
    let id = job_id(&text);
    let row = format!("document.querySelector('tr[data-job=\"{id}\"]')");

    // The row appears, running, with no finished trial yet.
    let first = wait_for(
        &tab,
        "the job's row, running",
        &format!(
            "{row} && {row}.dataset.status === 'running' && {row}.querySelector('td.progress').innerText.includes('/ 2') && {row}.querySelector('td.progress').innerText"
        ),
    );
    let first = first.as_str().expect("progress text").to_string();
    assert!(first.contains("0 / 2"), "{first:?}");
    assert_eq!(
        eval(&tab, &format!("{row}.querySelector('td.status').innerText")),
        "running"
    );
    // The fast trial finishes: the row says so without a reload, the job still running.
    let later = wait_for(
        &tab,
        "the row after a trial finished",
        &format!(
            "{row} && {row}.querySelector('td.progress').innerText.includes('1 / 2') && {row}.dataset.status === 'running' && {row}.querySelector('td.progress').innerText"
        ),
    );
    assert!(later.as_str().expect("text").contains("1 / 2"), "{later}");
    assert_eq!(
        eval(&tab, "window.loadedOnce"),
        "yes",
        "the page was reloaded"
    );
    screenshot(&tab, "jobs");
    assert_eq!(
        eval(&tab, &format!("{row}.querySelector('td.rate').innerText")),
        "0.0%",
        "sleep does not solve the task: 0 of 1 scored"
    );

    // Cancel without the token: refused, said in the page, the job goes on.
    let cancel = format!("tr[data-job=\"{id}\"] td.actions-cell button");
    tab.wait_for_element(&cancel)
        .expect("cancel button")
        .click()
        .expect("click");
    wait_for(
        &tab,
        "the refusal",
        "document.getElementById('message').innerText.includes('token')",
    );
    assert_eq!(job_of(a, &id)["status"], "running");

    // The token typed into the page (kept in sessionStorage, no cookie), then cancel.
    tab.wait_for_element("#token")
        .expect("token field")
        .click()
        .expect("focus");
    tab.type_str("web-tok").expect("type");
    tab.press_key("Enter").expect("enter");
    wait_for(
        &tab,
        "the token kept",
        "sessionStorage.getItem('arbiter-serve-token') === 'web-tok'",
    );
    assert_eq!(eval(&tab, "document.cookie"), "");
    tab.wait_for_element(&cancel)
        .expect("cancel button")
        .click()
        .expect("click");
    wait_for(
        &tab,
        "the row, cancelled",
        &format!(
            "{row} && {row}.querySelector('td.status').innerText === 'interrupted (cancelled)'"
        ),
    );
    let job = job_of(a, &id);
    assert_eq!(job["status"], "interrupted", "{job}");
    assert_eq!(job["cancelled"], true, "{job}");
    assert_eq!(job["counts"]["trials"], 1, "{job}");
    assert_eq!(
        eval(&tab, "window.loadedOnce"),
        "yes",
        "the page was reloaded"
    );
    assert_no_leftovers(&root.join("jobs/live"));
}

/// `arbiter run -c CONFIG --job-dir DIR`, the store off (the jobs are indexed afterwards).
fn run_job_here(config: &Path, job_dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["run", "--quiet", "-c"])
        .arg(config)
        .arg("--job-dir")
        .arg(job_dir)
        .env("ARBITER_DB", "off")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("arbiter run");
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 1),
        "{}",
        stderr(&out)
    );
}

/// A job named `nightly` of agent `bot` on tasks a and b: solving both, or neither.
fn nightly(root: &Path, n: usize, solves: bool) -> PathBuf {
    let run = if solves {
        "[sh, -c, \"echo ok > /app/out\"]"
    } else {
        "[\"true\"]"
    };
    let config = root.join(format!("nightly-{n}.yaml"));
    std::fs::write(
        &config,
        format!(
            "name: nightly\ntasks: [tasks/a, tasks/b]\nagents:\n  - name: bot\n    kind: command\n    run: {run}\n"
        ),
    )
    .expect("config");
    let job_dir = root.join(format!("jobs/nightly-{n}"));
    run_job_here(&config, &job_dir);
    job_dir
}

#[test]
fn the_history_plot_renders_from_the_store_and_the_report_links_trial_pages() {
    if !docker_available() {
        return;
    }
    let Some(browser) = browser() else {
        return;
    };
    let (tmp, root, db) = dirs();
    copy_dir(&fixture("quick"), &root.join("tasks/a"));
    copy_dir(&fixture("quick"), &root.join("tasks/b"));
    let dirs: Vec<PathBuf> = [true, false, true]
        .iter()
        .enumerate()
        .map(|(n, solves)| nightly(&root, n, *solves))
        .collect();
    let ids: Vec<String> = dirs
        .iter()
        .map(|d| {
            std::fs::read_to_string(d.join("job-id"))
                .expect("job-id")
                .trim()
                .to_string()
        })
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["index"])
        .arg(root.join("jobs"))
        .arg("--db")
        .arg(&db)
        .env("ARBITER_DB", "off")
        .output()
        .expect("arbiter index");
    assert!(out.status.success(), "{}", stderr(&out));

    let server = start(&root, &db, &[]);
    let a = &server.addr;
    let tab = browser.new_tab().expect("tab");
    open(&tab, &format!("http://{a}/history?name=nightly&agent=bot"));
    let shown = wait_for(
        &tab,
        "three points",
        "(() => { const p = [...document.querySelectorAll('svg.history circle.point')]; return p.length === 3 && JSON.stringify(p.map(c => c.dataset.job + '@' + c.getAttribute('cy'))); })()",
    );
    let shown: Vec<String> =
        serde_json::from_str(shown.as_str().expect("a JSON string")).expect("list");
    let jobs: Vec<&str> = shown
        .iter()
        .map(|s| s.split('@').next().expect("job"))
        .collect();
    assert_eq!(jobs, ids, "one point per indexed job, oldest first");
    let heights: Vec<f64> = shown
        .iter()
        .map(|s| s.split('@').nth(1).expect("cy").parse().expect("number"))
        .collect();
    // 100%, 0%, 100%: the middle point is lower on the page (larger y) than the others.
    assert!(
        heights[1] > heights[0] && heights[0] == heights[2],
        "{heights:?}"
    );
    let flips = eval(&tab, "document.querySelector('table.flips').innerText");
    let flips = flips.as_str().expect("flips table");
    for task in ["a", "b"] {
        assert!(
            flips.lines().any(|l| l.contains(&ids[0])
                && l.contains(&ids[1])
                && l.contains("pass → fail")
                && l.split('\t').any(|c| c.trim() == task)),
            "{task} flipped to fail: {flips}"
        );
    }
    assert_eq!(flips.matches("fail → pass").count(), 2, "{flips}");
    screenshot(&tab, "history");

    // The paired comparison of the first two jobs, as `arbiter compare A B` computes it.
    let (status, set) = get(a, &format!("/api/compare?a={}&b={}", ids[0], ids[1]));
    assert_eq!(status, 200, "{set}");
    assert_eq!(
        set["results"][0]["flipped_to_fail"],
        json!(["a", "b"]),
        "{set}"
    );
    open(
        &tab,
        &format!("http://{a}/compare?a={}&b={}", ids[0], ids[1]),
    );
    let row = wait_for(
        &tab,
        "the comparison row",
        "(() => { const r = document.querySelector('table.compare tbody tr'); return r && JSON.stringify([...r.cells].map(c => c.innerText.trim())); })()",
    );
    let cells: Vec<String> =
        serde_json::from_str(row.as_str().expect("a JSON string")).expect("cells");
    // paired tasks, pass→fail, fail→pass
    assert_eq!(cells[6..], ["2", "2", "0"], "{cells:?}");
    screenshot(&tab, "compare");
    assert_eq!(
        eval(
            &tab,
            "document.querySelectorAll('select[name=a] option[selected]').length"
        ),
        1
    );

    // The job's report, made from its dir, links each trial to its page.
    let second = &ids[1];
    open(&tab, &format!("http://{a}/jobs/{second}/report.html"));
    wait_for(
        &tab,
        "the report",
        "document.body.innerText.includes('Pass rate per arm')",
    );
    let link = wait_for(
        &tab,
        "a trial link",
        "(() => { const l = document.querySelector('a[href*=\"trial.html\"]'); return l && l.getAttribute('href'); })()",
    );
    assert!(
        link.as_str().expect("href").starts_with("trials/"),
        "{link}"
    );
    // The link, relative to the report, is a trial page made from the job dir.
    let href = link.as_str().expect("href");
    open(&tab, &format!("http://{a}/jobs/{second}/{href}"));
    wait_for(
        &tab,
        "the trial page",
        "location.pathname.endsWith('/trial.html') && document.body.innerText.includes('bot')",
    );
    // The job page around it shows the job and frames the report.
    open(&tab, &format!("http://{a}/jobs/{second}"));
    wait_for(
        &tab,
        "the job page",
        &format!(
            "document.getElementById('title').innerText === '{second}' && document.getElementById('status').innerText === 'finished' && document.querySelectorAll('#arms tbody tr').length === 1"
        ),
    );
    screenshot(&tab, "job");
    let src = eval(
        &tab,
        "document.getElementById('report').getAttribute('src')",
    );
    assert!(
        src.as_str()
            .is_some_and(|s| s.starts_with(&format!("/jobs/{second}/report.html"))),
        "{src}"
    );
    drop(tmp);
}
