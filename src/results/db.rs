//! The one query layer for both engines: sqlx's `any` driver over SQLite (bundled) and
//! PostgreSQL. Every statement is written once, with `$1`-style parameters; on SQLite they are
//! turned into plain `?` (bound by position, which SQLite does much faster than by name).
//! The only text per engine: how a writing transaction takes its lock.

use sqlx::any::{AnyConnectOptions, AnyRow, AnyTypeInfoKind};
use sqlx::{AnyConnection, Column, ConnectOptions, Connection, Executor, Row, ValueRef};

use super::error::{ResultsError, one_line};
use super::location::Location;
use super::read::{JobRows, Val};
use super::schema::{self, Table, Ty};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    Sqlite,
    Postgres,
}

/// An open results store.
pub(crate) struct Store {
    conn: AnyConnection,
    engine: Engine,
    shown: String,
}

/// One cell of a query's answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Null,
    Bool(bool),
    Int(i64),
    Real(f64),
    Text(String),
    Blob(usize),
}

/// A query's answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Answer {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
}

/// A key for PostgreSQL's advisory lock around migrations.
const MIGRATION_LOCK: i64 = 0x0061_7262_6974_6572; // "arbiter"

impl Store {
    /// Open for writing (a SQLite file is made with its directory when missing) and migrate
    /// the schema forward to [`schema::VERSION`].
    pub(crate) async fn open(location: &Location) -> Result<Store, ResultsError> {
        let mut store = Store::connect(location, false).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Open for `arbiter query`: SQLite read-only with `PRAGMA query_only`; on PostgreSQL each
    /// query runs in a READ ONLY transaction that is rolled back.
    pub(crate) async fn open_read_only(location: &Location) -> Result<Store, ResultsError> {
        if let Location::Sqlite(path) = location
            && !path.is_file()
        {
            return Err(ResultsError::Location {
                what: location.shown(),
                message: "no results store here (index jobs with `arbiter index DIR`)".into(),
            });
        }
        let mut store = Store::connect(location, true).await?;
        let version = store.version().await?;
        match version {
            None => Err(ResultsError::Location {
                what: store.shown.clone(),
                message:
                    "not a results store (no schema_version; index jobs with `arbiter index DIR`)"
                        .into(),
            }),
            Some(v) if v > schema::VERSION => Err(ResultsError::Newer {
                store: store.shown.clone(),
                found: v,
                known: schema::VERSION,
            }),
            Some(_) => Ok(store),
        }
    }

    async fn connect(location: &Location, read_only: bool) -> Result<Store, ResultsError> {
        sqlx::any::install_default_drivers();
        let shown = location.shown();
        let db = |e: sqlx::Error| ResultsError::Db {
            store: shown.clone(),
            message: one_line(&e),
        };
        let (url, engine) = match location {
            Location::Sqlite(path) => {
                if !read_only
                    && let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
                {
                    std::fs::create_dir_all(parent).map_err(ResultsError::io(parent))?;
                }
                let opts = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(!read_only)
                    .read_only(read_only);
                (opts.to_url_lossy().to_string(), Engine::Sqlite)
            }
            Location::Postgres(url) => (url.clone(), Engine::Postgres),
        };
        let opts: AnyConnectOptions = url.parse().map_err(db)?;
        let opts = opts.disable_statement_logging();
        let mut conn = AnyConnection::connect_with(&opts).await.map_err(db)?;
        if engine == Engine::Sqlite {
            // Two processes indexing at once wait for each other's transaction.
            conn.execute("PRAGMA busy_timeout = 60000")
                .await
                .map_err(db)?;
            if read_only {
                conn.execute("PRAGMA query_only = 1").await.map_err(db)?;
            }
        }
        Ok(Store {
            conn,
            engine,
            shown,
        })
    }

    fn db(&self) -> impl Fn(sqlx::Error) -> ResultsError + '_ {
        move |e| ResultsError::Db {
            store: self.shown.clone(),
            message: one_line(&e),
        }
    }

