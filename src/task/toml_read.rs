//! A key-by-key reader over a parsed `toml::Table`: typed getters that name the
//! dotted key, the TOML type found and the allowed values in every error, plus
//! the helpers behind them (did-you-mean, dotted keys, TOML → JSON).
//!
//! Nothing here knows which tables a `task.toml` has; `config.rs` does.

use std::collections::BTreeMap;

use serde_json::{Map as JsonMap, Value as Json};
use toml::Value;

use super::error::{FileCtx, TaskError, TaskErrorKind, quote};
use super::model::{MAX_DURATION_SEC, NetworkMode, VerifierMode};

type Result<T> = std::result::Result<T, TaskError>;

/// 16 TiB; keeps `memory_mb * 1024 * 1024` well inside an `i64`.
pub(crate) const MAX_MEMORY_MB: i64 = 16 * 1024 * 1024;

pub(crate) fn syntax_error(ctx: &FileCtx, text: &str, err: &toml::de::Error) -> TaskError {
    let message = condense(err.message());
    let message = if message.is_empty() {
        "invalid TOML".to_string()
    } else {
        format!("invalid TOML: {message}")
    };
    match err.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            ctx.err(TaskErrorKind::Syntax, &format!("{line}:{column}"), message)
        }
        None => TaskError::new(TaskErrorKind::Syntax, ctx.file(), None, message),
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// All whitespace runs (newlines included) become one space.
pub(crate) fn condense(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A known table, opened and key-checked.
pub(crate) struct Table<'v> {
    pub(crate) ctx: FileCtx,
    pub(crate) path: String,
    pub(crate) table: &'v toml::Table,
}

