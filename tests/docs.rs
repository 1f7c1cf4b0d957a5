//! The manual — the mdBook under `docs/` and `README.md` — checked the way a reader meets it
//! (the conventions are written down in docs/development.md, "The book's commands are
//! tested"):
//!
//! - the book builds with the pinned mdBook (`ARBITER_MDBOOK`, set by scripts/test from
//!   scripts/mdbook; without one this check skips, or fails under `ARBITER_REQUIRE_DOCKER=1`);
//! - every relative link and `#anchor` resolves to a file and a heading, and no chapter links
//!   out of `docs/`;
//! - every command of every ```` ```console ```` block runs, chapter by chapter and in order,
//!   in a fresh directory holding the example tasks, with the real binary on the real engine,
//!   and ends with the exit code the text gives it (0 unless its comment says `# exit N`);
//!   blocks that cannot run here are tagged `console,ignore` with a `<!-- not run: why -->`
//!   line before them, and are listed;
//! - `sh` blocks hold no `arbiter` command (they are never run), the CLI reference names every
//!   command of `arbiter --help`, and the README is at most 250 lines.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use arbiter::agent::PresetKind;
use common::{copy_dir, docker_available, repo};

/// The README's limit (issue 37): what arbiter is, the two commands, an example, links.
const README_MAX_LINES: usize = 250;

/// Chapters whose commands run at the same time (each chapter's own commands run in order).
const CHAPTERS_AT_ONCE: usize = 3;

// ---------------------------------------------------------------------------------------
// Reading markdown: fenced blocks, prose, headings, links.

/// One fenced code block.
#[derive(Debug, Clone)]
struct Block {
    /// The info string, e.g. `console` or `console,ignore`.
    info: String,
    /// 1-based line of the opening fence.
    line: usize,
    lines: Vec<String>,
    /// The last non-blank line before the opening fence.
    before: String,
}

/// A markdown text split into its fenced blocks and its prose (the text with every fenced
/// block blanked out, line numbers kept).
struct Markdown {
    blocks: Vec<Block>,
    prose: String,
}

fn parse_markdown(text: &str) -> Markdown {
    let mut blocks = Vec::new();
    let mut prose = String::with_capacity(text.len());
    let mut open: Option<(char, usize, Block)> = None;
    let mut last_prose = String::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence = |c: char| trimmed.chars().take_while(|&x| x == c).count();
        match open.take() {
            Some((c, n, mut block)) => {
                if fence(c) >= n && trimmed.trim_end().chars().all(|x| x == c) {
                    blocks.push(block);
                } else {
                    block.lines.push(line.to_string());
                    open = Some((c, n, block));
                }
                prose.push('\n');
            }
            None => {
                let (c, n) = if fence('`') >= 3 {
                    ('`', fence('`'))
                } else if fence('~') >= 3 {
                    ('~', fence('~'))
                } else {
                    (' ', 0)
                };
                if n > 0 {
                    let info = trimmed[n..].trim().to_string();
                    open = Some((
                        c,
                        n,
                        Block {
                            info,
                            line: i + 1,
                            lines: Vec::new(),
                            before: last_prose.clone(),
                        },
                    ));
                    prose.push('\n');
                } else {
                    if !line.trim().is_empty() {
                        last_prose = line.trim().to_string();
                    }
                    prose.push_str(line);
                    prose.push('\n');
                }
            }
        }
    }
    if let Some((_, _, block)) = open {
        blocks.push(block);
    }
    Markdown { blocks, prose }
}

/// `text` with its inline code spans blanked (a run of n backticks up to the next run of
/// exactly n, across lines as CommonMark allows; newlines kept so line numbers stay right).
fn without_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        // Find the closing run of exactly `run` backticks.
        let mut j = i + run;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let r = chars[j..].iter().take_while(|&&c| c == '`').count();
                if r == run {
                    close = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                for &c in &chars[i..j + run] {
                    out.push(if c == '\n' { '\n' } else { ' ' });
                }
                i = j + run;
            }
            None => {
                // An unmatched run is literal text.
                for _ in 0..run {
                    out.push('`');
                }
                i += run;
            }
        }
    }
    out
}

