//! `${NAME}` references and secret redaction (SPEC §3).

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

/// Resolve `${NAME}` references against the process environment.
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
        let name = &after[..end];
        let resolved = lookup(name).ok_or_else(|| EnvError::Unset {
            key: key.to_string(),
            name: name.to_string(),
        })?;
        out.push_str(&resolved);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The env as it may be written to disk: references stay unresolved, secret-named keys are `***`.
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

fn is_pure_reference(v: &str) -> bool {
    v.starts_with("${") && v.ends_with('}') && v.matches("${").count() == 1
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
    fn redaction() {
        let env = BTreeMap::from([
            ("LLM_API_KEY".to_string(), "sk-live".to_string()),
            ("MY_TOKEN".to_string(), "${TOKEN_FROM_HOST}".to_string()),
            ("MODE".to_string(), "fast".to_string()),
        ]);
        let shown = redact_env(&env);
        assert_eq!(shown["LLM_API_KEY"], "***");
        assert_eq!(shown["MY_TOKEN"], "${TOKEN_FROM_HOST}");
        assert_eq!(shown["MODE"], "fast");
    }
}
