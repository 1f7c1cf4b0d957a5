//! What the agent claims about its own work, and the audit that sets the claim against what
//! the verifier measured (SPEC §1, §4, §6). Pure functions over bytes: no I/O here.

mod audit;
mod claim;

pub use audit::{Audit, Verdict, audit};
pub use claim::{Claim, ClaimSource, ClaimStatus, OUTCOME_SCHEMA, collect_claim};
