//! The job's `models:` list and an agent's `model:` / `budget:` (SPEC §11).
//!
//! These types deserialise straight out of `job.yaml` (`deny_unknown_fields`). Problems that
//! serde cannot see (a scripted provider without a script, a negative price, an agent naming a
//! provider that does not exist) are found by [`validate_models`] and
//! [`validate_agent_model`], each as one line naming the field, e.g.
//! `models[1].script: required when api is scripted`.
//!
//! `api_key` is kept as written (`${ANTHROPIC_API_KEY}`) and resolved only by
//! [`ModelConfig::resolve`] when the job starts; it is never serialised resolved (a literal key
//! serialises as `***`).
//!
//! Over 600 lines: every `models:`/`model:`/`budget:` field with its one-line error, and the tests pinning them.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::scripted::Script;
pub use super::usage::Price;

/// A configuration problem, one line: `<field>: <what is wrong>`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// Dotted path of the field, e.g. `models[1].api`.
    pub field: String,
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// The wire protocol family a provider speaks upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderApi {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions and Responses.
    Openai,
    /// arbiter's deterministic scripted model (answers every protocol).
    Scripted,
}

impl ProviderApi {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderApi::Anthropic => "anthropic",
            ProviderApi::Openai => "openai",
            ProviderApi::Scripted => "scripted",
        }
    }
}

impl<'de> Deserialize<'de> for ProviderApi {
    /// By hand, for the message `unknown value "x" (expected anthropic, openai or scripted)`.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A visitor, so the deserializer attaches the field path to the error.
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ProviderApi;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("anthropic, openai or scripted")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ProviderApi, E> {
                match v {
                    "anthropic" => Ok(ProviderApi::Anthropic),
                    "openai" => Ok(ProviderApi::Openai),
                    "scripted" => Ok(ProviderApi::Scripted),
                    other => Err(E::custom(format!(
                        "unknown value {other:?} (expected anthropic, openai or scripted)"
                    ))),
                }
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// A credential as written in the job file: usually a `${NAME}` reference.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct ApiKeyRef(String);

impl ApiKeyRef {
    pub fn new(raw: impl Into<String>) -> Self {
        ApiKeyRef(raw.into())
    }

    fn is_pure_reference(&self) -> bool {
        let v = &self.0;
        v.starts_with("${") && v.ends_with('}') && v.matches("${").count() == 1
    }

    /// Resolve `${NAME}` / `${NAME:-default}` references with `lookup`.
    pub fn resolve_with(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = self.0.as_str();
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| "unterminated ${ reference".to_string())?;
            let inner = &after[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (inner, None),
            };
            match lookup(name).filter(|v| !v.is_empty()) {
                Some(v) => out.push_str(&v),
                None => match default {
                    Some(d) => out.push_str(d),
                    None => return Err(format!("${{{name}}} is not set in arbiter's environment")),
                },
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

impl Serialize for ApiKeyRef {
    /// A reference is written as is; a literal key never is.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_pure_reference() {
            serializer.serialize_str(&self.0)
        } else {
            serializer.serialize_str("***")
        }
    }
}

impl fmt::Debug for ApiKeyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_pure_reference() {
            write!(f, "ApiKeyRef({:?})", self.0)
        } else {
            f.write_str("ApiKeyRef(***)")
        }
    }
}

/// Upstream retries of 429 / 5xx / overloaded answers and connection failures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Retries after the first try (so `max + 1` tries at most).
    pub max: u32,
    /// Wait before the first retry; doubles each time, capped at [`MAX_BACKOFF`].
    pub backoff_sec: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max: 3,
            backoff_sec: 1.0,
        }
    }
}

/// Upper bound of one retry wait, whatever `backoff_sec` and `retry-after` say.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

