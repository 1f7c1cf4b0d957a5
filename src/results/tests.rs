//! The store on a job dir shaped like real records (every fact a record can hold), in SQLite.
//! PostgreSQL and jobs made on the real engine: tests/results_store.rs.

use std::path::Path;

use serde_json::json;

use super::ResultsError;
use super::db::{Answer, Cell, Store};
use super::location::Location;
use super::output::{Format, render};
use super::read::{Val, read_job};
use super::schema;

/// A rich record: continuation with two attempts, usage, integrity findings, regrade history.
fn rich() -> serde_json::Value {
    serde_json::from_str(
        r#"{
        "schema": "arbiter.trial.v1", "id": "t1__agent__v1__1", "job": "nightly",
        "task": "t1", "agent": "agent", "variant": "v1", "attempt": 1,
        "task_checksum": "sha256:abc", "image": "img:1",
        "termination": {"kind": "exited", "exit_code": 0, "detail": "done"},
        "claim": {"status": "present", "source": "file", "semantic_status": "succeeded", "record": {"status": "succeeded"}},
        "verifier": {"status": "passed", "mode": "snapshot", "reward": {"reward": 1.0, "style": 0.5}, "exit_code": 0},
        "audit": {"verdict": "certified", "violations": []},
        "phases": {"environment": {"seconds": 0.5}, "agent": {"seconds": 2.0}, "verify": {"seconds": 1.0}},
        "retries": 1,
        "previous_errors": [{"phase": "environment", "message": "engine hiccup"}],
        "artifacts": [], "overrides": {},
        "limits": {"cpus": 1.0, "memory_mb": 512, "pids_limit": 256, "network": "none", "storage_enforced": true},
        "output": {"stdout_bytes": 1, "stderr_bytes": 0, "truncated": false},
        "changes": {"added": 3, "modified": 2, "deleted": 1, "outside_workdir": 1, "file": "agent/changes.json"},
        "integrity": {"status": "restored", "findings": [{"path": "/usr/bin/python3", "class": "toolchain_modified", "why": "replaced"}]},
        "usage": {"requests": 14, "input_tokens": 51234, "output_tokens": 3120, "cache_read_tokens": 7,
                  "cache_write_tokens": 2, "cost_usd": 0.2004, "upstream_errors": {"429": 2, "500": 1},
                  "budget": {"max_cost_usd": 2.0, "exhausted": false}},
        "continuation": {"max_attempts": 3, "attempts_used": 2, "status": "claimed_success"},
        "attempts": [
            {"attempt": 1, "id": "a1", "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:01Z",
             "seconds": 1.0, "remaining_seconds": 9.0, "termination": {"kind": "exited", "exit_code": 1},
             "claim": {"status": "present", "semantic_status": "failed"}, "usage": {"requests": 4, "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.1},
             "saved_to": "attempts/1", "continued_because": "claim failed", "cleared": ["outcome.json"]},
            {"attempt": 2, "id": "a2", "started_at": "2026-01-01T00:00:01Z", "finished_at": "2026-01-01T00:00:02Z",
             "seconds": 1.0, "remaining_seconds": 8.0, "termination": {"kind": "exited", "exit_code": 0},
             "claim": {"status": "present", "semantic_status": "succeeded"}, "saved_to": "attempts/2"}
        ],
        "verifier_history": [
            {"at": "2026-01-01T00:00:03Z", "source": "original", "verifier_checksum": "sha256:t", "mode": "snapshot",
             "outcome": {"status": "failed", "mode": "snapshot", "reward": {"reward": 0.0}, "exit_code": 1}, "verdict": "honest_failure"},
            {"at": "2026-01-02T00:00:00Z", "regrade": "r1", "run": 1, "source": "change_set", "verifier_checksum": "sha256:u",
             "tests_dir": "fixed/", "arbiter_version": "0.1.0", "mode": "clean", "image": "img:1",
             "outcome": {"status": "passed", "mode": "clean", "reward": {"reward": 1.0}, "exit_code": 0}, "verdict": "certified"}
        ],
        "regrade": {"id": "r1", "at": "2026-01-02T00:00:00Z", "status": "regraded"},
        "sandbox": {"backend": "docker"},
        "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T00:00:04Z"
    }"#,
    )
    .expect("json")
}

