//! A Dockerfile's text → its instructions, as BuildKit's Dockerfile parser
//! (`frontend/dockerfile/parser`) reads them:
//! - parser directives (`# syntax=`, `# escape=`, `# check=`) count only at the very top,
//!   before any other comment, instruction or empty line; `# escape=` makes the backtick
//!   the escape and line-continuation character;
//! - an escape character ending a line (not itself escaped, blanks after it allowed)
//!   continues the instruction on the next line, joined without a space; comment lines and
//!   empty lines inside a continuation are skipped;
//! - `RUN`, `COPY` and `ADD` (also after `ONBUILD`) in shell form open a heredoc for each
//!   word `<<NAME`, `<<-NAME` (leading tabs of the terminator ignored), `<<"NAME"`,
//!   `<<'NAME'`, `<< NAME`, `2<<NAME`: the lines after the instruction, up to a line that is
//!   exactly `NAME`, are the heredoc's content, never instructions. Several heredocs on one
//!   line (`COPY <<a <<b /dst`) follow each other in order.

use super::words::{Lex, Vars, WordError};

/// One instruction: its keyword (lower case), `--flags`, the rest of its line(s), and the
/// heredocs it opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Instruction {
    pub(crate) keyword: String,
    pub(crate) flags: Vec<String>,
    pub(crate) args: String,
    pub(crate) heredocs: Vec<Heredoc>,
    /// The line (from 1) the instruction starts on.
    pub(crate) line: usize,
}

/// A heredoc of `RUN`, `COPY` or `ADD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heredoc {
    /// The terminator, quotes removed (`<<"EOF"` → `EOF`).
    pub name: String,
    /// The lines between the instruction and the terminator, line ends kept.
    pub content: String,
    /// `<<-`: leading tabs are ignored on the terminator line (and stripped from the content
    /// when it is used).
    pub chomp: bool,
    /// Variables in the content are expanded (the name was not quoted).
    pub expand: bool,
    /// `3<<EOF`: the file descriptor it is given on, 0 when none is written.
    pub fd: u32,
}

/// What BuildKit's parser refuses; `docker build` fails on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DockerfileError {
    #[error("line {line}: unterminated heredoc")]
    UnterminatedHeredoc { line: usize },
    #[error("line {line}: invalid escape token '{value}' does not match ` or \\")]
    Escape { line: usize, value: String },
    #[error("line {line}: only one {name} parser directive can be used")]
    RepeatedDirective { line: usize, name: String },
    #[error("line {line}: {source}")]
    Word {
        line: usize,
        #[source]
        source: WordError,
    },
    #[error("line {line}: when using JSON array syntax, arrays must be comprised of strings only")]
    JsonNotStrings { line: usize },
    #[error("file with no instructions")]
    Empty,
}

/// The instructions read up to the end, or up to what the parser refuses.
#[derive(Debug, Clone, Default)]
pub(crate) struct Parsed {
    pub(crate) instructions: Vec<Instruction>,
    pub(crate) escape: char,
    pub(crate) error: Option<DockerfileError>,
}

pub(crate) fn parse(text: &str) -> Parsed {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut parser = Parser {
        lines: text.split_inclusive('\n').collect(),
        next: 0,
        escape: '\\',
        directives_done: false,
        directives_seen: Vec::new(),
        instructions: Vec::new(),
    };
    let mut error = parser.run().err();
    if error.is_none() && parser.instructions.is_empty() {
        error = Some(DockerfileError::Empty);
    }
    Parsed {
        instructions: parser.instructions,
        escape: parser.escape,
        error,
    }
}

const DIRECTIVES: [&str; 3] = ["syntax", "escape", "check"];

struct Parser<'a> {
    lines: Vec<&'a str>,
    /// The index of the next line to read.
    next: usize,
    escape: char,
    directives_done: bool,
    directives_seen: Vec<String>,
    instructions: Vec<Instruction>,
}

impl<'a> Parser<'a> {
    fn run(&mut self) -> Result<(), DockerfileError> {
        while let Some(raw) = self.take_line() {
            let start = self.next;
            let first = self.process_line(raw, true)?;
            let (first, mut ended) = self.trim_continuation(first);
            if ended && first.is_empty() {
                continue;
            }
            let mut line = first.to_string();
            while !ended && let Some(raw) = self.take_line() {
                let more = self.process_line(raw, false)?;
                if is_comment(raw) || more.trim_start().is_empty() {
                    continue;
                }
                let (more, end) = self.trim_continuation(more);
                ended = end;
                line.push_str(more);
            }
            let mut instruction = split_command(&line, self.escape, start)?;
            if may_hold_heredocs(&instruction, self.escape, start)? && line.contains("<<") {
                let word_error = |source| DockerfileError::Word {
                    line: start,
                    source,
                };
                for mut heredoc in heredocs_in(&line).map_err(word_error)? {
                    heredoc.content = self
                        .heredoc_body(&heredoc)
                        .ok_or(DockerfileError::UnterminatedHeredoc { line: start })?;
                    instruction.heredocs.push(heredoc);
                }
            }
            self.instructions.push(instruction);
        }
        Ok(())
    }

