//! What can go wrong with the results store. Every message is one line naming the file (and
//! field or line) or the store, so the CLI prints it as is.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ResultsError {
    /// A directory given to `arbiter index` that is not a job dir and holds none.
    #[error("{}: not a job directory (no job.yaml) and none below it", path.display())]
    NoJobs { path: PathBuf },
    /// A file of a job dir that cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A record (a `result.json`, a line of `trials.jsonl`) or file that is not what it must
    /// be: nothing of its job is indexed.
    #[error("{}: {field}: {message}", path.display())]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// `--db` / `ARBITER_DB` is not a store location.
    #[error("{what}: {message}")]
    Location { what: String, message: String },
    /// The store was written by a newer arbiter: refused, never dropped or downgraded.
    #[error(
        "{store}: schema version {found} is newer than this arbiter knows ({known}); use a newer arbiter"
    )]
    Newer {
        store: String,
        found: i64,
        known: i64,
    },
    /// The store answered with an error (cannot connect, a statement failed).
    #[error("{store}: {message}")]
    Db { store: String, message: String },
    /// `arbiter query` with a statement the store refused (a write, a syntax error).
    #[error("query refused: {message}")]
    Query { message: String },
    /// A task of arbiter's own failed (a reading thread panicked): never the user's input.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ResultsError {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ResultsError + '_ {
        move |source| ResultsError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A user mistake (bad input, a refused statement, a store too new): exit 2. Otherwise the
    /// store or the disk failed.
    pub(crate) fn is_usage(&self) -> bool {
        !matches!(
            self,
            ResultsError::Io { .. } | ResultsError::Db { .. } | ResultsError::Internal(_)
        )
    }
}

/// The first line of a driver error, without sqlx's prefixes.
pub(crate) fn one_line(e: &sqlx::Error) -> String {
    let text = match e {
        sqlx::Error::Database(db) => db.message().to_string(),
        other => other.to_string(),
    };
    text.lines().next().unwrap_or("").trim().to_string()
}