/// A second arm: an infra error, a tampered pass, a plain failure.
fn others() -> Vec<serde_json::Value> {
    let mut infra = rich();
    infra["id"] = json!("t1__agent__v2__1");
    infra["variant"] = json!("v2");
    infra["termination"] = json!({"kind": "infra_error", "detail": "gone"});
    infra["infra_error"] = json!({"phase": "agent", "message": "container vanished"});
    infra["verifier"] = json!({"status": "skipped", "mode": "snapshot"});
    let mut tampered = rich();
    tampered["id"] = json!("t2__agent__v2__1");
    tampered["task"] = json!("t2");
    tampered["variant"] = json!("v2");
    tampered["integrity"]["status"] = json!("suspect");
    let mut failed = rich();
    failed["id"] = json!("t3__agent__v2__1");
    failed["task"] = json!("t3");
    failed["variant"] = json!("v2");
    failed["verifier"] = json!({"status": "failed", "mode": "snapshot", "reward": {"reward": 0.0}});
    for r in [&mut infra, &mut tampered, &mut failed] {
        r.as_object_mut().map(|o| o.remove("continuation"));
        r.as_object_mut().map(|o| o.remove("attempts"));
    }
    vec![infra, tampered, failed]
}

fn job_dir(dir: &Path, records: &[serde_json::Value]) {
    std::fs::create_dir_all(dir.join("trials")).expect("mkdir");
    std::fs::write(
        dir.join("job.yaml"),
        "agents: [agent]\nvariants: [v1, v2]\n",
    )
    .expect("yaml");
    std::fs::write(
        dir.join("lock.json"),
        r#"{"arbiter_version": "0.1.0", "attempts": 1, "pass_threshold": 1.0}"#,
    )
    .expect("lock");
    std::fs::write(dir.join(crate::job::JOB_ID_FILE), "job-one\n").expect("id");
    let mut lines = String::new();
    for r in records {
        let id = r["id"].as_str().expect("id");
        let t = dir.join("trials").join(id);
        std::fs::create_dir_all(&t).expect("mkdir");
        std::fs::write(
            t.join("result.json"),
            serde_json::to_vec_pretty(r).expect("json"),
        )
        .expect("write");
        lines.push_str(&r.to_string());
        lines.push('\n');
    }
    std::fs::write(dir.join("trials.jsonl"), lines).expect("jsonl");
}

fn all_records() -> Vec<serde_json::Value> {
    let mut v = vec![rich()];
    v.extend(others());
    v
}

async fn rows(store: &mut Store, sql: &str) -> Answer {
    store.query(sql).await.expect("query")
}

fn text(s: &str) -> Cell {
    Cell::Text(s.to_string())
}

