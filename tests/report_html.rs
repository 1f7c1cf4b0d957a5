//! report.html in a real browser: headless Chromium (Debian's `chromium`) renders it without
//! console messages, without a single network request, and leaves a screenshot to look at.
//!
//! How "no request" is proven: host names resolve nowhere (`--host-resolver-rules`), and the
//! browser's net log (`--log-net-log`) is searched for URL requests a page initiated (Chromium's
//! own background fetches carry the initiator "not an origin" and are ignored). A control page
//! that does load an image and log to the console must be caught by the same checks, so a
//! silent check cannot pass for a clean page.

mod common;
mod report_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use report_support::{
    HOSTILE, arbiter, edit_record, output_dir, page_section, s, stderr, tool, usage,
    write_change_set, write_grid, write_rich_trial,
};
use serde_json::Value;
use serde_json::json;

struct Browse {
    stdout: String,
    stderr: String,
    net_log: Value,
}

fn chromium(bin: &Path, page: &Path, work: &Path, extra: &[String]) -> Browse {
    let profile = tempfile::tempdir().expect("profile dir");
    let net_log = work.join(format!(
        "{}.netlog.json",
        page.file_stem().and_then(|s| s.to_str()).unwrap_or("page")
    ));
    let out_path = net_log.with_extension("stdout");
    let err_path = net_log.with_extension("stderr");
    let mut cmd = Command::new(bin);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-extensions",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(format!("--log-net-log={}", net_log.display()))
    .args(extra)
    .arg(format!("file://{}", page.display()))
    .stdin(Stdio::null())
    // files, not pipes: a full pipe (a big --dump-dom) would block the browser
    .stdout(std::fs::File::create(&out_path).expect("stdout file"))
    .stderr(std::fs::File::create(&err_path).expect("stderr file"));
    let mut child = cmd.spawn().expect("start chromium");
    // A safety net against a hung browser, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(status.success(), "chromium failed: {stderr}");
    let log = std::fs::read(&net_log).expect("net log written");
    Browse {
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr,
        net_log: serde_json::from_slice(&log).expect("net log is JSON"),
    }
}