impl RetryConfig {
    /// Wait before retry number `n` (1-based): `backoff_sec * 2^(n-1)`, capped.
    pub fn backoff(&self, n: u32) -> Duration {
        let secs = self.backoff_sec * 2f64.powi(n.saturating_sub(1).min(30) as i32);
        Duration::from_secs_f64(secs.clamp(0.0, MAX_BACKOFF.as_secs_f64()))
    }
}

fn default_max_concurrency() -> u32 {
    16
}

/// One entry of the job's `models:` list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// What agents name as `model.provider`.
    pub name: String,
    pub api: ProviderApi,
    /// Anthropic: without `/v1` (default `https://api.anthropic.com`); OpenAI: with `/v1`
    /// (default `https://api.openai.com/v1`), as the SDKs' `*_BASE_URL` variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<ApiKeyRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    #[serde(default = "default_max_concurrency")]
    pub max_concurrency: u32,
    #[serde(default)]
    pub retry: RetryConfig,
    /// The scripted provider's script (JSON), relative to the job file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<PathBuf>,
}

/// An agent's `model: {provider, name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentModel {
    pub provider: String,
    pub name: String,
}

/// An agent's `budget:` — limits per trial; a call that would start past one is refused.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<u64>,
    /// Input + output + cache read + cache write tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

impl Budget {
    pub fn is_unlimited(&self) -> bool {
        self.max_requests.is_none() && self.max_tokens.is_none() && self.max_cost_usd.is_none()
    }
}

/// Where a provider's calls go once credentials are resolved.
#[derive(Clone)]
pub enum Upstream {
    Http {
        base_url: String,
        /// The real key (never logged, never written).
        api_key: Option<String>,
    },
    Scripted(std::sync::Arc<Script>),
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Upstream::Http { base_url, api_key } => f
                .debug_struct("Http")
                .field("base_url", base_url)
                .field("api_key", &api_key.as_ref().map(|_| "***"))
                .finish(),
            Upstream::Scripted(_) => f.write_str("Scripted"),
        }
    }
}

/// A provider ready to serve: validated, key resolved, script loaded.
#[derive(Debug, Clone)]
pub struct ResolvedModel {
    pub name: String,
    pub api: ProviderApi,
    pub upstream: Upstream,
    pub price: Option<Price>,
    pub max_concurrency: u32,
    pub retry: RetryConfig,
}

impl ResolvedModel {
    /// The real key, for scrubbing.
    pub fn secret(&self) -> Option<&str> {
        match &self.upstream {
            Upstream::Http { api_key, .. } => api_key.as_deref().filter(|k| !k.is_empty()),
            Upstream::Scripted(_) => None,
        }
    }
}

impl ModelConfig {
    /// Resolve `api_key` from arbiter's environment and load the script (relative to
    /// `base_dir`, the job file's directory). `index` names the entry in errors.
    pub fn resolve(&self, index: usize, base_dir: &Path) -> Result<ResolvedModel, ConfigError> {
        self.resolve_with(index, base_dir, |name| std::env::var(name).ok())
    }