#[test]
fn every_fact_of_a_rich_record_reaches_its_table() {
    let tmp = tempfile::tempdir().expect("tmp");
    job_dir(tmp.path(), &all_records());
    let job = read_job(tmp.path()).expect("read");
    assert_eq!(job.job_id, "job-one");
    assert_eq!(job.trials, 4);
    let get = |table: &str, row: usize, col: &str| {
        let t = schema::TABLES
            .iter()
            .find(|t| t.name == table)
            .expect("table");
        job.rows(table)[row][t.column(col).expect("column")].clone()
    };
    let t = |s: &str| Val::Text(s.to_string());
    // Facts kept apart in the trial row.
    assert_eq!(get("trials", 0, "termination_kind"), t("exited"));
    assert_eq!(get("trials", 0, "claim_semantic_status"), t("succeeded"));
    assert_eq!(
        get("trials", 0, "claim_record"),
        t(r#"{"status":"succeeded"}"#)
    );
    assert_eq!(get("trials", 0, "verifier_status"), t("passed"));
    assert_eq!(get("trials", 0, "changes_added"), Val::Int(3));
    assert_eq!(get("trials", 0, "changes_outside_workdir"), Val::Int(1));
    assert_eq!(get("trials", 0, "integrity_status"), t("restored"));
    assert_eq!(get("trials", 0, "regrade_id"), t("r1"));
    assert_eq!(get("trials", 0, "seconds"), Val::Real(3.5));
    assert_eq!(get("trials", 0, "backend"), t("docker"));
    // Rewards, phases, usage.
    assert_eq!(
        job.rows("rewards").len(),
        2 + 2 + 1,
        "two keys twice, one key once; the infra error none"
    );
    assert_eq!(get("usage", 0, "input_tokens"), Val::Int(51234));
    assert_eq!(get("usage", 0, "upstream_errors"), Val::Int(3));
    assert_eq!(
        get("usage", 0, "upstream_errors_by_kind"),
        t(r#"{"429":2,"500":1}"#)
    );
    assert_eq!(get("usage", 0, "budget_max_cost_usd"), Val::Real(2.0));
    assert_eq!(get("usage", 0, "budget_exhausted"), Val::Int(0));
    assert_eq!(get("usage", 0, "cache_write_tokens"), Val::Int(2));
    // Continuation and its attempts.
    assert_eq!(job.rows("continuation").len(), 1);
    assert_eq!(get("continuation", 0, "status"), t("claimed_success"));
    assert_eq!(get("continuation", 0, "attempts_used"), Val::Int(2));
    assert_eq!(job.rows("attempts").len(), 2);
    assert_eq!(get("attempts", 0, "continued_because"), t("claim failed"));
    assert_eq!(get("attempts", 0, "cost_usd"), Val::Real(0.1));
    assert_eq!(get("attempts", 0, "cleared"), t(r#"["outcome.json"]"#));
    assert_eq!(get("attempts", 1, "claim_semantic_status"), t("succeeded"));
    // Verifier runs, findings, infra errors (earlier and final).
    assert_eq!(get("verifier_runs", 1, "source"), t("change_set"));
    assert_eq!(get("verifier_runs", 1, "regrade"), t("r1"));
    assert_eq!(get("verifier_runs", 1, "reward"), Val::Real(1.0));
    assert_eq!(get("verifier_runs", 0, "verdict"), t("honest_failure"));
    assert_eq!(get("findings", 0, "class"), t("toolchain_modified"));
    assert_eq!(get("findings", 0, "path"), t("/usr/bin/python3"));
    let infra: Vec<(Val, Val)> = job
        .rows("infra_errors")
        .iter()
        .map(|r| (r[3].clone(), r[5].clone()))
        .collect();
    assert!(infra.contains(&(t("agent"), Val::Int(1))), "{infra:?}");
    assert!(
        infra.contains(&(t("environment"), Val::Int(0))),
        "{infra:?}"
    );
}

#[test]
fn outcomes_are_counted_as_the_report_counts_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    job_dir(tmp.path(), &all_records());
    let job = read_job(tmp.path()).expect("read");
    let report = crate::report::load_job(tmp.path()).expect("report");
    let outcomes: Vec<Val> = job
        .rows("trials")
        .iter()
        .map(|r| r[schema::TRIALS.column("outcome").expect("col")].clone())
        .collect();
    assert_eq!(
        outcomes,
        ["pass", "infra", "fail", "fail"].map(|s| Val::Text(s.into())),
        "a tampered pass is a failure, an infra error is not scored"
    );
    let report_passed = report.trials.iter().filter(|t| t.outcome.passed()).count();
    let report_scored = report.trials.iter().filter(|t| t.outcome.scored()).count();
    let jobs = &job.rows("jobs")[0];
    assert_eq!(
        jobs[schema::JOBS.column("passed").expect("c")],
        Val::Int(report_passed as i64)
    );
    assert_eq!(
        jobs[schema::JOBS.column("scored").expect("c")],
        Val::Int(report_scored as i64)
    );
    assert_eq!(jobs[schema::JOBS.column("infra").expect("c")], Val::Int(1));
    // Arms in job order with their counts.
    let arms: Vec<(Val, Val, Val)> = job
        .rows("arms")
        .iter()
        .map(|r| (r[2].clone(), r[5].clone(), r[6].clone()))
        .collect();
    assert_eq!(
        arms,
        [
            (Val::Text("v1".into()), Val::Int(1), Val::Int(1)),
            (Val::Text("v2".into()), Val::Int(2), Val::Int(0)),
        ]
    );
}

#[tokio::test]
async fn indexing_again_gives_the_same_rows() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("job");
    job_dir(&dir, &all_records());
    let db = Location::Sqlite(tmp.path().join("r.db"));
    let dump = || {
        let mut out = Vec::new();
        for t in schema::TABLES {
            let cols: Vec<&str> = t
                .columns
                .iter()
                .map(|(c, _)| *c)
                .filter(|c| *c != "indexed_at")
                .collect();
            out.push(format!(
                "SELECT {} FROM {} ORDER BY {}",
                cols.join(", "),
                t.name,
                t.key.join(", ")
            ));
        }
        out
    };
    let mut store = Store::open(&db).await.expect("open");
    store
        .index(&read_job(&dir).expect("read"))
        .await
        .expect("index");
    let mut first = Vec::new();
    for q in dump() {
        first.push(rows(&mut store, &q).await);
    }
    store
        .index(&read_job(&dir).expect("read"))
        .await
        .expect("index");
    let mut second = Vec::new();
    for q in dump() {
        second.push(rows(&mut store, &q).await);
    }
    assert_eq!(first, second);
    assert_eq!(first[2].rows.len(), 4, "4 trials, not 8");
    // A trial added (a resume) replaces the job's rows, with one more.
    let mut more = all_records();
    let mut extra = rich();
    extra["id"] = json!("t9__agent__v1__1");
    extra["task"] = json!("t9");
    more.push(extra);
    job_dir(&dir, &more);
    store
        .index(&read_job(&dir).expect("read"))
        .await
        .expect("index");
    let n = rows(&mut store, "SELECT COUNT(*) FROM trials").await;
    assert_eq!(n.rows, [[Cell::Int(5)]]);
    let n = rows(&mut store, "SELECT COUNT(*) FROM jobs").await;
    assert_eq!(n.rows, [[Cell::Int(1)]]);
}

#[tokio::test]
async fn a_truncated_record_is_reported_and_nothing_indexed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("job");
    job_dir(&dir, &all_records());
    // trials.jsonl cut in the middle of its last line.
    let jsonl = dir.join("trials.jsonl");
    let text = std::fs::read_to_string(&jsonl).expect("read");
    std::fs::write(&jsonl, &text[..text.len() - 40]).expect("write");
    let e = read_job(&dir).expect_err("truncated");
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("{}: line 4: not a whole record", jsonl.display())),
        "{shown}"
    );
    assert!(e.is_usage());
    // A truncated result.json.
    job_dir(&dir, &all_records());
    let result = dir.join("trials/t1__agent__v1__1/result.json");
    std::fs::write(&result, b"{\"id\": \"t1").expect("write");
    let e = read_job(&dir).expect_err("truncated");
    assert!(
        e.to_string()
            .starts_with(&format!("{}: file: not a whole record", result.display())),
        "{e}"
    );
    // A line that is JSON but not a record the report reads.
    job_dir(&dir, &all_records());
    std::fs::write(&jsonl, format!("{text}{{\"id\": \"x\"}}\n")).expect("write");
    let e = read_job(&dir).expect_err("not a record");
    assert!(e.to_string().contains("line 5: not a trial record"), "{e}");
}

