//! The one error type of task loading.
//!
//! Every error renders as exactly one line, `<file>:<field>: <what is wrong>`
//! (or `<file>: <what is wrong>` when no field applies, e.g. a directory that is
//! not a task). `<file>` is the path the user gave, joined with the file name —
//! never canonicalized — so the message points where the user looks.

use std::fmt;
use std::path::Path;

/// What kind of mistake a [`TaskError`] reports. Lets callers (and tests) match
/// without parsing the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TaskErrorKind {
    /// The path is not a directory holding a `task.toml`.
    NotATaskDir,
    /// `task.toml` is not valid TOML (or not UTF-8).
    Syntax,
    /// A key has the wrong TOML type.
    Type,
    /// A key has a value of the right type that is not allowed.
    Value,
    /// A key inside a known table is not recognised.
    UnknownKey,
    /// Two keys contradict each other.
    Conflict,
    /// A required file is missing, empty or unreadable as text.
    File,
    /// A path (container path or symlink) is not allowed.
    Path,
    /// The file system refused a read.
    Io,
    /// Two tasks share a name, or one directory was given twice.
    Duplicate,
}

/// A task that cannot be loaded. `Display` is one line: `<file>:<field>: <what>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.render())]
pub struct TaskError {
    kind: TaskErrorKind,
    file: String,
    field: Option<String>,
    message: String,
}

impl TaskError {
    /// Builds an error; `file` is shown as given, `field` is a dotted TOML key
    /// (`agent.timeout_sec`) or a short name such as `file` or `symlink`.
    /// Line breaks and control characters are flattened so the result stays on
    /// one line whatever user text ends up in it.
    pub fn new(
        kind: TaskErrorKind,
        file: impl AsRef<Path>,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            file: one_line(&file.as_ref().display().to_string()),
            field: field.map(one_line),
            message: one_line(&message.into()),
        }
    }

    pub fn kind(&self) -> TaskErrorKind {
        self.kind
    }

    /// The offending file, as the user spelled its directory.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The dotted key or short field name, if the error has one.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }

    /// The "what is wrong" part alone.
    pub fn message(&self) -> &str {
        &self.message
    }

    fn render(&self) -> String {
        match &self.field {
            Some(field) => format!("{}:{}: {}", self.file, field, self.message),
            None => format!("{}: {}", self.file, self.message),
        }
    }
}

/// Builds errors and warnings about one file (usually `task.toml`), so call
/// sites only say the field and what is wrong.
#[derive(Debug, Clone)]
pub(crate) struct FileCtx {
    file: String,
}

impl FileCtx {
    pub(crate) fn new(file: &Path) -> Self {
        Self {
            file: file.display().to_string(),
        }
    }

    pub(crate) fn file(&self) -> &str {
        &self.file
    }

    pub(crate) fn err(
        &self,
        kind: TaskErrorKind,
        field: &str,
        message: impl Into<String>,
    ) -> TaskError {
        TaskError::new(kind, &self.file, Some(field), message)
    }

    pub(crate) fn value(&self, field: &str, message: impl Into<String>) -> TaskError {
        self.err(TaskErrorKind::Value, field, message)
    }

    pub(crate) fn warning(&self, field: &str, message: impl fmt::Display) -> String {
        one_line(&format!("{}:{}: {}", self.file, field, message))
    }
}

/// Quotes user text for a message: JSON string escaping, so control
/// characters and quotes cannot break the one-line format.
pub(crate) fn quote(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|_| format!("\"{}\"", one_line(text)))
}

/// Replaces every run of line breaks/control characters with one space and
/// trims the ends, so the text fits on one line. Ordinary spaces are kept.
pub(crate) fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_control = false;
    for c in text.chars() {
        if c.is_control() {
            if !in_control {
                out.push(' ');
            }
            in_control = true;
        } else {
            out.push(c);
            in_control = false;
        }
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_one_line_with_and_without_field() {
        let e = TaskError::new(
            TaskErrorKind::Value,
            "tasks/a/task.toml",
            Some("agent.timeout_sec"),
            "must be\ngreater than 0",
        );
        assert_eq!(
            e.to_string(),
            "tasks/a/task.toml:agent.timeout_sec: must be greater than 0"
        );
        let e = TaskError::new(
            TaskErrorKind::NotATaskDir,
            "tasks/a",
            None,
            "not a task directory",
        );
        assert_eq!(e.to_string(), "tasks/a: not a task directory");
    }

    #[test]
    fn quote_escapes_control_characters() {
        assert_eq!(quote("a\"b\nc"), r#""a\"b\nc""#);
    }
}
