use std::path::PathBuf;

/// Why an export or an import did not happen. Nothing is left half-written either way.
#[derive(Debug, thiserror::Error)]
pub enum HarborError {
    /// Bad input: the file (or flag) and field named, one line.
    #[error("{file}:{field}: {message}")]
    Input {
        file: String,
        field: String,
        message: String,
    },
    /// What the leaderboard's submission bot would refuse, one line each.
    #[error("{}", .0.join("\nerror: "))]
    Refused(Vec<String>),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl HarborError {
    pub(crate) fn input(
        file: impl std::fmt::Display,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        HarborError::Input {
            file: file.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }

    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> HarborError + '_ {
        move |source| HarborError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Bad input or a refusal (exit 2), as opposed to a failure to read or write (exit 1).
    pub fn is_usage(&self) -> bool {
        !matches!(self, HarborError::Io { .. })
    }
}
