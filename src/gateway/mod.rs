//! The model gateway (SPEC §11): agents reach models only through arbiter.
//!
//! One [`Gateway`] per job serves Anthropic Messages, OpenAI Chat Completions and OpenAI
//! Responses (streaming and not) for every trial, each on a listener opened inside the trial
//! container's own network namespace ([`listen_in_netns`]). A trial authenticates with its own
//! random [`TrialToken`]; the real provider key stays in this process. Every call is metered
//! from the response ([`usage`]), appended to the trial's `agent/model-calls.jsonl`
//! ([`ledger`]) and summed into the record's [`Usage`]. Budgets refuse calls with a typed
//! error; upstream 429/5xx/overloaded answers are retried with bounded backoff; an upstream
//! that cannot be reached or refuses the credentials sets [`Usage::unavailable`].
//!
//! The `scripted` provider ([`scripted`]) answers deterministically from a script, so real
//! agent CLIs can be run in tests with no paid model and no network. See docs/gateway.md.
//!
//! [`allowlist`] is the egress proxy for `network_mode = "allowlist"`: on the same loopback,
//! it admits only `allowed_hosts`.
//!
//! This module knows nothing about tasks, trials' phases or verifiers.

pub mod allowlist;
pub mod atif;
pub mod config;
pub mod ledger;
pub mod netns;
pub mod scripted;
pub mod server;
pub mod usage;

pub use allowlist::{
    Allowlist, AllowlistError, EgressEvent, Observe, PROXY_PORT, ProxyHandle, proxy_env,
    proxy_env_bypassing, serve_allowlist,
};
pub use config::{
    AgentModel, Budget, ConfigError, ModelConfig, Price, ProviderApi, ResolvedModel, RetryConfig,
    validate_agent_model, validate_models,
};
pub use ledger::{BudgetUsage, CallOutcome, CallRecord, Usage};
pub use netns::{NetnsError, listen_in_netns};
pub use server::{Gateway, GatewayError, ServerHandle, TrialGrant, TrialToken};
pub use usage::{Protocol, Tokens};
