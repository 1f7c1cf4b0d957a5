//! Compose value forms: scalars, env lists or maps, command words, healthcheck
//! tests, `depends_on`, durations.

use std::collections::BTreeMap;

use serde_yaml::Value as Yaml;

use super::super::error::{FileCtx, TaskError, TaskErrorKind, quote};
use super::{Dependency, DependsCondition, HealthTest};

type Result<T> = std::result::Result<T, TaskError>;

pub(super) fn valid_service_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

pub(super) fn key_text(ctx: &FileCtx, field: &str, key: &Yaml) -> Result<String> {
    match key {
        Yaml::String(s) => Ok(s.clone()),
        other => Err(type_error(ctx, field, "string keys", other)),
    }
}

pub(super) fn yaml_type(v: &Yaml) -> &'static str {
    match v {
        Yaml::Null => "null",
        Yaml::Bool(_) => "boolean",
        Yaml::Number(_) => "number",
        Yaml::String(_) => "string",
        Yaml::Sequence(_) => "list",
        Yaml::Mapping(_) => "mapping",
        Yaml::Tagged(_) => "tagged value",
    }
}

pub(super) fn type_error(ctx: &FileCtx, field: &str, expected: &str, found: &Yaml) -> TaskError {
    ctx.err(
        TaskErrorKind::Type,
        field,
        format!("expected {expected}, found {}", yaml_type(found)),
    )
}

/// A string, number or boolean as text (compose accepts all three for strings).
pub(super) fn scalar(ctx: &FileCtx, field: &str, v: &Yaml) -> Result<String> {
    match v {
        Yaml::String(s) => Ok(s.clone()),
        Yaml::Number(n) => Ok(n.to_string()),
        Yaml::Bool(b) => Ok(b.to_string()),
        other => Err(type_error(ctx, field, "a string", other)),
    }
}

/// `environment` / `args`: `["K=V", "K"]` or `{K: V}` (`null`: pass-through).
pub(super) fn environment(
    ctx: &FileCtx,
    field: &str,
    v: &Yaml,
) -> Result<BTreeMap<String, Option<String>>> {
    let mut out = BTreeMap::new();
    match v {
        Yaml::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                let entry = scalar(ctx, &format!("{field}[{i}]"), item)?;
                let (key, value) = match entry.split_once('=') {
                    Some((k, v)) => (k.to_string(), Some(v.to_string())),
                    None => (entry.clone(), None),
                };
                if key.is_empty() {
                    return Err(ctx.value(
                        &format!("{field}[{i}]"),
                        format!("no variable name in {}", quote(&entry)),
                    ));
                }
                out.insert(key, value);
            }
        }
        Yaml::Mapping(m) => {
            for (k, value) in m {
                let key = key_text(ctx, field, k)?;
                let value = match value {
                    Yaml::Null => None,
                    other => Some(scalar(ctx, &format!("{field}.{key}"), other)?),
                };
                out.insert(key, value);
            }
        }
        Yaml::Null => {}
        other => return Err(type_error(ctx, field, "a list or a mapping", other)),
    }
    Ok(out)
}

/// `command` / `entrypoint`: a list of words, or a string split like compose
/// does (quotes and backslashes, no shell). `null` means "not set".
pub(super) fn words(ctx: &FileCtx, field: &str, v: &Yaml) -> Result<Option<Vec<String>>> {
    match v {
        Yaml::Null => Ok(None),
        Yaml::Sequence(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| scalar(ctx, &format!("{field}[{i}]"), item))
            .collect::<Result<Vec<_>>>()
            .map(Some),
        Yaml::String(s) => split_words(s)
            .map(Some)
            .ok_or_else(|| ctx.value(field, format!("unterminated quote in {}", quote(s)))),
        other => Err(type_error(ctx, field, "a string or a list", other)),
    }
}