/// The anchor mdBook (and GitHub) give a heading: its text in lower case, whitespace to `-`,
/// every character but letters, digits, `_` and `-` dropped.
fn slug(heading: &str) -> String {
    // Links keep their text, emphasis and code marks go.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(start) = rest.find('[') {
        text.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(mid), Some(_)) => {
                text.push_str(&after[..mid]);
                let tail = &after[mid + 2..];
                rest = tail.find(')').map_or("", |end| &tail[end + 1..]);
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// Every anchor of a markdown text's headings, with mdBook's `-1`, `-2` for repeats.
fn anchors(text: &str) -> BTreeSet<String> {
    let md = parse_markdown(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in md.prose.lines() {
        let t = line.trim_start();
        if line.len() - t.len() > 3 {
            continue;
        }
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !t[hashes..].starts_with(' ') {
            continue;
        }
        let title = t[hashes..].trim().trim_end_matches('#').trim();
        let base = slug(title);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// Every link target of a markdown text's prose: `(line, target)`.
fn links(text: &str) -> Vec<(usize, String)> {
    let md = parse_markdown(text);
    let prose = without_code_spans(&md.prose);
    let mut out = Vec::new();
    for (i, line) in prose.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let end = tail
                .find(|c: char| c == ')' || c.is_whitespace())
                .unwrap_or(tail.len());
            let target = tail[..end].trim_matches(|c| c == '<' || c == '>');
            if !target.is_empty() {
                out.push((i + 1, target.to_string()));
            }
            rest = &tail[end..];
        }
    }
    out
}

/// `path` with `.` and `..` resolved lexically.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The documents.

/// The book's chapters in reading order (paths relative to the repository), from SUMMARY.md.
fn chapters() -> Vec<PathBuf> {
    let summary = std::fs::read_to_string(repo().join("docs/SUMMARY.md")).expect("SUMMARY.md");
    let mut out: Vec<PathBuf> = Vec::new();
    for (_, target) in links(&summary) {
        let path = normalise(&Path::new("docs").join(&target));
        if !out.contains(&path) {
            out.push(path);
        }
    }
    assert!(out.len() > 10, "SUMMARY.md lists {} chapters", out.len());
    out
}

/// README.md, SUMMARY.md and every chapter: what a reader can open.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![PathBuf::from("README.md"), PathBuf::from("docs/SUMMARY.md")];
    docs.extend(chapters());
    docs
}

fn read(doc: &Path) -> String {
    std::fs::read_to_string(repo().join(doc)).unwrap_or_else(|e| panic!("{}: {e}", doc.display()))
}

// ---------------------------------------------------------------------------------------
// Commands.

/// One command of a `console` block.
#[derive(Debug, Clone, PartialEq)]
struct Cmd {
    /// 1-based line of its `$ `.
    line: usize,
    /// What `sh -c` runs (continuation lines and heredoc bodies included).
    text: String,
    /// The exit code the text gives it.
    expect: i32,
}

/// A `console,ignore` block: why it does not run, and how many commands it shows.
#[derive(Debug)]
struct NotRun {
    doc: PathBuf,
    line: usize,
    reason: String,
    commands: usize,
}

/// Where an unquoted `#` starts a comment in `line`, and whether `text` (so far) leaves a
/// quote open.
fn shell_scan(text: &str) -> (bool, Option<usize>) {
    let (mut single, mut double, mut escaped) = (false, false, false);
    let mut comment = None;
    let mut prev_blank = true;
    let mut in_comment = false;
    for (i, c) in text.char_indices() {
        if in_comment {
            if c == '\n' {
                in_comment = false;
                prev_blank = true;
            }
            continue;
        }
        if escaped {
            escaped = false;
            prev_blank = false;
            continue;
        }
        match c {
            '\\' if !single => escaped = true,
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev_blank => {
                in_comment = true;
                if comment.is_none() {
                    comment = Some(i);
                }
            }
            _ => {}
        }
        prev_blank = c.is_whitespace();
    }
    (single || double, comment)
}

/// The exit code a command's comment gives it: `# exit N…` says N, anything else 0.
fn expected_exit(command: &str) -> i32 {
    let (_, comment) = shell_scan(command);
    comment
        .and_then(|at| {
            let words = command[at + 1..].trim_start();
            let digits: String = words
                .strip_prefix("exit ")?
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .unwrap_or(0)
}

/// The heredoc delimiter a command line opens (`<<'WORD'`, `<<"WORD"`, `<<WORD`, `<<-WORD`).
fn heredoc_word(line: &str) -> Option<String> {
    let (_, comment) = shell_scan(line);
    let code = &line[..comment.unwrap_or(line.len())];
    let at = code.find("<<")?;
    let rest = code[at + 2..].trim_start_matches('-').trim_start();
    let word: String = rest
        .trim_start_matches(['\'', '"'])
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// The commands of one `console` block: lines starting `$ `, with their `\` continuations,
/// the lines that close an open quote, and heredoc bodies.
fn block_commands(block: &Block) -> Vec<Cmd> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < block.lines.len() {
        let Some(first) = block.lines[i].strip_prefix("$ ") else {
            i += 1;
            continue;
        };
        let line = block.line + 1 + i;
        let mut text = first.to_string();
        i += 1;
        loop {
            let (open_quote, _) = shell_scan(&text);
            if (text.ends_with('\\') || open_quote) && i < block.lines.len() {
                text.push('\n');
                text.push_str(&block.lines[i]);
                i += 1;
            } else {
                break;
            }
        }
        let expect = expected_exit(&text);
        if let Some(word) = heredoc_word(&text) {
            while i < block.lines.len() {
                text.push('\n');
                text.push_str(&block.lines[i]);
                i += 1;
                if block.lines[i - 1].trim() == word {
                    break;
                }
            }
        }
        out.push(Cmd { line, expect, text });
    }
    out
}

/// The first word of a shell line after its `NAME=value` assignments.
fn command_word(line: &str) -> &str {
    line.split_whitespace()
        .find(|w| !w.contains('=') || w.starts_with('-'))
        .unwrap_or("")
}

/// The runnable commands of a document, its `console,ignore` blocks, and what breaks the
/// conventions (an `sh` block holding an `arbiter` command, an ignored block without its
/// reason).
fn doc_commands(doc: &Path, text: &str) -> (Vec<Cmd>, Vec<NotRun>, Vec<String>) {
    let md = parse_markdown(text);
    let (mut cmds, mut not_run, mut wrong) = (Vec::new(), Vec::new(), Vec::new());
    for block in &md.blocks {
        let tags: Vec<&str> = block.info.split(',').map(str::trim).collect();
        match tags[0] {
            "console" if tags.contains(&"ignore") => {
                let reason = block
                    .before
                    .strip_prefix("<!-- not run:")
                    .and_then(|r| r.strip_suffix("-->"))
                    .map(|r| r.trim().to_string());
                match reason {
                    Some(reason) if !reason.is_empty() => not_run.push(NotRun {
                        doc: doc.to_path_buf(),
                        line: block.line,
                        reason,
                        commands: block_commands(block).len(),
                    }),
                    _ => wrong.push(format!(
                        "{}:{}: a console,ignore block needs `<!-- not run: why -->` on the line before it",
                        doc.display(),
                        block.line
                    )),
                }
            }
            "console" => cmds.extend(block_commands(block)),
            "sh" | "bash" | "shell" | "zsh" => {
                for (k, line) in block.lines.iter().enumerate() {
                    if command_word(line) == "arbiter" {
                        wrong.push(format!(
                            "{}:{}: an `arbiter` command in a `{}` block is never run: put it in a console block (or console,ignore with a reason)",
                            doc.display(),
                            block.line + 1 + k,
                            tags[0]
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    (cmds, not_run, wrong)
}

/// The preset agents (`--agent KIND`) a chapter's commands run.
fn presets_named(cmds: &[Cmd]) -> Vec<PresetKind> {
    let mut out = Vec::new();
    for cmd in cmds {
        let words: Vec<&str> = cmd.text.split_whitespace().collect();
        for pair in words.windows(2) {
            if pair[0] == "--agent"
                && let Some(kind) = PresetKind::from_name(pair[1])
                && !out.contains(&kind)
            {
                out.push(kind);
            }
        }
    }
    out
}

/// What went wrong running one chapter's commands, or `None`; and how many ran.
fn run_chapter(doc: &Path, cmds: &[Cmd], bin_dir: &Path) -> (usize, Option<String>) {
    let dir = tempfile::Builder::new()
        .prefix("arbiter-docs-")
        .tempdir()
        .expect("temp dir");
    let work = dir.path();
    copy_dir(&repo().join("tasks"), &work.join("tasks"));
    copy_dir(
        &repo().join("tests/fixtures/agents"),
        &work.join("tests/fixtures/agents"),
    );
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (n, cmd) in cmds.iter().enumerate() {
        let started = std::time::Instant::now();
        let out: Output = Command::new("sh")
            .arg("-c")
            .arg(&cmd.text)
            .current_dir(work)
            .env("PATH", &path)
            .env("ARBITER_DB", work.join("results.db"))
            .env("GITHUB_STEP_SUMMARY", work.join("step-summary.md"))
            .output()
            .expect("run sh");
        let code = out.status.code().unwrap_or(-1);
        eprintln!(
            "docs: {}:{}: exit {code} in {:.1} s: {}",
            doc.display(),
            cmd.line,
            started.elapsed().as_secs_f64(),
            cmd.text.lines().next().unwrap_or("")
        );
        if code != cmd.expect {
            let tail = |b: &[u8]| {
                let s = String::from_utf8_lossy(b);
                let lines: Vec<&str> = s.lines().collect();
                lines[lines.len().saturating_sub(30)..].join("\n")
            };
            return (
                n,
                Some(format!(
                    "{}:{}: `{}` exited {code}, the text says {}\n--- stdout (tail)\n{}\n--- stderr (tail)\n{}",
                    doc.display(),
                    cmd.line,
                    cmd.text,
                    cmd.expect,
                    tail(&out.stdout),
                    tail(&out.stderr)
                )),
            );
        }
    }
    (cmds.len(), None)
}

// ---------------------------------------------------------------------------------------
// The tests.

#[test]
fn the_readme_is_at_most_250_lines() {
    let lines = read(Path::new("README.md")).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; at most {README_MAX_LINES}: move the rest into a chapter of docs/"
    );
}

#[test]
fn every_relative_link_and_anchor_resolves_and_no_chapter_leaves_the_book() {
    let root = repo();
    let mut broken = Vec::new();
    let mut checked = 0;
    let mut anchor_cache: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    for doc in documents() {
        let text = read(&doc);
        let in_book = doc.starts_with("docs");
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if file.is_empty() {
                doc.clone()
            } else {
                normalise(&doc.parent().unwrap_or(Path::new("")).join(file))
            };
            let at = format!("{}:{line}: ({target})", doc.display());
            if in_book && !dest.starts_with("docs") {
                broken.push(format!(
                    "{at}: leaves docs/, which the rendered book cannot follow: name the file in backticks"
                ));
                continue;
            }
            if !root.join(&dest).exists() {
                broken.push(format!("{at}: no such file {}", dest.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let anchors = anchor_cache
                    .entry(dest.clone())
                    .or_insert_with(|| anchors(&read(&dest)));
                if !anchors.contains(anchor) {
                    broken.push(format!(
                        "{at}: {} has no heading with the anchor #{anchor}",
                        dest.display()
                    ));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the scanner broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_book_builds_with_mdbook() {
    let mdbook = std::env::var_os("ARBITER_MDBOOK").map(PathBuf::from);
    let Some(mdbook) = mdbook.filter(|p| p.is_file()) else {
        if std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() == Ok("1") {
            panic!(
                "ARBITER_REQUIRE_DOCKER=1 but ARBITER_MDBOOK names no mdbook (run scripts/mdbook path)"
            );
        }
        eprintln!("skipping the book build: ARBITER_MDBOOK is not set (scripts/mdbook path)");
        return;
    };
    let out_dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(&mdbook)
        .arg("build")
        .arg(repo().join("docs"))
        .arg("--dest-dir")
        .arg(out_dir.path())
        .output()
        .expect("run mdbook");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "mdbook build failed:\n{log}");
    let complaints: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(
        complaints.is_empty(),
        "mdbook build warned:\n{}",
        complaints.join("\n")
    );
    for chapter in chapters() {
        let rel = chapter.strip_prefix("docs").expect("a chapter under docs/");
        let html = out_dir.path().join(rel.with_extension("html"));
        let page = std::fs::read_to_string(&html).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (rendered from {})",
                html.display(),
                chapter.display()
            )
        });
        let title = read(&chapter)
            .lines()
            .find_map(|l| l.strip_prefix("# ").map(str::to_string))
            .unwrap_or_default();
        // Its longest word, as the rendered page spells it.
        let word = title
            .split_whitespace()
            .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
            .filter(|w| w.chars().all(char::is_alphanumeric))
            .max_by_key(|w| w.len())
            .map(str::to_string)
            .unwrap_or_default();
        assert!(
            page.contains(&word),
            "{} does not hold its chapter's title {title:?}",
            html.display()
        );
    }
}

#[test]
fn shell_blocks_hold_no_unrun_command_and_every_skipped_block_says_why() {
    let mut wrong = Vec::new();
    let mut runnable = 0;
    for doc in documents() {
        let (cmds, _, w) = doc_commands(&doc, &read(&doc));
        runnable += cmds.len();
        wrong.extend(w);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(runnable > 40, "only {runnable} runnable commands found");
}

#[test]
fn the_cli_reference_names_every_command_of_arbiter_help() {
    let out = common::arbiter(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    let commands: Vec<String> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 10, "commands of --help: {commands:?}");
    let reference = read(Path::new("docs/reference/cli.md"));
    let missing: Vec<&String> = commands
        .iter()
        .filter(|c| !reference.contains(&format!("| `{c}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/reference/cli.md has no row for {missing:?}"
    );
}

#[test]
fn every_console_command_of_the_book_and_the_readme_runs_with_the_exit_code_it_shows() {
    if !docker_available() {
        return;
    }
    let mut plan: Vec<(PathBuf, Vec<Cmd>)> = Vec::new();
    let mut not_run = Vec::new();
    for doc in documents() {
        let (cmds, skipped, _) = doc_commands(&doc, &read(&doc));
        not_run.extend(skipped);
        if cmds.is_empty() {
            continue;
        }
        // A chapter that runs a preset agent needs it in the host cache (scripts/agents, which
        // scripts/test runs): without it the chapter skips, or fails under CI.
        let presets = presets_named(&cmds);
        if !common::presets::ready(&presets) {
            eprintln!(
                "docs: skipping {}: it runs {presets:?}, not in the agent cache",
                doc.display()
            );
            continue;
        }
        plan.push((doc, cmds));
    }
    let total: usize = plan.iter().map(|(_, c)| c.len()).sum();
    let bin = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_arbiter"), bin.path().join("arbiter"))
        .expect("symlink arbiter");

    let queue = Mutex::new(plan.into_iter().collect::<VecDeque<_>>());
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..CHAPTERS_AT_ONCE {
            s.spawn(|| {
                loop {
                    let next = queue.lock().expect("queue").pop_front();
                    let Some((doc, cmds)) = next else { break };
                    let (ran, failure) = run_chapter(&doc, &cmds, bin.path());
                    results
                        .lock()
                        .expect("results")
                        .push((doc, ran, cmds.len(), failure));
                }
            });
        }
    });
    let results = results.into_inner().expect("results");
    let ran: usize = results.iter().map(|r| r.1).sum();
    let skipped: usize = not_run.iter().map(|n| n.commands).sum();
    eprintln!(
        "docs: {ran} of {total} commands ran in {} documents; {skipped} commands in {} blocks not run:",
        results.len(),
        not_run.len()
    );
    for n in &not_run {
        eprintln!(
            "  {}:{}: {} command(s): {}",
            n.doc.display(),
            n.line,
            n.commands,
            n.reason
        );
    }
    let failures: Vec<&String> = results.iter().filter_map(|r| r.3.as_ref()).collect();
    assert!(
        failures.is_empty(),
        "{} chapter(s) stopped at a command:\n\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    assert_eq!(ran, total);
    // The set of commands that cannot run here stays small.
    assert!(
        skipped * 2 < total,
        "{skipped} commands not run against {total} run: keep the not-run set small"
    );
}

// Unit tests of the reading rules above.

#[test]
fn commands_take_continuations_open_quotes_heredocs_and_their_exit_code() {
    let text = "```console\n$ arbiter run a \\\n    --b   # exit 4: because\n$ cat > f <<'YAML'\nx: 1\n# not a command\nYAML\noutput line\n$ arbiter query \"\n  SELECT 1\" --format json\n$ echo '# exit 3' # 0 expected\n```\n";
    let md = parse_markdown(text);
    let cmds = block_commands(&md.blocks[0]);
    let texts: Vec<&str> = cmds.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "arbiter run a \\\n    --b   # exit 4: because",
            "cat > f <<'YAML'\nx: 1\n# not a command\nYAML",
            "arbiter query \"\n  SELECT 1\" --format json",
            "echo '# exit 3' # 0 expected",
        ]
    );
    let codes: Vec<i32> = cmds.iter().map(|c| c.expect).collect();
    assert_eq!(codes, [4, 0, 0, 0]);
    assert_eq!(cmds[0].line, 2);
    assert_eq!(cmds[2].line, 9);
}

#[test]
fn anchors_follow_mdbook_and_links_skip_code() {
    let text = "# A `task.toml` key (Harbor's, 0.26)\n## 2. A job file\n## Resume\n## Resume\n```sh\n# not a heading [x](nope.md)\n```\nsee [y](a.md#b) and `[z](code.md)`\n";
    let a = anchors(text);
    for want in [
        "a-tasktoml-key-harbors-026",
        "2-a-job-file",
        "resume",
        "resume-1",
    ] {
        assert!(a.contains(want), "{want} not in {a:?}");
    }
    assert_eq!(links(text), [(8, "a.md#b".to_string())]);
    assert_eq!(command_word("FOO=1 BAR=2 arbiter run"), "arbiter");
    assert_eq!(
        heredoc_word("cat > f <<'YAML' # x"),
        Some("YAML".to_string())
    );
}
