//! `${NAME}` / `${NAME:-default}` references and secret redaction (SPEC §3).

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvError {
    #[error("env.{key}: ${{{name}}} is not set in arbiter's environment")]
    Unset { key: String, name: String },
    #[error("env.{key}: unterminated ${{ reference")]
    Unterminated { key: String },
}

impl EnvError {
    /// The env key whose value is at fault.
    pub fn key(&self) -> &str {
        match self {
            EnvError::Unset { key, .. } | EnvError::Unterminated { key } => key,
        }
    }

    /// What is wrong, without the key.
    pub fn reason(&self) -> String {
        match self {
            EnvError::Unset { name, .. } => {
                format!("${{{name}}} is not set in arbiter's environment")
            }
            EnvError::Unterminated { .. } => "unterminated ${ reference".to_string(),
        }
    }
}

/// Keys whose values are secrets even when written literally.
pub fn is_secret_key(key: &str) -> bool {
    let upper = key.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|word| upper.contains(word))
}

/// Resolve `${NAME}` and `${NAME:-default}` references against the process environment.
///
/// `${NAME:-default}` takes `default` when `NAME` is not set (a set but empty `NAME` stays
/// empty, as in Harbor's resolver); `${NAME}` with `NAME` unset is an error.
pub fn resolve_env(env: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, EnvError> {
    env.iter()
        .map(|(k, v)| {
            Ok((
                k.clone(),
                substitute(k, v, |name| std::env::var(name).ok())?,
            ))
        })
        .collect()
}

fn substitute(
    key: &str,
    value: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, EnvError> {
    let mut out = String::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| EnvError::Unterminated {
            key: key.to_string(),
        })?;
        let (name, default) = match after[..end].split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (&after[..end], None),
        };
        let resolved = match (lookup(name), default) {
            (Some(value), _) => value,
            (None, Some(default)) => default.to_string(),
            (None, None) => {
                return Err(EnvError::Unset {
                    key: key.to_string(),
                    name: name.to_string(),
                });
            }
        };
        out.push_str(&resolved);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The env as it may be written to disk: references stay unresolved, secret-named keys are `***`
/// (also `${NAME:-default}` with a non-empty default: the default is a literal secret).
pub fn redact_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .map(|(k, v)| {
            let shown = if is_secret_key(k) && !is_pure_reference(v) {
                "***".to_string()
            } else {
                v.clone()
            };
            (k.clone(), shown)
        })
        .collect()
}

/// `${NAME}` or `${NAME:-}` alone: nothing literal in the value.
fn is_pure_reference(v: &str) -> bool {
    v.starts_with("${")
        && v.ends_with('}')
        && v.matches("${").count() == 1
        && v[2..v.len() - 1]
            .split_once(":-")
            .is_none_or(|(_, default)| default.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitution() {
        let lookup = |n: &str| (n == "A").then(|| "1".to_string());
        assert_eq!(
            substitute("K", "x${A}y${A}", lookup),
            Ok("x1y1".to_string())
        );
        assert_eq!(
            substitute("K", "${B}", lookup),
            Err(EnvError::Unset {
                key: "K".into(),
                name: "B".into()
            })
        );
        assert_eq!(
            substitute("K", "${A", lookup),
            Err(EnvError::Unterminated { key: "K".into() })
        );
    }

    #[test]
    fn substitution_with_defaults() {
        let lookup = |n: &str| match n {
            "A" => Some("1".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        let cases: &[(&str, Result<&str, EnvError>)] = &[
            ("${A:-x}", Ok("1")),
            ("${B:-x}", Ok("x")),
            ("${B:-}", Ok("")),
            ("${EMPTY:-x}", Ok("")),
            ("/usr/bin:${B:-/opt/bin}:${A}", Ok("/usr/bin:/opt/bin:1")),
            ("${B:-a:-b}", Ok("a:-b")),
            (
                "${B}",
                Err(EnvError::Unset {
                    key: "K".into(),
                    name: "B".into(),
                }),
            ),
            ("${B:-x", Err(EnvError::Unterminated { key: "K".into() })),
        ];
        for (value, expected) in cases {
            assert_eq!(
                substitute("K", value, lookup),
                expected.clone().map(str::to_string),
                "{value}"
            );
        }
        assert_eq!(
            EnvError::Unset {
                key: "K".into(),
                name: "B".into()
            }
            .to_string(),
            "env.K: ${B} is not set in arbiter's environment"
        );
    }

    #[test]
    fn values_resolved_from_references_with_defaults_are_secrets() {
        let raw = BTreeMap::from([
            (
                "URL".to_string(),
                "${ARBITER_TEST_SURELY_UNSET:-https://judge.example}".to_string(),
            ),
            ("MODE".to_string(), "fast-mode".to_string()),
        ]);
        let lookup = |_: &str| None;
        let resolved: Vec<(String, String)> = raw
            .iter()
            .map(|(k, v)| (k.clone(), substitute(k, v, lookup).expect("resolves")))
            .collect();
        assert_eq!(resolved[1].1, "https://judge.example");
        assert_eq!(
            crate::agent::secret_values(&raw, &resolved),
            vec!["https://judge.example".to_string()]
        );
    }

    #[test]
    fn redaction() {
        let env = BTreeMap::from([
            ("LLM_API_KEY".to_string(), "sk-live".to_string()),
            ("MY_TOKEN".to_string(), "${TOKEN_FROM_HOST}".to_string()),
            ("MODE".to_string(), "fast".to_string()),
            ("API_KEY".to_string(), "${HOST_KEY:-sk-default}".to_string()),
            ("OTHER_KEY".to_string(), "${HOST_KEY:-}".to_string()),
            ("LEVEL".to_string(), "${LEVEL:-info}".to_string()),
        ]);
        let shown = redact_env(&env);
        assert_eq!(shown["API_KEY"], "***");
        assert_eq!(shown["OTHER_KEY"], "${HOST_KEY:-}");
        assert_eq!(shown["LEVEL"], "${LEVEL:-info}");
        assert_eq!(shown["LLM_API_KEY"], "***");
        assert_eq!(shown["MY_TOKEN"], "${TOKEN_FROM_HOST}");
        assert_eq!(shown["MODE"], "fast");
    }
}