    /// The version row, `None` when there is none (an empty store).
    async fn version(&mut self) -> Result<Option<i64>, ResultsError> {
        // The catalogs differ: the one statement per engine.
        let exists = match self.engine {
            Engine::Sqlite => "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
            Engine::Postgres => {
                "SELECT 1 FROM information_schema.tables WHERE table_name = $1 AND table_schema = current_schema()"
            }
        };
        let found: Option<AnyRow> = sqlx::query(exists)
            .bind("schema_version")
            .fetch_optional(&mut self.conn)
            .await
            .map_err(self.db())?;
        if found.is_none() {
            return Ok(None);
        }
        let row: Option<AnyRow> = sqlx::query("SELECT version FROM schema_version WHERE id = 1")
            .fetch_optional(&mut self.conn)
            .await
            .map_err(self.db())?;
        row.map(|r| r.try_get::<i64, _>(0))
            .transpose()
            .map_err(self.db())
    }

    /// Read the version row under a lock and take the store forward in one transaction; a
    /// store newer than this arbiter is refused, never changed.
    async fn migrate(&mut self) -> Result<(), ResultsError> {
        let shown = self.shown.clone();
        let db = |e: sqlx::Error| ResultsError::Db {
            store: shown.clone(),
            message: one_line(&e),
        };
        let engine = self.engine;
        let sql = |t: &str| match engine {
            Engine::Postgres => t.to_string(),
            Engine::Sqlite => positional(t),
        };
        let mut tx = begin_write(&mut self.conn, engine).await.map_err(&db)?;
        if engine == Engine::Postgres {
            sqlx::query("SELECT 1 FROM (SELECT pg_advisory_xact_lock($1)) AS l")
                .bind(MIGRATION_LOCK)
                .execute(&mut *tx)
                .await
                .map_err(&db)?;
        }
        sqlx::query(schema::CREATE_VERSION)
            .execute(&mut *tx)
            .await
            .map_err(&db)?;
        let found: Option<i64> = sqlx::query("SELECT version FROM schema_version WHERE id = 1")
            .fetch_optional(&mut *tx)
            .await
            .map_err(&db)?
            .map(|r: AnyRow| r.try_get::<i64, _>(0))
            .transpose()
            .map_err(&db)?;
        let from = found.unwrap_or(0);
        if from > schema::VERSION {
            tx.rollback().await.map_err(&db)?;
            return Err(ResultsError::Newer {
                store: shown.clone(),
                found: from,
                known: schema::VERSION,
            });
        }
        if from == schema::VERSION {
            tx.commit().await.map_err(&db)?;
            return Ok(());
        }
        for version in from..schema::VERSION {
            for statement in schema::step(version) {
                sqlx::query(&statement)
                    .execute(&mut *tx)
                    .await
                    .map_err(&db)?;
            }
        }
        let now = crate::timefmt::now_rfc3339();
        let upsert = sql(
            "INSERT INTO schema_version (id, version, arbiter_version, migrated_at) VALUES (1, $1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET version = excluded.version, arbiter_version = excluded.arbiter_version, migrated_at = excluded.migrated_at",
        );
        sqlx::query(&upsert)
            .bind(schema::VERSION)
            .bind(env!("CARGO_PKG_VERSION"))
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(&db)?;
        tx.commit().await.map_err(&db)?;
        tracing::info!(store = %shown, from, to = schema::VERSION, "results store migrated");
        Ok(())
    }

