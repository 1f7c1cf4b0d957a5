//! Schema v1 of the results store (docs/results.md), as data: one table list from which the
//! DDL for both engines and every insert are made. Columns hold a fact each, kept apart as in
//! the records: `termination_*` (how the agent stopped), `claim_*` (what it says),
//! `verifier_*` / `rewards` (what was measured), `usage` (what it spent), `changes_*` /
//! `findings` (what it changed).

/// The schema version this arbiter writes and reads.
pub(crate) const VERSION: i64 = 1;

/// A column's type. Flags are 0/1 integers (`SUM(passed)` works on both engines).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Text,
    /// Counts and sizes: BIGINT.
    Int,
    /// 0/1: INTEGER.
    Flag,
    Real,
}

impl Ty {
    fn sql(self) -> &'static str {
        match self {
            Ty::Text => "TEXT",
            Ty::Int => "BIGINT",
            Ty::Flag => "INTEGER",
            Ty::Real => "DOUBLE PRECISION",
        }
    }
}

#[derive(Debug)]
pub(crate) struct Table {
    pub name: &'static str,
    pub columns: &'static [(&'static str, Ty)],
    pub key: &'static [&'static str],
}

impl Table {
    pub(crate) fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|(c, _)| *c == name)
    }

    /// `CREATE TABLE IF NOT EXISTS …`: the same text on SQLite and PostgreSQL.
    pub(crate) fn create(&self) -> String {
        let cols: Vec<String> = self
            .columns
            .iter()
            .map(|(name, ty)| {
                let not_null = if self.key.contains(name) {
                    " NOT NULL"
                } else {
                    ""
                };
                format!("{name} {}{not_null}", ty.sql())
            })
            .collect();
        format!(
            "CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))",
            self.name,
            cols.join(", "),
            self.key.join(", ")
        )
    }

    /// `INSERT INTO t (…) VALUES ($1, …)`.
    pub(crate) fn insert(&self) -> String {
        self.insert_rows(1)
    }

    /// One INSERT of `rows` rows: `$1…$n` numbered through all of them, row after row.
    pub(crate) fn insert_rows(&self, rows: usize) -> String {
        let names: Vec<&str> = self.columns.iter().map(|(n, _)| *n).collect();
        let width = names.len();
        let values: Vec<String> = (0..rows)
            .map(|r| {
                let params: Vec<String> =
                    (1..=width).map(|i| format!("${}", r * width + i)).collect();
                format!("({})", params.join(", "))
            })
            .collect();
        format!(
            "INSERT INTO {} ({}) VALUES {}",
            self.name,
            names.join(", "),
            values.join(", ")
        )
    }
}

use Ty::{Flag, Int, Real, Text};

pub(crate) const JOBS: Table = Table {
    name: "jobs",
    columns: &[
        ("job_id", Text),
        ("name", Text),
        ("dir", Text),
        ("host", Text),
        ("arbiter_version", Text),
        ("backend", Text),
        ("attempts", Int),
        ("pass_threshold", Real),
        ("trials", Int),
        ("scored", Int),
        ("passed", Int),
        ("infra", Int),
        ("started_at", Text),
        ("finished_at", Text),
        ("config", Text),
        ("indexed_at", Text),
    ],
    key: &["job_id"],
};

pub(crate) const ARMS: Table = Table {
    name: "arms",
    columns: &[
        ("job_id", Text),
        ("agent", Text),
        ("variant", Text),
        ("arm_order", Int),
        ("trials", Int),
        ("scored", Int),
        ("passed", Int),
        ("infra", Int),
    ],
    key: &["job_id", "agent", "variant"],
};

pub(crate) const TRIALS: Table = Table {
    name: "trials",
    columns: &[
        ("job_id", Text),
        ("trial_id", Text),
        ("task", Text),
        ("agent", Text),
        ("variant", Text),
        ("attempt", Int),
        ("task_checksum", Text),
        ("image", Text),
        ("backend", Text),
        ("started_at", Text),
        ("finished_at", Text),
        ("seconds", Real),
        // as `arbiter report` counts it
        ("outcome", Text),
        ("scored", Flag),
        ("passed", Flag),
        ("tampered", Flag),
        ("reward", Real),
        // how the agent stopped
        ("termination_kind", Text),
        ("termination_exit_code", Int),
        ("termination_detail", Text),
        // what it says
        ("claim_status", Text),
        ("claim_source", Text),
        ("claim_semantic_status", Text),
        ("claimed_success", Flag),
        ("claim_record", Text),
        // what was measured
        ("verifier_status", Text),
        ("verifier_mode", Text),
        ("verifier_exit_code", Int),
        ("verifier_detail", Text),
        ("audit_verdict", Text),
        ("audit_violations", Text),
        // what it changed
        ("integrity_status", Text),
        ("changes_added", Int),
        ("changes_modified", Int),
        ("changes_deleted", Int),
        ("changes_outside_workdir", Int),
        ("changes_file", Text),
        // the harness
        ("infra_phase", Text),
        ("infra_message", Text),
        ("retries", Int),
        ("regrade_id", Text),
        ("regrade_status", Text),
        ("record", Text),
    ],
    key: &["job_id", "trial_id"],
};

