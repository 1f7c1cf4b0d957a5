//! The results store on jobs the real binary ran on the real engine: indexed when the job
//! ends, `arbiter index` into SQLite and into a real PostgreSQL (scripts/postgres; its URL in
//! ARBITER_TEST_POSTGRES), two processes indexing at once, and `arbiter query` refusing writes.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{copy_dir, docker_available, repo, stderr, stdout};

/// The test PostgreSQL's URL; `None` (skip) when there is none, a failure under
/// `ARBITER_REQUIRE_DOCKER=1`.
fn postgres() -> Option<String> {
    match std::env::var("ARBITER_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            if std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() == Ok("1") {
                panic!(
                    "ARBITER_REQUIRE_DOCKER=1 but ARBITER_TEST_POSTGRES is not set (run scripts/postgres up)"
                );
            }
            eprintln!(
                "skipping the PostgreSQL part: ARBITER_TEST_POSTGRES is not set (scripts/postgres up; scripts/postgres env)"
            );
            None
        }
    }
}

/// `arbiter ARGS` with `ARBITER_DB=db`.
fn arbiter_db(db: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .env("ARBITER_DB", db)
        .args(args)
        .output()
        .expect("run arbiter")
}

fn job_id(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("job-id"))
        .expect("job-id")
        .trim()
        .to_string()
}

/// Every row of `jobs` (as SQL text list) in every table, but the time it was indexed, as CSV.
fn dump(db: &str, jobs: &str) -> String {
    let tables: [(&str, &str); 11] = [
        (
            "jobs",
            "job_id, name, dir, host, arbiter_version, backend, attempts, pass_threshold, trials, scored, passed, infra, started_at, finished_at, config",
        ),
        ("arms", "*"),
        ("trials", "*"),
        ("rewards", "*"),
        ("phases", "*"),
        ("usage", "*"),
        ("attempts", "*"),
        ("continuation", "*"),
        ("verifier_runs", "*"),
        ("findings", "*"),
        ("infra_errors", "*"),
    ];
    let mut out = String::new();
    for (table, cols) in tables {
        let sql = format!("SELECT {cols} FROM {table} WHERE job_id IN ({jobs}) ORDER BY 1, 2, 3");
        let o = arbiter_db(db, &["query", &sql, "--format", "csv"]);
        assert!(o.status.success(), "{sql}: {}", stderr(&o));
        out.push_str(&format!("== {table}\n{}", stdout(&o)));
    }
    out
}

/// Two `arbiter` processes started together with `ARBITER_DB=db`.
fn at_once(db: &str, one: &[&str], two: &[&str]) -> (Output, Output) {
    std::thread::scope(|s| {
        let h1 = s.spawn(|| arbiter_db(db, one));
        let h2 = s.spawn(|| arbiter_db(db, two));
        (h1.join().expect("join"), h2.join().expect("join"))
    })
}

