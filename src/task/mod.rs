//! Task loading: a Harbor / Terminal-Bench 2 task directory → a validated [`Task`].
//!
//! What this module owns:
//! - parsing `task.toml` (`config.rs`), reading the files the layout requires
//!   (`load.rs`), and one walk of the directory for symlinks and the checksum
//!   (`checksum.rs`);
//! - the user-facing error contract ([`TaskError`]): one line,
//!   `<file>:<field>: <what is wrong>`, naming the file as the user spelled
//!   its directory and the dotted TOML key.
//!
//! Invariants of a loaded [`Task`]: every duration is finite, > 0 and at most
//! [`MAX_DURATION_SEC`]; limits are in range; container paths are absolute
//! without `..`; `tests/test.sh` exists (and `solution/solve.sh` when
//! `solution/` does); no symlink under `tests/`, `solution/` or `environment/`
//! leads outside the task directory; `checksum` covers every file. Nothing
//! here panics on user input, and nothing touches Docker.
//!
//! Harbor compatibility: keys Harbor's `TaskConfig` accepts but arbiter does
//! not use are kept in `Task::metadata` (a warning only when the value asks
//! for something arbiter cannot do, e.g. `gpus > 0`). Harbor spellings load as
//! their arbiter equivalents: `network_mode = "public"` → `bridge`,
//! `environment_mode = "shared"` → `snapshot`, `memory = "2G"` →
//! `memory_mb = 2048`, `[agent] user = 1000` → `"1000"`.

mod checksum;
mod compose;
mod config;
mod dataset;
mod dockerfile;
mod error;
mod files;
mod load;
mod model;
mod steps;
mod toml_read;

#[cfg(test)]
mod tests;

pub(crate) use compose::interpolate::interpolate as interpolate_compose;
pub use compose::{
    Build, COMPOSE_FILE, Compose, Dependency, DependsCondition, HealthTest, MAIN_SERVICE, Service,
    ServiceHealthcheck,
};
pub(crate) use compose::{HARBOR_FIXED_VARIABLES, HARBOR_HOST_VARIABLES, NOT_COMPOSE_FILES};
pub(crate) use config::check_host;
pub use dataset::expand_task_dirs;
pub use dockerfile::{
    Dockerfile, DockerfileError, Heredoc, WordError, dockerfile_base_images, dockerfile_workdir,
};
pub use error::{TaskError, TaskErrorKind};
pub use load::{load, load_all};
pub use model::*;

/// Checksum (`sha256:<hex>`, same format as [`Task::checksum`]) of one directory, e.g. a
/// build context: used to tag environment images by content.
pub fn dir_checksum(dir: &std::path::Path) -> Result<String, TaskError> {
    checksum::scan(dir, dir).map(|scan| scan.checksum)
}
