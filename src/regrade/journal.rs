//! The regrade journal: `regrade/<id>.json` in the job dir (what the regrade is: its trials,
//! tests dir, repeat count, and when it finished), and the pure decisions over it — which
//! unfinished regrade a rerun continues, and what to do with each trial.
//!
//! There is no separate per-trial marker file: a trial is done for a regrade when its
//! `result.json` carries `regrade.id` equal to the regrade's id, written in the same atomic
//! rename as its new verdict, so "recorded" and "marked done" cannot disagree.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::task::VerifierMode;
use crate::trial::{TerminationKind, TrialRecord};

pub(crate) const REGRADE_SCHEMA: &str = "arbiter.regrade.v1";
/// The journal's directory inside the job dir.
pub(crate) const REGRADE_DIR: &str = "regrade";

/// `regrade/<id>.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RegradePlan {
    pub schema: String,
    pub id: String,
    pub created_at: String,
    pub arbiter_version: String,
    /// The replacement tests dir (`--tests`), as given, and its checksum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests_checksum: Option<String>,
    /// The trials to regrade, in order.
    pub trials: Vec<String>,
    pub repeat: u32,
    /// Set once every trial was regraded or found not regradable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

impl RegradePlan {
    pub(crate) fn path(job_dir: &Path, id: &str) -> PathBuf {
        job_dir.join(REGRADE_DIR).join(format!("{id}.json"))
    }

    /// Whether this is the same regrade as `other` asks for (a rerun continues it).
    fn same_work(&self, other: &RegradePlan) -> bool {
        self.tests_checksum == other.tests_checksum
            && self.trials == other.trials
            && self.repeat == other.repeat
    }
}

/// Every regrade plan of the job, oldest first (ids are UTC timestamps); unreadable files are
/// skipped with a warning.
pub(crate) fn load_plans(job_dir: &Path) -> Vec<RegradePlan> {
    let Ok(entries) = std::fs::read_dir(job_dir.join(REGRADE_DIR)) else {
        return Vec::new();
    };
    let mut plans: Vec<RegradePlan> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| {
            let bytes = std::fs::read(&p).ok()?;
            match serde_json::from_slice::<RegradePlan>(&bytes) {
                Ok(plan) if plan.schema == REGRADE_SCHEMA => Some(plan),
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!("{}: not a regrade plan: {e}", p.display());
                    None
                }
            }
        })
        .collect();
    plans.sort_by(|a, b| a.id.cmp(&b.id));
    plans
}

/// The regrade to run: the newest unfinished one doing the same work as `wanted` (a rerun
/// after a kill), else `wanted` itself. The flag says whether it continues an earlier one.
pub(crate) fn choose(existing: Vec<RegradePlan>, wanted: RegradePlan) -> (RegradePlan, bool) {
    match existing
        .into_iter()
        .rev()
        .find(|p| p.finished_at.is_none() && p.same_work(&wanted))
    {
        Some(earlier) => (earlier, true),
        None => (wanted, false),
    }
}

/// A regrade id not yet used in the job: `stamp`, or `stamp-2`, `stamp-3`, ….
pub(crate) fn fresh_id(existing: &[RegradePlan], stamp: &str) -> String {
    let taken = |id: &str| existing.iter().any(|p| p.id == id);
    if !taken(stamp) {
        return stamp.to_string();
    }
    (2..)
        .map(|n| format!("{stamp}-{n}"))
        .find(|id| !taken(id))
        .unwrap_or_else(|| stamp.to_string())
}

/// What to do with one trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Regraded by this regrade already (before a kill): skip.
    Done,
    /// Cannot be regraded, for this reason (recorded, not an error).
    NotRegradable(String),
    /// Regrade it from its change set.
    FromChangeSet,
}

