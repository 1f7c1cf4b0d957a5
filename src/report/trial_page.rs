//! Trial pages: `trials/<id>/trial.html`, one self-contained page per trial (inline CSS, no
//! script, nothing fetched; `report.html` links to them). A page shows the record's separate
//! facts side by side (termination, claim, verifier and reward, audit, integrity, usage, the
//! change-set summary, phases, retries), then whatever the trial directory holds: the agent's
//! trajectory (ATIF `agent/trajectory.atif.json`, else `agent/trajectory.json`), the model-call
//! ledger (`agent/model-calls.jsonl`), the change set (`agent/changes.json`) with integrity
//! findings marked, the tails of the agent's and the verifier's logs, validation receipts and
//! the artifacts manifest.
//!
//! Everything on a page may come from the agent (its answer, its logs, file names it created),
//! so every piece of text is escaped, files are read only when they are regular files (never
//! through a symlink), and every section has a size cap: a page over a 2 MB trajectory stays
//! small and renders fast. The record is read as `serde_json::Value` and every section is
//! optional, so records of any arbiter version render.
//!
//! Over 600 lines: one page's sections (facts, trajectory, model calls, change set, logs) share the escaping and folding helpers here; each section is a function.

use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;

use super::ReportError;
use super::load::{JobData, TAMPERED, Trial};
use super::markup::esc;
use super::model::{tokens, usd};
use super::readable::{self, ChangeCounts};
use crate::verifier::integrity::{CHANGES_SCHEMA, ChangeEntry, ChangesFile, summarize};

/// The largest `result.json`, trajectory or change set read whole.
const MAX_JSON_BYTES: u64 = 32 << 20;
/// What is shown of each log: its last bytes.
const LOG_TAIL_BYTES: u64 = 64 << 10;
/// Text longer than this (characters) or than `FOLD_LINES` lines is folded.
const FOLD_CHARS: usize = 1200;
const FOLD_LINES: usize = 16;
/// No single piece of text shows more than this (characters); the file has the rest.
const TEXT_CAP: usize = 16 << 10;
/// At most this much trajectory HTML per page; the steps after it are counted, not shown.
const TRAJECTORY_HTML_CAP: usize = 512 << 10;
const MAX_STEPS: usize = 2000;
const MAX_MODEL_CALLS: usize = 2000;
const MAX_CHANGES: usize = 5000;

/// The page of trial `id`, relative to the job directory (`report.html`'s directory), as a
/// URL path with every byte outside `[A-Za-z0-9._~-]` percent-encoded. `None` when the id
/// cannot be a directory name (empty, `.`, `..`, a `/` or NUL in it): such a trial gets no
/// page, and nothing links to one.
pub(crate) fn trial_href(id: &str) -> Option<String> {
    if !id_is_dir_name(id) {
        return None;
    }
    let mut out = String::from("trials/");
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out.push_str("/trial.html");
    Some(out)
}

fn id_is_dir_name(id: &str) -> bool {
    !id.is_empty() && id != "." && id != ".." && id.len() <= 255 && !id.contains(['/', '\0'])
}

/// What [`write_trial_pages`] did.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct PagesWritten {
    pub written: usize,
    /// Pages left as they were: their inputs (the trial's facts and files) had not changed
    /// since they were written (see [`PageMode::Changed`]).
    pub unchanged: usize,
    /// Trials without a page, with why (an id that is no file name, a trial directory that is
    /// a symlink).
    pub skipped: Vec<String>,
}

impl PagesWritten {
    fn add(&mut self, other: PagesWritten) {
        self.written += other.written;
        self.unchanged += other.unchanged;
        self.skipped.extend(other.skipped);
    }
}

/// Which trial pages [`write_trial_pages`] writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum PageMode {
    /// Pages whose inputs changed, and missing ones: a page carries a fingerprint of what it
    /// was made from (this page format, the job name, the trial's facts from
    /// `trials.jsonl`, and size, mtime and type of each file it reads), and a page whose
    /// fingerprint matches is left alone.
    #[default]
    Changed,
    /// Every page, fingerprints ignored.
    All,
    /// None (report.html still links to pages written earlier).
    None,
}

/// Bump when `render_page`'s output changes, so pages written by an older build are redone.
const PAGE_FORMAT: u32 = 5;
/// The page's second line: `<!-- arbiter-page <64 hex> -->`.
const FINGERPRINT_TAG: &str = "<!-- arbiter-page ";

/// Every file a page reads, relative to the trial directory.
const PAGE_INPUTS: [&str; 11] = [
    "result.json",
    REWARD_FILES[0],
    REWARD_FILES[1],
    TRAJECTORY_FILES[0],
    TRAJECTORY_FILES[1],
    "agent/model-calls.jsonl",
    "agent/changes.json",
    LOGS[0],
    LOGS[1],
    LOGS[2],
    LOGS[3],
];

/// Write `trials/<id>/trial.html` for the trials of `job` (creating the trial directory when
/// a job dir has none, as synthetic ones do), on up to `available_parallelism` threads (at
/// most 8), each with one record in memory at a time: bounded on 100,000 trials. Each page is
/// written atomically (temp file + rename); with [`PageMode::Changed`] an up-to-date page is
/// not rewritten.
pub(crate) fn write_trial_pages(
    job: &JobData,
    mode: PageMode,
) -> Result<PagesWritten, ReportError> {
    if mode == PageMode::None || job.trials.is_empty() {
        return Ok(PagesWritten::default());
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let chunk = job.trials.len().div_ceil(threads);
    if threads == 1 || job.trials.len() < 64 {
        return write_pages(job, &job.trials, mode);
    }
    let parts: Vec<Result<PagesWritten, ReportError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = job
            .trials
            .chunks(chunk)
            .map(|part| scope.spawn(move || write_pages(job, part, mode)))
            .collect();
        handles.into_iter().map(super::join).collect()
    });
    let mut done = PagesWritten::default();
    for part in parts {
        done.add(part?);
    }
    Ok(done)
}

/// The page of trial `id` of `job`, made now (what [`write_trial_pages`] writes); `None` when
/// `job` has no finished trial `id` or its directory is not a plain directory (a symlink is
/// refused, as when pages are written).
pub(crate) fn render_trial(job: &JobData, id: &str) -> Option<String> {
    let t = job.trials.iter().find(|t| &*t.id == id)?;
    if !id_is_dir_name(id) {
        return None;
    }
    let dir = job.dir.join("trials").join(id);
    let meta = std::fs::symlink_metadata(&dir).ok()?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return None;
    }
    let record = read_json(&dir.join("result.json"));
    Some(render_page(&dir, record.as_ref().ok(), Some(t), &job.name))
}

