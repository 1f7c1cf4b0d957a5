//! `report.html`: one self-contained page — inline CSS and SVG, no script, no font, no image,
//! nothing fetched (a Content-Security-Policy of `default-src 'none'` says so to the browser).
//! Every chart keyed on arms or tasks sits in a scrolling box, so 100+ tasks and 10+ arms
//! scroll instead of overflowing. All user text (task, agent, variant names) is escaped.

use std::fmt::Write as _;

use super::compare::{ComparisonSet, fmt_p, pts};
use super::model::{ArmStats, Report, verdict_names};
use super::text::{ci, glyphs, pct};

/// Escape text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// At most `n` characters, with an ellipsis when cut.
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

const CSS: &str = r#"
:root{--fg:#1d2430;--muted:#5d6776;--line:#d9dee5;--bg:#f6f7f9;--card:#fff;--pass:#2e9e5b;--fail:#d64545;--accent:#3a6fd8}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
header{background:#1d2430;color:#fff;padding:18px 28px}
header h1{margin:0;font-size:20px;font-weight:600}
header h1 span{font-weight:400;color:#aeb8c6}
header p{margin:6px 0 0;color:#cfd6e0}
main{max-width:1280px;margin:0 auto;padding:18px 28px 40px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:0 0 18px}
h2{font-size:16px;margin:0 0 4px}
p.sub{margin:0 0 10px;color:var(--muted);font-size:12.5px}
.scroll{overflow:auto;max-height:560px;border:1px solid #eef0f3;border-radius:6px}
.scroll.tall{max-height:72vh}
svg{display:block}
svg text{font:12px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:var(--fg)}
svg .muted{fill:var(--muted)}
svg .grid line{stroke:#e6e9ee}
table{border-collapse:separate;border-spacing:0;font-size:12.5px}
th,td{padding:4px 8px;border-bottom:1px solid #eef0f3;text-align:right;white-space:nowrap}
th{background:#f9fafb;font-weight:600}
td.l,th.l{text-align:left}
thead th{position:sticky;top:0;z-index:2}
.legend{display:flex;flex-wrap:wrap;gap:12px;margin:4px 0 10px;font-size:12px;color:var(--muted)}
.legend i{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.warn{background:#fff7e0;border-color:#f0d48a}
.warn li{margin:2px 0}
table.heat td{padding:0;min-width:30px;height:22px;text-align:center;font-size:11px;border:1px solid #fff}
table.heat tbody th{position:sticky;left:0;z-index:1;text-align:left;max-width:260px;overflow:hidden;text-overflow:ellipsis}
table.heat thead th{vertical-align:bottom;padding:4px 2px}
table.heat thead th.corner{left:0;z-index:3;text-align:left;vertical-align:bottom}
table.heat thead th div{writing-mode:vertical-rl;transform:rotate(180deg);max-height:170px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;margin:0 auto}
.h0{background:#d64545;color:#fff}.h1{background:#dd5f45}.h2{background:#e47a46}.h3{background:#ea9447}.h4{background:#eeac49}.h5{background:#f0c04a}
.h6{background:#cfc04d}.h7{background:#a9bb51}.h8{background:#7fb255}.h9{background:#56a858}.h10{background:#2e9e5b;color:#fff}
td.name{white-space:normal;overflow-wrap:anywhere;min-width:190px;max-width:260px}
td.infra{background:repeating-linear-gradient(45deg,#d5d9df 0 4px,#eceef1 4px 8px);color:#5d6776}
td.none{background:#fff;color:#b8bec8}
.sig-up{color:#1f7a44;font-weight:600}.sig-down{color:#b73131;font-weight:600}
details summary{cursor:pointer;color:var(--muted)}
ul.conv{margin:8px 0 0;padding-left:18px;color:var(--muted);font-size:12.5px}
"#;

const VERDICT_COLORS: [(&str, &str); 5] = [
    ("certified", "#2e9e5b"),
    ("unclaimed_success", "#5b8def"),
    ("honest_failure", "#9aa3ad"),
    ("false_completion", "#d64545"),
    ("unverifiable", "#e0a526"),
];

fn verdict_color(v: &str) -> &'static str {
    VERDICT_COLORS
        .iter()
        .find(|(n, _)| *n == v)
        .map(|(_, c)| *c)
        .unwrap_or("#888")
}

const LABEL_W: f64 = 230.0;
const PLOT_W: f64 = 460.0;
const VALUE_W: f64 = 190.0;
const ROW_H: f64 = 24.0;
const TOP: f64 = 26.0;

fn svg_open(out: &mut String, rows: usize, label: &str) -> f64 {
    let h = TOP + rows as f64 * ROW_H + 8.0;
    let w = LABEL_W + PLOT_W + VALUE_W;
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{}\">",
        esc(label)
    );
    h
}

/// Vertical grid lines with labels along the top.
fn x_grid(out: &mut String, h: f64, ticks: &[(f64, String)]) {
    out.push_str("<g class=\"grid\">");
    for (x, label) in ticks {
        let px = LABEL_W + x * PLOT_W;
        let _ = write!(
            out,
            "<line x1=\"{px:.1}\" y1=\"{}\" x2=\"{px:.1}\" y2=\"{:.1}\"/><text class=\"muted\" x=\"{px:.1}\" y=\"14\" text-anchor=\"middle\">{}</text>",
            TOP - 6.0,
            h - 4.0,
            esc(label)
        );
    }
    out.push_str("</g>");
}

fn arm_label(out: &mut String, y: f64, arm: &ArmStats) {
    let _ = write!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\"><title>{}</title>{}</text>",
        LABEL_W - 10.0,
        y + 4.0,
        esc(&arm.arm),
        esc(&clip(&arm.arm, 32))
    );
}

fn pass_rate_chart(r: &Report) -> String {
    let mut out = String::new();
    let h = svg_open(
        &mut out,
        r.arms.len(),
        "pass rate per arm with 95% Wilson intervals",
    );
    let ticks: Vec<(f64, String)> = (0..=4)
        .map(|i| (i as f64 / 4.0, format!("{}%", i * 25)))
        .collect();
    x_grid(&mut out, h, &ticks);
    for (i, a) in r.arms.iter().enumerate() {
        let y = TOP + i as f64 * ROW_H + ROW_H / 2.0;
        arm_label(&mut out, y, a);
        let x = |v: f64| LABEL_W + v.clamp(0.0, 1.0) * PLOT_W;
        match (a.pass_rate, a.pass_rate_ci) {
            (Some(rate), Some([lo, hi])) => {
                let _ = write!(
                    out,
                    "<g><title>{}: {} passed of {} scored ({} infra excluded); 95% CI {}</title>\
                     <rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"12\" rx=\"2\" fill=\"#bfe3cc\"/>\
                     <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#1d2430\" stroke-width=\"1.5\"/>\
                     <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#1d2430\" stroke-width=\"1.5\"/>\
                     <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#1d2430\" stroke-width=\"1.5\"/>\
                     <circle cx=\"{:.1}\" cy=\"{y:.1}\" r=\"4\" fill=\"#2e9e5b\" stroke=\"#fff\"/></g>",
                    esc(&a.arm),
                    a.passed,
                    a.scored,
                    a.infra,
                    ci(a.pass_rate_ci),
                    LABEL_W,
                    y - 6.0,
                    x(rate) - LABEL_W,
                    x(lo),
                    x(hi),
                    x(lo),
                    x(lo),
                    y - 5.0,
                    y + 5.0,
                    x(hi),
                    x(hi),
                    y - 5.0,
                    y + 5.0,
                    x(rate),
                );
                let _ = write!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\">{} {} <tspan class=\"muted\">n={}</tspan></text>",
                    LABEL_W + PLOT_W + 10.0,
                    y + 4.0,
                    pct(Some(rate)),
                    ci(a.pass_rate_ci),
                    a.scored
                );
            }
            _ => {
                let _ = write!(
                    out,
                    "<text class=\"muted\" x=\"{:.1}\" y=\"{:.1}\">nothing scored ({} infra)</text>",
                    LABEL_W + 6.0,
                    y + 4.0,
                    a.infra
                );
            }
        }
    }
    out.push_str("</svg>");
    out
}

fn verdict_chart(r: &Report) -> String {
    let mut out = String::new();
    let h = svg_open(
        &mut out,
        r.arms.len(),
        "audit verdicts per arm, share of scored trials",
    );
    let ticks: Vec<(f64, String)> = (0..=4)
        .map(|i| (i as f64 / 4.0, format!("{}%", i * 25)))
        .collect();
    x_grid(&mut out, h, &ticks);
    for (i, a) in r.arms.iter().enumerate() {
        let y = TOP + i as f64 * ROW_H + ROW_H / 2.0;
        arm_label(&mut out, y, a);
        let total: usize = a.verdicts.values().sum();
        if total == 0 {
            let _ = write!(
                out,
                "<text class=\"muted\" x=\"{:.1}\" y=\"{:.1}\">no audited trial</text>",
                LABEL_W + 6.0,
                y + 4.0
            );
            continue;
        }
        let mut x = LABEL_W;
        for v in verdict_names() {
            let n = a.verdicts.get(v).copied().unwrap_or(0);
            if n == 0 {
                continue;
            }
            let w = PLOT_W * n as f64 / total as f64;
            let _ = write!(
                out,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"14\" fill=\"{}\"><title>{}: {v} {n} of {total} ({:.1}%)</title></rect>",
                y - 7.0,
                verdict_color(v),
                esc(&a.arm),
                100.0 * n as f64 / total as f64
            );
            x += w;
        }
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\">false compl. {}/{} <tspan class=\"muted\">{}</tspan></text>",
            LABEL_W + PLOT_W + 10.0,
            y + 4.0,
            a.false_completion,
            a.claimed_success,
            pct(a.false_completion_rate)
        );
    }
    out.push_str("</svg>");
    out
}

/// A "nice" upper bound and step for an axis from 0 to `max`.
fn nice_axis(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.25);
    }
    let raw = max / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

fn time_chart(r: &Report) -> String {
    let mut out = String::new();
    let max = r
        .arms
        .iter()
        .filter_map(|a| a.agent_seconds.as_ref().map(|t| t.max))
        .fold(0.0, f64::max);
    let (top, step) = nice_axis(max);
    let h = svg_open(
        &mut out,
        r.arms.len(),
        "agent time per trial per arm (box plot)",
    );
    let mut ticks = Vec::new();
    let mut v = 0.0;
    while v <= top + 1e-9 {
        ticks.push((v / top, format!("{}s", trim_num(v))));
        v += step;
    }
    x_grid(&mut out, h, &ticks);
    let x = |v: f64| LABEL_W + (v / top).clamp(0.0, 1.0) * PLOT_W;
    for (i, a) in r.arms.iter().enumerate() {
        let y = TOP + i as f64 * ROW_H + ROW_H / 2.0;
        arm_label(&mut out, y, a);
        let Some(t) = &a.agent_seconds else {
            let _ = write!(
                out,
                "<text class=\"muted\" x=\"{:.1}\" y=\"{:.1}\">no timed trial</text>",
                LABEL_W + 6.0,
                y + 4.0
            );
            continue;
        };
        let _ = write!(
            out,
            "<g><title>{}: n={} min {:.2}s · p25 {:.2}s · median {:.2}s · p75 {:.2}s · p90 {:.2}s · max {:.2}s</title>\
             <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#8792a2\"/>\
             <rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"12\" fill=\"#d7e3fb\" stroke=\"#3a6fd8\"/>\
             <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#1d2430\" stroke-width=\"2.5\"/>\
             <path d=\"M{:.1} {:.1} l-4 -6 h8 z\" fill=\"#d64545\"/></g>",
            esc(&a.arm),
            t.n,
            t.min,
            t.p25,
            t.median,
            t.p75,
            t.p90,
            t.max,
            x(t.min),
            x(t.max),
            x(t.p25),
            y - 6.0,
            (x(t.p75) - x(t.p25)).max(1.0),
            x(t.median),
            x(t.median),
            y - 7.0,
            y + 7.0,
            x(t.p90),
            y - 6.0,
        );
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\">med {:.1}s · p90 {:.1}s <tspan class=\"muted\">n={}</tspan></text>",
            LABEL_W + PLOT_W + 10.0,
            y + 4.0,
            t.median,
            t.p90,
            t.n
        );
    }
    out.push_str("</svg>");
    out
}

fn trim_num(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A small forest plot of one comparison: the interval of the difference against zero.
fn forest(diff: f64, lo: f64, hi: f64, scale: f64, significant: bool) -> String {
    let (w, h) = (220.0, 20.0);
    let x = |v: f64| w / 2.0 + (v / scale).clamp(-1.0, 1.0) * (w / 2.0 - 6.0);
    let color = if !significant {
        "#8792a2"
    } else if diff > 0.0 {
        "#2e9e5b"
    } else {
        "#d64545"
    };
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\"><line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"2\" y2=\"18\" stroke=\"#c3c9d2\" stroke-dasharray=\"2 2\"/><line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"10\" y2=\"10\" stroke=\"{color}\" stroke-width=\"2\"/><circle cx=\"{:.1}\" cy=\"10\" r=\"4\" fill=\"{color}\"/></svg>",
        w / 2.0,
        w / 2.0,
        x(lo),
        x(hi),
        x(diff)
    )
}

fn comparisons(c: &ComparisonSet) -> String {
    let mut out = String::new();
    let scale = c
        .results
        .iter()
        .filter_map(|r| r.ci_pts)
        .map(|[l, h]| l.abs().max(h.abs()))
        .fold(5.0, f64::max);
    let (scale, _) = nice_axis(scale);
    let _ = write!(
        out,
        "<p class=\"sub\">Paired on tasks, by {}. Forest plots: difference in pass rate (points) with its 95% bootstrap interval; the dashed line is no difference; the axis spans ±{} pts. {} resamples, seed {}.</p>",
        esc(&c.by),
        trim_num(scale),
        c.resamples,
        c.seed
    );
    out.push_str("<div class=\"scroll\"><table><thead><tr><th class=\"l\">arm</th><th class=\"l\">against control</th><th class=\"l\">verdict</th><th>difference [95% CI]</th><th class=\"l\">−&nbsp;&nbsp;&nbsp;0&nbsp;&nbsp;&nbsp;+</th><th>p (Holm)</th><th>paired tasks</th><th>pass→fail</th><th>fail→pass</th></tr></thead><tbody>");
    for r in &c.results {
        let (class, word) = match (r.significant, r.diff_pts) {
            (true, Some(d)) if d > 0.0 => ("sig-up", "better"),
            (true, Some(_)) => ("sig-down", "worse"),
            (_, Some(_)) => ("", "no detectable difference"),
            _ => ("", "not comparable"),
        };
        let plot = match (r.diff_pts, r.ci_pts) {
            (Some(d), Some([l, h])) => forest(d, l, h, scale, r.significant),
            _ => String::new(),
        };
        let flips = |v: &[String]| {
            let shown: Vec<String> = v.iter().take(30).cloned().collect();
            format!(
                "<span title=\"{}{}\">{}</span>",
                esc(&shown.join(", ")),
                if v.len() > 30 { ", …" } else { "" },
                v.len()
            )
        };
        let diff = match (r.diff_pts, r.ci_pts) {
            (Some(d), Some([l, h])) => format!("{} pts [{}, {}]", pts(d), pts(l), pts(h)),
            _ => "–".to_string(),
        };
        let _ = write!(
            out,
            "<tr title=\"{}\"><td class=\"l name\">{}</td><td class=\"l name\">{}</td><td class=\"l {class}\">{word}</td><td class=\"{class}\">{diff}</td><td class=\"l\">{plot}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.verdict),
            esc(&clip(&r.b, 60)),
            esc(&clip(&r.a, 60)),
            esc(&fmt_p(r.p_adjusted).replace("p = ", "").replace("p ", "")),
            r.tasks_paired,
            flips(&r.flipped_to_fail),
            flips(&r.flipped_to_pass),
        );
    }
    out.push_str("</tbody></table></div>");
    let unpaired: Vec<String> = c
        .results
        .iter()
        .filter(|r| !r.unpaired.is_empty() || !r.unequal_attempts.is_empty())
        .map(|r| {
            format!(
                "{} vs {}: {} task(s) not paired{}{}",
                r.b,
                r.a,
                r.unpaired.len(),
                r.unpaired
                    .iter()
                    .take(10)
                    .map(|u| format!(" · {} ({})", u.task, u.reason))
                    .collect::<String>(),
                if r.unequal_attempts.is_empty() {
                    String::new()
                } else {
                    format!("; {} with unequal attempts", r.unequal_attempts.len())
                }
            )
        })
        .chain(c.notes.iter().cloned())
        .collect();
    out.push_str("<ul class=\"conv\">");
    for r in c.results.iter().filter(|r| r.significant) {
        let _ = write!(out, "<li>{}</li>", esc(&r.verdict));
    }
    out.push_str("</ul>");
    if !unpaired.is_empty() {
        let _ = write!(
            out,
            "<details><summary>Pairing notes ({})</summary><ul class=\"conv\">",
            unpaired.len()
        );
        for u in unpaired {
            let _ = write!(out, "<li>{}</li>", esc(&u));
        }
        out.push_str("</ul></details>");
    }
    out
}

fn heat_map(r: &Report) -> String {
    let mut out = String::new();
    out.push_str("<div class=\"legend\"><span><i class=\"h0\"></i>0% of scored attempts passed</span><span><i class=\"h5\"></i>50%</span><span><i class=\"h10\"></i>100%</span><span><i style=\"background:repeating-linear-gradient(45deg,#d5d9df 0 3px,#eceef1 3px 6px)\"></i>infra errors only (not scored)</span><span><i style=\"background:#fff;border:1px solid #d9dee5\"></i>no trial</span></div>");
    out.push_str("<div class=\"scroll tall\"><table class=\"heat\"><thead><tr><th class=\"corner l\">task</th>");
    for a in &r.arms {
        let _ = write!(
            out,
            "<th title=\"{}\"><div>{}</div></th>",
            esc(&a.arm),
            esc(&clip(&a.arm, 40))
        );
    }
    out.push_str("</tr></thead><tbody>");
    for t in &r.tasks {
        let _ = write!(out, "<tr><th title=\"{0}\">{0}</th>", esc(&t.task));
        for (a, c) in t.cells.iter().enumerate() {
            let arm = r.arms.get(a).map(|x| x.arm.as_str()).unwrap_or("");
            if c.is_empty() {
                let _ = write!(
                    out,
                    "<td class=\"none\" title=\"{} · {}: no trial\">·</td>",
                    esc(&t.task),
                    esc(arm)
                );
                continue;
            }
            match c.fraction() {
                None => {
                    let _ = write!(
                        out,
                        "<td class=\"infra\" title=\"{} · {}: {} (infra only)\">I</td>",
                        esc(&t.task),
                        esc(arm),
                        glyphs(c)
                    );
                }
                Some(f) => {
                    let level = (f * 10.0).round() as usize;
                    let _ = write!(
                        out,
                        "<td class=\"h{level}\" title=\"{} · {}: {} ({}/{} passed)\">{}/{}</td>",
                        esc(&t.task),
                        esc(arm),
                        glyphs(c),
                        c.passed,
                        c.scored,
                        c.passed,
                        c.scored
                    );
                }
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

fn arms_table(r: &Report) -> String {
    let mut out = String::new();
    out.push_str("<div class=\"scroll\"><table><thead><tr><th class=\"l\">agent</th><th class=\"l\">variant</th><th>tasks</th><th>trials</th><th>scored</th><th>infra (excluded)</th><th>pass rate</th><th>95% CI</th><th>mean reward</th>");
    for k in 1..=r.attempts {
        let _ = write!(out, "<th>pass@{k}</th>");
    }
    for k in 2..=r.attempts {
        let _ = write!(out, "<th>pass^{k}</th>");
    }
    out.push_str("<th>false compl.</th><th>agent s median</th><th>p90</th></tr></thead><tbody>");
    for a in &r.arms {
        let _ = write!(
            out,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
            esc(&a.agent),
            esc(&a.variant),
            a.tasks,
            a.trials,
            a.scored,
            a.infra,
            pct(a.pass_rate),
            ci(a.pass_rate_ci),
            a.mean_reward
                .map(|m| format!("{m:.3}"))
                .unwrap_or_else(|| "–".into())
        );
        for s in &a.pass_at_k {
            let _ = write!(out, "<td>{}</td>", pct(s.value));
        }
        for s in a.pass_hat_k.iter().filter(|s| s.k >= 2) {
            let _ = write!(out, "<td>{}</td>", pct(s.value));
        }
        let _ = write!(
            out,
            "<td>{}/{} {}</td><td>{}</td><td>{}</td></tr>",
            a.false_completion,
            a.claimed_success,
            pct(a.false_completion_rate),
            a.agent_seconds
                .as_ref()
                .map(|t| format!("{:.1}", t.median))
                .unwrap_or_else(|| "–".into()),
            a.agent_seconds
                .as_ref()
                .map(|t| format!("{:.1}", t.p90))
                .unwrap_or_else(|| "–".into()),
        );
    }
    out.push_str("</tbody></table></div>");
    let keyed: Vec<&ArmStats> = r
        .arms
        .iter()
        .filter(|a| !a.reward_keys.is_empty())
        .collect();
    if !keyed.is_empty() {
        out.push_str("<ul class=\"conv\">");
        for a in keyed {
            let keys: Vec<String> = a
                .reward_keys
                .iter()
                .map(|(k, m)| format!("{k} = {:.3} (n={})", m.mean, m.n))
                .collect();
            let _ = write!(out, "<li>{}: {}</li>", esc(&a.arm), esc(&keys.join(", ")));
        }
        out.push_str("</ul>");
    }
    out
}

/// Render `report.html`.
pub fn html(r: &Report) -> String {
    let mut out = String::with_capacity(64 * 1024 + r.tasks.len() * r.arms.len() * 90);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>arbiter report: {}</title><style>{CSS}</style></head><body>",
        esc(&r.job)
    );
    let _ = write!(
        out,
        "<header><h1>arbiter report <span>· {}</span></h1><p>{} trials · {} scored · {} infra error(s) excluded from rates · {} tasks · {} arms · {} attempt(s) per task · arbiter {}</p></header><main>",
        esc(&r.job),
        r.totals.trials,
        r.totals.scored,
        r.totals.infra,
        r.tasks.len(),
        r.arms.len(),
        r.attempts,
        esc(&r.arbiter_version)
    );
    if !r.warnings.is_empty() {
        out.push_str("<section class=\"warn\"><h2>Warnings</h2><ul>");
        for w in &r.warnings {
            let _ = write!(out, "<li>{}</li>", esc(w));
        }
        out.push_str("</ul></section>");
    }
    let _ = write!(
        out,
        "<section><h2>Pass rate per arm</h2><p class=\"sub\">Passed ÷ scored trials; whiskers: 95% Wilson interval. Infra errors are excluded.</p><div class=\"scroll\">{}</div></section>",
        pass_rate_chart(r)
    );
    out.push_str("<section><h2>Audit verdicts</h2><p class=\"sub\">The agent's claim set against the verifier, share of scored trials.</p><div class=\"legend\">");
    for (name, color) in VERDICT_COLORS {
        let _ = write!(
            out,
            "<span><i style=\"background:{color}\"></i>{name}</span>"
        );
    }
    let _ = write!(
        out,
        "</div><div class=\"scroll\">{}</div></section>",
        verdict_chart(r)
    );
    if let Some(c) = &r.comparisons {
        let _ = write!(
            out,
            "<section><h2>Comparisons</h2>{}</section>",
            comparisons(c)
        );
    }
    let _ = write!(
        out,
        "<section><h2>Agent time per trial</h2><p class=\"sub\">Agent phase of scored trials: whisker min–max, box p25–p75, bar median, red marker p90.</p><div class=\"scroll\">{}</div></section>",
        time_chart(r)
    );
    let _ = write!(
        out,
        "<section><h2>Tasks × arms</h2><p class=\"sub\">Passed / scored attempts per task and arm; hover a cell for each attempt's outcome.</p>{}</section>",
        heat_map(r)
    );
    let _ = write!(out, "<section><h2>Numbers</h2>{}</section>", arms_table(r));
    out.push_str(
        "<section><details><summary>How to read these numbers</summary><ul class=\"conv\">",
    );
    for c in &r.conventions {
        let _ = write!(out, "<li>{}</li>", esc(c));
    }
    out.push_str("</ul></details></section></main></body></html>\n");
    out
}
