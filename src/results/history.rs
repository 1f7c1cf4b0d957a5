//! One agent on one job name (a dataset run again and again) across the indexed jobs: its pass
//! rate per job, oldest first, and the tasks that flipped between consecutive jobs. Read with
//! the store's read-only query path, so it is what `arbiter query` would answer.

use std::collections::BTreeMap;

use serde::Serialize;

use super::db::{Cell, Store};
use super::error::ResultsError;

/// One job of the history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Point {
    pub job_id: String,
    pub started_at: Option<String>,
    /// Scored trials of the agent that passed, and scored trials (infra errors never count).
    pub passed: i64,
    pub scored: i64,
    pub pass_rate: f64,
}

/// A task whose verdict changed from one job to the next: it passes in a job when at least
/// half its scored attempts passed (the report's rule for comparisons).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Flip {
    pub task: String,
    pub from_job: String,
    pub to_job: String,
    /// `true`: failed before, passes now.
    pub to_pass: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct History {
    pub agent: String,
    pub name: String,
    pub points: Vec<Point>,
    pub flips: Vec<Flip>,
}

/// The (job name, agent) pairs the store holds scored trials of, sorted.
pub(crate) async fn choices(store: &mut Store) -> Result<Vec<(String, String)>, ResultsError> {
    let answer = store
        .query(
            "SELECT DISTINCT j.name AS name, t.agent AS agent FROM trials t JOIN jobs j ON j.job_id = t.job_id WHERE t.scored = 1 ORDER BY j.name, t.agent",
        )
        .await?;
    Ok(answer
        .rows
        .iter()
        .filter_map(|row| Some((text(row.first()?)?, text(row.get(1)?)?)))
        .collect())
}

/// The history of `agent` on the jobs named `name` (every variant of the agent counted).
pub(crate) async fn history(
    store: &mut Store,
    agent: &str,
    name: &str,
) -> Result<History, ResultsError> {
    let sql = format!(
        "SELECT j.job_id AS job_id, j.started_at AS started_at, t.task AS task, \
         SUM(t.passed) AS passed, COUNT(*) AS scored \
         FROM trials t JOIN jobs j ON j.job_id = t.job_id \
         WHERE t.agent = {} AND j.name = {} AND t.scored = 1 \
         GROUP BY j.job_id, j.started_at, t.task \
         ORDER BY j.started_at, j.job_id, t.task",
        literal(agent)?,
        literal(name)?
    );
    let answer = store.query(&sql).await?;
    Ok(fold(agent, name, answer.rows.iter().filter_map(|r| row(r))))
}

/// (job, started, task, passed, scored) rows, ordered by job, into the history.
fn fold(
    agent: &str,
    name: &str,
    rows: impl Iterator<Item = (String, Option<String>, String, i64, i64)>,
) -> History {
    let mut out = History {
        agent: agent.to_string(),
        name: name.to_string(),
        ..History::default()
    };
    // Per job, in order: task → passes.
    let mut verdicts: Vec<BTreeMap<String, bool>> = Vec::new();
    for (job_id, started_at, task, passed, scored) in rows {
        if out.points.last().is_none_or(|p| p.job_id != job_id) {
            out.points.push(Point {
                job_id,
                started_at,
                passed: 0,
                scored: 0,
                pass_rate: 0.0,
            });
            verdicts.push(BTreeMap::new());
        }
        if let (Some(p), Some(v)) = (out.points.last_mut(), verdicts.last_mut()) {
            p.passed += passed;
            p.scored += scored;
            v.insert(task, scored > 0 && 2 * passed >= scored);
        }
    }
    for p in &mut out.points {
        p.pass_rate = if p.scored > 0 {
            p.passed as f64 / p.scored as f64
        } else {
            0.0
        };
    }
    for (i, pair) in verdicts.windows(2).enumerate() {
        for (task, now) in &pair[1] {
            if let Some(before) = pair[0].get(task)
                && before != now
            {
                out.flips.push(Flip {
                    task: task.clone(),
                    from_job: out.points[i].job_id.clone(),
                    to_job: out.points[i + 1].job_id.clone(),
                    to_pass: *now,
                });
            }
        }
    }
    out
}

fn row(r: &[Cell]) -> Option<(String, Option<String>, String, i64, i64)> {
    Some((
        text(r.first()?)?,
        r.get(1).and_then(text),
        text(r.get(2)?)?,
        int(r.get(3)?)?,
        int(r.get(4)?)?,
    ))
}

fn text(c: &Cell) -> Option<String> {
    match c {
        Cell::Text(s) => Some(s.clone()),
        _ => None,
    }
}

fn int(c: &Cell) -> Option<i64> {
    match c {
        Cell::Int(i) => Some(*i),
        Cell::Real(r) if r.is_finite() => Some(*r as i64),
        Cell::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

/// A SQL string literal (quotes doubled: the standard form, the same on SQLite and
/// PostgreSQL); a NUL, which neither stores in text, is refused.
fn literal(s: &str) -> Result<String, ResultsError> {
    if s.contains('\0') {
        return Err(ResultsError::Query {
            message: "a name with a NUL character".into(),
        });
    }
    Ok(format!("'{}'", s.replace('\'', "''")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(
        job: &str,
        task: &str,
        passed: i64,
        scored: i64,
    ) -> (String, Option<String>, String, i64, i64) {
        (
            job.into(),
            Some(format!("{job}-t")),
            task.into(),
            passed,
            scored,
        )
    }

    #[test]
    fn points_per_job_and_flips_between_consecutive_jobs() {
        let h = fold(
            "oracle",
            "nightly",
            vec![
                r("j1", "a", 1, 1),
                r("j1", "b", 0, 2),
                r("j2", "a", 0, 1),
                r("j2", "b", 1, 2),
                r("j3", "a", 0, 1),
                r("j3", "c", 1, 1),
            ]
            .into_iter(),
        );
        let ids: Vec<&str> = h.points.iter().map(|p| p.job_id.as_str()).collect();
        assert_eq!(ids, ["j1", "j2", "j3"]);
        assert_eq!((h.points[0].passed, h.points[0].scored), (1, 3));
        assert!((h.points[1].pass_rate - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(h.points[2].pass_rate, 0.5);
        // a: pass → fail (j1→j2); b: half passed counts as passing (j1→j2); c is new in j3.
        let flips: Vec<(&str, &str, bool)> = h
            .flips
            .iter()
            .map(|f| (f.task.as_str(), f.to_job.as_str(), f.to_pass))
            .collect();
        assert_eq!(flips, [("a", "j2", false), ("b", "j2", true)]);
    }

    #[test]
    fn literals_double_their_quotes() {
        assert_eq!(literal("it's").expect("ok"), "'it''s'");
        assert!(literal("a\0b").is_err());
    }
}
