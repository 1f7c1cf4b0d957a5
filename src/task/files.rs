//! Reading a task's own files: what every part of the loader (task.toml's sections, Harbor
//! steps) reads the same way, with errors naming the file. Below `load` and `steps`, which
//! both use it, so neither depends on the other for it.

use std::fs;
use std::io;
use std::path::Path;

use super::config;
use super::error::{TaskError, TaskErrorKind};
use super::model::ImageSource;

type Result<T> = std::result::Result<T, TaskError>;

pub(crate) fn missing(file: &Path, why: &str) -> TaskError {
    TaskError::new(
        TaskErrorKind::File,
        file,
        Some("file"),
        format!("missing ({why})"),
    )
}

/// Reads a UTF-8 text file; `what` names it in messages.
pub(crate) fn read_text(path: &Path, what: &str) -> Result<String> {
    let bytes = fs::read(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => missing(path, &format!("{what} is required")),
        _ => TaskError::new(
            TaskErrorKind::Io,
            path,
            Some("file"),
            format!("cannot read ({e})"),
        ),
    })?;
    String::from_utf8(bytes).map_err(|e| {
        TaskError::new(
            TaskErrorKind::File,
            path,
            Some("file"),
            format!("not valid UTF-8 (at byte {})", e.utf8_error().valid_up_to()),
        )
    })
}

/// Reads an instruction file: a regular file of UTF-8 text, not blank. `why`
/// ends each error.
pub(crate) fn read_prompt(path: &Path, why: &str) -> Result<String> {
    let path = path.to_path_buf();
    match fs::metadata(&path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => {
            return Err(TaskError::new(
                TaskErrorKind::File,
                &path,
                Some("file"),
                format!("not a regular file ({why})"),
            ));
        }
        Err(_) => return Err(missing(&path, why)),
    }
    let text = read_text(&path, "instruction.md")?;
    if text.trim().is_empty() {
        return Err(TaskError::new(
            TaskErrorKind::File,
            &path,
            Some("file"),
            format!("empty ({why})"),
        ));
    }
    Ok(text)
}

/// The image of a separate verifier: the environment's `docker_image`, else
/// the first `Dockerfile` among `tests_dirs`, else the task's own source.
pub(crate) fn separate_source(
    env: &config::EnvConfig,
    tests_dirs: &[&Path],
    task_source: &ImageSource,
) -> ImageSource {
    if let Some(image) = &env.docker_image {
        return ImageSource::Image(image.clone());
    }
    for dir in tests_dirs {
        if dir.join("Dockerfile").is_file() {
            return ImageSource::Build {
                context: dir.to_path_buf(),
                dockerfile: dir.join("Dockerfile"),
            };
        }
    }
    task_source.clone()
}
