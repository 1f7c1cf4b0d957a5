//! The results store across jobs (SPEC §16): finished jobs' records indexed into one SQL
//! database — a SQLite file by default, or a team's PostgreSQL — so runs can be looked at
//! across jobs with `arbiter query`. Schema and commands: docs/results.md.
//!
//! Owns: finding and reading job dirs into rows ([`read`]), the schema as data and its
//! migrations ([`schema`]), the one query layer over both engines ([`db`]), where the store
//! is ([`location`]), rendering answers ([`output`]) and an agent's history across jobs
//! ([`history`]).
//!
//! Invariants:
//! - job dirs are the source of truth: every row can be made again from them, and indexing a
//!   job dir again replaces its rows with the same rows;
//! - a job is read whole and checked before anything is written (a truncated `result.json`
//!   or `trials.jsonl` line refuses it), then written in one transaction;
//! - a trial's outcome is the one `arbiter report` counts (its reader classifies it);
//! - the schema only moves forward, in one transaction under a lock; a store newer than this
//!   arbiter is refused, never changed;
//! - nothing here prints: the CLI does.

mod db;
mod error;
mod history;
mod location;
mod output;
mod read;
mod schema;
#[cfg(test)]
mod tests;

pub(crate) use db::Store;
pub(crate) use error::ResultsError;
#[cfg(test)]
pub(crate) use history::{Flip, Point};
pub(crate) use history::{History, choices, history};
pub(crate) use location::{ENV, Location};
pub(crate) use output::{Format, render};
pub(crate) use read::{find_jobs, read_job};
