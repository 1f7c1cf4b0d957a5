//! arbiter: a container-based benchmark harness for AI agents.
//!
//! See `docs/architecture.md` for the shape of the crate.

pub mod sandbox;