#[tokio::test]
async fn a_newer_store_is_refused_and_left_alone() {
    let tmp = tempfile::tempdir().expect("tmp");
    let path = tmp.path().join("r.db");
    let db = Location::Sqlite(path.clone());
    drop(Store::open(&db).await.expect("open"));
    // A future arbiter wrote version 99.
    {
        use sqlx::Connection;
        let url = format!("sqlite://{}", path.display());
        let mut conn = sqlx::SqliteConnection::connect(&url)
            .await
            .expect("connect");
        sqlx::query("UPDATE schema_version SET version = 99")
            .execute(&mut conn)
            .await
            .expect("update");
    }
    for e in [
        Store::open(&db).await.err().expect("newer"),
        Store::open_read_only(&db).await.err().expect("newer"),
    ] {
        assert!(
            matches!(
                e,
                ResultsError::Newer {
                    found: 99,
                    known: 1,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            format!(
                "{}: schema version 99 is newer than this arbiter knows (1); use a newer arbiter",
                path.display()
            )
        );
    }
    // Left as it was.
    let url = format!("sqlite://{}", path.display());
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("connect");
    let (version,): (i64,) = sqlx::query_as("SELECT version FROM schema_version")
        .fetch_one(&mut conn)
        .await
        .expect("version");
    assert_eq!(version, 99);
}

#[tokio::test]
async fn queries_are_read_only_and_render_three_ways() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("job");
    job_dir(&dir, &all_records());
    let db = Location::Sqlite(tmp.path().join("r.db"));
    Store::open(&db)
        .await
        .expect("open")
        .index(&read_job(&dir).expect("read"))
        .await
        .expect("index");
    let mut ro = Store::open_read_only(&db).await.expect("open");
    for write in [
        "DELETE FROM trials",
        "INSERT INTO jobs (job_id) VALUES ('x')",
        "DROP TABLE jobs",
        "CREATE TABLE x (a INTEGER)",
    ] {
        let e = ro.query(write).await.expect_err(write);
        assert!(matches!(e, ResultsError::Query { .. }), "{write}: {e}");
        assert!(e.is_usage());
    }
    let e = ro.query("SELEC 1").await.expect_err("syntax");
    assert_eq!(e.to_string(), "query refused: near \"SELEC\": syntax error");
    let n = ro
        .query("SELECT COUNT(*) FROM trials")
        .await
        .expect("count");
    assert_eq!(n.rows, [[Cell::Int(4)]], "nothing was written");

    let answer = ro
        .query("SELECT variant, SUM(passed) AS passed, CAST(SUM(passed) AS DOUBLE PRECISION) / SUM(scored) AS rate, NULL AS none FROM trials WHERE scored = 1 GROUP BY variant ORDER BY variant")
        .await
        .expect("query");
    assert_eq!(answer.columns, ["variant", "passed", "rate", "none"]);
    assert_eq!(
        answer.rows[0],
        [text("v1"), Cell::Int(1), Cell::Real(1.0), Cell::Null]
    );
    assert_eq!(
        render(&answer, Format::Table),
        "variant  passed  rate  none\n-------  ------  ----  ----\nv1       1       1\nv2       0       0\n(2 rows)\n"
    );
    assert_eq!(
        render(&answer, Format::Csv),
        "variant,passed,rate,none\r\nv1,1,1,\r\nv2,0,0,\r\n"
    );
    assert_eq!(
        render(&answer, Format::Json),
        "[\n  {\"variant\": \"v1\", \"passed\": 1, \"rate\": 1.0, \"none\": null},\n  {\"variant\": \"v2\", \"passed\": 0, \"rate\": 0.0, \"none\": null}\n]\n"
    );
    let quoted = ro.query("SELECT 'a,\"b\"' AS x").await.expect("q");
    assert_eq!(render(&quoted, Format::Csv), "x\r\n\"a,\"\"b\"\"\"\r\n");
    let empty = ro
        .query("SELECT job_id FROM jobs WHERE 1 = 0")
        .await
        .expect("q");
    assert_eq!(render(&empty, Format::Json), "[]\n");
    assert_eq!(empty.columns, ["job_id"]);
}

#[test]
fn a_job_dir_without_a_job_id_gets_one_from_its_contents() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("job");
    job_dir(&dir, &all_records());
    std::fs::remove_file(dir.join(crate::job::JOB_ID_FILE)).expect("rm");
    let a = read_job(&dir).expect("read").job_id;
    assert!(a.starts_with("legacy-"), "{a}");
    assert_eq!(read_job(&dir).expect("read").job_id, a, "stable");
    // The same folder holding another job (other records, started another night).
    let mut other = rich();
    other["started_at"] = json!("2026-02-01T00:00:00Z");
    job_dir(&dir, &[other]);
    std::fs::remove_file(dir.join(crate::job::JOB_ID_FILE)).expect("rm");
    assert_ne!(read_job(&dir).expect("read").job_id, a);
}

#[test]
fn every_column_is_documented() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results.md"))
            .expect("docs/results.md");
    for t in schema::TABLES {
        assert!(
            doc.contains(&format!("### `{}`", t.name)),
            "docs/results.md: no section for {}",
            t.name
        );
        for (c, _) in t.columns {
            assert!(
                doc.contains(&format!("`{c}`")),
                "docs/results.md: column {}.{c} undocumented",
                t.name
            );
        }
    }
}
