//! GPUs: a task that asks for more GPUs than the engine can give is refused before any trial
//! starts (SPEC §2: a key arbiter reads but cannot honour is an error, never silently dropped).
//!
//! The CLI asks the backend once (`Sandbox::gpus`) when [`gpus_wanted`] is above 0, then
//! calls [`check_gpus`] before `job::run`.

use std::sync::Arc;

use crate::sandbox::GPUS_UNCOUNTED;
use crate::task::Task;

use super::config::{ConfigError, field};

/// The most GPUs any one task of the job asks for (0: the engine need not be asked).
pub(crate) fn gpus_wanted(tasks: &[Arc<Task>]) -> u32 {
    tasks.iter().map(|t| t.environment.gpus).max().unwrap_or(0)
}

/// Refuse the first task that wants more GPUs than the engine has (`available`, as
/// `Sandbox::gpus` answered): one line naming its `task.toml` and `environment.gpus`.
pub(crate) fn check_gpus(tasks: &[Arc<Task>], available: u32) -> Result<(), ConfigError> {
    let Some(task) = tasks.iter().find(|t| t.environment.gpus > available) else {
        return Ok(());
    };
    let wanted = task.environment.gpus;
    let plural = if wanted == 1 { "" } else { "s" };
    let types = if task.environment.gpu_types.is_empty() {
        String::new()
    } else {
        format!(" ({})", task.environment.gpu_types.join(" or "))
    };
    let has = match available {
        0 => "the container engine has none (no GPU runtime or GPU device is registered with it)"
            .to_string(),
        // Above every count a task can ask for: never reached, but said plainly if it were.
        GPUS_UNCOUNTED => "the container engine cannot say how many it has".to_string(),
        n => format!("the container engine has {n}"),
    };
    Err(field(
        task.dir.join("task.toml").display().to_string(),
        "environment.gpus",
        format!(
            "the task needs {wanted} GPU{plural}{types}, but {has}; run it on a machine with GPUs"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::task_dir;

    fn tasks(root: &std::path::Path, gpus: &[(&str, &str)]) -> Vec<Arc<Task>> {
        gpus.iter()
            .map(|(name, toml)| {
                let dir = task_dir(root, name, toml);
                Arc::new(crate::task::load(&dir).expect("task loads"))
            })
            .collect()
    }

    #[test]
    fn a_task_wanting_more_gpus_than_the_engine_has_is_refused_with_one_line() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path();
        let all = tasks(
            root,
            &[
                ("cpu", ""),
                ("one", "gpus = 1\n"),
                ("two", "gpus = 2\ngpu_types = [\"H100\", \"A100\"]\n"),
            ],
        );
        assert_eq!(gpus_wanted(&all), 2);
        assert_eq!(gpus_wanted(&all[..1]), 0);
        let toml = |name: &str| root.join(name).join("task.toml").display().to_string();
        let err = check_gpus(&all, 0).expect_err("no GPUs").to_string();
        assert_eq!(
            err,
            format!(
                "{}:environment.gpus: the task needs 1 GPU, but the container engine has none (no GPU runtime or GPU device is registered with it); run it on a machine with GPUs",
                toml("one")
            )
        );
        assert_eq!(err.lines().count(), 1);
        let err = check_gpus(&all, 1).expect_err("one GPU").to_string();
        assert_eq!(
            err,
            format!(
                "{}:environment.gpus: the task needs 2 GPUs (H100 or A100), but the container engine has 1; run it on a machine with GPUs",
                toml("two")
            )
        );
        check_gpus(&all, 2).expect("enough");
        check_gpus(&all, GPUS_UNCOUNTED).expect("uncounted GPUs let every task through");
        check_gpus(&all[..1], 0).expect("no task wants GPUs");
    }
}