    /// Replace the job's rows with `job`'s, in one transaction: its `jobs` row is written
    /// first (on PostgreSQL that row's lock orders two processes indexing the same job), then
    /// every other row of the job is deleted and inserted anew.
    pub(crate) async fn index(&mut self, job: &JobRows) -> Result<(), ResultsError> {
        let shown = self.shown.clone();
        let db = |e: sqlx::Error| ResultsError::Db {
            store: shown.clone(),
            message: format!("indexing {}: {}", job.dir.display(), one_line(&e)),
        };
        let engine = self.engine;
        let sql = |t: &str| match engine {
            Engine::Postgres => t.to_string(),
            Engine::Sqlite => positional(t),
        };
        let mut tx = begin_write(&mut self.conn, engine).await.map_err(&db)?;
        let jobs = &schema::JOBS;
        let updates: Vec<String> = jobs
            .columns
            .iter()
            .filter(|(c, _)| !jobs.key.contains(c))
            .map(|(c, _)| format!("{c} = excluded.{c}"))
            .collect();
        let upsert = sql(&format!(
            "{} ON CONFLICT (job_id) DO UPDATE SET {}",
            jobs.insert(),
            updates.join(", ")
        ));
        for row in job.rows(jobs.name) {
            bind_row(sqlx::query(&upsert), jobs, row)
                .execute(&mut *tx)
                .await
                .map_err(&db)?;
        }
        for (table, rows) in &job.tables {
            if table.name == jobs.name {
                continue;
            }
            sqlx::query(&sql(&format!(
                "DELETE FROM {} WHERE job_id = $1",
                table.name
            )))
            .bind(job.job_id.as_str())
            .execute(&mut *tx)
            .await
            .map_err(&db)?;
            // Many rows a statement: each statement is a round trip to the driver (on SQLite
            // its worker thread), so one a row made the index 8x slower than a bare insert.
            let per = (MAX_PARAMS / table.columns.len()).clamp(1, MAX_ROWS);
            let full = sql(&table.insert_rows(per));
            for chunk in rows.chunks(per) {
                let partial;
                let text = if chunk.len() == per {
                    &full
                } else {
                    partial = sql(&table.insert_rows(chunk.len()));
                    &partial
                };
                let mut q = sqlx::query(text);
                for row in chunk {
                    q = bind_row(q, table, row);
                }
                q.execute(&mut *tx).await.map_err(&db)?;
            }
        }
        tx.commit().await.map_err(&db)?;
        Ok(())
    }

    /// Run one read-only statement. A statement the store refuses (a write, a syntax error) is
    /// [`ResultsError::Query`].
    pub(crate) async fn query(&mut self, text: &str) -> Result<Answer, ResultsError> {
        let refused = |e: sqlx::Error| match e {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) => {
                ResultsError::Db {
                    store: String::new(),
                    message: one_line(&e),
                }
            }
            other => ResultsError::Query {
                message: unsupported_hint(one_line(&other)),
            },
        };
        let rows: Vec<AnyRow>;
        let columns: Vec<String>;
        match self.engine {
            Engine::Sqlite => {
                rows = sqlx::query(text)
                    .fetch_all(&mut self.conn)
                    .await
                    .map_err(refused)?;
                columns = match rows.first() {
                    Some(r) => names(r),
                    None => describe(&mut self.conn, text).await,
                };
            }
            Engine::Postgres => {
                let mut tx = self
                    .conn
                    .begin_with("BEGIN READ ONLY")
                    .await
                    .map_err(refused)?;
                let fetched = sqlx::query(text).fetch_all(&mut *tx).await;
                let answer = match fetched {
                    Ok(rows) => {
                        let columns = match rows.first() {
                            Some(r) => names(r),
                            None => describe(&mut *tx, text).await,
                        };
                        Ok((rows, columns))
                    }
                    Err(e) => Err(e),
                };
                // Nothing a query did is kept.
                let _ = tx.rollback().await;
                (rows, columns) = answer.map_err(refused)?;
            }
        }
        let mut out = Answer {
            columns,
            rows: Vec::with_capacity(rows.len()),
        };
        for row in &rows {
            let mut cells = Vec::with_capacity(row.len());
            for i in 0..row.len() {
                cells.push(cell(row, i).map_err(refused)?);
            }
            out.rows.push(cells);
        }
        Ok(out)
    }
}

/// Parameters of one multi-row INSERT: under SQLite's limit (32,766 since 3.32; the bundled
/// library is newer) and PostgreSQL's (65,535).
const MAX_PARAMS: usize = 30_000;
/// Rows of one multi-row INSERT, whatever the width.
const MAX_ROWS: usize = 500;

