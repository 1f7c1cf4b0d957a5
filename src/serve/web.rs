//! The web page of `arbiter serve` (docs/serve.md "The web page"): HTML, JS and CSS built into
//! the binary, nothing fetched from anywhere but this server, no build step.
//!
//! - `/` (jobs list) and `/jobs/{id}` (one job) are static shells whose script reads the JSON
//!   API and the job's event stream, and posts cancel / resume / retry-infra with the token
//!   the person typed (kept in `sessionStorage`, sent as `Authorization: Bearer`, never a
//!   cookie);
//! - `/jobs/{id}/report.html` and `/jobs/{id}/trials/<trial>/trial.html` are the report and
//!   trial pages made now by `crate::report` (the same code as `arbiter report`); any other
//!   `/jobs/{id}/<path>` is a file of the job dir, as the file endpoint serves it. These pages
//!   hold text agents wrote, so they are served sandboxed (no script, an origin of their own);
//! - `/history` and `/compare` are made here: the store's history of an agent on one job
//!   name as an SVG plot with the tasks that flipped, and the report's paired comparison of
//!   two jobs. `/api/history` and `/api/compare` answer the same as JSON.

use std::fmt::Write as _;
use std::path::Path as FsPath;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use crate::report::markup::esc;

use super::dirs;
use super::error::ApiError;
use super::jobs::App;

type Shared = Arc<App>;

const JOBS_HTML: &str = include_str!("web/jobs.html");
const JOB_HTML: &str = include_str!("web/job.html");
const APP_JS: &str = include_str!("web/app.js");
const APP_CSS: &str = include_str!("web/app.css");

/// The shells: script and style only from this server, API calls only to it, the report in a
/// frame only from it, never framed elsewhere.
const SHELL_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
/// Pages made here (history, compare): no script at all, inline style only.
const MADE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";
/// A job dir's pages and files: no script, an opaque origin (nothing of this server's
/// storage reachable), framed only by the job page.
const SANDBOX_CSP: &str = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route(
            "/",
            get(|| async { page(SHELL_CSP, "text/html", JOBS_HTML) }),
        )
        .route("/jobs/{id}", get(job_shell))
        .route("/jobs/{id}/{*path}", get(job_path))
        .route("/history", get(history_page))
        .route("/compare", get(compare_page))
        .route(
            "/static/app.js",
            get(|| async { page(SHELL_CSP, "text/javascript", APP_JS) }),
        )
        .route(
            "/static/app.css",
            get(|| async { page(SHELL_CSP, "text/css", APP_CSS) }),
        )
        .route("/api/history", get(history_json))
        .route("/api/compare", get(compare_json))
}

fn page(csp: &'static str, kind: &'static str, body: impl Into<axum::body::Body>) -> Response {
    let mut headers = HeaderMap::new();
    let kind = match kind {
        "text/html" => "text/html; charset=utf-8",
        "text/javascript" => "text/javascript; charset=utf-8",
        "text/css" => "text/css; charset=utf-8",
        "text/plain" => "text/plain; charset=utf-8",
        other => other,
    };
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(csp),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    (headers, body.into()).into_response()
}

async fn job_shell(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    app.find(&id)?;
    Ok(page(SHELL_CSP, "text/html", JOB_HTML))
}

/// `report.html`, a trial's `trial.html` (made now), or a file of the job dir.
async fn job_path(
    State(app): State<Shared>,
    Path((id, rel)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let job = app.find(&id)?;
    tokio::task::spawn_blocking(move || {
        if rel == "report.html" {
            return Ok(page(SANDBOX_CSP, "text/html", report_html(&job.dir)));
        }
        if let Some(trial) = rel
            .strip_prefix("trials/")
            .and_then(|r| r.strip_suffix("/trial.html"))
        {
            let made = crate::report::load_job(&job.dir)
                .ok()
                .and_then(|data| crate::report::trial_page::render_trial(&data, trial));
            return match made {
                Some(html) => Ok(page(SANDBOX_CSP, "text/html", html)),
                None => Err(ApiError::not_found(format!(
                    "{trial}: no finished trial of this job"
                ))),
            };
        }
        let path = dirs::file(&job.dir, &rel)?;
        let bytes = std::fs::read(&path).map_err(ApiError::internal)?;
        let kind = if path.extension().is_some_and(|e| e == "json") {
            "application/json"
        } else if std::str::from_utf8(&bytes).is_ok() {
            "text/plain"
        } else {
            "application/octet-stream"
        };
        Ok(page(SANDBOX_CSP, kind, bytes))
    })
    .await
    .map_err(ApiError::internal)?
}

/// The job's report as `arbiter report` writes `report.html` (with the within-job
/// comparisons), from the records so far.
fn report_html(dir: &FsPath) -> String {
    match crate::report::load_job(dir) {
        Ok(job) => {
            let opts = crate::report::CompareOptions::default();
            let mut report = crate::report::build(&job, None);
            let grouping = crate::report::Grouping::default_for(&job.arms);
            report.comparisons = crate::report::compare::compare_within(&report, grouping, &opts);
            crate::report::html::html_linked(&report, &job)
        }
        Err(e) => format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>no report yet</title><style>{}</style></head><body><main><section><h2>No report yet</h2><p class=\"sub\">{}</p></section></main></body></html>",
            crate::report::html::CSS,
            esc(&e.to_string())
        ),
    }
}