    /// [`ModelConfig::resolve`] with an explicit environment.
    pub fn resolve_with(
        &self,
        index: usize,
        base_dir: &Path,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<ResolvedModel, ConfigError> {
        let at = |f: &str| format!("models[{index}].{f}");
        self.validate(index)?;
        let upstream = match self.api {
            ProviderApi::Scripted => {
                let rel = self
                    .script
                    .as_ref()
                    .ok_or_else(|| err(at("script"), "required when api is scripted"))?;
                let path = base_dir.join(rel);
                let script = Script::load(&path).map_err(|e| err(at("script"), e.to_string()))?;
                Upstream::Scripted(std::sync::Arc::new(script))
            }
            api => {
                let base_url = self
                    .base_url
                    .clone()
                    .unwrap_or_else(|| match api {
                        ProviderApi::Anthropic => "https://api.anthropic.com".to_string(),
                        _ => "https://api.openai.com/v1".to_string(),
                    })
                    .trim_end_matches('/')
                    .to_string();
                let api_key = match &self.api_key {
                    None => None,
                    Some(k) => Some(k.resolve_with(&lookup).map_err(|m| err(at("api_key"), m))?),
                };
                Upstream::Http { base_url, api_key }
            }
        };
        Ok(ResolvedModel {
            name: self.name.clone(),
            api: self.api,
            upstream,
            price: self.price,
            max_concurrency: self.max_concurrency,
            retry: self.retry,
        })
    }

    fn validate(&self, index: usize) -> Result<(), ConfigError> {
        let at = |f: &str| format!("models[{index}].{f}");
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(err(
                at("name"),
                format!(
                    "{:?} is not a valid provider name ([a-zA-Z0-9._-]+)",
                    self.name
                ),
            ));
        }
        match self.api {
            ProviderApi::Scripted => {
                if self.script.is_none() {
                    return Err(err(at("script"), "required when api is scripted"));
                }
                if self.base_url.is_some() {
                    return Err(err(at("base_url"), "not used when api is scripted"));
                }
                if self.api_key.is_some() {
                    return Err(err(at("api_key"), "not used when api is scripted"));
                }
            }
            ProviderApi::Anthropic | ProviderApi::Openai => {
                if self.script.is_some() {
                    return Err(err(at("script"), "only used when api is scripted"));
                }
                if let Some(url) = &self.base_url
                    && !(url.starts_with("http://") || url.starts_with("https://"))
                {
                    return Err(err(
                        at("base_url"),
                        format!("{url:?} is not an http:// or https:// URL"),
                    ));
                }
            }
        }
        if let Some(p) = &self.price {
            let fields = [
                ("input_per_mtok", Some(p.input_per_mtok)),
                ("output_per_mtok", Some(p.output_per_mtok)),
                ("cache_read_per_mtok", p.cache_read_per_mtok),
                ("cache_write_per_mtok", p.cache_write_per_mtok),
            ];
            for (name, value) in fields {
                if let Some(v) = value
                    && !(v.is_finite() && v >= 0.0)
                {
                    return Err(err(
                        at(&format!("price.{name}")),
                        format!("{v} is not a non-negative number"),
                    ));
                }
            }
        }
        if self.max_concurrency == 0 {
            return Err(err(at("max_concurrency"), "must be at least 1"));
        }
        if self.retry.max > 20 {
            return Err(err(at("retry.max"), "at most 20 retries"));
        }
        if !(self.retry.backoff_sec.is_finite() && self.retry.backoff_sec >= 0.0) {
            return Err(err(
                at("retry.backoff_sec"),
                format!("{} is not a non-negative number", self.retry.backoff_sec),
            ));
        }
        Ok(())
    }
}

/// Check a `models:` list: each entry, and that names are unique.
pub fn validate_models(models: &[ModelConfig]) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for (i, m) in models.iter().enumerate() {
        m.validate(i)?;
        if !seen.insert(m.name.as_str()) {
            return Err(err(
                format!("models[{i}].name"),
                format!("{:?} is defined twice", m.name),
            ));
        }
    }
    Ok(())
}

