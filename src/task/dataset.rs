//! Datasets: a directory of task directories, accepted wherever a task
//! directory is (SPEC §2.1, last paragraph).
//!
//! Harbor's two manifests are read when present, in this order:
//! - `dataset.toml` (Harbor's `DatasetManifest`): `[[tasks]]` entries with a
//!   `name` (`org/name`) pick the tasks and their order; each name is matched
//!   against the `[task] name` of the task directories beside the manifest,
//!   else their directory name (full name or the part after `/`). Digests are
//!   Harbor's own content hashes and are not checked.
//! - `registry.json` (Harbor's registry: a list of datasets, each with
//!   `tasks: [{name, path, git_url?, git_commit_id?}]`): the tasks of its one
//!   dataset, `path` relative to the file. A registry of several datasets is
//!   refused with their names (give the directory of one task set instead).
//!
//! Without a manifest, every subdirectory holding a `task.toml` is a task, in
//! natural order (`task-2` before `task-10`). Subdirectories without one are
//! skipped; a directory with no task at all is "not a task directory".

use std::cmp::Ordering;
use std::fs;
use std::path::{Path, PathBuf};

use super::error::{TaskError, TaskErrorKind, quote};
use super::load::not_a_task_dir;

type Result<T> = std::result::Result<T, TaskError>;

/// Expands each path: a task directory (it holds `task.toml`) stays as given;
/// a dataset directory becomes its task directories (see the module doc).
/// Paths are returned as the user spelled them, joined with the child's name,
/// so later errors point where the user looks. Duplicates are left to
/// [`super::load_all`], which names them.
///
/// The job resolver / CLI should call this on the task paths it was given,
/// then pass the result to `task::load_all`.
pub fn expand_task_dirs(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in paths {
        if path.join("task.toml").is_file() {
            out.push(path.clone());
            continue;
        }
        if !path.is_dir() {
            let why = if path.exists() {
                "not a directory"
            } else {
                "no task.toml"
            };
            return Err(not_a_task_dir(path, why));
        }
        out.extend(expand_dataset(path)?);
    }
    Ok(out)
}

fn expand_dataset(dir: &Path) -> Result<Vec<PathBuf>> {
    if dir.join("dataset.toml").is_file() {
        return from_dataset_toml(dir);
    }
    if dir.join("registry.json").is_file() {
        return from_registry_json(dir);
    }
    let tasks = task_children(dir)?;
    if tasks.is_empty() {
        return Err(not_a_task_dir(
            dir,
            "no task.toml, and no subdirectory holds one",
        ));
    }
    Ok(tasks)
}

/// Subdirectories holding a `task.toml`, in natural order.
fn task_children(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = fs::read_dir(dir).map_err(|e| io_error(dir, &e))?;
    let mut names: Vec<String> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, &e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if dir.join(&name).join("task.toml").is_file() {
            names.push(name);
        } else {
            tracing::debug!(dir = %dir.display(), entry = %name, "not a task directory, skipped");
        }
    }
    names.sort_by(|a, b| natural_cmp(a, b));
    Ok(names.into_iter().map(|n| dir.join(n)).collect())
}

fn from_dataset_toml(dir: &Path) -> Result<Vec<PathBuf>> {
    let file = dir.join("dataset.toml");
    let text = fs::read_to_string(&file).map_err(|e| io_error(&file, &e))?;
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        TaskError::new(
            TaskErrorKind::Syntax,
            &file,
            None,
            format!(
                "invalid TOML: {}",
                e.message().split_whitespace().collect::<Vec<_>>().join(" ")
            ),
        )
    })?;
    let entries = match doc.get("tasks") {
        None => {
            return Err(field_error(
                &file,
                "tasks",
                "missing (a dataset.toml lists its [[tasks]])",
            ));
        }
        Some(toml::Value::Array(a)) => a,
        Some(other) => {
            return Err(type_error(
                &file,
                "tasks",
                "an array of tables",
                other.type_str(),
            ));
        }
    };
    let children = task_children(dir)?;
    let names: Vec<(PathBuf, Option<String>)> = children
        .into_iter()
        .map(|path| {
            let name = task_toml_name(&path);
            (path, name)
        })
        .collect();
    let mut out: Vec<PathBuf> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let field = format!("tasks[{i}].name");
        let wanted = match entry.get("name") {
            Some(toml::Value::String(s)) => s,
            Some(other) => return Err(type_error(&file, &field, "a string", other.type_str())),
            None => {
                return Err(field_error(
                    &file,
                    &field,
                    "missing (every task entry needs a name)",
                ));
            }
        };
        let short = wanted.rsplit('/').next().unwrap_or(wanted);
        let dir_name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
        let found = names
            .iter()
            .find(|(_, name)| name.as_deref() == Some(wanted.as_str()))
            .or_else(|| {
                names
                    .iter()
                    .find(|(p, _)| dir_name(p).is_some_and(|d| d == *wanted || d == short))
            });
        match found {
            // Harbor keeps a name listed twice; so does this (load_all reports it).
            Some((path, _)) => out.push(path.clone()),
            None => {
                return Err(field_error(
                    &file,
                    &field,
                    &format!(
                        "no task directory here is {} (by [task] name or directory name)",
                        quote(wanted)
                    ),
                ));
            }
        }
    }
    if out.is_empty() {
        return Err(field_error(&file, "tasks", "lists no task"));
    }
    Ok(out)
}

