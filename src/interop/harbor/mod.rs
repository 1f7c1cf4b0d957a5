//! Harbor job folders (SPEC §17): `arbiter export harbor` writes an arbiter job in Harbor
//! 0.26's layout, `arbiter import harbor` reads one back as a read-only arbiter job dir.
//!
//! - `model.rs`: Harbor's documents as serde structs (names, types, nulls as Harbor writes).
//! - `policy.rs`: Harbor's error policy table, and the exception of each arbiter ending.
//! - `mapping.rs`: one arbiter record → Harbor trial `config.json` / `result.json` (pure).
//! - `stats.rs`: Harbor's job statistics (mean, pass@k, reward and exception stats).
//! - `source.rs`: an arbiter job dir read for export.
//! - `export.rs` / `import.rs`: the two directions, each staged in a temp dir and renamed.
//! - `leaderboard.rs`: `--leaderboard terminal-bench-2.0`: metadata.yaml and the bot's checks.

mod checksum;
mod error;
mod export;
mod import;
mod leaderboard;
mod mapping;
mod model;
mod policy;
mod source;
mod stats;

pub(crate) use error::HarborError;
pub(crate) use export::{ExportOptions, export};
pub(crate) use import::import;
pub(crate) use leaderboard::{Leaderboard, MetadataFlags, Submission};