/// URLs of requests a page started (not the browser's own background fetches).
fn page_requests(net_log: &Value) -> Vec<String> {
    let start_job = net_log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
        .as_u64()
        .expect("URL_REQUEST_START_JOB constant");
    net_log["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["type"].as_u64() == Some(start_job))
        .filter(|e| e["params"]["initiator"].as_str() != Some("not an origin"))
        .filter_map(|e| e["params"]["url"].as_str().map(str::to_string))
        .filter(|u| !u.starts_with("file:") && !u.starts_with("data:"))
        .collect()
}

fn console_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

#[test]
fn report_html_renders_in_headless_chromium_without_network_or_console_errors() {
    let Some(bin) = tool("chromium", "chromium") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let out_dir = output_dir("html");

    // The control: a page that fetches and logs must be caught.
    let probe = tmp.path().join("probe.html");
    std::fs::write(
        &probe,
        "<!DOCTYPE html><html><body><img src=\"http://arbiter-probe.invalid/x.png\"><script>console.error(\"arbiter-console-probe\")</script></body></html>",
    )
    .expect("probe");
    let control = chromium(&bin, &probe, tmp.path(), &["--dump-dom".to_string()]);
    assert!(
        page_requests(&control.net_log).contains(&"http://arbiter-probe.invalid/x.png".to_string()),
        "the net-log check must see the control page's request"
    );
    assert!(
        console_lines(&control.stderr)
            .iter()
            .any(|l| l.contains("arbiter-console-probe")),
        "the console check must see the control page's message: {}",
        control.stderr
    );

    // A job big enough to need scrolling (130 tasks × 12 arms), with hostile names: an
    // unescaped one would inject an image (a request) and break the page.
    let dir = tmp.path().join("big-job");
    let hostile: &'static str = "x\"><img src=http://evil.invalid/a.png>";
    let arms: Vec<(&'static str, &'static str, f64)> = vec![
        ("claude-sonnet", "default", 0.1),
        ("claude-sonnet", "no-gate", 0.0),
        ("claude-sonnet", "strict-completion", 0.2),
        ("claude-sonnet", hostile, -0.2),
        ("gpt", "default", -0.05),
        ("gpt", "no-gate", 0.05),
        ("gpt", "strict-completion", -0.1),
        ("gpt", hostile, 0.0),
        ("aworld-with-a-rather-long-agent-name", "default", 0.25),
        ("aworld-with-a-rather-long-agent-name", "no-gate", -0.3),
        (
            "aworld-with-a-rather-long-agent-name",
            "strict-completion",
            0.3,
        ),
        ("aworld-with-a-rather-long-agent-name", hostile, 0.15),
    ];
    let rows = report_support::grid(130, &arms, 3, 5);
    write_grid(
        &dir,
        &rows,
        &[
            "claude-sonnet",
            "gpt",
            "aworld-with-a-rather-long-agent-name",
        ],
        &["default", "no-gate", "strict-completion", hostile],
        3,
    );
    let out = arbiter(&["report", &s(&dir), "--format", "html"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let html_path: PathBuf = dir.join("report.html");
    let html = std::fs::read_to_string(&html_path).expect("report.html");
    assert!(!html.contains("<img"), "user text is escaped");
    assert!(!html.contains("<script"), "no script at all");
    assert!(
        !html.contains("http://") || !html.contains("src=\"http"),
        "nothing external"
    );

    let shot = out_dir.join("report.png");
    let _ = std::fs::remove_file(&shot);
    let page = chromium(
        &bin,
        &html_path,
        tmp.path(),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1400,2600".to_string(),
            "--hide-scrollbars".to_string(),
        ],
    );
    assert_eq!(
        page_requests(&page.net_log),
        Vec::<String>::new(),
        "report.html made no request"
    );
    assert_eq!(
        console_lines(&page.stderr),
        Vec::<&str>::new(),
        "no console message"
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    let dom = chromium(&bin, &html_path, tmp.path(), &["--dump-dom".to_string()]);
    assert_eq!(page_requests(&dom.net_log), Vec::<String>::new());
    assert!(
        dom.stdout.contains("Pass rate per arm"),
        "rendered DOM has the charts"
    );
    assert!(dom.stdout.contains("<svg"), "inline SVG");
    assert_eq!(console_lines(&dom.stderr), Vec::<&str>::new());
    let _ = std::fs::copy(&html_path, out_dir.join("report.html"));
    println!("screenshot: {}", shot.display());
    println!("report:     {}", out_dir.join("report.html").display());
}

/// What a measuring script (run in a copy of a page, with the CSP that forbids scripts taken
/// out) finds: boxes that scroll sideways, SVG text outside its SVG, forest plots whose zero
/// is off the header's, and the heat map's share of its card.
const MEASURE: &str = r#"<script>(function(){
const out=[];
document.querySelectorAll('.scroll').forEach(el=>{if(el.scrollWidth>el.clientWidth+1){const s=el.closest('section');const h=s&&s.querySelector('h2');out.push('hscroll: '+(h?h.textContent:'?')+' '+el.scrollWidth+'>'+el.clientWidth);}});
document.querySelectorAll('svg').forEach(svg=>{const r=svg.getBoundingClientRect();svg.querySelectorAll('text').forEach(t=>{const b=t.getBoundingClientRect();if(b.width>0&&(b.right>r.right+0.5||b.left<r.left-0.5))out.push('clipped: '+t.textContent+' '+b.left.toFixed(1)+'..'+b.right.toFixed(1)+' in '+r.left.toFixed(1)+'..'+r.right.toFixed(1));});});
const head=document.querySelector('svg.forest-axis line[data-zero]');
if(head){const hx=head.getBoundingClientRect().left;document.querySelectorAll('table.compare tbody line[data-zero]').forEach(l=>{const d=Math.abs(l.getBoundingClientRect().left-hx);if(d>1)out.push('forest-zero-off: '+d.toFixed(1));});}
const heat=document.querySelector('table.heat');if(heat){const card=heat.closest('section');const cs=getComputedStyle(card);out.push('heat-share: '+(heat.getBoundingClientRect().width/(card.clientWidth-parseFloat(cs.paddingLeft)-parseFloat(cs.paddingRight))).toFixed(3));}
const pre=document.createElement('pre');pre.id='geometry';pre.textContent=out.join('\n');document.body.appendChild(pre);
})();</script>"#;

/// A copy of `page` that runs `script` (its CSP removed), in the same directory.
fn instrumented(page: &Path, script: &str) -> PathBuf {
    let html = std::fs::read_to_string(page).expect("page");
    let start = html
        .find("<meta http-equiv=\"Content-Security-Policy\"")
        .expect("CSP meta");
    let end = start + html[start..].find('>').expect("end of meta") + 1;
    let mut copy = html.clone();
    copy.replace_range(start..end, "");
    let copy = copy.replace("</body>", &format!("{script}</body>"));
    let path = page.with_file_name("measured.html");
    std::fs::write(&path, copy).expect("write copy");
    path
}

/// The text of the `<pre id="{id}">` a measuring script appended (not the script's source).
fn appended<'a>(dom: &'a str, id: &str) -> &'a str {
    let tag = format!("<pre id=\"{id}\">");
    let start = dom.find(&tag).expect("the measuring script ran") + tag.len();
    let end = dom[start..].find("</pre>").expect("end") + start;
    &dom[start..end]
}