/// `[task] name` of a task directory, when its `task.toml` parses and has one.
fn task_toml_name(dir: &Path) -> Option<String> {
    let text = fs::read_to_string(dir.join("task.toml")).ok()?;
    let doc: toml::Table = text.parse().ok()?;
    doc.get("task")?.get("name")?.as_str().map(str::to_string)
}

fn from_registry_json(dir: &Path) -> Result<Vec<PathBuf>> {
    let file = dir.join("registry.json");
    let text = fs::read_to_string(&file).map_err(|e| io_error(&file, &e))?;
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        TaskError::new(
            TaskErrorKind::Syntax,
            &file,
            None,
            format!("invalid JSON: {e}"),
        )
    })?;
    let Some(datasets) = doc.as_array() else {
        return Err(type_error(
            &file,
            "registry",
            "a list of datasets",
            json_type(&doc),
        ));
    };
    let dataset = match datasets.as_slice() {
        [one] => one,
        [] => return Err(field_error(&file, "registry", "lists no dataset")),
        many => {
            let names: Vec<String> = many
                .iter()
                .map(|d| {
                    let name = d.get("name").and_then(|n| n.as_str()).unwrap_or("?");
                    match d.get("version").and_then(|v| v.as_str()) {
                        Some(v) => format!("{name}@{v}"),
                        None => name.to_string(),
                    }
                })
                .collect();
            return Err(field_error(
                &file,
                "registry",
                &format!(
                    "lists {} datasets ({}); give the directory of one dataset's tasks instead",
                    many.len(),
                    names.join(", ")
                ),
            ));
        }
    };
    let Some(tasks) = dataset.get("tasks").and_then(|t| t.as_array()) else {
        return Err(field_error(
            &file,
            "[0].tasks",
            "missing (a dataset lists its tasks)",
        ));
    };
    let mut out = Vec::with_capacity(tasks.len());
    for (i, task) in tasks.iter().enumerate() {
        let field = format!("[0].tasks[{i}].path");
        let Some(rel) = task.get("path").and_then(|p| p.as_str()) else {
            return Err(field_error(
                &file,
                &field,
                "missing (every task entry needs a path)",
            ));
        };
        let rel_path = Path::new(rel);
        if rel_path.is_absolute()
            || rel_path
                .components()
                .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(TaskError::new(
                TaskErrorKind::Path,
                &file,
                Some(&field),
                format!(
                    "must be a relative path inside the dataset (got {})",
                    quote(rel)
                ),
            ));
        }
        let path = dir.join(rel_path);
        if !path.join("task.toml").is_file() {
            let remote = task.get("git_url").and_then(|u| u.as_str());
            let why = match remote {
                Some(url) => format!(
                    "{} is not here (its source is {url}; fetch the dataset first)",
                    quote(rel)
                ),
                None => format!("{} is not a task directory (no task.toml)", quote(rel)),
            };
            return Err(field_error(&file, &field, &why));
        }
        out.push(path);
    }
    if out.is_empty() {
        return Err(field_error(&file, "[0].tasks", "lists no task"));
    }
    Ok(out)
}

/// Natural order: runs of digits compare as numbers (`t2` < `t10`), the rest
/// byte-wise; equal numbers with different zero padding fall back to text.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) if p.is_ascii_digit() && q.is_ascii_digit() => {
                let n = x.iter().take_while(|c| c.is_ascii_digit()).count();
                let m = y.iter().take_while(|c| c.is_ascii_digit()).count();
                let (dx, dy) = (trim_zeros(&x[..n]), trim_zeros(&y[..m]));
                let by_number = dx.len().cmp(&dy.len()).then_with(|| dx.cmp(dy));
                if by_number != Ordering::Equal {
                    return by_number;
                }
                x = &x[n..];
                y = &y[m..];
            }
            (Some(p), Some(q)) => {
                if p != q {
                    return p.cmp(q);
                }
                x = &x[1..];
                y = &y[1..];
            }
        }
    }
}

fn trim_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|c| **c == b'0').count();
    &digits[zeros..]
}

fn field_error(file: &Path, field: &str, message: &str) -> TaskError {
    TaskError::new(TaskErrorKind::Value, file, Some(field), message)
}

fn type_error(file: &Path, field: &str, expected: &str, found: &str) -> TaskError {
    TaskError::new(
        TaskErrorKind::Type,
        file,
        Some(field),
        format!("expected {expected}, found {found}"),
    )
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

fn io_error(path: &Path, err: &std::io::Error) -> TaskError {
    TaskError::new(
        TaskErrorKind::Io,
        path,
        None,
        format!("cannot read ({err})"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut names = vec![
            "task-10", "task-2", "task-1", "Task-3", "task-02", "a", "task-1b",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            vec![
                "Task-3", "a", "task-1", "task-1b", "task-02", "task-2", "task-10"
            ]
        );
    }
}