    fn take_line(&mut self) -> Option<&'a str> {
        let line = self.lines.get(self.next).copied()?;
        self.next += 1;
        Some(line)
    }

    /// The lines up to the heredoc's terminator (consumed), or `None` at the end of the file.
    fn heredoc_body(&mut self, heredoc: &Heredoc) -> Option<String> {
        let mut content = String::new();
        while let Some(raw) = self.take_line() {
            let mut line = raw.trim_end_matches(['\r', '\n']);
            if heredoc.chomp {
                line = line.trim_start_matches('\t');
            }
            if line == heredoc.name {
                return Some(content);
            }
            content.push_str(raw);
        }
        None
    }

    /// `raw` without its line end (and leading blanks for an instruction's first line),
    /// empty when it is a comment; a parser directive is taken on the way.
    fn process_line<'l>(&mut self, raw: &'l str, first: bool) -> Result<&'l str, DockerfileError> {
        let mut line = raw.trim_end_matches(['\r', '\n']);
        if first {
            line = line.trim_start();
        }
        self.directive(line)?;
        Ok(if is_comment(line) { "" } else { line })
    }

    /// Reads `line` as a parser directive while they may still come: the first line that is
    /// not one (an instruction, an empty line, another comment) ends them.
    fn directive(&mut self, line: &str) -> Result<(), DockerfileError> {
        if self.directives_done {
            return Ok(());
        }
        let Some((name, value)) = line.strip_prefix('#').and_then(directive_of) else {
            self.directives_done = true;
            return Ok(());
        };
        let name = name.to_ascii_lowercase();
        if !DIRECTIVES.contains(&name.as_str()) {
            self.directives_done = true;
            return Ok(());
        }
        let at = self.next;
        if self.directives_seen.contains(&name) {
            return Err(DockerfileError::RepeatedDirective { line: at, name });
        }
        if name == "escape" {
            self.escape = match value {
                "\\" => '\\',
                "`" => '`',
                _ => {
                    let value = value.to_string();
                    return Err(DockerfileError::Escape { line: at, value });
                }
            };
        }
        self.directives_seen.push(name);
        Ok(())
    }

    /// `line` without a trailing line-continuation escape, and whether the instruction ends
    /// here (no continuation).
    fn trim_continuation<'l>(&self, line: &'l str) -> (&'l str, bool) {
        let trimmed = line.trim_end_matches([' ', '\t']);
        match trimmed.strip_suffix(self.escape) {
            Some(before) if !before.ends_with(self.escape) => (before, false),
            _ => (line, true),
        }
    }
}

/// `key = value` after the `#` of a directive line (BuildKit's
/// `^([a-zA-Z][a-zA-Z0-9]*)\s*=\s*(.+?)\s*$`).
fn directive_of(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start();
    let key_len = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())))
        .map_or(text.len(), |(i, _)| i);
    if key_len == 0 {
        return None;
    }
    let (key, rest) = text.split_at(key_len);
    let value = rest.trim_start_matches(is_regex_space).strip_prefix('=')?;
    let value = value.trim_matches(is_regex_space);
    (!value.is_empty()).then_some((key, value))
}

/// `\s` of Go's regular expressions.
fn is_regex_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c')
}

fn is_comment(line: &str) -> bool {
    line.trim_start().starts_with('#')
}

/// The keyword, then `--flags` (quotes and escapes resolved), then the rest.
fn split_command(line: &str, escape: char, at: usize) -> Result<Instruction, DockerfileError> {
    let line = line.trim();
    let (keyword, rest) = match line.find(is_keyword_space) {
        Some(i) => (&line[..i], line[i..].trim_start_matches(is_keyword_space)),
        None => (line, ""),
    };
    let (args, flags) = builder_flags(rest, escape);
    Ok(Instruction {
        keyword: keyword.to_ascii_lowercase(),
        flags,
        args: args.trim().to_string(),
        heredocs: Vec::new(),
        line: at,
    })
}

