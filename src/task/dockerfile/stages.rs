//! A Dockerfile's build stages as BuildKit's dispatcher (`dockerfile2llb`) builds them, as far
//! as a reading without the base images can tell:
//! - `ARG`s before the first `FROM` are global: they (and the platform args, as on
//!   linux/amd64) substitute into `FROM`; a variable they do not set reads as empty;
//! - inside a stage, `ARG` (a bare `ARG NAME` takes the global value) and `ENV` substitute
//!   into later `ARG`, `ENV` and `WORKDIR` values; a global arg the stage does not name with
//!   `ARG`, or one named without a value, reads as unset; a variable the Dockerfile never
//!   mentions is kept as written, since the base image may set it;
//! - `WORKDIR` joins a relative path to the one before it (the base image's own, taken as
//!   `/` when the base is not an earlier stage); an absolute one is kept as written;
//! - `FROM x AS name`, then `FROM name`: the later stage starts from the earlier one's
//!   variables and working dir.

use super::lines::Instruction;
use super::words::{Lex, Vars};

/// One build stage, as read to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stage {
    /// `FROM`'s image or stage name after substitution (as written when that is empty, which
    /// BuildKit refuses).
    pub(crate) base: String,
    /// `AS name`, lower-cased.
    pub(crate) name: Option<String>,
    /// The earlier stage `base` names.
    pub(crate) parent: Option<usize>,
    /// The working dir the stage leaves its image with; `None`: the base image's own.
    pub(crate) workdir: Option<String>,
    vars: Vars,
}

pub(crate) fn stages(instructions: &[Instruction], escape: char) -> Vec<Stage> {
    let mut globals = platform_args();
    let mut stages: Vec<Stage> = Vec::new();
    let lex = Lex::new(escape);
    let stage_lex = Lex {
        keep_unset: true,
        ..lex
    };
    for instruction in instructions {
        let args = instruction.args.as_str();
        match (instruction.keyword.as_str(), stages.last_mut()) {
            ("from", _) => {
                let stage = from(args, &lex, &globals, &stages);
                stages.push(stage);
            }
            ("arg", None) => {
                for (name, value) in name_values(args, escape) {
                    if let Some(value) = value {
                        let value = lex.word(&value, &globals).unwrap_or(value);
                        globals.insert(name, Some(value));
                    }
                }
            }
            ("arg", Some(stage)) => {
                for (name, value) in name_values(args, escape) {
                    let value = match value {
                        Some(value) => Some(stage_lex.word(&value, &stage.vars).unwrap_or(value)),
                        None => globals.get(&name).cloned().flatten(),
                    };
                    // An `ARG` without a value leaves a variable already set alone.
                    if value.is_some() || !stage.vars.contains_key(&name) {
                        stage.vars.insert(name, value);
                    }
                }
            }
            ("env", Some(stage)) => {
                let expand = |text: &str| stage_lex.word(text, &stage.vars).ok();
                let pairs: Vec<(String, String)> = env_pairs(args, escape)
                    .into_iter()
                    .filter_map(|(name, value)| Some((expand(&name)?, expand(&value)?)))
                    .collect();
                for (name, value) in pairs {
                    stage.vars.insert(name, Some(value));
                }
            }
            ("workdir", Some(stage)) => {
                if let Ok(path) = stage_lex.word(args, &stage.vars) {
                    stage.workdir = Some(join_workdir(stage.workdir.as_deref(), &path));
                }
            }
            _ => {}
        }
    }
    stages
}

/// BuildKit's built-in platform args, for a linux/amd64 build.
fn platform_args() -> Vars {
    [
        ("BUILDPLATFORM", "linux/amd64"),
        ("BUILDOS", "linux"),
        ("BUILDOSVERSION", ""),
        ("BUILDARCH", "amd64"),
        ("BUILDVARIANT", ""),
        ("TARGETPLATFORM", "linux/amd64"),
        ("TARGETOS", "linux"),
        ("TARGETOSVERSION", ""),
        ("TARGETARCH", "amd64"),
        ("TARGETVARIANT", ""),
        ("TARGETSTAGE", "default"),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), Some(value.to_string())))
    .collect()
}

