//! Goal continuation (SPEC §15) in the HTML pages: the report's per-arm section (attempts
//! used, pass rate by attempts used, cost per solved task — one row per arm, one-shot arms
//! included, so "one shot vs continuation" reads as a paired comparison beside the report's
//! comparisons) and the trial page's "Attempts" section (one row per attempt of the record's
//! `attempts[]`). Every value from a record is escaped; links go only to relative paths inside
//! the trial directory.

use std::fmt::Write as _;

use serde_json::Value;

use super::markup::esc;
use super::model::{Report, tokens, usd};
use super::text::{by_attempts, pct};

/// The report's "Goal continuation" section, when any arm ran with `continuation`.
pub(crate) fn continuation_section(r: &Report) -> Option<String> {
    if !r.has_continuation() {
        return None;
    }
    let mut out = String::from(
        "<section id=\"continuation\"><h2>Goal continuation</h2><p class=\"sub\">Attempts one agent made in one trial's container (each trial counted once). Arms without continuation are one-shot runs (one attempt each), listed for the paired comparison; the comparisons above pair the arms on tasks.</p>",
    );
    out.push_str("<div class=\"scroll\"><table><thead><tr><th class=\"l\">agent</th><th class=\"l\">variant</th><th>scored</th><th>pass rate</th><th>continued trials</th><th>mean attempts</th><th>budget limited</th><th class=\"l\">pass rate by attempts used</th><th>cost</th><th>cost / solved task</th></tr></thead><tbody>");
    for a in &r.arms {
        let (continued, mean, limited, by) = match &a.continuation {
            Some(c) => (
                c.trials.to_string(),
                format!("{:.2}", c.mean_attempts),
                c.budget_limited.to_string(),
                by_attempts(&c.by_attempts),
            ),
            None => (
                "0".to_string(),
                "1 (one shot)".to_string(),
                "–".to_string(),
                format!("1: {}/{} ({})", a.passed, a.scored, pct(a.pass_rate)),
            ),
        };
        let cost = a.usage.as_ref().map(|u| usd(u.cost_usd));
        let per_solved = a.usage.as_ref().and_then(|u| u.cost_per_solved_task_usd);
        let _ = write!(
            out,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(&a.agent),
            esc(&a.variant),
            a.scored,
            pct(a.pass_rate),
            continued,
            esc(&mean),
            limited,
            esc(&by),
            esc(&cost.unwrap_or_else(|| "–".to_string())),
            esc(&per_solved.map(usd).unwrap_or_else(|| "–".to_string())),
        );
    }
    out.push_str("</tbody></table></div></section>");
    Some(out)
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .filter(|v| !v.is_null())
}

