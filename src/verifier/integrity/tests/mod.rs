//! Table-driven tests of the change-set helpers and the classifier, against a fake
//! Debian-like image (merged /usr, python3.11, pytest from Debian, a few libraries).
//!
//! This file holds the fixture and the table helpers; the tables are by rule family: one row
//! per finding class (`classes`), per not-a-finding rule (`not_findings`), issue 10's attacks
//! as data (`attacks`), the change-set helpers (`change_set`) and issue 23's network steering
//! (`steering`).

mod attacks;
mod change_set;
mod classes;
mod not_findings;
mod steering;

use std::collections::{BTreeMap, BTreeSet};

use super::paths::parent;
use super::*;

// ------------------------------------------------------------------ fixture ---

#[derive(Default)]
struct Image {
    files: BTreeMap<String, OriginalFile>,
    original_text: BTreeMap<String, String>,
    agent_text: BTreeMap<String, String>,
}

impl Filesystems for Image {
    fn original(&self, path: &str) -> Option<OriginalFile> {
        self.files.get(path).cloned()
    }
    fn original_text(&self, path: &str) -> Option<String> {
        self.original_text.get(path).cloned()
    }
    fn agent_text(&self, path: &str) -> Option<String> {
        self.agent_text.get(path).cloned()
    }
}

impl Image {
    fn dir(&mut self, path: &str) {
        self.put(path, FileType::Dir, Some(0o755), None);
    }
    fn file(&mut self, path: &str, mode: u32) {
        self.put(path, FileType::File, Some(mode), None);
    }
    fn link(&mut self, path: &str, target: &str) {
        self.put(path, FileType::Symlink, Some(0o777), Some(target));
    }
    fn put(&mut self, path: &str, t: FileType, mode: Option<u32>, target: Option<&str>) {
        // Parents are directories (unless already something else, e.g. a symlink).
        let mut p = parent(path);
        while let Some(dir) = p {
            if dir != "/" && !self.files.contains_key(dir) {
                self.files.insert(
                    dir.to_string(),
                    OriginalFile {
                        file_type: FileType::Dir,
                        mode: Some(0o755),
                        link_target: None,
                    },
                );
            }
            p = parent(dir);
        }
        self.files.insert(
            path.to_string(),
            OriginalFile {
                file_type: t,
                mode,
                link_target: target.map(str::to_string),
            },
        );
    }

    /// [`Image::debian`] where the agent's files at the paths of `agent_text` read as given.
    fn debian_with(agent_text: &[(&str, &str)]) -> Self {
        let mut im = Image::debian();
        for (p, t) in agent_text {
            im.agent_text.insert(p.to_string(), t.to_string());
        }
        im
    }

    /// A Debian bookworm-like image with python3.11 and Debian's pytest.
    fn debian() -> Self {
        let mut im = Image::default();
        for (l, t) in [
            ("/bin", "usr/bin"),
            ("/sbin", "usr/sbin"),
            ("/lib", "usr/lib"),
            ("/lib64", "usr/lib64"),
        ] {
            im.link(l, t);
        }
        for d in [
            "/usr/local/bin",
            "/usr/local/sbin",
            "/usr/local/lib/python3.11/dist-packages",
            "/usr/local/include",
            "/usr/share/doc",
            "/etc/ld.so.conf.d",
            "/etc/profile.d",
            "/etc/python3.11",
            "/root",
            "/home",
            "/app",
            "/tmp",
            "/var/lib/dpkg/info",
            "/var/log/apt",
            "/usr/lib/python3.11/__pycache__",
            "/usr/lib/python3.11/json/__pycache__",
            "/usr/lib/python3.11/lib-dynload",
        ] {
            im.dir(d);
        }
        for exe in [
            "/usr/bin/dash",
            "/usr/bin/bash",
            "/usr/bin/cat",
            "/usr/bin/ls",
            "/usr/bin/grep",
            "/usr/bin/python3.11",
            "/usr/bin/env",
            "/usr/bin/timeout",
            "/usr/bin/pytest",
            "/usr/sbin/ldconfig",
        ] {
            im.file(exe, 0o755);
        }
        im.link("/usr/bin/sh", "dash");
        im.link("/usr/bin/python3", "python3.11");
        for lib in [
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libz.so.1",
            "/usr/lib64/ld-linux-x86-64.so.2",
        ] {
            im.file(lib, 0o644);
        }
        for f in [
            "/usr/lib/python3.11/os.py",
            "/usr/lib/python3.11/__pycache__/os.cpython-311.pyc",
            "/usr/lib/python3.11/json/__init__.py",
            "/usr/lib/python3.11/json/decoder.py",
            "/usr/lib/python3.11/json/__pycache__/__init__.cpython-311.pyc",
            "/usr/lib/python3.11/json/__pycache__/decoder.cpython-311.pyc",
            "/usr/lib/python3.11/unittest/__init__.py",
            "/usr/lib/python3/dist-packages/pytest/__init__.py",
            "/usr/lib/python3/dist-packages/_pytest/main.py",
            "/usr/lib/python3/dist-packages/requests/__init__.py",
            "/etc/python3.11/sitecustomize.py",
            "/etc/passwd",
            "/etc/group",
            "/etc/shadow",
            "/etc/profile",
            "/etc/bash.bashrc",
            "/etc/environment",
            "/etc/nsswitch.conf",
            "/etc/ld.so.conf",
            "/etc/ld.so.conf.d/libc.conf",
            "/etc/ld.so.cache",
            "/root/.bashrc",
            "/root/.profile",
            "/app/main.py",
            "/app/old.py",
            "/app/tests/data.json",
            "/var/lib/dpkg/status",
            "/etc/hosts",
            "/etc/resolv.conf",
            "/etc/apt/sources.list",
            "/etc/apt/apt.conf.d/70debconf",
            "/etc/apt/trusted.gpg.d/debian-archive-bookworm-stable.asc",
            "/etc/ssl/certs/ca-certificates.crt",
            "/etc/ssl/openssl.cnf",
            "/etc/ca-certificates.conf",
            "/usr/share/ca-certificates/mozilla/ISRG_Root_X1.crt",
            "/usr/lib/python3/dist-packages/botocore/cacert.pem",
            "/home/dev/.bashrc",
        ] {
            im.file(f, 0o644);
        }
        im.dir("/usr/local/share/ca-certificates");
        im.dir("/etc/apt/sources.list.d");
        im.dir("/etc/apt/auth.conf.d");
        im.dir("/usr/share/keyrings");
        im.dir("/var/lib/apt/lists");
        im.dir("/var/cache/apt/archives");
        im.link(
            "/usr/lib/python3.11/sitecustomize.py",
            "../../../etc/python3.11/sitecustomize.py",
        );
        im.original_text.insert("/etc/passwd".into(), PASSWD.into());
        im
    }
}