fn write_pages(
    job: &JobData,
    trials: &[Trial],
    mode: PageMode,
) -> Result<PagesWritten, ReportError> {
    let mut done = PagesWritten::default();
    let trials_dir = job.dir.join("trials");
    for t in trials {
        if !id_is_dir_name(&t.id) {
            done.skipped
                .push(format!("{}: the id is not a file name", t.id));
            continue;
        }
        let dir = trials_dir.join(&*t.id);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() || !m.is_dir() => {
                done.skipped
                    .push(format!("{}: trials/{} is not a directory", t.id, t.id));
                continue;
            }
            Ok(_) => {}
            Err(_) => std::fs::create_dir_all(&dir).map_err(ReportError::io(&dir))?,
        }
        let page_path = dir.join("trial.html");
        let print = fingerprint(&dir, t, &job.name);
        if mode == PageMode::Changed && page_fingerprint(&page_path).as_deref() == Some(&*print) {
            done.unchanged += 1;
            continue;
        }
        let record = read_json(&dir.join("result.json"));
        let mut page = render_page(&dir, record.as_ref().ok(), Some(t), &job.name);
        stamp(&mut page, &print);
        write_page(&page_path, page.as_bytes())?;
        done.written += 1;
    }
    Ok(done)
}

/// SHA-256 over what a page is made from: the page format and arbiter's version, the job
/// name, the trial's facts, and each input file's type, size and mtime (a file rewritten in
/// place changes its mtime; one replaced by rename, its inode's).
fn fingerprint(dir: &Path, t: &Trial, job: &str) -> String {
    use std::os::unix::fs::MetadataExt;
    let mut input = format!(
        "{PAGE_FORMAT}\n{}\n{job}\n{t:?}\n",
        env!("CARGO_PKG_VERSION")
    );
    let agent_dir = std::fs::symlink_metadata(dir.join("agent")).ok();
    let verifier_dir = std::fs::symlink_metadata(dir.join("verifier")).is_ok();
    for name in PAGE_INPUTS {
        // a missing agent/ or verifier/ directory means none of its files: no stat each
        let skip = (name.starts_with("agent/") && agent_dir.is_none())
            || (name.starts_with("verifier/") && !verifier_dir);
        let meta = if skip {
            None
        } else {
            std::fs::symlink_metadata(dir.join(name)).ok()
        };
        match meta {
            Some(m) => {
                let _ = writeln!(
                    input,
                    "{name} {:?} {} {} {} {}",
                    m.file_type(),
                    m.len(),
                    m.ino(),
                    m.mtime(),
                    m.mtime_nsec()
                );
            }
            None => {
                let _ = writeln!(input, "{name} -");
            }
        }
    }
    crate::digest::sha256_hex(input.as_bytes())
}

/// Put the fingerprint on the page's second line.
fn stamp(page: &mut String, print: &str) {
    let at = page.find('\n').map_or(0, |i| i + 1);
    page.insert_str(at, &format!("{FINGERPRINT_TAG}{print} -->\n"));
}

/// The fingerprint an existing page carries (only its first bytes are read).
fn page_fingerprint(path: &Path) -> Option<String> {
    let (f, _) = open_regular(path).ok()?;
    let mut head = Vec::with_capacity(160);
    f.take(160).read_to_end(&mut head).ok()?;
    let head = std::str::from_utf8(&head).ok()?;
    let line = head.lines().nth(1)?;
    let hex = line.strip_prefix(FINGERPRINT_TAG)?.strip_suffix(" -->")?;
    (hex.len() == 64).then(|| hex.to_string())
}

/// A page in one write: a temp file (mode 0644, pages are for sharing) renamed over the target.
fn write_page(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".trial.html.")
        .permissions(std::fs::Permissions::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(ReportError::io(path))?;
    tmp.write_all(bytes).map_err(ReportError::io(path))?;
    tmp.persist(path)
        .map_err(|e| ReportError::io(path)(e.error))?;
    Ok(())
}

/// Why a file's content is not shown.
#[derive(Debug)]
enum Unread {
    Missing,
    NotAFile,
    TooLarge(u64),
    Io(String),
    NotJson(String),
}

impl Unread {
    fn words(&self) -> String {
        match self {
            Unread::Missing => "not present".to_string(),
            Unread::NotAFile => "not a regular file (not read)".to_string(),
            Unread::TooLarge(n) => format!("too large to show here ({})", bytes(*n)),
            Unread::Io(e) => format!("unreadable: {e}"),
            Unread::NotJson(e) => format!("not valid JSON: {e}"),
        }
    }
}

/// Open a regular file, refusing symlinks and special files.
fn open_regular(path: &Path) -> Result<(std::fs::File, u64), Unread> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unread::Missing),
        Err(e) => return Err(Unread::Io(e.to_string())),
    };
    if !meta.file_type().is_file() {
        return Err(Unread::NotAFile);
    }
    let f = std::fs::File::open(path).map_err(|e| Unread::Io(e.to_string()))?;
    Ok((f, meta.len()))
}

fn read_json(path: &Path) -> Result<Value, Unread> {
    let (mut f, len) = open_regular(path)?;
    if len > MAX_JSON_BYTES {
        return Err(Unread::TooLarge(len));
    }
    let mut buf = Vec::with_capacity(len as usize);
    f.read_to_end(&mut buf)
        .map_err(|e| Unread::Io(e.to_string()))?;
    serde_json::from_slice(&buf).map_err(|e| Unread::NotJson(e.to_string()))
}

/// The last `max` bytes of a file (from a line start when one is near), and its size.
fn read_tail(path: &Path, max: u64) -> Result<(String, u64), Unread> {
    let (mut f, len) = open_regular(path)?;
    let start = len.saturating_sub(max);
    f.seek(SeekFrom::Start(start))
        .map_err(|e| Unread::Io(e.to_string()))?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    f.take(max)
        .read_to_end(&mut buf)
        .map_err(|e| Unread::Io(e.to_string()))?;
    let mut text = String::from_utf8_lossy(&buf).into_owned();
    if start > 0
        && let Some(i) = text.find('\n').filter(|i| *i < 4096)
    {
        text.drain(..=i);
    }
    Ok((text, len))
}

fn bytes(n: u64) -> String {
    match n {
        0..=1023 => format!("{n} B"),
        1024..=1_048_575 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

/// At most `n` characters of `s`, and whether it was cut.
fn cap(s: &str, n: usize) -> (&str, bool) {
    match s.char_indices().nth(n) {
        Some((i, _)) => (&s[..i], true),
        None => (s, false),
    }
}

/// Text in a `<pre>`, folded behind a summary line when long, capped at `TEXT_CAP`.
fn text_block(out: &mut String, s: &str, class: &str) {
    let (shown, cut) = cap(s, TEXT_CAP);
    let more = if cut {
        format!(
            "\n… ({} more characters not shown)",
            s.chars().count() - TEXT_CAP
        )
    } else {
        String::new()
    };
    let long = shown.len() > FOLD_CHARS || shown.lines().count() > FOLD_LINES;
    if long {
        let first: String = shown
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(120)
            .collect();
        let _ = write!(
            out,
            "<details class=\"fold\"><summary><code>{}</code> … <span class=\"muted\">({} characters, {} lines)</span></summary><pre class=\"{class}\">{}{}</pre></details>",
            esc(&first),
            s.chars().count(),
            s.lines().count(),
            esc(shown),
            esc(&more)
        );
    } else {
        let _ = write!(
            out,
            "<pre class=\"{class}\">{}{}</pre>",
            esc(shown),
            esc(&more)
        );
    }
}

/// A JSON value as readable text: strings as they are, anything else pretty-printed.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

/// A short scalar for a fact table.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "–".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for k in path {
        cur = cur.get(*k)?;
    }
    (!cur.is_null()).then_some(cur)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get(v, path).and_then(Value::as_str)
}