impl Table<'_> {
    pub(crate) fn key(&self, key: &str) -> String {
        join(&self.path, key)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.table.get(key)
    }

    pub(crate) fn string(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(type_error(&self.ctx, &self.key(key), "a string", v)),
        }
    }

    pub(crate) fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Boolean(b)) => Ok(Some(*b)),
            Some(v) => Err(type_error(&self.ctx, &self.key(key), "a boolean", v)),
        }
    }

    /// Seconds: integer or float, finite, > 0, at most `MAX_DURATION_SEC`.
    pub(crate) fn duration(&self, key: &str) -> Result<Option<f64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let field = self.key(key);
        let secs = number(&self.ctx, &field, v)?;
        if secs.is_nan() {
            return Err(self
                .ctx
                .value(&field, "must be a number of seconds (got nan)"));
        }
        if secs <= 0.0 {
            return Err(self
                .ctx
                .value(&field, format!("must be greater than 0 (got {v})")));
        }
        if secs > MAX_DURATION_SEC {
            return Err(self.ctx.value(
                &field,
                format!("must be at most {MAX_DURATION_SEC} seconds (got {v})"),
            ));
        }
        Ok(Some(secs))
    }

    /// Seconds that may be 0 (intervals, grace periods): finite, >= 0, at
    /// most `MAX_DURATION_SEC`.
    pub(crate) fn seconds(&self, key: &str) -> Result<Option<f64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let field = self.key(key);
        let secs = number(&self.ctx, &field, v)?;
        if secs.is_nan() || secs < 0.0 {
            return Err(self.ctx.value(
                &field,
                format!("must be a number of seconds >= 0 (got {v})"),
            ));
        }
        if secs > MAX_DURATION_SEC {
            return Err(self.ctx.value(
                &field,
                format!("must be at most {MAX_DURATION_SEC} seconds (got {v})"),
            ));
        }
        Ok(Some(secs))
    }

    /// `<key>_mb` as an integer, or Harbor's deprecated size string under
    /// `legacy` ("2G", "512M"); both given and different is an error.
    pub(crate) fn memory_mb(
        &self,
        key: &str,
        legacy: &str,
        min: i64,
        why: &str,
    ) -> Result<Option<u64>> {
        let modern = match self.get(key) {
            Some(v) => {
                let n = integer(&self.ctx, &self.key(key), v)?;
                if n < min {
                    let why = if why.is_empty() {
                        String::new()
                    } else {
                        format!("{why}; ")
                    };
                    let bound = if min == 1 {
                        format!("must be greater than 0 ({why}got {v})")
                    } else {
                        format!("must be at least {min} ({why}got {v})")
                    };
                    return Err(self.ctx.value(&self.key(key), bound));
                }
                if n > MAX_MEMORY_MB {
                    return Err(self.ctx.value(
                        &self.key(key),
                        format!("must be at most {MAX_MEMORY_MB} (got {v})"),
                    ));
                }
                Some(n as u64)
            }
            None => None,
        };
        let old = match self.string(legacy)? {
            Some(s) => {
                let mb = parse_size_mb(&s)
                    .filter(|mb| *mb >= min && *mb <= MAX_MEMORY_MB)
                    .ok_or_else(|| {
                        self.ctx.value(
                            &self.key(legacy),
                            format!(
                                "not a size like \"2G\" or \"512M\" of at least {min} MB (got {})",
                                quote(&s)
                            ),
                        )
                    })?;
                Some(mb as u64)
            }
            None => None,
        };
        match (modern, old) {
            (Some(m), Some(o)) if m != o => Err(self.ctx.err(
                TaskErrorKind::Conflict,
                &self.key(legacy),
                format!("conflicts with {key} = {m} ({legacy} means {o} MB; remove one of them)"),
            )),
            (m, o) => Ok(m.or(o)),
        }
    }

    /// A user name, or a Harbor integer UID as decimal text.
    pub(crate) fn user(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if s.trim().is_empty() => {
                Err(self.ctx.value(&self.key(key), "must not be empty"))
            }
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Integer(n)) if *n >= 0 => Ok(Some(n.to_string())),
            Some(v @ Value::Integer(_)) => Err(self
                .ctx
                .value(&self.key(key), format!("must not be negative (got {v})"))),
            Some(v) => Err(type_error(
                &self.ctx,
                &self.key(key),
                "a string or an integer",
                v,
            )),
        }
    }

    pub(crate) fn network_mode(&self, key: &str) -> Result<Option<NetworkMode>> {
        let Some(s) = self.string(key)? else {
            return Ok(None);
        };
        if let Some(mode) = NetworkMode::ALL.into_iter().find(|m| m.as_str() == s) {
            return Ok(Some(mode));
        }
        if s == "public" {
            // Harbor's name for a network with internet access.
            return Ok(Some(NetworkMode::Bridge));
        }
        Err(unknown_value(
            &self.ctx,
            &self.key(key),
            &s,
            &NetworkMode::ALL.map(|m| m.as_str()),
        ))
    }

    /// The environment mode and how it was spelled (Harbor's `shared` is our
    /// default, `snapshot`).
    pub(crate) fn verifier_mode(&self, key: &str) -> Result<Option<(VerifierMode, String)>> {
        let Some(s) = self.string(key)? else {
            return Ok(None);
        };
        let mode = VerifierMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .or((s == "shared").then_some(VerifierMode::Snapshot))
            .ok_or_else(|| {
                unknown_value(
                    &self.ctx,
                    &self.key(key),
                    &s,
                    &VerifierMode::ALL.map(|m| m.as_str()),
                )
            })?;
        Ok(Some((mode, s)))
    }

    pub(crate) fn string_map(&self, key: &str) -> Result<Option<BTreeMap<String, String>>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let field = self.key(key);
        let table = expect_table(&self.ctx, &field, v)?;
        let mut out = BTreeMap::new();
        for (k, v) in table {
            match v {
                Value::String(s) => {
                    out.insert(k.clone(), s.clone());
                }
                other => return Err(type_error(&self.ctx, &join(&field, k), "a string", other)),
            }
        }
        Ok(Some(out))
    }
}

pub(crate) fn expect_table<'v>(
    ctx: &FileCtx,
    field: &str,
    v: &'v Value,
) -> Result<&'v toml::Table> {
    match v {
        Value::Table(t) => Ok(t),
        other => Err(type_error(ctx, field, "a table", other)),
    }
}

pub(crate) fn expect_array<'v>(ctx: &FileCtx, field: &str, v: &'v Value) -> Result<&'v Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(type_error(ctx, field, "an array", other)),
    }
}

pub(crate) fn string_list(ctx: &FileCtx, field: &str, v: &Value) -> Result<Vec<String>> {
    expect_array(ctx, field, v)?
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) => Ok(s.clone()),
            other => Err(type_error(ctx, &format!("{field}[{i}]"), "a string", other)),
        })
        .collect()
}

pub(crate) fn number(ctx: &FileCtx, field: &str, v: &Value) -> Result<f64> {
    match v {
        Value::Integer(n) => Ok(*n as f64),
        Value::Float(f) => Ok(*f),
        other => Err(type_error(ctx, field, "a number", other)),
    }
}