const PASSWD: &str =
    "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";

fn ctx<'a>(im: &'a Image, protect: &[&str]) -> IntegrityContext<'a> {
    let protect: Vec<String> = protect.iter().map(|s| s.to_string()).collect();
    IntegrityContext::new(
        "/app",
        &["HOME=/root".to_string(), format!("PATH={DEFAULT_PATH}")],
        &protect,
        im,
    )
}

// A change as the engine would report it, plus what enrichment adds.
fn add(path: &str) -> ChangeEntry {
    file(path, ChangeKind::Added, 0o644)
}
fn add_exe(path: &str) -> ChangeEntry {
    file(path, ChangeKind::Added, 0o755)
}
fn modify(path: &str) -> ChangeEntry {
    file(path, ChangeKind::Modified, 0o755)
}
fn file(path: &str, kind: ChangeKind, mode: u32) -> ChangeEntry {
    let mut e = ChangeEntry::new(path, kind, FileType::File);
    e.mode = Some(mode);
    e.size = Some(10);
    e
}
fn add_dir(path: &str) -> ChangeEntry {
    let mut e = ChangeEntry::new(path, ChangeKind::Added, FileType::Dir);
    e.mode = Some(0o755);
    e
}
fn link(path: &str, kind: ChangeKind, target: &str) -> ChangeEntry {
    let mut e = ChangeEntry::new(path, kind, FileType::Symlink);
    e.link_target = Some(target.to_string());
    e
}
fn delete(path: &str) -> ChangeEntry {
    ChangeEntry::new(path, ChangeKind::Deleted, FileType::Other)
}

/// Add what the engine adds: every parent dir of a change, `Modified` if it was in the
/// image, else `Added` (unless the change set already has it).
fn with_parents(im: &Image, mut changes: Vec<ChangeEntry>) -> Vec<ChangeEntry> {
    let have: BTreeSet<String> = changes.iter().map(|e| e.path.clone()).collect();
    let mut parents = BTreeSet::new();
    for e in &changes {
        let mut p = parent(&e.path);
        while let Some(dir) = p {
            if dir != "/" && !have.contains(dir) {
                parents.insert(dir.to_string());
            }
            p = parent(dir);
        }
    }
    for dir in parents {
        let kind = if im.files.contains_key(&dir) {
            ChangeKind::Modified
        } else {
            ChangeKind::Added
        };
        let mut e = ChangeEntry::new(dir, kind, FileType::Dir);
        e.mode = Some(0o755);
        changes.push(e);
    }
    changes
}

/// The change set as arbiter reads it: [`with_parents`], then collapsed.
fn collapsed(im: &Image, changes: Vec<ChangeEntry>) -> Vec<ChangeEntry> {
    collapse(with_parents(im, changes))
}

fn run(im: &Image, protect: &[&str], changes: Vec<ChangeEntry>) -> Vec<Finding> {
    let changes = collapsed(im, changes);
    classify(&changes, &ctx(im, protect))
}

/// The integrity status of `findings` when the verifier ran on the agent's filesystem.
fn verdict(findings: Vec<Finding>) -> IntegrityStatus {
    Integrity::judge(findings, VerifiedOn::AgentFilesystem).status
}

// ------------------------------------------------------------ one per class ---

struct Case {
    name: &'static str,
    changes: Vec<ChangeEntry>,
    agent_text: &'static [(&'static str, &'static str)],
    protect: &'static [&'static str],
    /// The finding expected: (path, class).
    want: Option<(&'static str, FindingClass)>,
}

fn case(name: &'static str, changes: Vec<ChangeEntry>, want: (&'static str, FindingClass)) -> Case {
    Case {
        name,
        changes,
        agent_text: &[],
        protect: &[],
        want: Some(want),
    }
}

fn honest(name: &'static str, changes: Vec<ChangeEntry>) -> Case {
    Case {
        name,
        changes,
        agent_text: &[],
        protect: &[],
        want: None,
    }
}

fn check(cases: Vec<Case>) {
    for c in cases {
        let im = Image::debian_with(c.agent_text);
        let findings = run(&im, c.protect, c.changes);
        match c.want {
            None => assert!(
                findings.is_empty(),
                "{}: unexpected findings {findings:#?}",
                c.name
            ),
            Some((path, class)) => {
                let hit = findings.iter().find(|f| f.path == path);
                assert!(
                    hit.is_some_and(|f| f.class == class),
                    "{}: wanted {class:?} at {path}, got {findings:#?}",
                    c.name
                );
                assert!(
                    !hit.is_some_and(|f| f.why.is_empty()),
                    "{}: empty why",
                    c.name
                );
            }
        }
    }
}

use FindingClass::*;
