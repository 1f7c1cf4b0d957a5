//! Snapshots of report.md, report.json and junit.xml for a fixed synthetic job, with the job
//! directory, the arbiter version and timestamps redacted. To accept a change on purpose:
//! `UPDATE_SNAPSHOTS=1 cargo test --test report_snapshots`, then review the diff.

mod report_support;

use report_support::{Kind, T, arbiter, repo_file, s, stderr, write_job};

fn redact(text: &str, dir: &std::path::Path) -> String {
    let canonical = std::fs::canonicalize(dir).expect("canonical");
    let mut out = text
        .replace(&canonical.display().to_string(), "[JOB_DIR]")
        .replace(&dir.display().to_string(), "[JOB_DIR]")
        .replace(
            &format!("\"arbiter_version\": \"{}\"", env!("CARGO_PKG_VERSION")),
            "\"arbiter_version\": \"[VERSION]\"",
        )
        .replace(
            &format!("arbiter {}", env!("CARGO_PKG_VERSION")),
            "arbiter [VERSION]",
        );
    // timestamp="…" attributes
    while let Some(i) = out.find("timestamp=\"2") {
        let end = out[i + 11..]
            .find('"')
            .map(|e| i + 11 + e)
            .unwrap_or(out.len());
        out.replace_range(i..=end, "timestamp=\"[TIME]\"");
    }
    out
}

fn check(name: &str, actual: &str) {
    let path = repo_file(&format!("tests/snapshots/{name}"));
    if std::env::var("UPDATE_SNAPSHOTS").as_deref() == Ok("1") {
        std::fs::write(&path, actual).expect("write snapshot");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} missing: run UPDATE_SNAPSHOTS=1 cargo test --test report_snapshots",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from {} at line {}:\n  expected: {}\n  actual:   {}\n(UPDATE_SNAPSHOTS=1 to accept)",
            path.display(),
            first + 1,
            expected.lines().nth(first).unwrap_or("<end>"),
            actual.lines().nth(first).unwrap_or("<end>")
        );
    }
}

#[test]
fn md_json_and_junit_match_their_snapshots() {
    use Kind::*;
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("snap");
    let t = |task, agent, variant, attempt, kind, secs| T {
        task,
        agent,
        variant,
        attempt,
        kind,
        agent_seconds: secs,
    };
    write_job(
        &dir,
        &[
            t("build-cache", "aworld", "default", 1, Pass, 12.0),
            t("build-cache", "aworld", "default", 2, Pass, 14.0),
            t("build-cache", "aworld", "no_gate", 1, FalseCompletion, 9.0),
            t("build-cache", "aworld", "no_gate", 2, Pass, 10.0),
            t("fix|pipe", "aworld", "default", 1, Fail, 30.0),
            t("fix|pipe", "aworld", "default", 2, Unclaimed, 28.0),
            t("fix|pipe", "aworld", "no_gate", 1, FalseCompletion, 20.0),
            t("fix|pipe", "aworld", "no_gate", 2, FalseCompletion, 21.0),
            t("web-crawl", "aworld", "default", 1, Infra, 0.0),
            t("web-crawl", "aworld", "default", 2, VerifierError, 40.0),
            t("web-crawl", "aworld", "no_gate", 1, Pass, 35.0),
            // no second attempt of web-crawl in no_gate
        ],
        &["aworld"],
        &["default", "no_gate"],
        2,
    );
    let out = arbiter(&["report", &s(&dir), "--resamples", "500", "--seed", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for name in ["report.md", "report.json", "junit.xml"] {
        let text = std::fs::read_to_string(dir.join(name)).expect("written");
        check(name, &redact(&text, &dir));
    }
    check(
        "table.txt",
        &redact(&String::from_utf8_lossy(&out.stdout), &dir),
    );
}