/// An integer; a float with no fractional part (`4096.0`) is accepted, as
/// Harbor's pydantic models accept it.
pub(crate) fn integer(ctx: &FileCtx, field: &str, v: &Value) -> Result<i64> {
    match v {
        Value::Integer(n) => Ok(*n),
        Value::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(*f as i64),
        other => Err(type_error(ctx, field, "an integer", other)),
    }
}

pub(crate) fn type_error(ctx: &FileCtx, field: &str, expected: &str, found: &Value) -> TaskError {
    ctx.err(
        TaskErrorKind::Type,
        field,
        format!("expected {expected}, found {}", found.type_str()),
    )
}

pub(crate) fn unknown_value(ctx: &FileCtx, field: &str, got: &str, allowed: &[&str]) -> TaskError {
    ctx.value(
        field,
        format!(
            "unknown value {} (expected one of: {})",
            quote(got),
            allowed.join(", ")
        ),
    )
}

/// A path inside the container: absolute, no `..` component, no NUL.
pub(crate) fn container_path(ctx: &FileCtx, field: &str, path: &str) -> Result<String> {
    if !path.starts_with('/') {
        return Err(ctx.err(
            TaskErrorKind::Path,
            field,
            format!(
                "must be an absolute path inside the container (got {})",
                quote(path)
            ),
        ));
    }
    if path.split('/').any(|c| c == "..") {
        return Err(ctx.err(
            TaskErrorKind::Path,
            field,
            format!("must not contain \"..\" components (got {})", quote(path)),
        ));
    }
    if path.contains('\0') {
        return Err(ctx.err(
            TaskErrorKind::Path,
            field,
            "must not contain a NUL character",
        ));
    }
    Ok(path.to_string())
}

pub(crate) fn sha256_hex(ctx: &FileCtx, field: &str, s: &str) -> Result<String> {
    let hex = s.strip_prefix("sha256:").unwrap_or(s);
    if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(hex.to_ascii_lowercase())
    } else {
        Err(ctx.value(field, format!("must be 64 hex digits (got {})", quote(s))))
    }
}

/// Harbor's legacy size strings: "2G", "512M", "1024K" (case-insensitive).
pub(crate) fn parse_size_mb(s: &str) -> Option<i64> {
    let s = s.trim().to_ascii_uppercase();
    let (number, factor) = if let Some(n) = s.strip_suffix('G') {
        (n, 1024.0)
    } else if let Some(n) = s.strip_suffix('M') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('K') {
        (n, 1.0 / 1024.0)
    } else {
        return None;
    };
    let value: f64 = number.trim().parse().ok()?;
    let mb = (value * factor).floor();
    (0.0..9.0e15).contains(&mb).then_some(mb as i64)
}

/// The closest candidate within a small edit distance, if any.
pub(crate) fn suggest<'c>(key: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let key = key.to_ascii_lowercase();
    let limit = match key.chars().count() {
        0..=3 => 1,
        4..=8 => 2,
        _ => 3,
    };
    candidates
        .iter()
        .map(|c| (levenshtein(&key, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

pub(crate) fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// `path` + `.key`, quoting the key when it is not a bare TOML key.
pub(crate) fn join(path: &str, key: &str) -> String {
    let part = dotted(&[key]);
    if path.is_empty() {
        part
    } else {
        format!("{path}.{part}")
    }
}

pub(crate) fn dotted(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| {
            if !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                k.to_string()
            } else {
                quote(k)
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// Files `kept` under a dotted `path` ("verifier.environment") of `root`,
/// merging with what is there.
pub(crate) fn insert_path(
    root: &mut JsonMap<String, Json>,
    path: &str,
    kept: JsonMap<String, Json>,
) {
    let mut node = root;
    for part in path.split('.') {
        let entry = node
            .entry(part.to_string())
            .or_insert_with(|| Json::Object(JsonMap::new()));
        if !entry.is_object() {
            *entry = Json::Object(JsonMap::new());
        }
        let Json::Object(next) = entry else {
            return;
        };
        node = next;
    }
    node.extend(kept);
}

/// TOML → JSON. Datetimes become their TOML text; non-finite floats their
/// TOML spelling (`nan`, `inf`, `-inf`), as JSON has no such numbers.
pub(crate) fn to_json(v: &Value) -> Json {
    match v {
        Value::String(s) => Json::String(s.clone()),
        Value::Integer(n) => Json::from(*n),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .unwrap_or_else(|| Json::String(v.to_string())),
        Value::Boolean(b) => Json::Bool(*b),
        Value::Datetime(d) => Json::String(d.to_string()),
        Value::Array(a) => Json::Array(a.iter().map(to_json).collect()),
        Value::Table(t) => Json::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
    }
}