/// BuildKit's `[\t\v\f\r ]`.
fn is_keyword_space(c: char) -> bool {
    matches!(c, '\t' | '\x0b' | '\x0c' | '\r' | ' ')
}

/// The `--flag` words at the start of `line` (up to the first other word, or `--`), and the
/// rest of the line.
fn builder_flags(line: &str, escape: char) -> (&str, Vec<String>) {
    let mut flags = Vec::new();
    let mut rest = line;
    loop {
        let start = rest.trim_start();
        if !start.starts_with("--") {
            return (start, flags);
        }
        let mut word = String::new();
        let mut quote: Option<char> = None;
        let mut blank_ok = false;
        let mut chars = start.char_indices();
        let mut end = start.len();
        while let Some((i, ch)) = chars.next() {
            match quote {
                None if ch.is_whitespace() => {
                    end = i;
                    break;
                }
                None if ch == '\'' || ch == '"' => {
                    quote = Some(ch);
                    blank_ok = true;
                }
                Some(q) if ch == q => quote = None,
                _ if ch == escape => {
                    if let Some((_, next)) = chars.next() {
                        word.push(next);
                    } else if quote.is_some() {
                        quote = None;
                    }
                }
                _ => word.push(ch),
            }
        }
        rest = &start[end..];
        if word == "--" {
            return (rest, flags);
        }
        if blank_ok || !word.is_empty() {
            flags.push(word);
        }
    }
}

/// Whether `instruction` may open heredocs: `RUN`, `COPY`, `ADD` (or `ONBUILD` of one)
/// written in shell form, not as a JSON array.
fn may_hold_heredocs(
    instruction: &Instruction,
    escape: char,
    at: usize,
) -> Result<bool, DockerfileError> {
    let inner;
    let instruction = if instruction.keyword == "onbuild" {
        inner = split_command(&instruction.args, escape, at)?;
        &inner
    } else {
        instruction
    };
    if !matches!(instruction.keyword.as_str(), "run" | "copy" | "add") {
        return Ok(false);
    }
    Ok(!is_json_array(&instruction.args, at)?)
}

/// `[ "…", … ]`: the exec (JSON) form of an instruction.
fn is_json_array(args: &str, at: usize) -> Result<bool, DockerfileError> {
    let args = args.trim_start();
    if !args.starts_with('[') {
        return Ok(false);
    }
    match serde_json::from_str::<Vec<serde_json::Value>>(args) {
        Ok(items) if items.iter().all(|v| v.is_string()) => Ok(true),
        Ok(_) => Err(DockerfileError::JsonNotStrings { line: at }),
        Err(_) => Ok(false),
    }
}

/// The heredocs an instruction's line opens, in order.
fn heredocs_in(line: &str) -> Result<Vec<Heredoc>, WordError> {
    let lex = Lex {
        raw_quotes: true,
        raw_escapes: true,
        keep_unset: true,
        ..Lex::new('\\')
    };
    // BuildKit reads no heredoc from a line its lexer cannot split (an unmatched quote).
    let words = lex.words(line, &Vars::new()).unwrap_or_default();
    let mut docs = Vec::new();
    for word in words {
        if let Some(doc) = heredoc_word(&word)? {
            docs.push(doc);
        }
    }
    Ok(docs)
}

/// A heredoc from one word (`^(\d*)<<(-?)\s*([^<]*)$` in BuildKit), `None` when the word
/// opens none.
pub(crate) fn heredoc_word(word: &str) -> Result<Option<Heredoc>, WordError> {
    let digits = word.len() - word.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let (fd, rest) = word.split_at(digits);
    let Some(rest) = rest.strip_prefix("<<") else {
        return Ok(None);
    };
    let (chomp, rest) = match rest.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, rest),
    };
    let rest = rest.trim_start_matches(is_regex_space);
    if rest.is_empty() || rest.contains('<') {
        return Ok(None);
    }
    let lex = Lex {
        keep_unset: true,
        ..Lex::new('\\')
    };
    let names = lex.words(rest, &Vars::new())?;
    let [name] = names.as_slice() else {
        return Ok(None);
    };
    let raw = Lex {
        raw_quotes: true,
        ..lex
    }
    .words(rest, &Vars::new())?;
    let quotes = |s: &str| s.matches(['\'', '"']).count();
    let expand = raw.len() == 1 && quotes(name) == quotes(&raw[0]);
    Ok(Some(Heredoc {
        name: name.clone(),
        content: String::new(),
        chomp,
        expand,
        fd: fd.parse().unwrap_or(0),
    }))
}