/// A page made here: the report's style, a bar of links to the other pages.
fn made(title: &str, body: &str) -> Response {
    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title><style>{}{EXTRA_CSS}</style></head><body><header><nav class=\"top\"><a href=\"/\">Jobs</a><a href=\"/history\">History</a><a href=\"/compare\">Compare</a></nav><h1>{}</h1></header><main>{body}</main></body></html>",
        esc(title),
        crate::report::html::CSS,
        esc(title)
    );
    page(MADE_CSP, "text/html", html)
}

const EXTRA_CSS: &str = "nav.top{margin:0 0 8px}nav.top a{color:#cfd6e0;margin-right:16px;text-decoration:none}nav.top a:hover{color:#fff}ul.choices{columns:2;margin:0;padding-left:18px}ul.choices a.on{font-weight:600}form.pick{display:flex;gap:10px;align-items:center;flex-wrap:wrap}form.pick select{max-width:420px}p.err{color:#b73131}svg .point{fill:#3a6fd8}svg .line{fill:none;stroke:#3a6fd8;stroke-width:2}";

#[derive(Debug, Deserialize)]
struct HistoryArgs {
    agent: Option<String>,
    name: Option<String>,
}

/// Open the store read-only, or say why not.
async fn store(app: &App) -> Result<crate::results::Store, ApiError> {
    let location = app
        .store
        .as_ref()
        .ok_or_else(|| ApiError::bad("the results store is off (start serve with --db)"))?;
    crate::results::Store::open_read_only(location)
        .await
        .map_err(|e| {
            if e.is_usage() {
                ApiError::bad(e)
            } else {
                ApiError::internal(e)
            }
        })
}

/// The pairs the store holds, and the history of the one asked for (else the first).
async fn history_of(
    app: &App,
    args: &HistoryArgs,
) -> Result<(Vec<(String, String)>, Option<crate::results::History>), ApiError> {
    let mut store = store(app).await?;
    let refused = |e: crate::results::ResultsError| ApiError::bad(e);
    let choices = crate::results::choices(&mut store).await.map_err(refused)?;
    let chosen = match (&args.name, &args.agent) {
        (Some(n), Some(a)) => Some((n.clone(), a.clone())),
        (None, None) => choices.first().cloned(),
        _ => return Err(ApiError::bad("give both name and agent")),
    };
    let history = match chosen {
        Some((name, agent)) => Some(
            crate::results::history(&mut store, &agent, &name)
                .await
                .map_err(refused)?,
        ),
        None => None,
    };
    Ok((choices, history))
}

async fn history_json(
    State(app): State<Shared>,
    Query(args): Query<HistoryArgs>,
) -> Result<Response, ApiError> {
    if args.name.is_none() || args.agent.is_none() {
        return Err(ApiError::bad("give name (a job name) and agent"));
    }
    let (_, history) = history_of(&app, &args).await?;
    Ok(axum::Json(history).into_response())
}

