//! `arbiter serve`: the HTTP JSON API over the job dirs under a root (SPEC §16, docs/serve.md;
//! the logic is `crate::serve`).

use std::net::IpAddr;
use std::path::PathBuf;

use clap::Args;

use crate::serve::{ServeConfig, ServeError};

use super::exit;

#[derive(Debug, Args)]
pub(super) struct ServeCmd {
    /// Address to listen on; anything but a loopback address needs --token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Port (0: any free one; the address is printed on stderr).
    #[arg(long, value_name = "PORT", default_value_t = 8787)]
    port: u16,
    /// The served root: the job dirs under it are listed, run and read; nothing else is.
    #[arg(long, value_name = "DIR", default_value = ".")]
    root: PathBuf,
    /// The results store for /api/query and the jobs run here: a SQLite file or
    /// postgres://… (default: $ARBITER_DB, else ~/.local/share/arbiter/results.db).
    #[arg(long = "db", value_name = "PATH|URL")]
    db: Option<String>,
    /// Token every mutating request must carry (Authorization: Bearer TOKEN); default:
    /// $ARBITER_SERVE_TOKEN.
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// Where the jobs run here run.
    #[command(flatten)]
    backend: super::BackendArgs,
}

/// The environment variable holding the token when `--token` is not given.
const TOKEN_ENV: &str = "ARBITER_SERVE_TOKEN";

/// Serve until killed.
pub(super) async fn main(cmd: ServeCmd) -> Result<u8, ServeError> {
    let config = ServeConfig {
        bind: cmd.bind,
        port: cmd.port,
        root: cmd.root,
        db: cmd.db,
        token: cmd
            .token
            .or_else(|| std::env::var(TOKEN_ENV).ok())
            .filter(|t| !t.is_empty()),
        backend: cmd.backend.flags(),
    };
    // Ctrl-C / SIGTERM, counted: the first stops the server's jobs gracefully, the second at once.
    let (count, interrupts) = tokio::sync::watch::channel(0u32);
    tokio::spawn(async move {
        let Some(mut signals) = super::Interrupts::install() else {
            return;
        };
        loop {
            signals.next().await;
            count.send_modify(|n| *n += 1);
        }
    });
    let stopped = crate::serve::serve(
        config,
        |addr| eprintln!("arbiter serve: listening on http://{addr}"),
        interrupts,
    )
    .await?;
    if stopped > 0 {
        eprintln!(
            "arbiter serve: stopped {stopped} job(s); each resumes with POST /api/jobs/<id>/resume"
        );
    }
    Ok(exit::OK)
}
