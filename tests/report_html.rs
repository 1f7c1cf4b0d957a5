//! report.html in a real browser: headless Chromium (Debian's `chromium`) renders it without
//! console messages, without a single network request, and leaves a screenshot to look at.
//!
//! How "no request" is proven: host names resolve nowhere (`--host-resolver-rules`), and the
//! browser's net log (`--log-net-log`) is searched for URL requests a page initiated (Chromium's
//! own background fetches carry the initiator "not an origin" and are ignored). A control page
//! that does load an image and log to the console must be caught by the same checks, so a
//! silent check cannot pass for a clean page.

mod report_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use report_support::{arbiter, output_dir, s, stderr, tool, write_grid};
use serde_json::Value;

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