#[test]
fn jobs_are_indexed_into_sqlite_and_postgres_and_queries_stay_read_only() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let auto = tmp.path().join("auto.db");
    let auto = auto.to_str().expect("utf-8");
    let a = tmp.path().join("jobs/a");
    let task = repo().join("tasks/csv-to-json");
    let out = arbiter_db(
        auto,
        &[
            "run",
            task.to_str().expect("utf-8"),
            "--agent",
            "oracle",
            "--agent",
            "nop",
            "--quiet",
            "--job-dir",
            a.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("results store"), "{}", stderr(&out));
    // Indexed as it ended, counted as the report counts it.
    let id_a = job_id(&a);
    let q = arbiter_db(
        auto,
        &[
            "query",
            "SELECT agent, trials, scored, passed, infra FROM arms ORDER BY agent",
            "--format",
            "csv",
        ],
    );
    assert_eq!(
        stdout(&q),
        "agent,trials,scored,passed,infra\r\nnop,1,1,0,0\r\noracle,1,1,1,0\r\n",
        "{}",
        stderr(&q)
    );
    let report = common::arbiter(&["report", a.to_str().expect("utf-8"), "--format", "json"]);
    assert!(report.status.success(), "{}", stderr(&report));

    // `resume` indexes its job too; a store that cannot be written is a warning, not the
    // job's failure or exit code.
    let resumed = tmp.path().join("resumed.db");
    let o = arbiter_db(
        resumed.to_str().expect("utf-8"),
        &["resume", a.to_str().expect("utf-8"), "-q"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let q = arbiter_db(
        resumed.to_str().expect("utf-8"),
        &[
            "query",
            "SELECT job_id, trials FROM jobs",
            "--format",
            "csv",
        ],
    );
    assert_eq!(
        stdout(&q),
        format!("job_id,trials\r\n{id_a},2\r\n"),
        "{}",
        stderr(&q)
    );
    let o = arbiter_db(
        "/dev/null/results.db",
        &["resume", a.to_str().expect("utf-8"), "-q"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: results store: /dev/null: "),
        "{}",
        stderr(&o)
    );

    // Another job: the same folder made anew on another night (its own job-id).
    let b = tmp.path().join("jobs/b");
    copy_dir(&a, &b);
    let id_b = format!("{id_a}-b");
    std::fs::write(b.join("job-id"), format!("{id_b}\n")).expect("write");
    let jobs = format!("'{id_a}', '{id_b}'");

    // SQLite: `arbiter index` of the folder, twice, gives the same rows.
    let lite = tmp.path().join("r.db");
    let lite = lite.to_str().expect("utf-8");
    let folder = tmp.path().join("jobs");
    let folder = folder.to_str().expect("utf-8");
    let o = arbiter_db(lite, &["index", folder]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).ends_with(&format!("2 job(s), 4 trial(s) indexed into {lite}\n")),
        "{}",
        stdout(&o)
    );
    let first = dump(lite, &jobs);
    let o = arbiter_db(lite, &["index", folder, "-q"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(dump(lite, &jobs), first, "re-indexing is idempotent");

    // Two processes into one SQLite file at once: the same jobs in opposite orders.
    let (a_s, b_s) = (a.to_str().expect("utf-8"), b.to_str().expect("utf-8"));
    let (o1, o2) = at_once(lite, &["index", a_s, b_s, "-q"], &["index", b_s, a_s, "-q"]);
    assert!(o1.status.success(), "{}", stderr(&o1));
    assert!(o2.status.success(), "{}", stderr(&o2));
    assert_eq!(dump(lite, &jobs), first);

    // A write in a query: one line, exit 2, nothing changed.
    for sql in ["DELETE FROM trials", "DROP TABLE jobs"] {
        let o = arbiter_db(lite, &["query", sql]);
        assert_eq!(o.status.code(), Some(2), "{sql}");
        assert!(
            stderr(&o).starts_with("error: query refused: "),
            "{}",
            stderr(&o)
        );
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
    assert_eq!(dump(lite, &jobs), first);

    let Some(pg) = postgres() else {
        return;
    };
    // Two processes at once: different jobs, then the same jobs in opposite orders.
    for (one, two) in [
        (vec!["index", a_s, "-q"], vec!["index", b_s, "-q"]),
        (vec!["index", a_s, b_s, "-q"], vec!["index", b_s, a_s, "-q"]),
    ] {
        let (o1, o2) = at_once(&pg, &one, &two);
        assert!(o1.status.success(), "{}", stderr(&o1));
        assert!(o2.status.success(), "{}", stderr(&o2));
        assert_eq!(
            dump(&pg, &jobs),
            first,
            "PostgreSQL holds what SQLite holds"
        );
    }
    let o = arbiter_db(&pg, &["query", "DELETE FROM trials"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o)
            .starts_with("error: query refused: cannot execute DELETE in a read-only transaction"),
        "{}",
        stderr(&o)
    );
    assert_eq!(dump(&pg, &jobs), first);
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().expect("tmp");
    let db = tmp.path().join("r.db");
    let db = db.to_str().expect("utf-8");
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let o = arbiter_db(db, &["index", empty.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        format!(
            "error: {}: not a job directory (no job.yaml) and none below it\n",
            empty.display()
        )
    );
    let o = arbiter_db("off", &["index", empty.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: ARBITER_DB: off: the results store is turned off (name one with --db PATH|URL)\n"
    );
    let o = arbiter_db(db, &["query", "SELECT 1"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        format!("error: {db}: no results store here (index jobs with `arbiter index DIR`)\n")
    );
    let o = arbiter_db(db, &["query", "SELECT 1", "--db", "mysql://x"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "error: --db: unknown store \"mysql\": expected a file path (SQLite) or postgres://…\n"
    );
    // A truncated trials.jsonl line: named, and nothing of the job indexed.
    let job = tmp.path().join("job");
    std::fs::create_dir_all(&job).expect("mkdir");
    std::fs::write(job.join("job.yaml"), "agents: [oracle]\n").expect("write");
    std::fs::write(job.join("trials.jsonl"), "{\"id\": \"t").expect("write");
    let o = arbiter_db(db, &["index", job.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.starts_with(&format!(
            "error: {}: line 1: not a whole record",
            job.join("trials.jsonl").display()
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        !Path::new(db).exists(),
        "nothing written when a job is refused"
    );
}
