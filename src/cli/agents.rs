//! `arbiter agents install NAME[@VERSION]...` and `arbiter agents list`: the host cache of
//! agent presets (SPEC §12). The fetching lives in `agent::install`; this file parses,
//! prints and picks the exit code.
//!
//! Hooked into `cli/mod.rs` with `mod agents;`, a `Command` variant
//! `Agents(agents::AgentsCmd)` (doc: "Fetch agent CLIs into the host cache; list it.") and the
//! arm `Command::Agents(cmd) => Ok(agents::main(cmd).await),`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::agent::PresetKind;
use crate::agent::cache::{AgentCache, CacheError};
use crate::agent::install::{
    DEFAULT_PYTHON_IMAGE, InstallError, InstallOptions, Installed, install, parse_spec,
};
use crate::sandbox::choose::{self, BackendConfig};

use super::exit;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  arbiter agents install claude-code codex mini-swe-agent aider\n  arbiter agents install codex@0.171.0 --force\n  arbiter agents list"
)]
pub(crate) struct AgentsCmd {
    #[command(subcommand)]
    command: AgentsSub,
}

#[derive(Debug, Subcommand)]
enum AgentsSub {
    /// Fetch agent presets into the host cache (a no-op for a verified entry).
    #[command(
        after_help = "Examples:\n  arbiter agents install claude-code           # the pinned version\n  arbiter agents install aider@0.86.2 --python-image my/task-image:latest\n\nThe cache is $ARBITER_AGENT_CACHE, else $XDG_CACHE_HOME/arbiter/agents, else ~/.cache/arbiter/agents."
    )]
    Install(InstallCmd),
    /// Show the pinned version of each preset and whether it is installed.
    List(ListCmd),
}

#[derive(Debug, Args)]
struct InstallCmd {
    /// Presets to fetch: claude-code, codex, mini-swe-agent, aider (optionally @VERSION).
    #[arg(required = true, value_name = "NAME[@VERSION]")]
    agents: Vec<String>,
    /// Fetch again even when a verified entry exists.
    #[arg(long)]
    force: bool,
    /// Image whose python3 the Python agents' venvs are built for (it must match the task
    /// images' python3).
    #[arg(long, value_name = "IMAGE", default_value = DEFAULT_PYTHON_IMAGE)]
    python_image: String,
    /// Cache directory (default: see below).
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ListCmd {
    /// Cache directory.
    #[arg(long, value_name = "DIR")]
    cache: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
enum AgentsError {
    #[error(transparent)]
    Install(#[from] InstallError),
    #[error(transparent)]
    Cache(#[from] CacheError),
}

impl AgentsError {
    fn code(&self) -> u8 {
        match self {
            AgentsError::Install(InstallError::UnknownAgent { .. })
            | AgentsError::Install(InstallError::EmptyVersion { .. })
            | AgentsError::Cache(CacheError::NoRoot) => exit::USAGE,
            AgentsError::Install(_) | AgentsError::Cache(_) => exit::FAILURE,
        }
    }
}

/// Run an `agents` subcommand; errors are printed here (one line) and mapped to an exit code.
pub(crate) async fn main(cmd: AgentsCmd) -> u8 {
    let result = match cmd.command {
        AgentsSub::Install(c) => run_install(c).await,
        AgentsSub::List(c) => run_list(c),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            e.code()
        }
    }
}

fn cache_at(dir: Option<PathBuf>) -> Result<AgentCache, CacheError> {
    match dir {
        Some(dir) => Ok(AgentCache::at(dir)),
        None => AgentCache::from_env(),
    }
}

fn megabytes(bytes: u64) -> String {
    format!("{:.0} MB", bytes as f64 / 1e6)
}

async fn run_install(cmd: InstallCmd) -> Result<u8, AgentsError> {
    let cache = cache_at(cmd.cache)?;
    // Every spec is checked before anything is fetched.
    let specs = cmd
        .agents
        .iter()
        .map(|s| parse_spec(s))
        .collect::<Result<Vec<_>, _>>()?;
    let options = InstallOptions {
        force: cmd.force,
        python_image: cmd.python_image,
    };
    let needs_engine = specs.iter().any(|(kind, version)| {
        kind.source(version).registry == crate::agent::presets::Registry::Pypi
            && crate::agent::install::existing(&cache, *kind, version, options.force).is_err()
    });
    let sandbox = if needs_engine {
        Some(
            choose::connect(&BackendConfig::default(), None)
                .await
                .map_err(|e| InstallError::Engine(e.source))?,
        )
    } else {
        None
    };
    for (kind, version) in specs {
        eprintln!("{} {version}: checking the cache", kind.name());
        match install(&cache, kind, &version, &options, sandbox.as_deref()).await? {
            Installed::Present(entry) => println!(
                "{} {version}: already installed in {} ({})",
                kind.name(),
                entry.dir.display(),
                megabytes(entry.manifest.bytes)
            ),
            Installed::Fetched { entry, replaced } => println!(
                "{} {version}: installed in {} ({}){}",
                kind.name(),
                entry.dir.display(),
                megabytes(entry.manifest.bytes),
                replaced
                    .map(|why| format!("; replaced the previous entry ({why})"))
                    .unwrap_or_default()
            ),
        }
    }
    Ok(exit::OK)
}

fn run_list(cmd: ListCmd) -> Result<u8, AgentsError> {
    let cache = cache_at(cmd.cache)?;
    println!("cache: {}", cache.root().display());
    for kind in PresetKind::ALL {
        let version = kind.pinned_version();
        let state = match cache.lookup(kind.name(), version) {
            Ok(entry) => format!("installed ({})", megabytes(entry.manifest.bytes)),
            Err(CacheError::NotInstalled { .. }) => format!(
                "not installed: arbiter agents install {}@{version}",
                kind.name()
            ),
            Err(e) => e.to_string(),
        };
        println!("{:<15} {version:<10} {state}", kind.name());
    }
    Ok(exit::OK)
}