/// What to do with `rec` in regrade `id` (its task's verifier runs in `mode`).
pub(crate) fn decide(rec: &TrialRecord, id: &str, mode: VerifierMode) -> Decision {
    if rec.regrade.as_ref().is_some_and(|m| m.id == id) {
        return Decision::Done;
    }
    let no = |why: String| Decision::NotRegradable(why);
    if rec.termination.kind == TerminationKind::InfraError {
        let detail = rec
            .infra_error
            .as_ref()
            .map(|e| format!(" ({} phase: {})", e.phase, e.message))
            .unwrap_or_default();
        return no(format!(
            "the agent has no result to regrade: its trial ended in an infrastructure error{detail}"
        ));
    }
    match mode {
        VerifierMode::Live => {
            return no(
                "live mode: the verifier checked the running agent container, which is gone"
                    .to_string(),
            );
        }
        VerifierMode::Separate => {
            return no(
                "separate mode: regrading from collected artifacts is not supported yet"
                    .to_string(),
            );
        }
        VerifierMode::Snapshot | VerifierMode::Clean => {}
    }
    match &rec.change_content {
        Some(c) if c.regradable => Decision::FromChangeSet,
        Some(c) => no(c
            .reason
            .clone()
            .unwrap_or_else(|| "the content of the agent's changes was not kept".to_string())),
        None => {
            let why = match &rec.verifier.detail {
                Some(d) if d.starts_with("not run") => d.clone(),
                _ => "no change-set content was recorded for this trial (agent/changes.tar; recorded by arbiter since regrading was added)".to_string(),
            };
            no(why)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(id: &str, trials: &[&str], finished: bool) -> RegradePlan {
        RegradePlan {
            schema: REGRADE_SCHEMA.to_string(),
            id: id.to_string(),
            created_at: "t".to_string(),
            arbiter_version: "v".to_string(),
            tests_dir: None,
            tests_checksum: Some("sha256:a".to_string()),
            trials: trials.iter().map(|s| s.to_string()).collect(),
            repeat: 1,
            finished_at: finished.then(|| "t".to_string()),
        }
    }

    #[test]
    fn a_rerun_continues_the_unfinished_regrade_with_the_same_work() {
        let wanted = plan("20261201T130000Z", &["a", "b"], false);
        let existing = vec![
            plan("20261201T110000Z", &["a", "b"], true),
            plan("20261201T120000Z", &["a", "b"], false),
        ];
        let (chosen, resumed) = choose(existing, wanted.clone());
        assert!(resumed);
        assert_eq!(chosen.id, "20261201T120000Z");
        // Other trials, another tests dir or a finished one: a new regrade.
        let (chosen, resumed) = choose(vec![plan("x", &["a"], false)], wanted.clone());
        assert!(!resumed);
        assert_eq!(chosen.id, wanted.id);
        let mut other_tests = plan("y", &["a", "b"], false);
        other_tests.tests_checksum = Some("sha256:b".to_string());
        assert!(!choose(vec![other_tests], wanted.clone()).1);
        assert!(!choose(vec![plan("z", &["a", "b"], true)], wanted).1);
    }

    #[test]
    fn fresh_ids_do_not_collide() {
        let existing = vec![plan("s", &[], true), plan("s-2", &[], true)];
        assert_eq!(fresh_id(&existing, "s"), "s-3");
        assert_eq!(fresh_id(&existing, "t"), "t");
    }

    #[test]
    fn plans_are_read_oldest_first_and_junk_is_skipped() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join(REGRADE_DIR);
        std::fs::create_dir_all(&dir).expect("dir");
        for id in ["b", "a"] {
            let p = plan(id, &["t"], false);
            std::fs::write(
                RegradePlan::path(tmp.path(), id),
                serde_json::to_vec(&p).expect("json"),
            )
            .expect("write");
        }
        std::fs::write(dir.join("junk.json"), b"{").expect("write");
        let ids: Vec<String> = load_plans(tmp.path()).into_iter().map(|p| p.id).collect();
        assert_eq!(ids, ["a", "b"]);
    }
}