pub(super) fn health_test(ctx: &FileCtx, field: &str, v: &Yaml) -> Result<HealthTest> {
    match v {
        Yaml::String(s) => Ok(HealthTest::Shell(s.clone())),
        Yaml::Sequence(items) => {
            let words: Vec<String> = items
                .iter()
                .enumerate()
                .map(|(i, item)| scalar(ctx, &format!("{field}[{i}]"), item))
                .collect::<Result<_>>()?;
            match words.split_first() {
                Some((kind, rest)) if kind == "CMD" && !rest.is_empty() => Ok(HealthTest::Exec(rest.to_vec())),
                Some((kind, rest)) if kind == "CMD-SHELL" && rest.len() == 1 => {
                    Ok(HealthTest::Shell(rest[0].clone()))
                }
                Some((kind, rest)) if kind == "NONE" && rest.is_empty() => Ok(HealthTest::Disabled),
                _ => Err(ctx.value(
                    field,
                    "must be [\"CMD\", prog, args...], [\"CMD-SHELL\", command], [\"NONE\"] or a command string",
                )),
            }
        }
        other => Err(type_error(ctx, field, "a string or a list", other)),
    }
}

pub(super) fn depends_on(ctx: &FileCtx, field: &str, v: &Yaml) -> Result<Vec<Dependency>> {
    let mut out: Vec<Dependency> = Vec::new();
    match v {
        Yaml::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                out.push(Dependency {
                    service: scalar(ctx, &format!("{field}[{i}]"), item)?,
                    condition: DependsCondition::Started,
                });
            }
        }
        Yaml::Mapping(m) => {
            for (k, body) in m {
                let service = key_text(ctx, field, k)?;
                let entry = format!("{field}.{service}");
                let condition = match body {
                    Yaml::Null => DependsCondition::Started,
                    Yaml::Mapping(b) => match b.get("condition") {
                        None => DependsCondition::Started,
                        Some(c) => {
                            let text = scalar(ctx, &format!("{entry}.condition"), c)?;
                            DependsCondition::ALL
                                .into_iter()
                                .find(|d| d.as_str() == text)
                                .ok_or_else(|| {
                                    ctx.value(
                                        &format!("{entry}.condition"),
                                        format!(
                                            "unknown value {} (expected one of: {})",
                                            quote(&text),
                                            DependsCondition::ALL.map(|d| d.as_str()).join(", ")
                                        ),
                                    )
                                })?
                        }
                    },
                    other => return Err(type_error(ctx, &entry, "a mapping", other)),
                };
                out.push(Dependency { service, condition });
            }
        }
        other => return Err(type_error(ctx, field, "a list or a mapping", other)),
    }
    Ok(out)
}

/// Compose durations: `1h2m3s`, `1.5s`, `500ms`, `10us`; a bare number is seconds.
pub(super) fn parse_duration(text: &str) -> Option<f64> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then_some(secs);
    }
    let mut total = 0.0;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * factor;
    }
    total.is_finite().then_some(total)
}

/// Splits a command string into words: whitespace separates, `'…'` is
/// literal, `"…"` allows `\"` and `\\`, a backslash outside quotes escapes
/// the next character. `None` on an unterminated quote.
pub(super) fn split_words(text: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            c @ ('"' | '\\' | '$' | '`') => word.push(c),
                            c => {
                                word.push('\\');
                                word.push(c);
                            }
                        },
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next()?);
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        out.push(word);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases: &[(&str, Option<f64>)] = &[
            ("5s", Some(5.0)),
            ("1m30s", Some(90.0)),
            ("1h", Some(3600.0)),
            ("500ms", Some(0.5)),
            ("1.5s", Some(1.5)),
            ("10", Some(10.0)),
            ("", None),
            ("5x", None),
            ("s", None),
            ("-1s", None),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_duration(text), *expected, "{text:?}");
        }
    }

    #[test]
    fn command_strings_split_like_compose() {
        let cases: &[(&str, Option<&[&str]>)] = &[
            ("sleep infinity", Some(&["sleep", "infinity"])),
            ("sh -c 'echo a b'", Some(&["sh", "-c", "echo a b"])),
            (r#"echo "a \"b\"" c\ d"#, Some(&["echo", "a \"b\"", "c d"])),
            ("  ", Some(&[])),
            ("''", Some(&[""])),
            ("echo 'open", None),
        ];
        for (text, expected) in cases {
            let expected = expected.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(split_words(text), expected, "{text:?}");
        }
    }
}
