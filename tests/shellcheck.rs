//! The repository's shell scripts are code: every one passes `shellcheck -x -S warning` — the
//! scripts under `scripts/` (with `scripts/k8s.d/`, the parts `scripts/k8s` sources) and
//! `.ci/run`. Skipped with a message when shellcheck is missing (Debian package `shellcheck`,
//! which `scripts/test` installs as root); under `ARBITER_REQUIRE_DOCKER=1` (CI) that fails.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether `path` is a shell script: named `*.sh`, or its `#!` line runs sh or bash (directly
/// or through `env`).
fn is_shell_script(path: &Path) -> bool {
    if path.extension().is_some_and(|e| e == "sh") {
        return true;
    }
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let Some(line) = text.lines().next().and_then(|l| l.strip_prefix("#!")) else {
        return false;
    };
    let mut words = line.split_whitespace();
    let mut program = words.next().unwrap_or("");
    if program.ends_with("/env") {
        program = words.next().unwrap_or("");
    }
    matches!(
        program.rsplit('/').next(),
        Some("sh" | "bash" | "dash" | "ksh")
    )
}

/// The shell scripts under `root/dir`, recursively, as paths relative to `root`.
fn scripts_under(root: &Path, dir: &str, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("read {dir}: {e}"));
    for entry in entries {
        let entry = entry.expect("directory entry");
        let rel = Path::new(dir).join(entry.file_name());
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            scripts_under(root, rel.to_str().expect("UTF-8 path"), out);
        } else if kind.is_file() && is_shell_script(&entry.path()) {
            out.push(rel);
        }
    }
}

#[test]
fn every_script_passes_shellcheck() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    scripts_under(root, "scripts", &mut files);
    files.push(PathBuf::from(".ci/run"));
    files.sort();
    // Not vacuous: the scripts and the parts of scripts/k8s are all found.
    assert!(
        files.len() >= 10,
        "only {} shell scripts found: {files:?}",
        files.len()
    );
    for must in [
        "scripts/k8s",
        "scripts/lib.sh",
        "scripts/postgres",
        "scripts/test",
        "scripts/k8s.d/settings.sh",
    ] {
        assert!(
            files.iter().any(|f| f == Path::new(must)),
            "{must} is not among the scripts found: {files:?}"
        );
    }

    let found = Command::new("shellcheck")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !found {
        if std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() == Ok("1") {
            panic!(
                "ARBITER_REQUIRE_DOCKER=1 but shellcheck is missing (Debian package shellcheck; scripts/test installs it as root)"
            );
        }
        eprintln!(
            "skipping: shellcheck not found (apt-get install shellcheck); set ARBITER_REQUIRE_DOCKER=1 to fail instead"
        );
        return;
    }

    // From the repository root: the `# shellcheck source=scripts/...` directives are relative
    // to it.
    let out = Command::new("shellcheck")
        .args(["-x", "-S", "warning"])
        .args(&files)
        .current_dir(root)
        .output()
        .expect("run shellcheck");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "shellcheck -x -S warning on {} scripts ({}):\n{report}",
        files.len(),
        out.status
    );
    eprintln!("shellcheck -x -S warning: {} scripts clean", files.len());
}