fn text(v: Option<&Value>) -> String {
    match v {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// At most `n` characters of `s`, with an ellipsis when cut.
fn clip(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// A path from a record as a link target: relative, inside the trial directory, plain
/// characters only; `None` otherwise (then it is shown as text, never linked).
fn safe_href(path: &str) -> Option<String> {
    let ok = !path.is_empty()
        && !path.starts_with('/')
        && path.split('/').all(|part| !part.is_empty() && part != "..")
        && path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/".contains(c));
    ok.then(|| esc(path))
}

fn link_or_text(path: &str, label: &str) -> String {
    match safe_href(path) {
        Some(href) => format!("<a href=\"{href}\">{}</a>", esc(label)),
        None => format!("<code>{}</code>", esc(path)),
    }
}

/// The trial page's "Attempts" section, when the record has `attempts[]`.
pub(crate) fn attempts_section(rec: &Value) -> Option<String> {
    let Some(Value::Array(attempts)) = at(rec, &["attempts"]) else {
        return None;
    };
    let mut out = String::from("<section id=\"attempts\"><h2>Attempts</h2>");
    if let Some(c) = at(rec, &["continuation"]) {
        let _ = write!(
            out,
            "<p>{} of at most {} attempt(s) used · goal status <b>{}</b>{}</p>",
            esc(&text(at(c, &["attempts_used"]))),
            esc(&text(at(c, &["max_attempts"]))),
            esc(&text(at(c, &["status"]))),
            at(c, &["detail"])
                .map(|d| format!(" · {}", esc(&text(Some(d)))))
                .unwrap_or_default(),
        );
    }
    out.push_str("<p class=\"muted\">Each attempt ran in the trial's one container; its claim and receipts were read by arbiter before the next one started (the verifier ran once, after the last). The trial's claim is the last attempt's.</p>");
    out.push_str("<div class=\"scroll\"><table class=\"grid\"><thead><tr><th>#</th><th>id</th><th>started</th><th>finished</th><th>seconds</th><th>termination</th><th>claim</th><th>receipts</th><th>usage</th><th>files</th><th>next attempt because</th></tr></thead><tbody>");
    for a in attempts {
        let termination = {
            let kind = text(at(a, &["termination", "kind"]));
            match at(a, &["termination", "exit_code"]) {
                Some(code) => format!("{kind} {}", text(Some(code))),
                None => kind,
            }
        };
        let claim = {
            let status = text(at(a, &["claim", "status"]));
            let semantic = at(a, &["claim", "semantic_status"]).map(|s| text(Some(s)));
            let said = at(a, &["claim", "record", "failure", "message"])
                .or_else(|| at(a, &["claim", "record", "final_answer"]))
                .or_else(|| at(a, &["claim", "error"]))
                .map(|m| clip(&text(Some(m)), 300));
            let mut s = semantic.unwrap_or(status);
            if let Some(said) = said {
                s.push_str(": ");
                s.push_str(&said);
            }
            s
        };
        let receipts = match at(a, &["validation"]) {
            Some(Value::Array(rs)) if !rs.is_empty() => rs
                .iter()
                .map(|r| {
                    let end = if at(r, &["timed_out"]).and_then(Value::as_bool) == Some(true) {
                        "timed out".to_string()
                    } else {
                        format!("exit {}", text(at(r, &["exit_code"])))
                    };
                    format!("{} {end}", text(at(r, &["id"])))
                })
                .collect::<Vec<_>>()
                .join(", "),
            _ => "–".to_string(),
        };
        let usage = match at(a, &["usage"]) {
            Some(u) => {
                let mut s = format!(
                    "{} req · {} in · {} out",
                    text(at(u, &["requests"])),
                    tokens(
                        at(u, &["input_tokens"])
                            .and_then(Value::as_u64)
                            .unwrap_or(0)
                    ),
                    tokens(
                        at(u, &["output_tokens"])
                            .and_then(Value::as_u64)
                            .unwrap_or(0)
                    ),
                );
                if let Some(c) = at(u, &["cost_usd"]).and_then(Value::as_f64) {
                    let _ = write!(s, " · {}", usd(c));
                }
                s
            }
            None => "–".to_string(),
        };
        let mut files = Vec::new();
        if let Some(t) = at(a, &["trajectory"]).and_then(Value::as_str) {
            files.push(link_or_text(t, "trajectory"));
        }
        if let Some(dir) = at(a, &["saved_to"]).and_then(Value::as_str) {
            let dir = dir.trim_end_matches('/');
            files.push(link_or_text(&format!("{dir}/stdout.log"), "stdout"));
            files.push(link_or_text(&format!("{dir}/stderr.log"), "stderr"));
        }
        let because = text(at(a, &["continued_because"]));
        let cleared = match at(a, &["cleared"]) {
            Some(Value::Array(c)) if !c.is_empty() => format!(
                " (cleared: {})",
                c.iter()
                    .map(|p| text(Some(p)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => String::new(),
        };
        let seconds = at(a, &["seconds"])
            .and_then(Value::as_f64)
            .map(|s| format!("{s:.1}"))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr><td class=\"n\">{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&text(at(a, &["attempt"]))),
            esc(&text(at(a, &["id"]))),
            esc(&text(at(a, &["started_at"]))),
            esc(&text(at(a, &["finished_at"]))),
            esc(&seconds),
            esc(&termination),
            esc(&claim),
            esc(&receipts),
            esc(&usage),
            files.join(" · "),
            esc(&format!("{because}{cleared}")),
        );
    }
    out.push_str("</tbody></table></div></section>");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hostile_attempt_text_is_escaped_and_odd_paths_are_not_links() {
        let evil = "<script>alert(1)</script>\"'&";
        let rec = json!({
            "continuation": {"max_attempts": 3, "attempts_used": 2, "status": "claimed_success", "detail": evil},
            "attempts": [{
                "attempt": 1, "id": format!("t/attempt-1{evil}"), "started_at": evil, "finished_at": "x",
                "seconds": 1.25, "termination": {"kind": "exited", "exit_code": 1},
                "claim": {"status": "present", "semantic_status": "task_failed",
                          "record": {"failure": {"message": evil}}},
                "validation": [{"id": evil, "exit_code": 1, "timed_out": false}],
                "usage": {"requests": 2, "input_tokens": 300, "output_tokens": 20, "cost_usd": 0.01},
                "trajectory": "javascript:alert(1)",
                "saved_to": "../../etc",
                "continued_because": evil,
                "cleared": [evil]
            }, {
                "attempt": 2, "id": "t/attempt-2", "termination": {"kind": "exited", "exit_code": 0},
                "claim": {"status": "present", "semantic_status": "succeeded"},
                "trajectory": "attempts/2/trajectory.json", "saved_to": "attempts/2"
            }]
        });
        let html = attempts_section(&rec).expect("a section");
        assert!(!html.contains("<script"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;"));
        assert!(!html.contains("href=\"javascript"), "{html}");
        assert!(!html.contains("href=\"../"), "{html}");
        assert!(html.contains("<a href=\"attempts/2/trajectory.json\">trajectory</a>"));
        assert!(html.contains("<a href=\"attempts/2/stdout.log\">stdout</a>"));
        assert!(html.contains("task_failed: &lt;script&gt;"));
        assert!(html.contains("2 req · "));
        assert!(attempts_section(&json!({"attempts": null})).is_none());
    }
}