fn geometry(dom: &str) -> Vec<String> {
    appended(dom, "geometry")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// The job of issue 15: 6 arms × 120 tasks × 5 attempts, agent times up to ~180 s (p90 ≥
/// 100 s, n ≈ 580 per arm).
fn six_arm_job(dir: &Path) {
    let arms: Vec<(&'static str, &'static str, f64)> = vec![
        ("claude-sonnet", "default", 0.1),
        ("claude-sonnet", "no-gate", 0.0),
        ("claude-sonnet", "strict-completion", 0.25),
        ("gpt", "default", -0.05),
        ("gpt", "no-gate", 0.05),
        ("gpt", "strict-completion", -0.2),
    ];
    let mut rows = report_support::grid(120, &arms, 5, 11);
    for r in &mut rows {
        r.5 *= 4.0;
    }
    write_grid(
        dir,
        &rows,
        &["claude-sonnet", "gpt"],
        &["default", "no-gate", "strict-completion"],
        5,
    );
}

#[test]
fn report_html_fits_1400_and_1920_px_without_sideways_scrolls_or_clipped_labels() {
    let Some(bin) = tool("chromium", "chromium") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let out_dir = output_dir("html-geometry");
    let dir = tmp.path().join("six-arms");
    six_arm_job(&dir);
    let out = arbiter(&["report", &s(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = dir.join("report.html");
    let html = std::fs::read_to_string(&page).expect("html");
    assert!(html.contains("n=5"), "the box plot has its n= labels");
    let measured = instrumented(&page, MEASURE);
    for width in [1400, 1920] {
        let dom = chromium(
            &bin,
            &measured,
            tmp.path(),
            &[
                "--dump-dom".to_string(),
                format!("--window-size={width},3000"),
            ],
        );
        let found = geometry(&dom.stdout);
        let problems: Vec<&String> = found
            .iter()
            .filter(|l| !l.starts_with("heat-share"))
            .collect();
        assert!(problems.is_empty(), "at {width} px: {problems:#?}");
        let share: f64 = found
            .iter()
            .find_map(|l| l.strip_prefix("heat-share: "))
            .and_then(|v| v.parse().ok())
            .expect("heat-map share measured");
        assert!(
            share > 0.9,
            "at {width} px the heat map fills its card: {share}"
        );
    }
    for (width, name) in [(1400, "report-1400.png"), (1920, "report-1920.png")] {
        let shot = out_dir.join(name);
        let _ = std::fs::remove_file(&shot);
        let page_run = chromium(
            &bin,
            &page,
            tmp.path(),
            &[
                format!("--screenshot={}", shot.display()),
                format!("--window-size={width},4200"),
                "--hide-scrollbars".to_string(),
            ],
        );
        assert_eq!(page_requests(&page_run.net_log), Vec::<String>::new());
        assert_eq!(console_lines(&page_run.stderr), Vec::<&str>::new());
        assert!(shot.is_file(), "screenshot written");
        println!("screenshot: {}", shot.display());
    }
    let _ = std::fs::copy(&page, out_dir.join("report.html"));
}

/// Time from navigation start to the end of parsing plus a forced layout, in ms.
const TIMING: &str = r#"<script>(function(){document.body.offsetHeight;const t=performance.now();const pre=document.createElement('pre');pre.id='timing';pre.textContent=t.toFixed(1);document.body.appendChild(pre);})();</script>"#;

#[test]
fn trial_pages_render_offline_without_console_messages_and_fast_with_a_2_mb_trajectory() {
    let Some(bin) = tool("chromium", "chromium") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let out_dir = output_dir("trial-page");
    let dir = tmp.path().join("trial-pages");
    use report_support::Kind::*;
    let t = |task, attempt, kind| report_support::T {
        task,
        agent: "claude-code",
        variant: "default",
        attempt,
        kind,
        agent_seconds: 42.0,
    };
    report_support::write_job(
        &dir,
        &[
            t("hello", 1, Pass),
            t("hello", 2, Fail),
            t("build", 1, Pass),
        ],
        &["claude-code"],
        &["default"],
        2,
    );
    // a tampered trial with a 2 MB trajectory, hostile text everywhere
    let tampered = "hello__claude-code__default__2";
    write_rich_trial(&dir, tampered, 2 << 20);
    edit_record(&dir, tampered, |r| {
        r["claim"]["record"]["final_answer"] = json!(format!("All done {HOSTILE}"));
        r["usage"] = usage(0.2004, 51_234, 2);
        r["changes"] = json!({"added": 2, "modified": 1, "deleted": 1, "outside_workdir": 2, "file": "agent/changes.json"});
        r["integrity"] = json!({"status": "suspect", "findings": [
            {"path": "/usr/bin/python3", "class": "toolchain_modified", "why": "a pre-existing interpreter was replaced"},
            {"path": "/usr/local/bin/pytest", "class": "shadows_command", "why": "shadows /usr/bin/pytest earlier on PATH"}]});
        r["audit"]["verdict"] = json!("tampered");
    });
    // a clean trial with the newer files (a real agent's shape), and one of today's records
    let clean = "build__claude-code__default__1";
    write_rich_trial(&dir, clean, 0);
    edit_record(&dir, clean, |r| {
        r["usage"] = usage(0.05, 9_000, 0);
        r["integrity"] = json!({"status": "clean", "findings": []});
    });
    let out = arbiter(&["report", &s(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for id in [tampered, clean, "hello__claude-code__default__1"] {
        let page = dir.join("trials").join(id).join("trial.html");
        let shot = out_dir.join(format!("{id}.png"));
        let _ = std::fs::remove_file(&shot);
        let run = chromium(
            &bin,
            &page,
            tmp.path(),
            &[
                format!("--screenshot={}", shot.display()),
                "--window-size=1400,2400".to_string(),
                "--hide-scrollbars".to_string(),
            ],
        );
        assert_eq!(
            page_requests(&run.net_log),
            Vec::<String>::new(),
            "{id}: no request"
        );
        assert_eq!(
            console_lines(&run.stderr),
            Vec::<&str>::new(),
            "{id}: no console message"
        );
        assert!(shot.is_file());
        let _ = std::fs::copy(&page, out_dir.join(format!("{id}.html")));
        println!("screenshot: {}", shot.display());
    }
    let render_ms = |id: &str| -> (u64, f64) {
        let page = dir.join("trials").join(id).join("trial.html");
        let size = std::fs::metadata(&page).expect("page").len();
        let measured = instrumented(&page, TIMING);
        let dom = chromium(&bin, &measured, tmp.path(), &["--dump-dom".to_string()]);
        let ms = appended(&dom.stdout, "timing")
            .trim()
            .parse()
            .expect("timing measured");
        (size, ms)
    };
    let (small_size, small_ms) = render_ms("hello__claude-code__default__1");
    let (size, ms) = render_ms(tampered);
    println!(
        "trial page with a 2 MB trajectory: {size} bytes, parsed and laid out {ms:.0} ms after navigation start (a {small_size}-byte page: {small_ms:.0} ms)"
    );
    // The time is a figure to read, not a pass condition (these machines are noisy): what
    // must hold is that Chromium laid the page out at all.
    assert!(ms.is_finite() && ms > 0.0, "layout time measured: {ms}");
}

/// `arbiter run -c <dir>/job.yaml --job-dir <dir>/job --quiet`: the job dir.
fn run_real_job(dir: &Path, yaml: &str) -> PathBuf {
    std::fs::write(dir.join("job.yaml"), yaml).expect("job.yaml");
    let job = dir.join("job");
    let out = arbiter(&[
        "run",
        "--quiet",
        "-c",
        &s(&dir.join("job.yaml")),
        "--job-dir",
        &s(&job),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    job
}

fn record_of(job: &Path, id: &str) -> Value {
    let bytes = std::fs::read(job.join("trials").join(id).join("result.json")).expect("record");
    serde_json::from_slice(&bytes).expect("json")
}

/// Real trials, not synthetic ones: Claude Code (the preset, from the host agent cache)
/// solving a task through `arbiter run` and the gateway's scripted provider, and a command
/// agent that shadows python3 (integrity `suspect`, audit `tampered`). Their report.html and
/// trial pages render in headless Chromium with no request and no console message; the
/// screenshots are left in target/tmp/report-tests/real-trials/.
#[test]
fn pages_of_a_real_claude_code_trial_and_a_tampered_trial_render_offline_in_chromium() {
    let Some(bin) = tool("chromium", "chromium") else {
        return;
    };
    if !common::docker_available() {
        return;
    }
    if !common::presets::claude_code_cached() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let out_dir = output_dir("real-trials");
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));

    let cc_dir = tmp.path().join("cc");
    std::fs::create_dir_all(&cc_dir).expect("mkdir");
    let task = repo.join("tasks/exact-deliverable");
    let solve = std::fs::read_to_string(task.join("solution/solve.sh")).expect("solve.sh");
    let script = json!({"turns": [
        {"run": solve, "usage": {"input_tokens": 100, "output_tokens": 10}},
        {"say": "Done: /app/out/report.txt is written.", "usage": {"input_tokens": 200, "output_tokens": 20}}
    ]});
    std::fs::write(cc_dir.join("script.json"), script.to_string()).expect("script");
    let cc_job = run_real_job(
        &cc_dir,
        &format!(
            "name: real-cc\ntasks: [{}]\nmodels:\n  - {{name: fake, api: scripted, script: script.json}}\nagents:\n  - name: cc\n    kind: claude-code\n    model: {{provider: fake, name: claude-sonnet-4-5}}\n",
            task.display()
        ),
    );
    let cc = "exact-deliverable__cc__default__1";
    assert_eq!(record_of(&cc_job, cc)["verifier"]["status"], "passed");

    let tamper_dir = tmp.path().join("tamper");
    std::fs::create_dir_all(&tamper_dir).expect("mkdir");
    let shadow = "printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/python3 && chmod +x /usr/local/bin/python3";
    let tamper_job = run_real_job(
        &tamper_dir,
        &format!(
            "name: real-tamper\ntasks: [{}]\nagents:\n  - name: shadow-python\n    kind: command\n    run: [bash, -c, {}]\n",
            repo.join("tests/fixtures/integrity/pycheck").display(),
            serde_json::to_string(shadow).expect("json")
        ),
    );
    let tampered = "pycheck__shadow-python__default__1";
    assert_eq!(
        record_of(&tamper_job, tampered)["audit"]["verdict"],
        "tampered"
    );

    for job in [&cc_job, &tamper_job] {
        let out = arbiter(&["report", &s(job)]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let pages = [
        ("cc-report", cc_job.join("report.html")),
        (
            "cc-trial",
            cc_job.join("trials").join(cc).join("trial.html"),
        ),
        ("tampered-report", tamper_job.join("report.html")),
        (
            "tampered-trial",
            tamper_job.join("trials").join(tampered).join("trial.html"),
        ),
    ];
    for (name, page) in &pages {
        let shot = out_dir.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&shot);
        let run = chromium(
            &bin,
            page,
            tmp.path(),
            &[
                format!("--screenshot={}", shot.display()),
                "--window-size=1400,2400".to_string(),
                "--hide-scrollbars".to_string(),
            ],
        );
        assert_eq!(
            page_requests(&run.net_log),
            Vec::<String>::new(),
            "{name}: no request"
        );
        assert_eq!(
            console_lines(&run.stderr),
            Vec::<&str>::new(),
            "{name}: no console message"
        );
        let png = std::fs::read(&shot).expect("screenshot written");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}: a PNG");
        let _ = std::fs::copy(page, out_dir.join(format!("{name}.html")));
        println!("screenshot: {}", shot.display());
    }
    // what a reader finds on the rendered pages
    let dom = |page: &Path| chromium(&bin, page, tmp.path(), &["--dump-dom".to_string()]).stdout;
    let cc_dom = dom(&pages[1].1);
    for needle in [
        "certified",
        "Model calls",
        "claude-sonnet-4-5",
        "agent/stdout.log",
        "passed",
    ] {
        assert!(
            cc_dom.contains(needle),
            "the Claude Code page shows {needle:?}"
        );
    }
    // Its trajectory: the ATIF export of the gateway's ledger (what arbiter measured) comes
    // before Claude Code's own stream-json events; its tool calls are named.
    assert!(
        cc_dom.contains("From <a href=\"agent/trajectory.atif.json\">"),
        "the Claude Code page has its trajectory"
    );
    assert!(
        !cc_dom.contains("No trajectory in this trial"),
        "the Claude Code page has its trajectory"
    );
    assert!(
        cc_dom.contains("→ <b>Bash</b>"),
        "the agent's tool call is shown"
    );
    let t_dom = dom(&pages[3].1);
    for needle in ["tampered", "suspect", "/usr/local/bin/python3"] {
        assert!(t_dom.contains(needle), "the tampered page shows {needle:?}");
    }
    assert!(
        dom(&pages[0].1).contains(&format!("trials/{cc}/trial.html")),
        "report.html links the page"
    );
}

/// The trial page as Chromium lays it out: the facts card's change counts and the change-set
/// table's read the same (the record's counts; implied parent directories not counted), and
/// the facts carry no raw JSON. Leaves a screenshot to look at.
#[test]
fn a_trial_page_shows_one_change_count_and_no_raw_json_in_chromium() {
    let Some(bin) = tool("chromium", "chromium") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let out_dir = output_dir("trial-page-counts");
    let dir = tmp.path().join("job");
    use report_support::Kind::*;
    report_support::write_job(
        &dir,
        &[report_support::T {
            task: "edits",
            agent: "ag",
            variant: "default",
            attempt: 1,
            kind: Pass,
            agent_seconds: 12.0,
        }],
        &["ag"],
        &["default"],
        1,
    );
    let id = "edits__ag__default__1";
    let summary = write_change_set(&dir, id);
    edit_record(&dir, id, |r| {
        r["changes"] = summary.clone();
        r["usage"] = usage(0.5, 1_000, 0);
    });
    let out = arbiter(&["report", &s(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = dir.join("trials").join(id).join("trial.html");
    let shot = out_dir.join(format!("{id}.png"));
    let _ = std::fs::remove_file(&shot);
    let run = chromium(
        &bin,
        &page,
        tmp.path(),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1400,1600".to_string(),
            "--hide-scrollbars".to_string(),
        ],
    );
    assert_eq!(page_requests(&run.net_log), Vec::<String>::new());
    assert_eq!(console_lines(&run.stderr), Vec::<&str>::new());
    assert!(shot.is_file());
    println!("screenshot: {}", shot.display());

    let dom = chromium(&bin, &page, tmp.path(), &["--dump-dom".to_string()]).stdout;
    let facts = page_section(&dom, "facts");
    let card = facts
        .split("<th>changes</th><td>")
        .nth(1)
        .and_then(|rest| rest.split("</td>").next())
        .expect("the card's counts");
    let header = page_section(&dom, "changes")
        .split("<span class=\"counts\">")
        .nth(1)
        .and_then(|rest| rest.split("</span>").next())
        .expect("the table's counts");
    assert_eq!(card, header);
    assert_eq!(
        card,
        "1 added, 4 modified, 1 deleted; 3 outside the working dir"
    );
    assert!(!facts.contains("{\""), "no raw JSON in the facts: {facts}");
    assert!(!facts.contains("reward · reward"));
}