pub(crate) const REWARDS: Table = Table {
    name: "rewards",
    columns: &[
        ("job_id", Text),
        ("trial_id", Text),
        ("name", Text),
        ("value", Real),
    ],
    key: &["job_id", "trial_id", "name"],
};

pub(crate) const PHASES: Table = Table {
    name: "phases",
    columns: &[
        ("job_id", Text),
        ("trial_id", Text),
        ("phase", Text),
        ("seconds", Real),
    ],
    key: &["job_id", "trial_id", "phase"],
};

pub(crate) const USAGE: Table = Table {
    name: "usage",
    columns: &[
        ("job_id", Text),
        ("trial_id", Text),
        ("requests", Int),
        ("input_tokens", Int),
        ("output_tokens", Int),
        ("cache_read_tokens", Int),
        ("cache_write_tokens", Int),
        ("cost_usd", Real),
        ("upstream_errors", Int),
        ("upstream_errors_by_kind", Text),
        ("refused", Int),
        ("calls_without_usage", Int),
        ("budget_max_cost_usd", Real),
        ("budget_exhausted", Flag),
        ("unavailable", Text),
    ],
    key: &["job_id", "trial_id"],
};

pub(crate) const ATTEMPTS: Table = Table {
    name: "attempts",
    columns: &[
        ("job_id", Text),
        ("trial_id", Text),
        ("attempt", Int),
        ("attempt_id", Text),
        ("started_at", Text),
        ("finished_at", Text),
        ("seconds", Real),
        ("remaining_seconds", Real),
        ("termination_kind", Text),
        ("termination_exit_code", Int),
        ("termination_detail", Text),
        ("claim_status", Text),
        ("claim_semantic_status", Text),
        ("requests", Int),
        ("input_tokens", Int),
        ("output_tokens", Int),
        ("cost_usd", Real),
        ("continued_because", Text),
        ("validation", Text),
        ("cleared", Text),
    ],
    key: &["job_id", "trial_id", "attempt"],
};

pub(crate) const CONTINUATION: Table = Table {
    name: "continuation",
    columns: &[
        ("job_id", Text),
        ("trial_id", Text),
        ("max_attempts", Int),
        ("attempts_used", Int),
        ("status", Text),
        ("detail", Text),
    ],
    key: &["job_id", "trial_id"],
};

pub(crate) const VERIFIER_RUNS: Table = Table {
    name: "verifier_runs",
    columns: &[
        ("job_id", Text),
        ("trial_id", Text),
        ("seq", Int),
        ("recorded_at", Text),
        ("regrade", Text),
        ("run", Int),
        ("source", Text),
        ("verifier_checksum", Text),
        ("tests_dir", Text),
        ("arbiter_version", Text),
        ("mode", Text),
        ("image", Text),
        ("status", Text),
        ("reward", Real),
        ("exit_code", Int),
        ("detail", Text),
        ("verdict", Text),
    ],
    key: &["job_id", "trial_id", "seq"],
};

pub(crate) const FINDINGS: Table = Table {
    name: "findings",
    columns: &[
        ("job_id", Text),
        ("trial_id", Text),
        ("seq", Int),
        ("path", Text),
        ("class", Text),
        ("why", Text),
    ],
    key: &["job_id", "trial_id", "seq"],
};

pub(crate) const INFRA_ERRORS: Table = Table {
    name: "infra_errors",
    columns: &[
        ("job_id", Text),
        ("trial_id", Text),
        ("seq", Int),
        ("phase", Text),
        ("message", Text),
        ("is_final", Flag),
    ],
    key: &["job_id", "trial_id", "seq"],
};

/// Every table of a job's rows, `jobs` first.
pub(crate) const TABLES: [&Table; 11] = [
    &JOBS,
    &ARMS,
    &TRIALS,
    &REWARDS,
    &PHASES,
    &USAGE,
    &ATTEMPTS,
    &CONTINUATION,
    &VERIFIER_RUNS,
    &FINDINGS,
    &INFRA_ERRORS,
];

/// The version row's table (one row, `id = 1`).
pub(crate) const CREATE_VERSION: &str = "CREATE TABLE IF NOT EXISTS schema_version (id INTEGER NOT NULL PRIMARY KEY, version BIGINT NOT NULL, arbiter_version TEXT NOT NULL, migrated_at TEXT NOT NULL)";

/// The statements that take a store from version `from` to `from + 1`.
pub(crate) fn step(from: i64) -> Vec<String> {
    match from {
        0 => {
            let mut out: Vec<String> = TABLES.iter().map(|t| t.create()).collect();
            out.push(
                "CREATE INDEX IF NOT EXISTS trials_by_agent_task ON trials (agent, task)".into(),
            );
            out.push("CREATE INDEX IF NOT EXISTS jobs_by_name ON jobs (name)".into());
            out
        }
        _ => Vec::new(),
    }
}