async fn history_page(State(app): State<Shared>, Query(args): Query<HistoryArgs>) -> Response {
    let (choices, history) = match history_of(&app, &args).await {
        Ok(found) => found,
        Err(e) => {
            return made(
                "History",
                &format!(
                    "<section><p class=\"err\">{}</p></section>",
                    esc(&e.message)
                ),
            );
        }
    };
    let mut body = String::new();
    body.push_str("<section><h2>Agent × job name</h2><p class=\"sub\">Every job name (a dataset run again) and agent the results store holds scored trials of.</p><ul class=\"choices\">");
    for (name, agent) in &choices {
        let on = history
            .as_ref()
            .is_some_and(|h| &h.name == name && &h.agent == agent);
        let _ = write!(
            body,
            "<li><a{} href=\"/history?name={}&amp;agent={}\">{} · {}</a></li>",
            if on { " class=\"on\"" } else { "" },
            url(name),
            url(agent),
            esc(name),
            esc(agent)
        );
    }
    body.push_str("</ul></section>");
    match &history {
        None => body.push_str(
            "<section><p class=\"sub\">Nothing indexed yet: jobs run here are indexed when they end; `arbiter index DIR` adds others.</p></section>",
        ),
        Some(h) => {
            let _ = write!(
                body,
                "<section><h2>Pass rate of {} on {}</h2><p class=\"sub\">One point per indexed job, oldest first: passed ÷ scored trials of the agent (every variant; infra errors excluded).</p><div class=\"scroll\">{}</div></section>",
                esc(&h.agent),
                esc(&h.name),
                plot(h)
            );
            body.push_str(&flips(h));
        }
    }
    made("History", &body)
}

const PLOT_H: f64 = 220.0;
const PLOT_LEFT: f64 = 48.0;
const PLOT_TOP: f64 = 14.0;
const STEP: f64 = 84.0;

/// The pass rate per job as an SVG line with one circle per job.
fn plot(h: &crate::results::History) -> String {
    let n = h.points.len();
    let width = PLOT_LEFT + STEP * n.max(1) as f64 + 24.0;
    let height = PLOT_TOP + PLOT_H + 70.0;
    let x = |i: usize| PLOT_LEFT + STEP * (i as f64 + 0.5);
    let y = |rate: f64| PLOT_TOP + PLOT_H * (1.0 - rate.clamp(0.0, 1.0));
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"history\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" role=\"img\" aria-label=\"pass rate per job\"><g class=\"grid\">"
    );
    for pct in [0, 25, 50, 75, 100] {
        let yy = y(f64::from(pct) / 100.0);
        let _ = write!(
            out,
            "<line x1=\"{PLOT_LEFT}\" x2=\"{:.1}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\"/><text class=\"muted\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{pct}%</text>",
            width - 16.0,
            PLOT_LEFT - 6.0,
            yy + 4.0
        );
    }
    out.push_str("</g>");
    if n > 1 {
        let pts: Vec<String> = h
            .points
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{:.1},{:.1}", x(i), y(p.pass_rate)))
            .collect();
        let _ = write!(
            out,
            "<polyline class=\"line\" points=\"{}\"/>",
            pts.join(" ")
        );
    }
    for (i, p) in h.points.iter().enumerate() {
        let when = p.started_at.as_deref().unwrap_or("");
        let _ = write!(
            out,
            "<a href=\"/jobs/{}\"><circle class=\"point\" data-job=\"{}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"5\"><title>{} · {} · {}/{} = {:.1}%</title></circle></a>",
            url(&p.job_id),
            esc(&p.job_id),
            x(i),
            y(p.pass_rate),
            esc(&p.job_id),
            esc(when),
            p.passed,
            p.scored,
            p.pass_rate * 100.0
        );
        let day: String = when.chars().take(10).collect();
        let time: String = when.chars().skip(11).take(5).collect();
        let _ = write!(
            out,
            "<text class=\"muted\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text><text class=\"muted\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.0}%</text>",
            x(i),
            PLOT_TOP + PLOT_H + 18.0,
            esc(&day),
            x(i),
            PLOT_TOP + PLOT_H + 32.0,
            esc(&time),
            x(i),
            PLOT_TOP + PLOT_H + 50.0,
            p.pass_rate * 100.0
        );
    }
    out.push_str("</svg>");
    out
}

/// The tasks that flipped between consecutive jobs, each pair linked to its comparison.
fn flips(h: &crate::results::History) -> String {
    let mut out = String::from(
        "<section><h2>Tasks that flipped</h2><p class=\"sub\">Between consecutive jobs: a task passes in a job when at least half its scored attempts passed.</p>",
    );
    if h.flips.is_empty() {
        out.push_str("<p class=\"note\">No task flipped.</p></section>");
        return out;
    }
    out.push_str("<div class=\"scroll\"><table class=\"flips\"><thead><tr><th class=\"l\">from job</th><th class=\"l\">to job</th><th class=\"l\">task</th><th class=\"l\">flip</th><th class=\"l\"></th></tr></thead><tbody>");
    for f in &h.flips {
        let (class, word) = if f.to_pass {
            ("sig-up", "fail → pass")
        } else {
            ("sig-down", "pass → fail")
        };
        let _ = write!(
            out,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l name\">{}</td><td class=\"l {class}\">{word}</td><td class=\"l\"><a href=\"/compare?a={}&amp;b={}\">compare</a></td></tr>",
            esc(&f.from_job),
            esc(&f.to_job),
            esc(&f.task),
            url(&f.from_job),
            url(&f.to_job)
        );
    }
    out.push_str("</tbody></table></div></section>");
    out
}