/// `"<label>: <text>"` of an object's two fields (`"<label>"` alone without the text).
fn labelled(v: &Value, label: &str, text: &str) -> String {
    let l = str_at(v, &[label]).unwrap_or("?");
    match str_at(v, &[text]) {
        Some(t) => format!("{l}: {t}"),
        None => l.to_string(),
    }
}

/// A fact card: a title and rows of (key, escaped-or-raw value).
struct Card {
    title: &'static str,
    class: &'static str,
    rows: Vec<(String, String)>,
    extra: String,
}

impl Card {
    fn new(title: &'static str) -> Self {
        Card {
            title,
            class: "",
            rows: Vec::new(),
            extra: String::new(),
        }
    }

    /// A row whose value is plain text (escaped here).
    fn text(&mut self, k: &str, v: impl AsRef<str>) {
        self.rows.push((esc(k), esc(v.as_ref())));
    }

    /// A row from a record field, skipped when absent.
    fn field(&mut self, k: &str, record: &Value, path: &[&str]) {
        if let Some(v) = get(record, path) {
            self.text(k, scalar(v));
        }
    }

    fn render(&self, out: &mut String) {
        let _ = write!(
            out,
            "<div class=\"card {}\"><h3>{}</h3><table class=\"kv\">",
            self.class,
            esc(self.title)
        );
        for (k, v) in &self.rows {
            let _ = write!(out, "<tr><th>{k}</th><td>{v}</td></tr>");
        }
        out.push_str("</table>");
        out.push_str(&self.extra);
        out.push_str("</div>");
    }
}