/// A stage from `FROM [--platform=…] image [AS name]`.
fn from(args: &str, lex: &Lex, globals: &Vars, earlier: &[Stage]) -> Stage {
    let words: Vec<&str> = args.split_whitespace().collect();
    let written = words.first().copied().unwrap_or_default();
    let base = match lex.word(written, globals) {
        Ok(base) if !base.is_empty() => base,
        _ => written.to_string(),
    };
    let name = match words.as_slice() {
        [_, as_kw, name] if as_kw.eq_ignore_ascii_case("as") => Some(name.to_ascii_lowercase()),
        _ => None,
    };
    // BuildKit looks the base up among the earlier stages' (lower-cased) names as written.
    let parent = earlier
        .iter()
        .rposition(|stage| stage.name.as_deref() == Some(base.as_str()));
    let (vars, workdir) = match parent {
        Some(i) => (earlier[i].vars.clone(), earlier[i].workdir.clone()),
        // Global args are not in a stage's scope until it names them with `ARG`: they read
        // as unset there.
        None => (
            globals.keys().map(|name| (name.clone(), None)).collect(),
            None,
        ),
    };
    Stage {
        base,
        name,
        parent,
        workdir,
        vars,
    }
}

/// BuildKit's `NormalizeWorkdir` on Linux: a relative path joined to the current one (or
/// `/`) and cleaned; an absolute one as it is. A path still starting with a variable the
/// Dockerfile does not set is kept as written.
fn join_workdir(current: Option<&str>, path: &str) -> String {
    if path.starts_with('/') || path.starts_with('$') {
        return path.to_string();
    }
    let parent = match current {
        Some(dir) if dir.starts_with('/') => dir,
        Some(dir) => return format!("{}/{path}", dir.trim_end_matches('/')),
        None => "/",
    };
    clean(&format!("{parent}/{path}"))
}

/// Go's `path.Clean` for an absolute path.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

/// `ARG` words: `NAME=value` or `NAME` (quotes still in the value, for substitution).
fn name_values(args: &str, escape: char) -> Vec<(String, Option<String>)> {
    words(args, escape)
        .into_iter()
        .map(|word| match word.split_once('=') {
            Some((name, value)) => (name.to_string(), Some(value.to_string())),
            None => (word, None),
        })
        .collect()
}

/// `ENV` pairs: `ENV A=1 B="x y"`, or the legacy `ENV NAME the rest of the line`.
fn env_pairs(args: &str, escape: char) -> Vec<(String, String)> {
    let words = words(args, escape);
    match words.first() {
        None => Vec::new(),
        Some(first) if !first.contains('=') => match args.split_once(is_keyword_space) {
            Some((name, value)) => vec![(
                name.to_string(),
                value.trim_start_matches(is_keyword_space).to_string(),
            )],
            None => Vec::new(),
        },
        Some(_) => words
            .iter()
            .filter_map(|word| word.split_once('='))
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect(),
    }
}

/// BuildKit's `[\t\v\f\r ]`.
fn is_keyword_space(c: char) -> bool {
    matches!(c, '\t' | '\x0b' | '\x0c' | '\r' | ' ')
}

/// BuildKit's `parseWords`: words split at blanks outside quotes, quotes and escapes kept.
fn words(text: &str, escape: char) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut blank_ok = false;
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        match quote {
            None if ch.is_whitespace() => {
                if blank_ok || !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
                blank_ok = false;
            }
            None => {
                if ch == '\'' || ch == '"' {
                    quote = Some(ch);
                    blank_ok = true;
                }
                if ch == escape {
                    let Some(next) = chars.next() else { break };
                    word.push(ch);
                    word.push(next);
                } else {
                    word.push(ch);
                }
            }
            Some(q) => {
                if ch == q {
                    quote = None;
                    word.push(ch);
                } else if ch == escape && q != '\'' {
                    let Some(next) = chars.next() else {
                        quote = None;
                        continue;
                    };
                    word.push(ch);
                    word.push(next);
                } else {
                    word.push(ch);
                }
            }
        }
    }
    if blank_ok || !word.is_empty() {
        words.push(word);
    }
    words
}
