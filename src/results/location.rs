//! Where the store is: `--db PATH|postgres://…`, else `$ARBITER_DB`, else the user's data
//! dir (`$XDG_DATA_HOME/arbiter/results.db`, `~/.local/share/arbiter/results.db`).
//! `ARBITER_DB=off` turns the store off.

use std::path::PathBuf;

use super::error::ResultsError;

/// The environment variable naming the store (or `off`).
pub(crate) const ENV: &str = "ARBITER_DB";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    Sqlite(PathBuf),
    /// A `postgres://` / `postgresql://` URL.
    Postgres(String),
}

impl Location {
    /// `what` names where `raw` came from (`--db`, `ARBITER_DB`) in errors.
    pub(crate) fn parse(raw: &str, what: &str) -> Result<Location, ResultsError> {
        let bad = |message: String| ResultsError::Location {
            what: what.to_string(),
            message,
        };
        if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
            return Ok(Location::Postgres(raw.to_string()));
        }
        if let Some((scheme, _)) = raw.split_once("://") {
            return Err(bad(format!(
                "unknown store {scheme:?}: expected a file path (SQLite) or postgres://…"
            )));
        }
        let path = raw.strip_prefix("sqlite:").unwrap_or(raw);
        if path.is_empty() {
            return Err(bad(
                "empty: expected a file path (SQLite) or postgres://…".into()
            ));
        }
        Ok(Location::Sqlite(PathBuf::from(path)))
    }

    /// The store of `--db` when given, else of the environment; `None` when it is off.
    pub(crate) fn chosen(flag: Option<&str>) -> Result<Option<Location>, ResultsError> {
        match flag {
            Some(raw) => Location::parse(raw, "--db").map(Some),
            None => Location::from_env(),
        }
    }

    /// `$ARBITER_DB` (`off` → `None`), else the default file in the user's data dir.
    pub(crate) fn from_env() -> Result<Option<Location>, ResultsError> {
        match std::env::var(ENV) {
            Ok(v) if v.eq_ignore_ascii_case("off") => Ok(None),
            Ok(v) if !v.trim().is_empty() => Location::parse(v.trim(), ENV).map(Some),
            _ => default_file().map(|p| Some(Location::Sqlite(p))),
        }
    }

    /// For messages: the path, or the URL without its password.
    pub(crate) fn shown(&self) -> String {
        match self {
            Location::Sqlite(p) => p.display().to_string(),
            Location::Postgres(url) => redact(url),
        }
    }
}

fn default_file() -> Result<PathBuf, ResultsError> {
    let data = match std::env::var_os("XDG_DATA_HOME").map(PathBuf::from) {
        Some(p) if p.is_absolute() => p,
        _ => match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(home) => PathBuf::from(home).join(".local/share"),
            None => {
                return Err(ResultsError::Location {
                    what: ENV.to_string(),
                    message: "not set, and no HOME for the default store (set ARBITER_DB to a file, or off)".into(),
                });
            }
        },
    };
    Ok(data.join("arbiter").join("results.db"))
}

/// `postgres://user:secret@host/db` → `postgres://user:***@host/db`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some(parts) => parts,
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_and_hide_passwords() {
        assert_eq!(
            Location::parse("/tmp/r.db", "--db").expect("path"),
            Location::Sqlite("/tmp/r.db".into())
        );
        assert_eq!(
            Location::parse("sqlite:r.db", "--db").expect("path"),
            Location::Sqlite("r.db".into())
        );
        let pg = Location::parse("postgres://u:pw@127.0.0.1:5/db", "--db").expect("pg");
        assert_eq!(pg.shown(), "postgres://u:***@127.0.0.1:5/db");
        assert_eq!(
            Location::parse("mysql://x", "--db")
                .expect_err("mysql")
                .to_string(),
            "--db: unknown store \"mysql\": expected a file path (SQLite) or postgres://…"
        );
        assert!(Location::parse("", "ARBITER_DB").is_err());
    }
}