const CSS: &str = r#"
:root{--fg:#1d2430;--muted:#5d6776;--line:#d9dee5;--bg:#f6f7f9;--card:#fff;--pass:#2e9e5b;--fail:#d64545}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
header{background:#1d2430;color:#fff;padding:16px 28px}
header h1{margin:0;font-size:19px;font-weight:600;overflow-wrap:anywhere}
header p{margin:6px 0 0;color:#cfd6e0}
header a{color:#cfe0ff}
main{max-width:1560px;margin:0 auto;padding:18px 28px 40px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:0 0 18px;overflow-wrap:anywhere}
h2{font-size:16px;margin:0 0 8px}
h3{font-size:13.5px;margin:0 0 6px}
.muted{color:var(--muted)}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12.5px;font-weight:600;background:#e6e9ee;color:#1d2430}
.badge.pass{background:#d3efdc;color:#17663a}.badge.fail{background:#f9d9d9;color:#9c2323}.badge.infra{background:#e6e9ee}.badge.warn{background:#fbecc4;color:#7a5200}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:12px}
.card{border:1px solid #e6e9ee;border-radius:6px;padding:10px 12px;min-width:0}
.card.bad{border-color:#e8a0a0;background:#fff6f6}
table{border-collapse:collapse;font-size:12.5px}
table.kv th{text-align:left;font-weight:500;color:var(--muted);padding:2px 10px 2px 0;vertical-align:top;white-space:nowrap}
table.kv td{padding:2px 0;overflow-wrap:anywhere}
table.grid{width:100%}
table.grid th,table.grid td{padding:3px 8px;border-bottom:1px solid #eef0f3;text-align:left;vertical-align:top}
table.grid th{background:#f9fafb;font-weight:600;position:sticky;top:0}
table.grid td.n{text-align:right;white-space:nowrap}
tr.finding td{background:#fde8e8}
tr.dir td{color:var(--muted);background:#fafbfc}
.scroll{overflow:auto;max-height:640px;border:1px solid #eef0f3;border-radius:6px}
pre{margin:4px 0;padding:8px 10px;background:#f6f8fa;border-radius:5px;white-space:pre-wrap;overflow-wrap:anywhere;font:12px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;max-height:520px;overflow:auto}
pre.log{background:#0f1720;color:#d8dee9}
details.fold summary{cursor:pointer}
details.fold summary code{font-size:12px}
.step{border-left:3px solid #c9d3e0;padding:4px 0 4px 12px;margin:0 0 12px;content-visibility:auto;contain-intrinsic-size:auto 90px}
.step.agent{border-color:#3a6fd8}.step.user{border-color:#2e9e5b}.step.system{border-color:#9aa3ad}
.step h4{margin:0 0 4px;font-size:12.5px;font-weight:600}
.tool{margin:4px 0 4px 8px}
.tool b{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
ul.plain{margin:4px 0;padding-left:18px}
nav.toc{font-size:12.5px;margin:0 0 14px}
nav.toc a{margin-right:12px}
"#;

fn outcome_badge(record: Option<&Value>, trial: Option<&Trial>) -> (String, &'static str) {
    if let Some(t) = trial {
        let class = match t.outcome {
            super::load::Outcome::Passed => "pass",
            super::load::Outcome::Infra | super::load::Outcome::Cancelled => "infra",
            super::load::Outcome::Failed if t.tampered => "warn",
            _ => "fail",
        };
        let word = if t.tampered {
            "tampered".to_string()
        } else {
            t.outcome.as_str().to_string()
        };
        return (word, class);
    }
    let status = record
        .and_then(|r| str_at(r, &["verifier", "status"]))
        .unwrap_or("unknown");
    let class = match status {
        "passed" => "pass",
        _ => "fail",
    };
    (status.to_string(), class)
}

/// Render one trial page. `dir` is the trial directory (files are read from it); `record` is
/// its `result.json` when readable; `trial` the report's compact facts, when known.
pub(crate) fn render_page(
    dir: &Path,
    record: Option<&Value>,
    trial: Option<&Trial>,
    job: &str,
) -> String {
    let empty = Value::Null;
    let rec = record.unwrap_or(&empty);
    let id = str_at(rec, &["id"])
        .map(str::to_string)
        .or_else(|| trial.map(|t| t.id.to_string()))
        .unwrap_or_else(|| "trial".to_string());
    let mut out = String::with_capacity(64 << 10);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>trial {}</title><style>{CSS}</style></head><body>",
        esc(&id)
    );
    let (word, class) = outcome_badge(record, trial);
    let who = ["task", "agent", "variant"]
        .iter()
        .filter_map(|k| str_at(rec, &[k]).map(|v| format!("{k} {v}")))
        .chain(get(rec, &["attempt"]).map(|a| format!("attempt {}", scalar(a))))
        .collect::<Vec<_>>()
        .join(" · ");
    let _ = write!(
        out,
        "<header><h1>{} <span class=\"badge {class}\">{}</span></h1><p>{} · job {} · <a href=\"../../report.html\">report.html</a> · <a href=\"result.json\">result.json</a></p></header><main>",
        esc(&id),
        esc(&word),
        esc(&who),
        esc(job)
    );
    let attempts = super::attempts::attempts_section(rec);
    let _ = write!(
        out,
        "<nav class=\"toc\"><a href=\"#facts\">facts</a>{}<a href=\"#trajectory\">trajectory</a><a href=\"#model-calls\">model calls</a><a href=\"#changes\">change set</a><a href=\"#logs\">logs</a><a href=\"#validation\">validation</a><a href=\"#artifacts\">artifacts</a></nav>",
        if attempts.is_some() {
            "<a href=\"#attempts\">attempts</a>"
        } else {
            ""
        }
    );
    if record.is_none() {
        let why = read_json(&dir.join("result.json"))
            .err()
            .map(|e| e.words())
            .unwrap_or_default();
        let _ = write!(
            out,
            "<section><h2>Record</h2><p>result.json: {}. The facts below are what the job's trials.jsonl says.</p></section>",
            esc(&why)
        );
    }
    facts(&mut out, dir, rec, trial);
    if let Some(section) = &attempts {
        out.push_str(section);
    }
    trajectory(&mut out, dir);
    model_calls(&mut out, dir);
    changes(&mut out, dir, rec);
    logs(&mut out, dir);
    validation(&mut out, rec);
    artifacts(&mut out, rec);
    out.push_str("</main></body></html>\n");
    out
}

fn facts(out: &mut String, dir: &Path, rec: &Value, trial: Option<&Trial>) {
    out.push_str("<section id=\"facts\"><h2>Facts</h2><p class=\"muted\">Each fact is measured apart: how the agent ended, what it claims, what the verifier measured, what the audit concluded, what it changed and what it spent.</p><div class=\"cards\">");
    let mut c = Card::new("Termination");
    c.field("kind", rec, &["termination", "kind"]);
    c.field("exit code", rec, &["termination", "exit_code"]);
    c.field("detail", rec, &["termination", "detail"]);
    if let Some(e) = get(rec, &["infra_error"]) {
        c.class = "bad";
        c.text("infra error", labelled(e, "phase", "message"));
    }
    if c.rows.is_empty()
        && let Some(t) = trial
    {
        // no readable result.json: what trials.jsonl said
        c.text(
            "kind",
            serde_json::to_value(t.termination)
                .ok()
                .as_ref()
                .map(scalar)
                .unwrap_or_default(),
        );
        if let Some(code) = t.exit_code {
            c.text("exit code", code.to_string());
        }
        if let Some(d) = &t.detail {
            c.text("detail", d);
        }
    }
    c.render(out);

    let mut c = Card::new("Claim (what the agent says)");
    c.field("status", rec, &["claim", "status"]);
    c.field("source", rec, &["claim", "source"]);
    c.field("semantic status", rec, &["claim", "semantic_status"]);
    c.field("error", rec, &["claim", "error"]);
    for key in ["llm_call_count", "tool_call_count", "action_count"] {
        c.field(&key.replace('_', " "), rec, &["claim", "record", key]);
    }
    let answer = ["final_answer", "answer"]
        .iter()
        .find_map(|k| get(rec, &["claim", "record", k]))
        .or_else(|| {
            ["final_answer", "answer"]
                .iter()
                .find_map(|k| get(rec, &["completion", "record", k]))
        });
    if let Some(a) = answer {
        let mut block = String::from("<h3>final answer</h3>");
        text_block(&mut block, &as_text(a), "");
        c.extra = block;
    }
    c.render(out);

    let mut c = Card::new("Verifier (what was measured)");
    c.field("status", rec, &["verifier", "status"]);
    c.field("mode", rec, &["verifier", "mode"]);
    c.field("exit code", rec, &["verifier", "exit_code"]);
    if let Some(Value::Object(m)) = get(rec, &["verifier", "reward"]) {
        let source = REWARD_FILES
            .into_iter()
            .find(|f| dir.join(f).symlink_metadata().is_ok_and(|m| m.is_file()));
        c.text("reward", readable::reward(m, source));
    } else if rec.get("verifier").is_some() {
        c.text("reward", "none (not a zero: the verifier wrote no reward)");
    }
    c.field("detail", rec, &["verifier", "detail"]);
    if c.rows.is_empty()
        && let Some(t) = trial
    {
        c.text("outcome", t.outcome.as_str());
    }
    c.render(out);

    let mut c = Card::new("Audit");
    match get(rec, &["audit"]) {
        Some(a) => {
            c.field("verdict", a, &["verdict"]);
            if str_at(a, &["verdict"]) == Some(TAMPERED) {
                c.class = "bad";
            }
            if let Some(Value::Array(v)) = get(a, &["violations"]) {
                for x in v {
                    c.text("violation", labelled(x, "kind", "detail"));
                }
            }
            if let Some(Value::Array(v)) = get(a, &["evidence"]) {
                let mut list = String::from("<h3>evidence</h3><ul class=\"plain\">");
                for e in v.iter().take(50) {
                    let _ = write!(list, "<li>{}</li>", esc(cap(&scalar(e), 2000).0));
                }
                list.push_str("</ul>");
                c.extra = list;
            }
        }
        None => c.text("verdict", "none (not scored)"),
    }
    c.render(out);

    let mut c = Card::new("Integrity (what the agent changed)");
    match get(rec, &["integrity"]) {
        Some(i) => {
            c.field("status", i, &["status"]);
            if str_at(i, &["status"]) == Some("suspect") {
                c.class = "bad";
            }
            if let Some(Value::Array(f)) = get(i, &["findings"]) {
                c.text("findings", f.len().to_string());
                let mut list = String::from("<ul class=\"plain\">");
                for x in f.iter().take(50) {
                    let _ = write!(
                        list,
                        "<li><b>{}</b> <code>{}</code> {}</li>",
                        esc(str_at(x, &["class"]).unwrap_or("finding")),
                        esc(str_at(x, &["path"]).unwrap_or("?")),
                        esc(str_at(x, &["why"]).unwrap_or(""))
                    );
                }
                list.push_str("</ul>");
                c.extra = list;
            }
        }
        None => c.text("status", "not recorded"),
    }
    if let Some(counts) = get(rec, &["changes"]).and_then(ChangeCounts::of_record) {
        c.text("changes", counts.text());
    }
    c.render(out);

    let mut c = Card::new("Usage (counted by the gateway)");
    match get(rec, &["usage"]) {
        Some(u) => {
            c.field("requests", u, &["requests"]);
            for k in ["input_tokens", "output_tokens", "cache_read_tokens"] {
                if let Some(n) = get(u, &[k]).and_then(Value::as_u64) {
                    c.text(&k.replace('_', " "), tokens(n));
                }
            }
            if let Some(x) = get(u, &["cost_usd"]).and_then(Value::as_f64) {
                c.text("cost", usd(x));
            }
            if let Some(Value::Object(m)) = get(u, &["upstream_errors"]) {
                let v: Vec<String> = m
                    .iter()
                    .map(|(k, n)| format!("{k}: {}", scalar(n)))
                    .collect();
                c.text(
                    "upstream errors",
                    if v.is_empty() {
                        "none".into()
                    } else {
                        v.join(", ")
                    },
                );
            }
            if let Some(b) = get(u, &["budget"]) {
                c.text("budget", readable::budget(b));
                if get(b, &["exhausted"]).and_then(Value::as_bool) == Some(true) {
                    c.class = "bad";
                }
            }
        }
        None => c.text("usage", "none (no model call through the gateway)"),
    }
    c.render(out);

    let mut c = Card::new("Phases and retries");
    if let Some(Value::Object(p)) = get(rec, &["phases"]) {
        for (k, v) in p {
            if let Some(s) = get(v, &["seconds"]).and_then(Value::as_f64) {
                c.text(k, format!("{s:.2} s"));
            }
        }
    }
    c.field("retries", rec, &["retries"]);
    if let Some(Value::Array(v)) = get(rec, &["previous_errors"]) {
        for e in v {
            c.text("previous error", labelled(e, "phase", "message"));
        }
    }
    c.field("started", rec, &["started_at"]);
    c.field("finished", rec, &["finished_at"]);
    c.field("image", rec, &["image"]);
    if let Some(l) = get(rec, &["limits"]) {
        c.text("limits", readable::limits(l));
    }
    if let Some(n) = get(rec, &["network"])
        && let Ok(n) = serde_json::from_value::<crate::trial::NetworkRecord>(n.clone())
    {
        c.text("egress", n.summary());
    }
    if let Some(Value::Object(o)) = get(rec, &["overrides"])
        && !o.is_empty()
    {
        c.text("overrides", readable::overrides(o));
    }
    c.render(out);
    out.push_str("</div></section>");
}

/// The verifier's reward files as the trial dir keeps them; `reward.json` wins when both exist.
const REWARD_FILES: [&str; 2] = ["verifier/reward.json", "verifier/reward.txt"];

/// Where a trajectory is: the ATIF export first, then the agent's own file.
const TRAJECTORY_FILES: [&str; 2] = ["agent/trajectory.atif.json", "agent/trajectory.json"];

fn trajectory(out: &mut String, dir: &Path) {
    out.push_str("<section id=\"trajectory\"><h2>Trajectory</h2>");
    let mut found = None;
    for name in TRAJECTORY_FILES {
        match read_json(&dir.join(name)) {
            Ok(v) => {
                found = Some((name, v));
                break;
            }
            Err(Unread::Missing) => {}
            Err(e) => {
                let _ = write!(
                    out,
                    "<p><a href=\"{name}\">{name}</a>: {}</p>",
                    esc(&e.words())
                );
            }
        }
    }
    // Else the agent's own JSON event stream on stdout (Claude Code's `stream-json`, Codex's
    // `--json`): one event per line, shown as steps.
    let found = found.or_else(|| event_stream(&dir.join(EVENT_STREAM)).map(|v| (EVENT_STREAM, v)));
    let Some((name, v)) = found else {
        out.push_str("<p class=\"muted\">No trajectory in this trial (agent/trajectory.atif.json, agent/trajectory.json, or a JSON event stream on agent/stdout.log).</p></section>");
        return;
    };
    let _ = write!(
        out,
        "<p class=\"muted\">From <a href=\"{name}\">{name}</a>."
    );
    if let Some(a) = v.get("agent") {
        let who: Vec<String> = ["name", "version", "model_name"]
            .iter()
            .filter_map(|k| str_at(a, &[k]).map(str::to_string))
            .collect();
        if !who.is_empty() {
            let _ = write!(out, " Agent: {}.", esc(&who.join(" ")));
        }
    }
    out.push_str("</p>");
    let steps: Option<&Vec<Value>> = v
        .get("steps")
        .or_else(|| v.get("messages"))
        .or_else(|| v.get("history"))
        .and_then(Value::as_array)
        .or_else(|| v.as_array());
    match steps {
        Some(steps) => {
            let start = out.len();
            for (i, s) in steps.iter().enumerate() {
                if i >= MAX_STEPS || out.len() - start > TRAJECTORY_HTML_CAP {
                    let _ = write!(
                        out,
                        "<p class=\"muted\">… {} more step(s) not shown; the file has them all.</p>",
                        steps.len() - i
                    );
                    break;
                }
                step(out, i, s);
            }
            if let Some(m) = v.get("final_metrics") {
                out.push_str("<h3>final metrics</h3>");
                text_block(out, &as_text(m), "");
            }
        }
        None => text_block(out, &as_text(&v), ""),
    }
    out.push_str("</section>");
}

/// The agent's stdout, read as a trajectory when it is a JSON event stream.
const EVENT_STREAM: &str = "agent/stdout.log";

/// The events of a JSON Lines stream (every non-empty line a JSON object with a `type`), as
/// an array; `None` when the file is absent, too large, or not such a stream.
fn event_stream(path: &Path) -> Option<Value> {
    let (mut f, len) = open_regular(path).ok()?;
    if len == 0 || len > MAX_JSON_BYTES {
        return None;
    }
    let mut text = String::new();
    f.read_to_string(&mut text).ok()?;
    let mut events = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).ok()?;
        v.get("type").and_then(Value::as_str)?;
        events.push(v);
    }
    (!events.is_empty()).then_some(Value::Array(events))
}

/// Text of a message: a string, the text parts of a content array (tool calls and their
/// results named), a message object's `content`, else JSON.
fn message_text(v: &Value) -> String {
    match v {
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.clone(),
                other => match str_at(other, &["type"]) {
                    Some("tool_use") => format!(
                        "→ {} {}",
                        str_at(other, &["name"]).unwrap_or("tool"),
                        other.get("input").map(as_text).unwrap_or_default()
                    ),
                    Some("tool_result") => format!(
                        "← {}",
                        other.get("content").map(message_text).unwrap_or_default()
                    ),
                    _ => other
                        .get("text")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                        .unwrap_or_else(|| as_text(other)),
                },
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) if o.contains_key("content") => message_text(&o["content"]),
        other => as_text(other),
    }
}

fn step(out: &mut String, i: usize, s: &Value) {
    let source = str_at(s, &["source"])
        .or_else(|| str_at(s, &["role"]))
        .or_else(|| str_at(s, &["type"]))
        .unwrap_or("step");
    let class = match source {
        "agent" | "assistant" => "agent",
        "user" | "tool" => "user",
        _ => "system",
    };
    let n = get(s, &["step_id"])
        .map(scalar)
        .unwrap_or_else(|| (i + 1).to_string());
    let mut head = format!("#{} · {}", n, source);
    for k in ["timestamp", "model_name"] {
        if let Some(v) = str_at(s, &[k]) {
            let _ = write!(head, " · {v}");
        }
    }
    if let Some(m) = s.get("metrics") {
        let p = get(m, &["prompt_tokens"]).map(scalar);
        let c = get(m, &["completion_tokens"]).map(scalar);
        if p.is_some() || c.is_some() {
            let _ = write!(
                head,
                " · tokens {} in / {} out",
                p.unwrap_or_else(|| "?".into()),
                c.unwrap_or_else(|| "?".into())
            );
        }
    }
    let _ = write!(out, "<div class=\"step {class}\"><h4>{}</h4>", esc(&head));
    if let Some(m) = s
        .get("message")
        .or_else(|| s.get("content"))
        .filter(|m| !m.is_null())
    {
        let t = message_text(m);
        if !t.is_empty() {
            text_block(out, &t, "");
        }
    }
    if let Some(r) = str_at(s, &["reasoning_content"]) {
        out.push_str("<div class=\"tool muted\">reasoning</div>");
        text_block(out, r, "");
    }
    if let Some(Value::Array(calls)) = s.get("tool_calls") {
        for c in calls {
            let name = str_at(c, &["function_name"])
                .or_else(|| str_at(c, &["function", "name"]))
                .or_else(|| str_at(c, &["name"]))
                .unwrap_or("tool");
            let args = c
                .get("arguments")
                .or_else(|| get(c, &["function", "arguments"]))
                .or_else(|| c.get("input"))
                .map(as_text)
                .unwrap_or_default();
            let _ = write!(out, "<div class=\"tool\">→ <b>{}</b></div>", esc(name));
            if !args.is_empty() {
                text_block(out, &args, "");
            }
        }
    }
    if let Some(Value::Array(results)) = get(s, &["observation", "results"]) {
        for r in results {
            let _ = write!(
                out,
                "<div class=\"tool muted\">← output{}</div>",
                str_at(r, &["source_call_id"])
                    .map(|id| format!(" of {}", esc(id)))
                    .unwrap_or_default()
            );
            text_block(
                out,
                &r.get("content").map(message_text).unwrap_or_default(),
                "log",
            );
        }
    }
    out.push_str("</div>");
}

fn first_of<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().find_map(|k| {
        let mut cur = v;
        for part in k.split('.') {
            cur = cur.get(part)?;
        }
        (!cur.is_null()).then_some(cur)
    })
}

/// The file's content, or `None` after writing why there is none (`missing` when absent)
/// and closing the section.
fn present<T>(out: &mut String, r: Result<T, Unread>, name: &str, missing: &str) -> Option<T> {
    match r {
        Ok(x) => Some(x),
        Err(Unread::Missing) => {
            let _ = write!(out, "<p class=\"muted\">{}</p></section>", esc(missing));
            None
        }
        Err(e) => {
            let _ = write!(out, "<p>{}: {}</p></section>", esc(name), esc(&e.words()));
            None
        }
    }
}

fn model_calls(out: &mut String, dir: &Path) {
    out.push_str("<section id=\"model-calls\"><h2>Model calls</h2>");
    let name = "agent/model-calls.jsonl";
    let Some((f, len)) = present(
        out,
        open_regular(&dir.join(name)),
        name,
        "No model-call ledger (agent/model-calls.jsonl): the agent made no call through the gateway.",
    ) else {
        return;
    };
    let _ = write!(
        out,
        "<p class=\"muted\">From <a href=\"{name}\">{name}</a> ({}).</p><div class=\"scroll\"><table class=\"grid\"><thead><tr><th>#</th><th>time</th><th>api</th><th>model</th><th>status</th><th>latency</th><th>input tok</th><th>output tok</th><th>cache read</th><th>cost</th><th>stop reason</th><th>error</th></tr></thead><tbody>",
        bytes(len)
    );
    let reader = std::io::BufReader::new(f.take(MAX_JSON_BYTES));
    let (mut shown, mut more, mut bad) = (0usize, 0usize, 0usize);
    use std::io::BufRead;
    for line in reader.split(b'\n') {
        let Ok(line) = line else { break };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if shown >= MAX_MODEL_CALLS {
            more += 1;
            continue;
        }
        let Ok(v) = serde_json::from_slice::<Value>(&line) else {
            bad += 1;
            continue;
        };
        shown += 1;
        let cell = |keys: &[&str]| first_of(&v, keys).map(scalar).unwrap_or_default();
        let latency = match (
            first_of(&v, &["latency_ms", "duration_ms"]).and_then(Value::as_f64),
            first_of(&v, &["latency_sec", "latency_s", "seconds"]).and_then(Value::as_f64),
        ) {
            (Some(ms), _) => format!("{:.2} s", ms / 1000.0),
            (None, Some(s)) => format!("{s:.2} s"),
            _ => String::new(),
        };
        let status = cell(&["status", "http_status", "status_code"]);
        let error = cell(&["error", "error.message", "error_kind"]);
        let row_class = match status.parse::<u16>() {
            Ok(s) if s >= 400 => " class=\"finding\"",
            _ if !error.is_empty() => " class=\"finding\"",
            _ => "",
        };
        let cost = first_of(&v, &["cost_usd", "usage.cost_usd"])
            .and_then(Value::as_f64)
            .map(usd)
            .unwrap_or_default();
        let _ = write!(
            out,
            "<tr{row_class}><td class=\"n\">{shown}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(&cell(&["time", "ts", "started_at", "timestamp"])),
            esc(&cell(&["api", "protocol"])),
            esc(&cell(&["model"])),
            esc(&status),
            esc(&latency),
            esc(&cell(&[
                "input_tokens",
                "usage.input_tokens",
                "tokens.input"
            ])),
            esc(&cell(&[
                "output_tokens",
                "usage.output_tokens",
                "tokens.output"
            ])),
            esc(&cell(&[
                "cache_read_tokens",
                "usage.cache_read_tokens",
                "tokens.cache_read"
            ])),
            esc(&cost),
            esc(&cell(&["stop_reason", "finish_reason"])),
            esc(cap(&error, 300).0),
        );
    }
    out.push_str("</tbody></table></div>");
    if more > 0 || bad > 0 {
        let _ = write!(
            out,
            "<p class=\"muted\">{} more call(s) not listed; {} unreadable line(s).</p>",
            more, bad
        );
    }
    out.push_str("</section>");
}

/// One entry of a change set, whatever shape the file has.
struct Change {
    kind: String,
    path: String,
    kind_of_file: String,
    size: String,
    mode: String,
    target: String,
}

fn change_of(kind: &str, v: &Value) -> Change {
    let field = |k: &[&str]| first_of(v, k).map(scalar).unwrap_or_default();
    Change {
        kind: str_at(v, &["kind"])
            .or_else(|| str_at(v, &["change"]))
            .or_else(|| str_at(v, &["op"]))
            .unwrap_or(kind)
            .to_string(),
        path: v
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| field(&["path"])),
        kind_of_file: field(&["type", "file_type"]),
        size: first_of(v, &["size"])
            .and_then(Value::as_u64)
            .map(bytes)
            .unwrap_or_default(),
        mode: field(&["mode"]),
        target: field(&["target", "link_target", "symlink_target", "link"]),
    }
}

/// The rows of a change-set file and their counts.
struct Listed {
    list: Vec<Change>,
    counts: ChangeCounts,
    workdir: Option<String>,
    /// Parent directories listed only because something beneath them changed: neither
    /// counted (as in the record's `changes`) nor listed.
    implied: usize,
}

/// An `arbiter.changes.v1` file is counted the way the record's `changes` was
/// ([`summarize`]); a file of another shape has its rows counted.
fn listed(v: &Value) -> Listed {
    if str_at(v, &["schema"]) == Some(CHANGES_SCHEMA)
        && let Ok(file) = <ChangesFile as serde::Deserialize>::deserialize(v)
    {
        let counts = ChangeCounts::of_summary(&summarize(&file.entries, &file.workdir));
        let implied = file.entries.iter().filter(|e| e.implied).count();
        let list = file
            .entries
            .iter()
            .filter(|e| !e.implied)
            .map(change_of_entry)
            .collect();
        return Listed {
            list,
            counts,
            workdir: Some(file.workdir),
            implied,
        };
    }
    let mut list: Vec<Change> = Vec::new();
    let entries = v
        .get("changes")
        .or_else(|| v.get("entries"))
        .and_then(Value::as_array)
        .or_else(|| v.as_array());
    match entries {
        Some(items) => list.extend(items.iter().map(|x| change_of("changed", x))),
        None => {
            for kind in ["added", "modified", "deleted"] {
                if let Some(Value::Array(items)) = v.get(kind) {
                    list.extend(items.iter().map(|x| change_of(kind, x)));
                }
            }
        }
    }
    let count = |k: &str| list.iter().filter(|c| c.kind == k).count() as u64;
    let counts = ChangeCounts {
        added: count("added"),
        modified: count("modified"),
        deleted: count("deleted"),
        outside_workdir: None,
    };
    Listed {
        list,
        counts,
        workdir: None,
        implied: 0,
    }
}

fn change_of_entry(e: &ChangeEntry) -> Change {
    let word = |v: serde_json::Result<Value>| v.ok().as_ref().map(scalar).unwrap_or_default();
    Change {
        kind: word(serde_json::to_value(e.kind)),
        path: e.path.clone(),
        kind_of_file: word(serde_json::to_value(e.file_type)),
        size: e.size.map(bytes).unwrap_or_default(),
        mode: e
            .mode
            .map(|m| format!("{:04o}", m & 0o7777))
            .unwrap_or_default(),
        target: e.link_target.clone().unwrap_or_default(),
    }
}

fn changes(out: &mut String, dir: &Path, rec: &Value) {
    out.push_str("<section id=\"changes\"><h2>Change set</h2>");
    let name = "agent/changes.json";
    let Some(v) = present(
        out,
        read_json(&dir.join(name)),
        name,
        "No change set in this trial (agent/changes.json).",
    ) else {
        return;
    };
    let Listed {
        mut list,
        counts,
        workdir,
        implied,
    } = listed(&v);
    let findings: std::collections::HashMap<&str, (&str, &str)> =
        match get(rec, &["integrity", "findings"]) {
            Some(Value::Array(f)) => f
                .iter()
                .filter_map(|x| {
                    Some((
                        str_at(x, &["path"])?,
                        (
                            str_at(x, &["class"]).unwrap_or("finding"),
                            str_at(x, &["why"]).unwrap_or(""),
                        ),
                    ))
                })
                .collect(),
            _ => Default::default(),
        };
    list.sort_by(|a, b| a.path.cmp(&b.path));
    let _ = write!(
        out,
        "<p class=\"muted\">From <a href=\"{name}\">{name}</a>{}: <span class=\"counts\">{}</span>.{} {} integrity finding(s) marked in red.</p>",
        workdir
            .map(|w| format!(" (working dir <code>{}</code>)", esc(&w)))
            .unwrap_or_default(),
        esc(&counts.text()),
        if implied > 0 {
            format!(
                " Not counted or listed: {implied} parent director{} the engine lists only because something beneath changed.",
                if implied == 1 { "y" } else { "ies" }
            )
        } else {
            String::new()
        },
        findings.len()
    );
    out.push_str("<div class=\"scroll\"><table class=\"grid\"><thead><tr><th>path</th><th>change</th><th>type</th><th>size</th><th>mode</th><th>target</th><th>finding</th></tr></thead><tbody>");
    let mut last_dir = String::new();
    for c in list.iter().take(MAX_CHANGES) {
        let (parent, file) = match c.path.rfind('/') {
            Some(i) => (&c.path[..=i], &c.path[i + 1..]),
            None => ("", c.path.as_str()),
        };
        if parent != last_dir {
            let _ = write!(
                out,
                "<tr class=\"dir\"><td colspan=\"7\">{}</td></tr>",
                esc(parent)
            );
            last_dir = parent.to_string();
        }
        let finding = findings.get(c.path.as_str());
        let _ = write!(
            out,
            "<tr{}><td>&nbsp;&nbsp;{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if finding.is_some() {
                " class=\"finding\""
            } else {
                ""
            },
            esc(file),
            esc(&c.kind),
            esc(&c.kind_of_file),
            esc(&c.size),
            esc(&c.mode),
            esc(&c.target),
            finding
                .map(|(class, why)| format!("<b>{}</b> {}", esc(class), esc(why)))
                .unwrap_or_default()
        );
    }
    out.push_str("</tbody></table></div>");
    if list.len() > MAX_CHANGES {
        let _ = write!(
            out,
            "<p class=\"muted\">… {} more change(s) not listed.</p>",
            list.len() - MAX_CHANGES
        );
    }
    out.push_str("</section>");
}

const LOGS: [&str; 4] = [
    "agent/stdout.log",
    "agent/stderr.log",
    "verifier/stdout.log",
    "verifier/stderr.log",
];

fn logs(out: &mut String, dir: &Path) {
    out.push_str("<section id=\"logs\"><h2>Logs</h2>");
    for name in LOGS {
        match read_tail(&dir.join(name), LOG_TAIL_BYTES) {
            Ok((text, len)) => {
                let _ = write!(
                    out,
                    "<h3><a href=\"{name}\">{name}</a> <span class=\"muted\">({}{})</span></h3>",
                    bytes(len),
                    if len > LOG_TAIL_BYTES {
                        format!(", last {} shown", bytes(LOG_TAIL_BYTES))
                    } else {
                        String::new()
                    }
                );
                if text.is_empty() {
                    out.push_str("<p class=\"muted\">empty</p>");
                } else {
                    let _ = write!(out, "<pre class=\"log\">{}</pre>", esc(&text));
                }
            }
            Err(e) => {
                let _ = write!(
                    out,
                    "<h3>{name} <span class=\"muted\">({})</span></h3>",
                    esc(&e.words())
                );
            }
        }
    }
    out.push_str("</section>");
}

fn validation(out: &mut String, rec: &Value) {
    out.push_str("<section id=\"validation\"><h2>Validation receipts</h2>");
    let Some(Value::Array(v)) = get(rec, &["validation"]) else {
        out.push_str(
            "<p class=\"muted\">No validation command ran (the task declares none).</p></section>",
        );
        return;
    };
    out.push_str("<div class=\"scroll\"><table class=\"grid\"><thead><tr><th>id</th><th>argv</th><th>exit</th><th>seconds</th><th>timed out</th><th>stdout</th><th>stderr</th></tr></thead><tbody>");
    for r in v {
        let argv = match get(r, &["argv"]) {
            Some(Value::Array(a)) => a.iter().map(scalar).collect::<Vec<_>>().join(" "),
            Some(other) => scalar(other),
            None => String::new(),
        };
        let exit = get(r, &["exit_code"])
            .map(scalar)
            .unwrap_or_else(|| "none".into());
        let bad = exit != "0";
        let out_of = |k: &str| {
            format!(
                "{} · sha256 {}",
                get(r, &[&format!("{k}_bytes")])
                    .and_then(Value::as_u64)
                    .map(bytes)
                    .unwrap_or_default(),
                cap(str_at(r, &[&format!("{k}_sha256")]).unwrap_or(""), 16).0
            )
        };
        let _ = write!(
            out,
            "<tr{}><td>{}</td><td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if bad { " class=\"finding\"" } else { "" },
            esc(&get(r, &["id"]).map(scalar).unwrap_or_default()),
            esc(cap(&argv, 500).0),
            esc(&exit),
            esc(&get(r, &["seconds"])
                .and_then(Value::as_f64)
                .map(|s| format!("{s:.2}"))
                .unwrap_or_default()),
            esc(&get(r, &["timed_out"]).map(scalar).unwrap_or_default()),
            esc(&out_of("stdout")),
            esc(&out_of("stderr")),
        );
    }
    out.push_str("</tbody></table></div></section>");
}

fn artifacts(out: &mut String, rec: &Value) {
    out.push_str("<section id=\"artifacts\"><h2>Artifacts</h2>");
    let mut any = false;
    for (title, key) in [
        ("collected files (artifacts/manifest.json)", "artifacts"),
        ("declared deliverables", "deliverables"),
        ("files the completion record names", "observed_files"),
    ] {
        let Some(Value::Array(v)) = get(rec, &[key]) else {
            continue;
        };
        if v.is_empty() {
            continue;
        }
        any = true;
        let _ = write!(
            out,
            "<h3>{}</h3><div class=\"scroll\"><table class=\"grid\"><thead><tr><th>path</th><th>status</th><th>size</th><th>sha256</th><th>detail</th></tr></thead><tbody>",
            esc(title)
        );
        for a in v.iter().take(MAX_CHANGES) {
            let status = get(a, &["status"]).map(scalar).unwrap_or_default();
            let _ = write!(
                out,
                "<tr{}><td>{}</td><td>{}</td><td class=\"n\">{}</td><td><code>{}</code></td><td>{}</td></tr>",
                if status == "ok" || status == "present" {
                    ""
                } else {
                    " class=\"finding\""
                },
                esc(&get(a, &["path"]).map(scalar).unwrap_or_default()),
                esc(&status),
                esc(&get(a, &["size"])
                    .and_then(Value::as_u64)
                    .map(bytes)
                    .unwrap_or_default()),
                esc(&get(a, &["sha256"]).map(scalar).unwrap_or_default()),
                esc(&get(a, &["detail"])
                    .or_else(|| get(a, &["goal"]))
                    .map(scalar)
                    .unwrap_or_default()),
            );
        }
        out.push_str("</tbody></table></div>");
    }
    if let Some(t) = get(rec, &["trajectory"]) {
        any = true;
        let _ = write!(
            out,
            "<p>trajectory file: <code>{}</code> ({})</p>",
            esc(&get(t, &["path"]).map(scalar).unwrap_or_default()),
            esc(&get(t, &["status"]).map(scalar).unwrap_or_default())
        );
    }
    if !any {
        out.push_str("<p class=\"muted\">No artifact was collected.</p>");
    }
    out.push_str("</section>");
}

#[cfg(test)]
mod tests {
    use super::render_page;

    /// A preset's JSON event stream on stdout is the trajectory when no file is exported.
    #[test]
    fn a_json_event_stream_on_stdout_is_shown_as_the_trajectory() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(tmp.path().join("agent")).expect("agent dir");
        std::fs::write(
            tmp.path().join("agent/stdout.log"),
            include_str!("../../tests/fixtures/agents/claude-code/stream-success.jsonl"),
        )
        .expect("stdout");
        let page = render_page(tmp.path(), None, None, "job");
        assert!(
            page.contains("From <a href=\"agent/stdout.log\">"),
            "{page}"
        );
        assert!(page.contains("→ Bash"), "the tool call is named");
        assert!(page.contains("echo hello &gt; /tmp/fx/work/out.txt"));
        assert!(page.contains("I wrote out.txt."));

        // Plain text on stdout is no trajectory.
        std::fs::write(tmp.path().join("agent/stdout.log"), "hello\n{\"type\":1}\n").expect("w");
        let page = render_page(tmp.path(), None, None, "job");
        assert!(page.contains("No trajectory in this trial"), "{page}");
    }

    /// The egress proxy's attempts are summed up in one row.
    #[test]
    fn egress_attempts_are_one_row() {
        let tmp = tempfile::tempdir().expect("tmp");
        let rec = serde_json::json!({"id": "t1", "network": {"egress": [
            {"phase": "agent", "host": "127.0.0.1", "port": 8080, "allowed": true},
            {"phase": "agent", "host": "example.invalid", "port": 443, "allowed": false},
            {"phase": "agent", "host": "example.invalid", "port": 443, "allowed": false}
        ], "egress_dropped": 0}});
        let page = render_page(tmp.path(), Some(&rec), None, "job");
        assert!(page.contains("egress"), "{page}");
        assert!(page.contains("3 attempts"), "{page}");
        assert!(page.contains("example.invalid:443 (agent) ×2"), "{page}");
        let page = render_page(
            tmp.path(),
            Some(&serde_json::json!({"id": "t2"})),
            None,
            "job",
        );
        assert!(!page.contains("attempts"), "no proxy, no row");
    }
}