/// A writing transaction: on SQLite `BEGIN IMMEDIATE` takes the write lock at once (two
/// processes never both read, then both try to write); PostgreSQL's own BEGIN.
async fn begin_write(
    conn: &mut AnyConnection,
    engine: Engine,
) -> Result<sqlx::Transaction<'_, sqlx::Any>, sqlx::Error> {
    match engine {
        Engine::Sqlite => conn.begin_with("BEGIN IMMEDIATE").await,
        Engine::Postgres => conn.begin().await,
    }
}

fn bind_row<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    table: &Table,
    row: &'q [Val],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for ((_, ty), val) in table.columns.iter().zip(row) {
        q = match (val, ty) {
            (Val::Null, Ty::Text) => q.bind(None::<String>),
            (Val::Null, Ty::Int) => q.bind(None::<i64>),
            (Val::Null, Ty::Flag) => q.bind(None::<i32>),
            (Val::Null, Ty::Real) => q.bind(None::<f64>),
            (Val::Int(i), Ty::Flag) => q.bind(i32::try_from(*i).unwrap_or(i32::MAX)),
            (Val::Int(i), Ty::Real) => q.bind(*i as f64),
            (Val::Int(i), _) => q.bind(*i),
            (Val::Real(f), _) => q.bind(*f),
            (Val::Text(s), _) => q.bind(s.as_str()),
        };
    }
    q
}

fn names(row: &AnyRow) -> Vec<String> {
    row.columns().iter().map(|c| c.name().to_string()).collect()
}

/// The column names of a statement that returned no row.
async fn describe<'c, E>(conn: E, text: &'c str) -> Vec<String>
where
    E: Executor<'c, Database = sqlx::Any>,
{
    match conn.describe(text).await {
        Ok(d) => d.columns().iter().map(|c| c.name().to_string()).collect(),
        Err(_) => Vec::new(),
    }
}

fn cell(row: &AnyRow, i: usize) -> Result<Cell, sqlx::Error> {
    let raw = row.try_get_raw(i)?;
    if raw.is_null() {
        return Ok(Cell::Null);
    }
    let kind = raw.type_info().kind();
    Ok(match kind {
        AnyTypeInfoKind::Null => Cell::Null,
        AnyTypeInfoKind::Bool => Cell::Bool(row.try_get(i)?),
        AnyTypeInfoKind::SmallInt | AnyTypeInfoKind::Integer | AnyTypeInfoKind::BigInt => {
            Cell::Int(row.try_get(i)?)
        }
        AnyTypeInfoKind::Real => Cell::Real(f64::from(row.try_get::<f32, _>(i)?)),
        AnyTypeInfoKind::Double => Cell::Real(row.try_get(i)?),
        AnyTypeInfoKind::Text => Cell::Text(row.try_get(i)?),
        AnyTypeInfoKind::Blob => Cell::Blob(row.try_get::<Vec<u8>, _>(i)?.len()),
    })
}

/// PostgreSQL types the driver does not carry (NUMERIC from AVG or SUM of BIGINT, times): a
/// hint to cast.
fn unsupported_hint(message: String) -> String {
    if message.contains("does not support") {
        format!(
            "{message} (cast the column: CAST(x AS DOUBLE PRECISION), CAST(x AS BIGINT) or CAST(x AS TEXT))"
        )
    } else {
        message
    }
}

/// `$1, $2, …` in order, each once → `?` (SQLite binds those by position); any other use of
/// parameters is left as written (SQLite reads `$N` by name).
pub(crate) fn positional(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut next = 1u32;
    let mut i = 0;
    let mut last = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            if end > start {
                let n: u32 = text[start..end].parse().unwrap_or(0);
                if n != next {
                    return text.to_string();
                }
                next += 1;
                out.push_str(&text[last..i]);
                out.push('?');
                last = end;
                i = end;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_in_order_become_positional() {
        assert_eq!(
            positional("INSERT INTO t (a, b) VALUES ($1, $2)"),
            "INSERT INTO t (a, b) VALUES (?, ?)"
        );
        // Out of order or repeated: left as written.
        assert_eq!(positional("SELECT $2, $1"), "SELECT $2, $1");
        assert_eq!(positional("SELECT $1, $1"), "SELECT $1, $1");
        assert_eq!(positional("SELECT 1"), "SELECT 1");
    }
}
