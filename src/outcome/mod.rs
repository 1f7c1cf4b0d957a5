//! What the agent claims about its own work, and the audit that sets the claim against what
//! the verifier and arbiter's own checks measured (SPEC §1, §4, §6). Pure functions over bytes
//! and plain data: no I/O here.

mod audit;
mod claim;
mod completion;

pub use audit::{Audit, AuditInput, Verdict, Violation, ViolationKind, audit};
pub use claim::{Claim, ClaimSource, ClaimStatus, OUTCOME_SCHEMA, collect_claim};
pub use completion::{
    Attempt, CompletionRecord, CompletionStatus, CompletionSummary, FileCheck, FileStatus, Receipt,
};
