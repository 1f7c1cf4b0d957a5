//! arbiter: a container-based benchmark harness for AI agents.
//!
//! See `docs/architecture.md` for the shape of the crate.

pub mod agent;
pub mod cli;
pub(crate) mod digest;
pub mod gateway;
pub(crate) mod interop;
pub mod job;
pub mod outcome;
pub(crate) mod regrade;
pub(crate) mod report;
pub(crate) mod results;
pub mod sandbox;
pub(crate) mod serve;
pub mod task;
pub(crate) mod taskcheck;
#[cfg(test)]
mod testing;
pub(crate) mod timefmt;
pub(crate) mod trial;
pub mod verifier;