/// Check an agent's `model` and `budget` against the job's `models`. `at` is the agent's field
/// path, e.g. `agents[0]`.
pub fn validate_agent_model(
    at: &str,
    models: &[ModelConfig],
    model: &AgentModel,
    budget: Option<&Budget>,
) -> Result<(), ConfigError> {
    let Some(provider) = models.iter().find(|m| m.name == model.provider) else {
        let known: Vec<&str> = models.iter().map(|m| m.name.as_str()).collect();
        let expected = if known.is_empty() {
            "the job defines no models".to_string()
        } else {
            format!("expected one of {}", known.join(", "))
        };
        return Err(err(
            format!("{at}.model.provider"),
            format!("unknown provider {:?} ({expected})", model.provider),
        ));
    };
    if model.name.is_empty() {
        return Err(err(format!("{at}.model.name"), "must not be empty"));
    }
    if let Some(b) = budget {
        if b.max_requests == Some(0) {
            return Err(err(
                format!("{at}.budget.max_requests"),
                "must be at least 1",
            ));
        }
        if b.max_tokens == Some(0) {
            return Err(err(format!("{at}.budget.max_tokens"), "must be at least 1"));
        }
        if let Some(c) = b.max_cost_usd {
            if !(c.is_finite() && c > 0.0) {
                return Err(err(
                    format!("{at}.budget.max_cost_usd"),
                    format!("{c} is not a positive number"),
                ));
            }
            if provider.price.is_none() {
                return Err(err(
                    format!("{at}.budget.max_cost_usd"),
                    format!(
                        "provider {:?} has no price, so cost cannot be counted",
                        provider.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Parse a YAML `models:` list on its own (the job config embeds `Vec<ModelConfig>` directly;
/// this is for tests and tools). Errors are serde_yaml's, which name the field path.
pub fn parse_models_yaml(text: &str) -> Result<Vec<ModelConfig>, ConfigError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Doc {
        models: Vec<ModelConfig>,
    }
    let doc: Doc = serde_yaml::from_str(text).map_err(|e| {
        let message = e.to_string();
        match message.split_once(": ") {
            Some((path, rest)) if !path.contains(' ') => err(path, rest),
            _ => err("models", message),
        }
    })?;
    validate_models(&doc.models)?;
    Ok(doc.models)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Result<Vec<ModelConfig>, String> {
        parse_models_yaml(text).map_err(|e| e.to_string())
    }

    #[test]
    fn spec_example_parses() {
        let models = one(r#"
models:
  - name: anthropic
    api: anthropic
    base_url: https://api.anthropic.com
    api_key: ${ANTHROPIC_API_KEY}
    price: { input_per_mtok: 3.0, output_per_mtok: 15.0, cache_read_per_mtok: 0.3 }
    max_concurrency: 16
    retry: { max: 5, backoff_sec: 2 }
  - name: fake
    api: scripted
    script: scripts/model.json
"#)
        .unwrap();
        assert_eq!(models.len(), 2);
        assert_eq!(models[0].api, ProviderApi::Anthropic);
        assert_eq!(models[0].retry.max, 5);
        assert_eq!(models[0].price.unwrap().cache_read_per_mtok, Some(0.3));
        assert_eq!(models[1].api, ProviderApi::Scripted);
        assert_eq!(models[1].max_concurrency, 16);
        // Serialised back, the key stays a reference.
        let yaml = serde_yaml::to_string(&models).unwrap();
        assert!(yaml.contains("${ANTHROPIC_API_KEY}"), "{yaml}");
    }

    #[test]
    fn one_line_errors_name_the_field() {
        let cases = [
            (
                "models:\n  - {name: a, api: openai}\n  - {name: b, api: x}\n",
                "models[1].api: unknown value \"x\" (expected anthropic, openai or scripted)",
            ),
            (
                "models:\n  - {name: a, api: openai, colour: red}\n",
                "models[0]: unknown field `colour`",
            ),
            (
                "models:\n  - {name: a, api: scripted}\n",
                "models[0].script: required when api is scripted",
            ),
            (
                "models:\n  - {name: a, api: openai, script: s.json}\n",
                "models[0].script: only used when api is scripted",
            ),
            (
                "models:\n  - {name: a, api: openai}\n  - {name: a, api: anthropic}\n",
                "models[1].name: \"a\" is defined twice",
            ),
            (
                "models:\n  - {name: a, api: openai, max_concurrency: 0}\n",
                "models[0].max_concurrency: must be at least 1",
            ),
            (
                "models:\n  - {name: a, api: openai, base_url: ftp://x}\n",
                "models[0].base_url: \"ftp://x\" is not an http:// or https:// URL",
            ),
            (
                "models:\n  - {name: a, api: openai, price: {input_per_mtok: -1, output_per_mtok: 1}}\n",
                "models[0].price.input_per_mtok: -1 is not a non-negative number",
            ),
            (
                "models:\n  - {name: 'a b', api: openai}\n",
                "models[0].name: \"a b\" is not a valid provider name ([a-zA-Z0-9._-]+)",
            ),
        ];
        for (yaml, want) in cases {
            let got = one(yaml).unwrap_err();
            assert!(
                got.starts_with(want),
                "for {yaml:?}\n got: {got}\nwant: {want}"
            );
            assert!(!got.contains('\n'), "{got}");
        }
    }

    #[test]
    fn api_key_resolution_and_redaction() {
        let env = |n: &str| (n == "K").then(|| "sk-real".to_string());
        assert_eq!(ApiKeyRef::new("${K}").resolve_with(env).unwrap(), "sk-real");
        assert_eq!(
            ApiKeyRef::new("${MISSING:-dflt}")
                .resolve_with(env)
                .unwrap(),
            "dflt"
        );
        assert_eq!(
            ApiKeyRef::new("${MISSING}").resolve_with(env).unwrap_err(),
            "${MISSING} is not set in arbiter's environment"
        );
        let literal = ApiKeyRef::new("sk-literal");
        assert_eq!(serde_json::to_string(&literal).unwrap(), "\"***\"");
        assert!(!format!("{literal:?}").contains("sk-literal"));

        let cfg: ModelConfig =
            serde_yaml::from_str("{name: a, api: openai, api_key: '${NOPE}'}").unwrap();
        let e = cfg
            .resolve_with(0, Path::new("."), |_| None)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "models[0].api_key: ${NOPE} is not set in arbiter's environment"
        );
        let r = cfg
            .resolve_with(0, Path::new("."), |_| Some("sk-x".into()))
            .unwrap();
        assert!(!format!("{r:?}").contains("sk-x"));
        match r.upstream {
            Upstream::Http { base_url, api_key } => {
                assert_eq!(base_url, "https://api.openai.com/v1");
                assert_eq!(api_key.as_deref(), Some("sk-x"));
            }
            Upstream::Scripted(_) => panic!("not scripted"),
        }
    }

    #[test]
    fn agent_model_checks() {
        let models = one(
            "models:\n  - {name: a, api: openai}\n  - {name: p, api: openai, price: {input_per_mtok: 1, output_per_mtok: 2}}\n",
        )
        .unwrap();
        let m = |p: &str| AgentModel {
            provider: p.into(),
            name: "gpt".into(),
        };
        assert_eq!(
            validate_agent_model("agents[0]", &models, &m("zz"), None)
                .unwrap_err()
                .to_string(),
            "agents[0].model.provider: unknown provider \"zz\" (expected one of a, p)"
        );
        let costly = Budget {
            max_cost_usd: Some(1.0),
            ..Budget::default()
        };
        assert_eq!(
            validate_agent_model("agents[2]", &models, &m("a"), Some(&costly))
                .unwrap_err()
                .to_string(),
            "agents[2].budget.max_cost_usd: provider \"a\" has no price, so cost cannot be counted"
        );
        validate_agent_model("agents[2]", &models, &m("p"), Some(&costly)).unwrap();
        let b: Result<Budget, _> = serde_yaml::from_str("{max_request: 3}");
        assert!(
            b.unwrap_err()
                .to_string()
                .contains("unknown field `max_request`")
        );
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let r = RetryConfig {
            max: 5,
            backoff_sec: 2.0,
        };
        assert_eq!(r.backoff(1), Duration::from_secs(2));
        assert_eq!(r.backoff(2), Duration::from_secs(4));
        assert_eq!(r.backoff(3), Duration::from_secs(8));
        assert_eq!(r.backoff(10), MAX_BACKOFF);
    }
}
