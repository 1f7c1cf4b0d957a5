use std::path::PathBuf;

/// Why a report, comparison or check could not be made. Every message names the file (and
/// the field where there is one), so the CLI prints it as one line and exits 2.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReportError {
    #[error(
        "{}: file: missing (not a job directory, or no trial has finished yet)",
        path.display()
    )]
    NoTrials { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {field}: {message}", path.display())]
    Field {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error("{what}: {message}")]
    Args { what: String, message: String },
}

impl ReportError {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
        move |source| ReportError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
