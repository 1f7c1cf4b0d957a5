//! junit.xml: validated against the Jenkins xunit plugin's JUnit schema with xmllint, and read
//! back by a real JUnit consumer library (junit-parser).
//!
//! The vendored schema (tests/fixtures/junit/junit-10.xsd, MIT, as shipped in pytest's sdist)
//! does not declare testcase-level `<properties>`, which arbiter writes (the convention of
//! pytest's `record_property`) for the claim and the audit verdict. The schema check therefore
//! validates the document with exactly those blocks taken out — everything else must conform —
//! and the consumer check reads the full document, properties included.

mod report_support;

use std::process::Command;

use report_support::{Kind, T, arbiter, s, stderr, tool, write_job};

fn job(dir: &std::path::Path) {
    use Kind::*;
    let t = |task, variant, attempt, kind| T {
        task,
        agent: "ag",
        variant,
        attempt,
        kind,
        agent_seconds: 3.5,
    };
    write_job(
        dir,
        &[
            t("alpha", "default", 1, Pass),
            t("alpha", "default", 2, Fail),
            t("beta", "default", 1, Infra),
            t("beta", "default", 2, VerifierError),
            t("gamma", "default", 1, FalseCompletion),
            t("gamma", "default", 2, Unclaimed),
            // user text that must be escaped
            t("delta", "a<b&\"c'", 1, Pass),
        ],
        &["ag"],
        &["default", "a<b&\"c'"],
        2,
    );
}

#[test]
fn junit_validates_against_the_jenkins_junit_schema() {
    let Some(xmllint) = tool("xmllint", "libxml2-utils") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("junit-job");
    job(&dir);
    let out = arbiter(&["report", &s(&dir), "--format", "junit"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let xml = std::fs::read_to_string(dir.join("junit.xml")).expect("junit.xml");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        xml.trim_end()
    );

    // Drop testcase-level <properties> blocks (the one documented extension) and validate.
    let mut stripped = String::new();
    let mut in_case_props = false;
    for line in xml.lines() {
        if line.starts_with("      <properties>") {
            in_case_props = true;
            continue;
        }
        if in_case_props {
            if line.starts_with("      </properties>") {
                in_case_props = false;
            }
            continue;
        }
        stripped.push_str(line);
        stripped.push('\n');
    }
    assert!(
        stripped.len() < xml.len(),
        "testcase properties were present"
    );
    let doc = tmp.path().join("junit-stripped.xml");
    std::fs::write(&doc, &stripped).expect("write");
    let xsd = report_support::repo_file("tests/fixtures/junit/junit-10.xsd");
    let v = Command::new(&xmllint)
        .arg("--noout")
        .arg("--schema")
        .arg(&xsd)
        .arg(&doc)
        .output()
        .expect("run xmllint");
    assert!(
        v.status.success(),
        "junit.xml does not validate: {}",
        String::from_utf8_lossy(&v.stderr)
    );
    // and the full document is well-formed XML
    let wf = Command::new(&xmllint)
        .arg("--noout")
        .arg(dir.join("junit.xml"))
        .output()
        .expect("run xmllint");
    assert!(
        wf.status.success(),
        "{}",
        String::from_utf8_lossy(&wf.stderr)
    );
}

#[test]
fn junit_reads_back_in_a_junit_consumer_library() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("junit-job");
    job(&dir);
    let out = arbiter(&["report", &s(&dir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let file = std::fs::File::open(dir.join("junit.xml")).expect("open");
    let suites = junit_parser::from_reader(std::io::BufReader::new(file)).expect("parses as JUnit");
    assert_eq!(suites.tests, 7);
    assert_eq!(suites.failures, 2, "alpha#2 and gamma#1 failed");
    assert_eq!(
        suites.errors, 2,
        "infra and verifier error are errors, not failures"
    );
    assert_eq!(suites.suites.len(), 2, "one suite per arm");
    let suite = &suites.suites[0];
    assert_eq!(suite.name, "ag/default");
    assert_eq!(suite.cases.len(), 6);
    let case = |class: &str, name: &str| {
        suite
            .cases
            .iter()
            .find(|c| c.classname.as_deref() == Some(class) && c.original_name == name)
            .unwrap_or_else(|| panic!("no testcase {class} {name}"))
    };
    let pass = case("alpha", "ag/default/1");
    assert!(pass.status.is_success());
    assert_eq!(pass.properties.hashmap["audit.verdict"], "certified");
    assert_eq!(pass.properties.hashmap["claim.status"], "present");
    assert_eq!(
        pass.properties.hashmap["claim.semantic_status"],
        "succeeded"
    );
    let fail = case("alpha", "ag/default/2");
    assert!(fail.status.is_failure());
    let infra = case("beta", "ag/default/1");
    assert!(infra.status.is_error());
    assert_eq!(infra.status.error_as_ref().error_type, "infra_error");
    assert_eq!(
        infra.properties.hashmap["audit.verdict"],
        "none (not scored)"
    );
    let verr = case("beta", "ag/default/2");
    assert!(verr.status.is_error());
    assert_eq!(verr.status.error_as_ref().error_type, "verifier_error");
    let fc = case("gamma", "ag/default/1");
    assert!(fc.status.is_failure());
    assert_eq!(fc.properties.hashmap["audit.verdict"], "false_completion");
    // logs are referenced
    let canonical = std::fs::canonicalize(&dir).expect("canonical");
    let system_out = fc.system_out.as_deref().unwrap_or_default();
    assert!(
        system_out.contains(&format!(
            "logs: {}/trials/gamma__ag__default__1/ (result.json, agent/stdout.log, agent/stderr.log, verifier/stdout.log, verifier/stderr.log)",
            canonical.display()
        )),
        "{system_out}"
    );
    // escaped user text survives the round trip
    let odd = &suites.suites[1];
    assert_eq!(odd.name, "ag/a<b&\"c'");
    assert_eq!(odd.cases[0].original_name, "ag/a<b&\"c'/1");
}