#[derive(Debug, Deserialize)]
struct CompareArgs {
    a: Option<String>,
    b: Option<String>,
}

/// The paired comparison of jobs `a` (the control) and `b`, as `arbiter compare A B` makes it.
async fn compare(
    app: &App,
    a: &str,
    b: &str,
) -> Result<crate::report::compare::ComparisonSet, ApiError> {
    let ja = app.find(a)?;
    let jb = app.find(b)?;
    tokio::task::spawn_blocking(move || {
        let load =
            |dir: &FsPath| crate::report::load_job(dir).map_err(|e| ApiError::bad(e.to_string()));
        let (da, db) = (load(&ja.dir)?, load(&jb.dir)?);
        Ok(crate::report::compare::compare_jobs(
            &crate::report::build(&da, None),
            &crate::report::build(&db, None),
            &crate::report::CompareOptions::default(),
        ))
    })
    .await
    .map_err(ApiError::internal)?
}

async fn compare_json(
    State(app): State<Shared>,
    Query(args): Query<CompareArgs>,
) -> Result<Response, ApiError> {
    let (Some(a), Some(b)) = (&args.a, &args.b) else {
        return Err(ApiError::bad("give a and b (job ids)"));
    };
    Ok(axum::Json(compare(&app, a, b).await?).into_response())
}

async fn compare_page(State(app): State<Shared>, Query(args): Query<CompareArgs>) -> Response {
    let listed = app.clone();
    let ids: Vec<String> =
        tokio::task::spawn_blocking(move || listed.list().into_iter().map(|j| j.id).collect())
            .await
            .unwrap_or_default();
    let select = |field: &str, chosen: Option<&String>| {
        let mut s = format!("<select name=\"{field}\">");
        for id in &ids {
            let _ = write!(
                s,
                "<option{} value=\"{}\">{}</option>",
                if chosen == Some(id) { " selected" } else { "" },
                esc(id),
                esc(id)
            );
        }
        s.push_str("</select>");
        s
    };
    let mut body = format!(
        "<section><h2>Two jobs</h2><p class=\"sub\">A is the control; arms are matched by agent and variant, trials paired by task.</p><form class=\"pick\" method=\"get\" action=\"/compare\"><label>A {}</label><label>B {}</label><button type=\"submit\">Compare</button></form></section>",
        select("a", args.a.as_ref()),
        select("b", args.b.as_ref())
    );
    if let (Some(a), Some(b)) = (&args.a, &args.b) {
        match compare(&app, a, b).await {
            Ok(set) => {
                let _ = write!(
                    body,
                    "<section><h2>{} → {}</h2>{}</section>",
                    esc(a),
                    esc(b),
                    crate::report::html::comparison_html(&set)
                );
            }
            Err(e) => {
                let _ = write!(
                    body,
                    "<section><p class=\"err\">{}</p></section>",
                    esc(&e.message)
                );
            }
        }
    }
    made("Compare", &body)
}

/// Percent-encode for a query value or path segment.
fn url(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Flip, History, Point};

    fn point(id: &str, passed: i64, scored: i64) -> Point {
        Point {
            job_id: id.into(),
            started_at: Some("2026-01-02T03:04:05Z".into()),
            passed,
            scored,
            pass_rate: passed as f64 / scored as f64,
        }
    }

    #[test]
    fn the_plot_has_a_point_per_job_and_escapes_names() {
        let h = History {
            agent: "a<b".into(),
            name: "n".into(),
            points: vec![point("j<1>", 1, 2), point("j2", 2, 2), point("j3", 0, 2)],
            flips: vec![Flip {
                task: "t\"x".into(),
                from_job: "j<1>".into(),
                to_job: "j2".into(),
                to_pass: true,
            }],
        };
        let svg = plot(&h);
        assert_eq!(svg.matches("<circle class=\"point\"").count(), 3);
        assert!(svg.contains("data-job=\"j&lt;1&gt;\""), "{svg}");
        assert!(svg.contains("href=\"/jobs/j%3C1%3E\""), "{svg}");
        assert!(!svg.contains("j<1>"), "{svg}");
        let table = flips(&h);
        assert!(
            table.contains("t&quot;x") && table.contains("fail → pass"),
            "{table}"
        );
        assert!(table.contains("/compare?a=j%3C1%3E&amp;b=j2"), "{table}");
    }
}
