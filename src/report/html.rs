//! `report.html`: one self-contained page — inline CSS and SVG, no script, no font, no image,
//! nothing fetched (a Content-Security-Policy of `default-src 'none'` says so to the browser).
//! Every chart keyed on arms or tasks sits in a scrolling box, so 100+ tasks and 10+ arms
//! scroll instead of overflowing; at 1400 px and wider nothing else needs a horizontal scroll
//! (wide tables are split: numbers, pass@k, usage). Chart widths follow their longest value
//! label, so no label is clipped. All user text (task, agent, variant names) is escaped.
//!
//! With [`html_linked`], every heat-map cell and the trials table link to the trial pages
//! (`trials/<id>/trial.html`, see `trial_page`).
//!
//! Over 600 lines: the charts (forest, box, heat map) are SVG written by hand and share their geometry helpers.

use std::fmt::Write as _;

use super::compare::{ComparisonSet, fmt_p, pts};
use super::load::{JobData, Outcome};
use super::markup::esc;
use super::model::{ArmStats, Cell, Report, tokens, usd};
use super::text::{ci, glyphs, pct, reward_key_lines, unverified_line};
use super::trial_page::trial_href;

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

/// The report's style sheet (also `arbiter serve`'s compare and history pages).
pub(crate) const CSS: &str = r#"
:root{--fg:#1d2430;--muted:#5d6776;--line:#d9dee5;--bg:#f6f7f9;--card:#fff;--pass:#2e9e5b;--fail:#d64545;--accent:#3a6fd8}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
header{background:#1d2430;color:#fff;padding:18px 28px}
header h1{margin:0;font-size:20px;font-weight:600}
header h1 span{font-weight:400;color:#aeb8c6}
header p{margin:6px 0 0;color:#cfd6e0}
main{max-width:1560px;margin:0 auto;padding:18px 28px 40px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:0 0 18px}
h2{font-size:16px;margin:0 0 4px}
h3{font-size:14px;margin:16px 0 6px}
p.sub{margin:0 0 10px;color:var(--muted);font-size:12.5px}
.scroll{overflow:auto;max-height:560px;border:1px solid #eef0f3;border-radius:6px}
.scroll.tall{max-height:72vh}
svg{display:block}
svg text{font:12px system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;fill:var(--fg)}
svg .muted{fill:var(--muted)}
svg .grid line{stroke:#e6e9ee}
table{border-collapse:separate;border-spacing:0;font-size:12.5px}
th,td{padding:4px 8px;border-bottom:1px solid #eef0f3;text-align:right;white-space:nowrap}
th{background:#f9fafb;font-weight:600;white-space:normal;vertical-align:bottom}
td.l,th.l{text-align:left}
thead th{position:sticky;top:0;z-index:2}
.legend{display:flex;flex-wrap:wrap;gap:12px;margin:4px 0 10px;font-size:12px;color:var(--muted)}
.legend i{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
.warn{background:#fff7e0;border-color:#f0d48a}
.warn li{margin:2px 0}
table.heat td{padding:0;min-width:30px;height:22px;text-align:center;font-size:11px;border:1px solid #fff}
table.heat td a{display:block;color:inherit;text-decoration:none;line-height:22px}
table.heat td a:hover{outline:2px solid #1d2430;outline-offset:-2px}
table.heat tbody th{position:sticky;left:0;z-index:1;text-align:left;max-width:300px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
table.heat thead th{vertical-align:bottom;padding:4px 2px}
table.heat thead th.corner{left:0;z-index:3;text-align:left;vertical-align:bottom}
table.heat thead th div{writing-mode:vertical-rl;transform:rotate(180deg);max-height:170px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;margin:0 auto}
.hf0{background:#c43c3c;color:#fff}.hf1{background:#e0705a;color:#fff}.hf2{background:#f2b1a3}
.hp0{background:#bfe5c9}.hp1{background:#6cc08a}.hp2{background:#2e9e5b;color:#fff}
td.name{white-space:normal;overflow-wrap:anywhere;min-width:110px;max-width:230px}
td.wrap{white-space:normal;min-width:80px}
p.note{margin:8px 0 0;font-size:12.5px;color:var(--muted)}
table.trials td.detail{white-space:normal;max-width:420px;overflow-wrap:anywhere;text-align:left}
td.infra{background:repeating-linear-gradient(45deg,#d5d9df 0 4px,#eceef1 4px 8px);color:#5d6776}
td.none{background:#fff;color:#b8bec8}
.sig-up{color:#1f7a44;font-weight:600}.sig-down{color:#b73131;font-weight:600}
details summary{cursor:pointer;color:var(--muted)}
ul.conv{margin:8px 0 0;padding-left:18px;color:var(--muted);font-size:12.5px}
"#;

const VERDICT_COLORS: [(&str, &str); 6] = [
    ("certified", "#2e9e5b"),
    ("unclaimed_success", "#5b8def"),
    ("honest_failure", "#9aa3ad"),
    ("false_completion", "#d64545"),
    ("unverifiable", "#e0a526"),
    ("tampered", "#6b2fa3"),
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
/// The narrowest value column (right of a chart's plot).
const VALUE_W: f64 = 190.0;
const ROW_H: f64 = 24.0;
const TOP: f64 = 26.0;
/// A generous width of one character of the charts' 12 px sans-serif text (digits and most
/// letters are ~6.5 px), for sizing columns so that no label is clipped.
pub(crate) const CHAR_W: f64 = 7.2;
/// Arm labels longer than this are cut (the full name is in the tooltip): they must fit in
/// `LABEL_W` at `CHAR_W`.
const LABEL_CHARS: usize = 30;

/// Width of a value column that holds every one of `labels`, each shown as `main muted`
/// (plain text, before escaping; see [`value_label`]).
fn value_width<'a>(labels: impl IntoIterator<Item = &'a (String, String)>) -> f64 {
    labels
        .into_iter()
        .map(|(main, muted)| format!("{main} {muted}").chars().count() as f64 * CHAR_W + 16.0)
        .fold(VALUE_W, f64::max)
        .ceil()
}

/// Open a chart's `<svg>`: a row per arm of `r`, a value column that holds every one of
/// `values` (see [`value_width`]). Returns the height.
fn svg_open<'a>(
    out: &mut String,
    r: &Report,
    label: &str,
    values: impl IntoIterator<Item = &'a (String, String)>,
) -> f64 {
    let h = TOP + r.arms.len() as f64 * ROW_H + 8.0;
    let w = LABEL_W + PLOT_W + value_width(values);
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

/// Start the chart row of the `i`th arm: its label, left of the plot. Returns the row's
/// vertical middle.
fn arm_row(out: &mut String, i: usize, arm: &ArmStats) -> f64 {
    let y = TOP + i as f64 * ROW_H + ROW_H / 2.0;
    let _ = write!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\"><title>{}</title>{}</text>",
        LABEL_W - 10.0,
        y + 4.0,
        esc(&arm.arm),
        esc(&clip(&arm.arm, LABEL_CHARS))
    );
    y
}

/// A muted note at the start of a chart row in place of its plot (`text` is not escaped).
fn row_note(out: &mut String, y: f64, text: &str) {
    let _ = write!(
        out,
        "<text class=\"muted\" x=\"{:.1}\" y=\"{:.1}\">{text}</text>",
        LABEL_W + 6.0,
        y + 4.0
    );
}

/// A value label right of the plot: `main` then a muted `n=…`.
fn value_label(out: &mut String, y: f64, main: &str, muted: &str) {
    let _ = write!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\">{} <tspan class=\"muted\">{}</tspan></text>",
        LABEL_W + PLOT_W + 10.0,
        y + 4.0,
        esc(main),
        esc(muted)
    );
}

fn percent_ticks() -> Vec<(f64, String)> {
    (0..=4)
        .map(|i| (i as f64 / 4.0, format!("{}%", i * 25)))
        .collect()
}

fn pass_rate_chart(r: &Report) -> String {
    let mut out = String::new();
    let labels: Vec<(String, String)> = r
        .arms
        .iter()
        .map(|a| {
            (
                format!("{} {}", pct(a.pass_rate), ci(a.pass_rate_ci)),
                format!("n={}", a.scored),
            )
        })
        .collect();
    let h = svg_open(
        &mut out,
        r,
        "pass rate per arm with 95% Wilson intervals",
        &labels,
    );
    x_grid(&mut out, h, &percent_ticks());
    for (i, a) in r.arms.iter().enumerate() {
        let y = arm_row(&mut out, i, a);
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
                value_label(&mut out, y, &labels[i].0, &labels[i].1);
            }
            _ => row_note(&mut out, y, &format!("nothing scored ({} infra)", a.infra)),
        }
    }
    out.push_str("</svg>");
    out
}

fn verdict_chart(r: &Report) -> String {
    let mut out = String::new();
    let labels: Vec<(String, String)> = r
        .arms
        .iter()
        .map(|a| {
            (
                format!("false compl. {}/{}", a.false_completion, a.claimed_success),
                pct(a.false_completion_rate),
            )
        })
        .collect();
    let h = svg_open(
        &mut out,
        r,
        "audit verdicts per arm, share of scored trials",
        &labels,
    );
    x_grid(&mut out, h, &percent_ticks());
    let columns = r.verdict_columns();
    for (i, a) in r.arms.iter().enumerate() {
        let y = arm_row(&mut out, i, a);
        let total: usize = a.verdicts.values().sum();
        if total == 0 {
            row_note(&mut out, y, "no audited trial");
            continue;
        }
        let mut x = LABEL_W;
        for v in &columns {
            let n = a.verdicts.get(*v).copied().unwrap_or(0);
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
        value_label(&mut out, y, &labels[i].0, &labels[i].1);
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
    let labels: Vec<Option<(String, String)>> = r
        .arms
        .iter()
        .map(|a| {
            a.agent_seconds.as_ref().map(|t| {
                (
                    format!("med {:.1}s · p90 {:.1}s", t.median, t.p90),
                    format!("n={}", t.n),
                )
            })
        })
        .collect();
    let h = svg_open(
        &mut out,
        r,
        "agent time per trial per arm (box plot)",
        labels.iter().flatten(),
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
        let y = arm_row(&mut out, i, a);
        let (Some(t), Some((main, n))) = (&a.agent_seconds, &labels[i]) else {
            row_note(&mut out, y, "no timed trial");
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
        value_label(&mut out, y, main, n);
    }
    out.push_str("</svg>");
    out
}

fn trim_num(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Width and height of a forest plot; its header axis has the same width, so both share
/// [`forest_x`] and the header's ticks stand over the plots' points.
const FOREST_W: f64 = 200.0;
const FOREST_H: f64 = 20.0;
/// Room left and right of the axis ends, for the outer tick labels (`−30`, `+30`).
const FOREST_PAD: f64 = 16.0;

fn forest_x(v: f64, scale: f64) -> f64 {
    FOREST_W / 2.0 + (v / scale).clamp(-1.0, 1.0) * (FOREST_W / 2.0 - FOREST_PAD)
}

/// The forest plots' column header: an axis with tick labels in points.
fn forest_axis(scale: f64) -> String {
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"forest-axis\" width=\"{FOREST_W}\" height=\"{FOREST_H}\" viewBox=\"0 0 {FOREST_W} {FOREST_H}\" role=\"img\" aria-label=\"difference in points, from −{0} to +{0}\">",
        trim_num(scale)
    );
    for f in [-1.0, -0.5, 0.0, 0.5, 1.0] {
        let v = f * scale;
        let x = forest_x(v, scale);
        let label = if f == 0.0 {
            "0".to_string()
        } else {
            pts(v).trim_end_matches(".0").to_string()
        };
        let zero = if f == 0.0 { " data-zero=\"1\"" } else { "" };
        let _ = write!(
            out,
            "<line{zero} x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"15\" y2=\"20\" stroke=\"#8792a2\"/><text class=\"muted\" x=\"{x:.1}\" y=\"12\" text-anchor=\"middle\">{}</text>",
            esc(&label)
        );
    }
    out.push_str("</svg>");
    out
}

/// A small forest plot of one comparison: the interval of the difference against zero.
fn forest(diff: f64, lo: f64, hi: f64, scale: f64, significant: bool) -> String {
    let color = if !significant {
        "#8792a2"
    } else if diff > 0.0 {
        "#2e9e5b"
    } else {
        "#d64545"
    };
    let zero = forest_x(0.0, scale);
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{FOREST_W}\" height=\"{FOREST_H}\" viewBox=\"0 0 {FOREST_W} {FOREST_H}\"><line data-zero=\"1\" x1=\"{zero:.1}\" x2=\"{zero:.1}\" y1=\"2\" y2=\"18\" stroke=\"#c3c9d2\" stroke-dasharray=\"2 2\"/><line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"10\" y2=\"10\" stroke=\"{color}\" stroke-width=\"2\"/><circle cx=\"{:.1}\" cy=\"10\" r=\"4\" fill=\"{color}\"/></svg>",
        forest_x(lo, scale),
        forest_x(hi, scale),
        forest_x(diff, scale)
    )
}

/// A comparison set as the report's "Comparisons" section shows it (forest plots, verdicts,
/// flips, pairing notes), for a page that shows one outside a report.
pub(crate) fn comparison_html(c: &ComparisonSet) -> String {
    comparisons(c)
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
        "<p class=\"sub\">Paired on tasks, by {}. Forest plots: difference in pass rate (points) with its 95% bootstrap interval; the dashed line is no difference. {} resamples, seed {}.</p>",
        esc(&c.by),
        c.resamples,
        c.seed
    );
    let _ = write!(
        out,
        "<div class=\"scroll\"><table class=\"compare\"><thead><tr><th class=\"l\">arm</th><th class=\"l\">against control</th><th class=\"l\">verdict</th><th>difference [95% CI]</th><th class=\"l\">{}</th><th>p (Holm)</th><th>paired tasks</th><th>pass→fail</th><th>fail→pass</th></tr></thead><tbody>",
        forest_axis(scale)
    );
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
            "<tr title=\"{}\"><td class=\"l name\">{}</td><td class=\"l name\">{}</td><td class=\"l wrap {class}\">{word}</td><td class=\"{class}\">{diff}</td><td class=\"l\">{plot}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
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

/// The heat-map class of a cell with something scored. The hue changes exactly where
/// comparisons draw the line ([`Cell::task_passes`]): reds for tasks that count as failed,
/// greens for tasks that count as passed; the shade says how far from the line.
pub(crate) fn heat_class(c: &Cell) -> &'static str {
    let f = c.passed as f64 / c.scored.max(1) as f64;
    if c.task_passes() {
        match f {
            f if f >= 1.0 => "hp2",
            f if f >= 0.75 => "hp1",
            _ => "hp0",
        }
    } else {
        match f {
            f if f <= 0.0 => "hf0",
            f if f < 0.25 => "hf1",
            _ => "hf2",
        }
    }
}

/// One attempt of a cell: (attempt, trial id, outcome).
type Attempt<'a> = (u32, &'a str, Outcome);

/// The trials of a job by report cell, for links to trial pages: `[task][arm]` → (attempt,
/// id, outcome), sorted by attempt.
pub(crate) struct TrialIndex<'a> {
    cells: Vec<Vec<Vec<Attempt<'a>>>>,
    job: &'a JobData,
}

impl<'a> TrialIndex<'a> {
    /// Index `job`'s trials; `job` must be the job `report` was built from.
    pub(crate) fn new(job: &'a JobData) -> Self {
        let mut cells = vec![vec![Vec::new(); job.arms.len()]; job.tasks.len()];
        for t in &job.trials {
            if let Some(c) = cells
                .get_mut(t.task as usize)
                .and_then(|row: &mut Vec<Vec<_>>| row.get_mut(t.arm as usize))
            {
                c.push((t.attempt, &*t.id, t.outcome));
            }
        }
        for row in &mut cells {
            for c in row.iter_mut() {
                c.sort_by_key(|x| x.0);
            }
        }
        TrialIndex { cells, job }
    }

    /// The trial a heat-map cell links to: its first attempt that did not pass, else its first.
    fn cell_target(&self, task: usize, arm: usize) -> Option<&'a str> {
        let c = self.cells.get(task)?.get(arm)?;
        c.iter()
            .find(|(_, _, o)| !o.passed())
            .or_else(|| c.first())
            .map(|x| x.1)
    }
}

fn heat_map(r: &Report, links: Option<&TrialIndex<'_>>) -> String {
    let mut out = String::new();
    out.push_str("<div class=\"legend\"><span><i class=\"hf0\"></i>no scored attempt passed</span><span><i class=\"hf2\"></i>fewer than half passed</span><span><i class=\"hp0\"></i>half or more passed</span><span><i class=\"hp2\"></i>all passed</span><span><i style=\"background:repeating-linear-gradient(45deg,#d5d9df 0 3px,#eceef1 3px 6px)\"></i>infra errors only (not scored)</span><span><i style=\"background:#fff;border:1px solid #d9dee5\"></i>no trial</span></div>");
    out.push_str("<p class=\"sub\">Red cells count as failed and green cells as passed in comparisons (a task passes for an arm when at least half its scored attempts pass).");
    if links.is_some() {
        out.push_str(" Click a cell for its trial page (the first attempt that did not pass).");
    }
    out.push_str("</p>");
    // wide enough to read, without stretching a few arms across the card
    let _ = write!(
        out,
        "<div class=\"scroll tall\"><table class=\"heat\" style=\"width:min(100%, {}px)\"><thead><tr><th class=\"corner l\">task</th>",
        320 + 180 * r.arms.len()
    );
    for a in &r.arms {
        let _ = write!(
            out,
            "<th title=\"{}\"><div>{}</div></th>",
            esc(&a.arm),
            esc(&clip(&a.arm, 40))
        );
    }
    out.push_str("</tr></thead><tbody>");
    for (ti, t) in r.tasks.iter().enumerate() {
        let _ = write!(out, "<tr><th title=\"{0}\">{0}</th>", esc(&t.task));
        for (a, c) in t.cells.iter().enumerate() {
            let arm = r.arms.get(a).map(|x| x.arm.as_str()).unwrap_or("");
            let (class, text, what) = if c.is_empty() {
                let _ = write!(
                    out,
                    "<td class=\"none\" title=\"{} · {}: no trial\">·</td>",
                    esc(&t.task),
                    esc(arm)
                );
                continue;
            } else if c.scored == 0 {
                (
                    "infra",
                    "I".to_string(),
                    format!("{} (infra only)", glyphs(c)),
                )
            } else {
                (
                    heat_class(c),
                    format!("{}/{}", c.passed, c.scored),
                    format!("{} ({}/{} passed)", glyphs(c), c.passed, c.scored),
                )
            };
            let href = links
                .and_then(|l| l.cell_target(ti, a))
                .and_then(trial_href);
            let _ = write!(
                out,
                "<td class=\"{class}\" title=\"{} · {}: {}\">",
                esc(&t.task),
                esc(arm),
                esc(&what)
            );
            match href {
                Some(h) => {
                    let _ = write!(out, "<a href=\"{}\">{text}</a></td>", esc(&h));
                }
                None => {
                    let _ = write!(out, "{text}</td>");
                }
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>");
    out
}

fn dash(x: Option<String>) -> String {
    x.unwrap_or_else(|| "–".into())
}

fn arms_table(r: &Report) -> String {
    let mut out = String::new();
    let tampered = r.arms.iter().any(|a| a.tampered.is_some());
    out.push_str("<div class=\"scroll\"><table><thead><tr><th class=\"l\">agent</th><th class=\"l\">variant</th><th>tasks</th><th>trials</th><th>scored</th><th>infra (excluded)</th><th>pass rate</th><th>95% CI</th><th>mean reward</th><th>false compl.</th>");
    if tampered {
        out.push_str("<th>tampered</th>");
    }
    out.push_str("<th>agent s median</th><th>agent s p90</th></tr></thead><tbody>");
    for a in &r.arms {
        let _ = write!(
            out,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{} {}</td>",
            esc(&a.agent),
            esc(&a.variant),
            a.tasks,
            a.trials,
            a.scored,
            a.infra,
            pct(a.pass_rate),
            ci(a.pass_rate_ci),
            dash(a.mean_reward.map(|m| format!("{m:.3}"))),
            a.false_completion,
            a.claimed_success,
            pct(a.false_completion_rate),
        );
        if tampered {
            let _ = write!(out, "<td>{}</td>", dash(a.tampered.map(|n| n.to_string())));
        }
        let _ = write!(
            out,
            "<td>{}</td><td>{}</td></tr>",
            dash(a.agent_seconds.as_ref().map(|t| format!("{:.1}", t.median))),
            dash(a.agent_seconds.as_ref().map(|t| format!("{:.1}", t.p90))),
        );
    }
    out.push_str("</tbody></table></div>");
    if r.attempts > 1 {
        out.push_str("<h3>pass@k and pass^k</h3><div class=\"scroll\"><table><thead><tr><th class=\"l\">arm</th>");
        for k in 1..=r.attempts {
            let _ = write!(out, "<th>pass@{k}</th>");
        }
        for k in 2..=r.attempts {
            let _ = write!(out, "<th>pass^{k}</th>");
        }
        out.push_str("</tr></thead><tbody>");
        for a in &r.arms {
            let _ = write!(out, "<tr><td class=\"l\">{}</td>", esc(&a.arm));
            for s in &a.pass_at_k {
                let _ = write!(out, "<td>{}</td>", pct(s.value));
            }
            for s in a.pass_hat_k.iter().filter(|s| s.k >= 2) {
                let _ = write!(out, "<td>{}</td>", pct(s.value));
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table></div>");
    }
    if r.has_usage() {
        out.push_str("<h3>Usage (counted by the model gateway)</h3><div class=\"scroll\"><table><thead><tr><th class=\"l\">arm</th><th>trials with usage</th><th>requests</th><th>input tokens</th><th>output tokens</th><th>cache read</th><th>cost</th><th>cost / solved task</th><th>upstream errors</th><th>budget exhausted</th></tr></thead><tbody>");
        for a in &r.arms {
            let Some(u) = &a.usage else { continue };
            let _ = write!(
                out,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&a.arm),
                u.trials,
                u.requests,
                tokens(u.input_tokens),
                tokens(u.output_tokens),
                tokens(u.cache_read_tokens),
                usd(u.cost_usd),
                dash(u.cost_per_solved_task_usd.map(usd)),
                u.upstream_errors,
                u.budget_exhausted
            );
        }
        out.push_str("</tbody></table></div>");
    }
    let keyed = reward_key_lines(r, &|k| k.to_string());
    if !keyed.is_empty() {
        out.push_str("<ul class=\"conv\">");
        for (arm, keys) in keyed {
            let _ = write!(out, "<li>{}: {}</li>", esc(arm), esc(&keys));
        }
        out.push_str("</ul>");
    }
    out
}

/// Trials listed with links to their pages: the ones that did not pass first (those are the
/// ones a reader opens), at most `TRIALS_LISTED`.
const TRIALS_LISTED: usize = 1000;

fn trials_table(links: &TrialIndex<'_>) -> String {
    let job = links.job;
    let mut order: Vec<&super::load::Trial> = job.trials.iter().collect();
    order.sort_by_key(|t| t.outcome.passed());
    let not_passed = order.iter().filter(|t| !t.outcome.passed()).count();
    let mut out = String::new();
    let _ = write!(
        out,
        "<p class=\"sub\">{} trial(s), {} did not pass; each has a page with its record, trajectory, model calls, change set and logs ({}).</p>",
        job.trials.len(),
        not_passed,
        if job.trials.len() > TRIALS_LISTED {
            format!(
                "the first {TRIALS_LISTED} are listed, those that did not pass first; every page is trials/&lt;id&gt;/trial.html"
            )
        } else {
            "trials that did not pass first".to_string()
        }
    );
    out.push_str("<div class=\"scroll\"><table class=\"trials\"><thead><tr><th class=\"l\">trial</th><th class=\"l\">arm</th><th>attempt</th><th class=\"l\">outcome</th><th class=\"l\">audit</th><th>reward</th><th>agent s</th><th class=\"l\">detail</th></tr></thead><tbody>");
    for t in order.into_iter().take(TRIALS_LISTED) {
        let arm = job
            .arms
            .get(t.arm as usize)
            .map(|a| a.label())
            .unwrap_or_default();
        let id = match trial_href(&t.id) {
            Some(h) => format!("<a href=\"{}\">{}</a>", esc(&h), esc(&t.id)),
            None => esc(&t.id),
        };
        let verdict = match t.verdict {
            Some(v) => v.as_str(),
            None if t.tampered => super::load::TAMPERED,
            None => "–",
        };
        let _ = write!(
            out,
            "<tr><td class=\"l\">{id}</td><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"detail\">{}</td></tr>",
            esc(&arm),
            t.attempt,
            t.outcome.as_str(),
            verdict,
            dash(t.reward.map(|r| format!("{r:.3}"))),
            dash(t.agent_seconds.map(|s| format!("{s:.1}"))),
            esc(&clip(t.detail.as_deref().unwrap_or(""), 160)),
        );
    }
    out.push_str("</tbody></table></div>");
    out
}

/// Render `report.html` with links to the trial pages `trials/<id>/trial.html` (what
/// `write_report` writes). `job` must be the job `r` was built from.
pub(crate) fn html_linked(r: &Report, job: &JobData) -> String {
    render(r, Some(&TrialIndex::new(job)))
}

fn render(r: &Report, links: Option<&TrialIndex<'_>>) -> String {
    let mut out = String::with_capacity(64 * 1024 + r.tasks.len() * r.arms.len() * 160);
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
    let unverified = unverified_line(r)
        .map(|l| format!("<p class=\"note\">{}.</p>", esc(&l)))
        .unwrap_or_default();
    let _ = write!(
        out,
        "<section><h2>Pass rate per arm</h2><p class=\"sub\">Passed ÷ scored trials; whiskers: 95% Wilson interval. Infra errors are excluded.</p><div class=\"scroll\">{}</div>{unverified}</section>",
        pass_rate_chart(r)
    );
    out.push_str("<section><h2>Audit verdicts</h2><p class=\"sub\">The agent's claim set against the verifier, share of scored trials.</p><div class=\"legend\">");
    for name in r.verdict_columns() {
        let _ = write!(
            out,
            "<span><i style=\"background:{}\"></i>{name}</span>",
            verdict_color(name)
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
    if let Some(section) = super::attempts::continuation_section(r) {
        out.push_str(&section);
    }
    let _ = write!(
        out,
        "<section><h2>Agent time per trial</h2><p class=\"sub\">Agent phase of scored trials: whisker min–max, box p25–p75, bar median, red marker p90.</p><div class=\"scroll\">{}</div></section>",
        time_chart(r)
    );
    let _ = write!(
        out,
        "<section><h2>Tasks × arms</h2><p class=\"sub\">Passed / scored attempts per task and arm; hover a cell for each attempt's outcome.</p>{}</section>",
        heat_map(r, links)
    );
    let _ = write!(
        out,
        "<section><h2>Numbers</h2>{}{unverified}</section>",
        arms_table(r)
    );
    if let Some(l) = links {
        let _ = write!(out, "<section><h2>Trials</h2>{}</section>", trials_table(l));
    }
    out.push_str(
        "<section><details><summary>How to read these numbers</summary><ul class=\"conv\">",
    );
    for c in &r.conventions {
        let _ = write!(out, "<li>{}</li>", esc(c));
    }
    out.push_str("</ul></details></section></main></body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::model::{TimeStats, Totals};

    fn cell(scored: usize, passed: usize) -> Cell {
        Cell {
            outcomes: vec![Some("pass".into()); scored],
            scored,
            passed,
        }
    }

    #[test]
    fn html_and_xml_escapes_differ_only_in_apostrophe_and_control_characters() {
        let raw = "a&b<c>\"d'e\tf\ng\rh\u{1}i\u{FFFE}j";
        assert_eq!(
            esc(raw),
            "a&amp;b&lt;c&gt;&quot;d&#39;e\tf\ng\u{FFFD}h\u{FFFD}i\u{FFFE}j"
        );
        assert_eq!(
            crate::report::junit::xml(raw),
            "a&amp;b&lt;c&gt;&quot;d&apos;e\tf\ng\rh\u{FFFD}i\u{FFFD}j"
        );
    }

    #[test]
    fn heat_colours_change_hue_exactly_at_the_pairing_threshold() {
        let pass_side = ["hp0", "hp1", "hp2"];
        let fail_side = ["hf0", "hf1", "hf2"];
        // 2/4 counts as a pass in comparisons, 2/5 does not
        assert!(cell(4, 2).task_passes() && pass_side.contains(&heat_class(&cell(4, 2))));
        assert!(!cell(5, 2).task_passes() && fail_side.contains(&heat_class(&cell(5, 2))));
        for scored in 1..=7 {
            for passed in 0..=scored {
                let c = cell(scored, passed);
                let side = if c.task_passes() {
                    &pass_side
                } else {
                    &fail_side
                };
                assert!(side.contains(&heat_class(&c)), "{passed}/{scored}");
            }
        }
        assert_eq!(heat_class(&cell(3, 0)), "hf0");
        assert_eq!(heat_class(&cell(3, 3)), "hp2");
        // the two sides are different hues in the stylesheet: reds vs greens
        for (class, hue) in [("hf0", "#c43c3c"), ("hf2", "#f2b1a3"), ("hp0", "#bfe5c9")] {
            assert!(
                CSS.contains(&format!(".{class}{{background:{hue}")),
                "{class}"
            );
        }
    }

    fn arm(name: &str, scored: usize, p90: f64) -> ArmStats {
        ArmStats {
            arm: name.into(),
            agent: name.into(),
            variant: "default".into(),
            tasks: 1,
            trials: scored,
            scored,
            infra: 0,
            cancelled: 0,
            passed: scored / 2,
            failed: scored - scored / 2,
            unverified: 0,
            pass_rate: Some(0.5),
            pass_rate_ci: Some([0.4, 0.6]),
            mean_reward: Some(0.5),
            rewarded: scored,
            reward_keys: Default::default(),
            pass_at_k: Vec::new(),
            pass_hat_k: Vec::new(),
            verdicts: Default::default(),
            claimed_success: 0,
            false_completion: 0,
            false_completion_rate: None,
            false_completion_ci: None,
            agent_seconds: Some(TimeStats {
                n: scored,
                min: 1.0,
                p25: 20.0,
                median: 60.0,
                p75: 90.0,
                p90,
                max: p90 * 1.5,
            }),
            usage: None,
            tampered: None,
            continuation: None,
        }
    }

    fn report(arms: Vec<ArmStats>) -> Report {
        Report {
            schema: "arbiter.report.v1".into(),
            job: "j".into(),
            arbiter_version: "0".into(),
            attempts: 1,
            pass_threshold: None,
            conventions: Vec::new(),
            warnings: Vec::new(),
            totals: Totals {
                trials: 0,
                scored: 0,
                infra: 0,
                cancelled: 0,
                passed: 0,
            },
            arms,
            tasks: Vec::new(),
            steps: Vec::new(),
            comparisons: None,
        }
    }

    /// The `(name)="…"` attribute values of `tag` elements, in order.
    fn attrs(svg: &str, tag: &str, name: &str) -> Vec<f64> {
        svg.split(&format!("<{tag} "))
            .skip(1)
            .filter_map(|s| {
                let s = &s[..s.find('>')?];
                let i = s
                    .find(&format!(" {name}=\""))
                    .map(|i| i + 1)
                    .or_else(|| s.starts_with(&format!("{name}=\"")).then_some(0))?;
                let v = &s[i + name.len() + 2..];
                v[..v.find('"')?].parse().ok()
            })
            .collect()
    }

    #[test]
    fn box_plot_value_labels_fit_inside_the_chart_with_long_times_and_big_n() {
        let r = report(vec![arm("slow", 566, 153.4), arm("fast", 12, 3.0)]);
        let svg = time_chart(&r);
        let width = attrs(&svg, "svg", "width")[0];
        let label = "med 60.0s · p90 153.4s n=566";
        assert!(svg.contains("med 60.0s · p90 153.4s <tspan class=\"muted\">n=566</tspan>"));
        let x = LABEL_W + PLOT_W + 10.0;
        assert!(
            x + label.chars().count() as f64 * CHAR_W <= width,
            "label needs {} px from {x}, the chart is {width} wide",
            label.chars().count() as f64 * CHAR_W
        );
    }

    #[test]
    fn forest_header_ticks_stand_over_the_plots_zero_line_and_are_labelled() {
        let scale = 30.0;
        let header = forest_axis(scale);
        let plot = forest(12.0, 2.0, 22.0, scale, true);
        // same width, same zero
        assert_eq!(attrs(&header, "svg", "width"), attrs(&plot, "svg", "width"));
        let zero_plot: Vec<f64> = plot
            .split("<line data-zero=\"1\" ")
            .nth(1)
            .map(|s| attrs(&format!("<line {s}"), "line", "x1"))
            .unwrap_or_default();
        let zero_head: Vec<f64> = header
            .split("<line data-zero=\"1\" ")
            .nth(1)
            .map(|s| attrs(&format!("<line {s}"), "line", "x1"))
            .unwrap_or_default();
        assert_eq!(zero_plot.first(), zero_head.first());
        assert_eq!(zero_head.first(), Some(&(FOREST_W / 2.0)));
        for label in [">−30<", ">−15<", ">0<", ">+15<", ">+30<"] {
            assert!(header.contains(label), "tick label {label} in {header}");
        }
        // the outer labels are inside the header: the ±scale ticks leave room for their text
        let xs = attrs(&header, "text", "x");
        assert!(
            xs[0] - 1.5 * CHAR_W >= 0.0 && xs[4] + 1.5 * CHAR_W <= FOREST_W,
            "{xs:?}"
        );
        // the plotted interval uses the same mapping
        assert_eq!(attrs(&plot, "circle", "cx"), vec![forest_x(12.0, scale)]);
    }
}
