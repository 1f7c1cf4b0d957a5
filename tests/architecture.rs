//! The house as docs/architecture.md draws it:
//! - no loops: no two source files of `src/` depend on each other, directly or through others
//!   (issue 24). A file depends on another when it names it by a `crate::…`, `super::…` or
//!   `self::…` path, or by the name of a child module it declares (`mod lifecycle;` …
//!   `lifecycle::PodState`), in a `use` or a path in code, its unit tests left out;
//! - one seam, two wings (issue 34): the wings `sandbox/docker/` and `sandbox/kubernetes/` do
//!   not depend on each other but for the declared downward reuse (Kubernetes builds images
//!   with the Docker engine), the seam (the rest of `sandbox/`) on neither but through the one
//!   file that chooses, and no backend's word appears outside the wings and that file.
//!
//! Each check fails naming the files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Loops known and not yet broken: each a sorted list of files.
const KNOWN: &[&[&str]] = &[];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/a/b.rs` and `src/a/b/mod.rs` → `["a", "b"]`.
fn module_of(rel: &str) -> Vec<String> {
    let stem = rel.trim_end_matches(".rs");
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without its `#[cfg(test)] mod tests { … }` (what follows it).
fn without_tests(text: &str) -> &str {
    match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    }
}

/// The child modules a file declares (`mod a;`, `pub(crate) mod b;`).
fn child_modules(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("pub ").unwrap_or(line);
            let rest = match rest.strip_prefix("pub(") {
                Some(r) => r.split_once(") ")?.1,
                None => rest,
            };
            let name = rest.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// `text` without its re-export lines (`pub use a::B;`, `pub(crate) use …`, to the `;`): a
/// module's façade over its children is not its own code depending on them.
fn without_reexports(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut skipping = false;
    for line in text.lines() {
        let t = line.trim_start();
        if !skipping && (t.starts_with("pub use ") || t.starts_with("pub(") && t.contains(") use "))
        {
            skipping = true;
        }
        if skipping {
            skipping = !line.trim_end().ends_with(';');
            out.push('\n');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every `crate::a::b` / `super::super::c` / `self::c` path in `text`, and every path that
/// starts with a child module the file declares (`lifecycle::PodState`) outside its
/// re-exports, as segments.
fn paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let own = without_reexports(text);
    let children: Vec<String> = child_modules(text)
        .into_iter()
        .map(|c| format!("{c}::"))
        .collect();
    let starts = ["crate::", "super::", "self::"]
        .into_iter()
        .map(str::to_string)
        .chain(children);
    for start in starts {
        let start = start.as_str();
        // A child's name counts in the file's own code only, not in its re-exports.
        let text = if start.starts_with("crate::")
            || start.starts_with("super::")
            || start.starts_with("self::")
        {
            text
        } else {
            own.as_str()
        };
        let bytes = text.as_bytes();
        let mut from = 0;
        while let Some(i) = text[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            let before = at.checked_sub(1).map(|j| bytes[j]);
            // Part of a longer name or path (`crate::a::lifecycle::` is not the child's).
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':') {
                continue;
            }
            let end = text[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(text.len(), |n| at + n);
            let segs: Vec<String> = text[at..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            out.push(segs);
        }
    }
    out
}

/// The file a path names: the longest module prefix that is a file of `src/`.
fn resolve<'a>(
    here: &[String],
    segs: &[String],
    files: &'a BTreeMap<Vec<String>, String>,
) -> Option<&'a String> {
    let mut base: Vec<String> = here.to_vec();
    let mut rest = segs;
    if rest.first().is_some_and(|s| s == "crate") {
        base.clear();
        rest = &rest[1..];
    } else {
        while let Some(first) = rest.first() {
            match first.as_str() {
                "super" => {
                    base.pop();
                }
                "self" => {}
                _ => break,
            }
            rest = &rest[1..];
        }
    }
    (0..=rest.len()).rev().find_map(|n| {
        let mut key = base.clone();
        key.extend(rest[..n].iter().cloned());
        files.get(&key)
    })
}

/// Strongly connected components of more than one file (Tarjan).
fn loops(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        if let Some(ws) = s.edges.get(v) {
            for w in ws {
                if !s.index.contains_key(w.as_str()) {
                    visit(s, w);
                    let lw = s.low[w.as_str()];
                    let lv = s.low[v];
                    s.low.insert(v, lv.min(lw));
                } else if s.on.contains(w.as_str()) {
                    let iw = s.index[w.as_str()];
                    let lv = s.low[v];
                    s.low.insert(v, lv.min(iw));
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.found.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

/// The source files of `src/` (relative paths) and which of them each depends on.
struct House {
    /// Every dependency, a parent naming its own children included.
    edges: BTreeMap<String, BTreeSet<String>>,
    /// The same without a module's root file naming its direct children.
    without_children: BTreeMap<String, BTreeSet<String>>,
}

/// The folder a file's module owns: `src/a/mod.rs` and `src/a.rs` own `src/a`; a leaf
/// `src/a/b.rs` is in `src/a`.
fn folder_of(rel: &str) -> String {
    let stem = rel.trim_end_matches(".rs");
    match stem.strip_suffix("/mod") {
        Some(dir) => dir.to_string(),
        None => stem.to_string(),
    }
}

/// The folder a file lies in (`src/a/b.rs` → `src/a`).
fn parent_folder(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(dir, _)| dir)
}

fn is_test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name == "tests.rs" || name.starts_with("tests_") || rel.contains("/tests/")
}

fn house() -> House {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    sources(&root.join("src"), &mut all);
    let rel = |p: &Path| {
        p.strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/")
    };
    let files: BTreeMap<Vec<String>, String> = all
        .iter()
        .map(|p| {
            let r = rel(p);
            (module_of(r.trim_start_matches("src/")), r)
        })
        .collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut without_children: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &all {
        let r = rel(path);
        if is_test_file(&r) {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        let here = module_of(r.trim_start_matches("src/"));
        let children = child_modules(without_tests(&text));
        let deps = edges.entry(r.clone()).or_default();
        let own = without_children.entry(r.clone()).or_default();
        for segs in paths(without_tests(&text)) {
            if let Some(target) = resolve(&here, &segs, &files)
                && *target != r
            {
                deps.insert(target.clone());
                let names_child = segs.first().is_some_and(|s| children.contains(s));
                if !names_child {
                    own.insert(target.clone());
                }
            }
        }
    }
    assert!(edges.len() > 100, "read {} files", edges.len());
    House {
        edges,
        without_children,
    }
}

/// The loops that span more than one module folder: a module's root file and its direct
/// children (`kubernetes/mod.rs` and `kubernetes/lifecycle.rs`) are one module, and may name
/// each other (one type's methods spread over its children is how Rust splits a module); a
/// loop through two modules may not.
fn loops_across_modules(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    loops(edges)
        .into_iter()
        .filter(|files| {
            let module = |f: &String| {
                if f.ends_with("/mod.rs") || edges.keys().any(|k| parent_folder(k) == folder_of(f))
                {
                    folder_of(f)
                } else {
                    parent_folder(f).to_string()
                }
            };
            let first = module(&files[0]);
            files.iter().any(|f| module(f) != first)
        })
        .collect()
}

#[test]
fn no_two_source_files_depend_on_each_other() {
    let house = house();
    // Across modules, with a parent naming its children: yesterday's circle through
    // `sandbox/kubernetes/mod.rs → lifecycle.rs` ran through two modules.
    let across = loops_across_modules(&house.edges);
    assert!(
        across.is_empty(),
        "modules that depend on each other: {across:#?}"
    );
    // Any two files, but for a root naming its own children.
    let found = loops(&house.without_children);
    let known: Vec<Vec<String>> = KNOWN
        .iter()
        .map(|l| l.iter().map(|s| s.to_string()).collect())
        .collect();
    let new: Vec<&Vec<String>> = found.iter().filter(|l| !known.contains(l)).collect();
    assert!(new.is_empty(), "files that depend on each other: {new:#?}");
}

const DOCKER_WING: &str = "src/sandbox/docker/";
const KUBERNETES_WING: &str = "src/sandbox/kubernetes/";
/// The one file above the wings that names them: it owns the backend config and connects
/// the chosen backend.
const CHOOSER: &str = "src/sandbox/choose.rs";
/// The wings' one declared dependency on each other, downward: the Kubernetes wing builds
/// images with the Docker engine before pushing them (file, the file it uses).
const DECLARED_REUSE: &[(&str, &str)] = &[
    ("src/sandbox/kubernetes/mod.rs", "src/sandbox/docker/mod.rs"),
    (
        "src/sandbox/kubernetes/images.rs",
        "src/sandbox/docker/mod.rs",
    ),
];

/// The edges that break the wings' rules: a wing on the other (but the declared reuse), the
/// seam or anything above it on a wing (but the chooser).
fn wing_violations(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let wing = |f: &str| {
        if f.starts_with(DOCKER_WING) {
            Some("docker")
        } else if f.starts_with(KUBERNETES_WING) {
            Some("kubernetes")
        } else {
            None
        }
    };
    let mut out = Vec::new();
    for (from, tos) in edges {
        for to in tos {
            let bad = match (wing(from), wing(to)) {
                (Some(a), Some(b)) => {
                    a != b && !DECLARED_REUSE.contains(&(from.as_str(), to.as_str()))
                }
                (None, Some(_)) => from != CHOOSER,
                _ => false,
            };
            if bad {
                out.push((from.clone(), to.clone()));
            }
        }
    }
    out
}

#[test]
fn the_wings_depend_on_each_other_only_as_declared_and_the_seam_on_neither() {
    let bad = wing_violations(&house().edges);
    assert!(bad.is_empty(), "file → file across the seam: {bad:#?}");
}

/// Words that name a backend or its client libraries in code.
const BACKEND_WORDS: &[&str] = &[
    "bollard",
    "kube::",
    "k8s_openapi",
    "KubeError",
    "KubeSettings",
    "KubernetesSandbox",
    "DockerSandbox",
    "DockerError",
    "sandbox::docker",
    "sandbox::kubernetes",
    "BackendKind::Docker",
    "BackendKind::Kubernetes",
];

/// The backend words in `text` outside comments: (line number, word).
fn backend_words(text: &str) -> Vec<(usize, &'static str)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        for word in BACKEND_WORDS {
            if code.contains(word) {
                out.push((i + 1, *word));
            }
        }
    }
    out
}

#[test]
fn no_backend_is_named_outside_its_wing_and_the_chooser() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut all = Vec::new();
    sources(&root.join("src"), &mut all);
    let mut found = Vec::new();
    for path in &all {
        let rel = path
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if rel.starts_with(DOCKER_WING) || rel.starts_with(KUBERNETES_WING) || rel == CHOOSER {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        for (line, word) in backend_words(&text) {
            found.push(format!("{rel}:{line}: {word}"));
        }
    }
    assert!(all.len() > 100, "read {} files", all.len());
    assert!(found.is_empty(), "backend words above the seam: {found:#?}");
}

/// The check finds a loop when there is one (so a pass above means something).
#[test]
fn a_loop_is_found() {
    let e = |pairs: &[(&str, &str)]| {
        let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            m.entry(a.to_string()).or_default().insert(b.to_string());
            m.entry(b.to_string()).or_default();
        }
        m
    };
    assert_eq!(
        loops(&e(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])),
        vec![vec!["a".to_string(), "b".to_string(), "c".to_string()]]
    );
    assert!(loops(&e(&[("a", "b"), ("b", "c")])).is_empty());
    let files: BTreeMap<Vec<String>, String> = [
        (vec!["trial".to_string()], "src/trial/mod.rs".to_string()),
        (
            vec!["trial".to_string(), "plan".to_string()],
            "src/trial/plan.rs".to_string(),
        ),
    ]
    .into_iter()
    .collect();
    let here = vec!["trial".to_string(), "run".to_string()];
    let segs: Vec<String> = ["super", "plan", "Phase"].map(String::from).to_vec();
    assert_eq!(
        resolve(&here, &segs, &files).map(String::as_str),
        Some("src/trial/plan.rs")
    );
}

/// A parent naming its child (`mod lifecycle;` … `lifecycle::PodState`) is a dependency, as
/// `self::` is; a longer path that merely ends in the child's name is not. Yesterday's circle
/// through `sandbox/kubernetes/mod.rs → lifecycle.rs` was invisible without it.
#[test]
fn a_parent_naming_its_child_is_seen() {
    let text = "mod lifecycle;\npub(crate) mod pod;\nuse crate::other::lifecycle::X;\nfn f() -> lifecycle::PodState { self::pod::p() }\n";
    assert_eq!(child_modules(text), ["lifecycle", "pod"]);
    let found = paths(text);
    let names: Vec<String> = found.iter().map(|s| s.join("::")).collect();
    assert!(
        names.contains(&"lifecycle::PodState".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"self::pod::p".to_string()), "{names:?}");
    assert!(
        names.contains(&"crate::other::lifecycle::X".to_string()),
        "{names:?}"
    );
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("lifecycle::"))
            .count(),
        1,
        "{names:?}"
    );
    let files: BTreeMap<Vec<String>, String> = [
        (
            vec!["sandbox".to_string(), "kubernetes".to_string()],
            "src/sandbox/kubernetes/mod.rs".to_string(),
        ),
        (
            ["sandbox", "kubernetes", "lifecycle"]
                .map(String::from)
                .to_vec(),
            "src/sandbox/kubernetes/lifecycle.rs".to_string(),
        ),
    ]
    .into_iter()
    .collect();
    let here = vec!["sandbox".to_string(), "kubernetes".to_string()];
    let segs: Vec<String> = ["lifecycle", "PodState"].map(String::from).to_vec();
    assert_eq!(
        resolve(&here, &segs, &files).map(String::as_str),
        Some("src/sandbox/kubernetes/lifecycle.rs")
    );
    // The circle it closed is found.
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [
        ("src/sandbox/docker.rs", "src/sandbox/error.rs"),
        ("src/sandbox/error.rs", "src/sandbox/kubernetes/mod.rs"),
        (
            "src/sandbox/kubernetes/mod.rs",
            "src/sandbox/kubernetes/lifecycle.rs",
        ),
        (
            "src/sandbox/kubernetes/lifecycle.rs",
            "src/sandbox/docker.rs",
        ),
    ] {
        edges
            .entry(a.to_string())
            .or_default()
            .insert(b.to_string());
    }
    assert_eq!(loops(&edges).len(), 1);
}

/// The wing rules and the word check fail where they should.
#[test]
fn crossing_the_seam_is_found() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [
        ("src/sandbox/docker/mod.rs", "src/sandbox/kubernetes/pod.rs"),
        (
            "src/sandbox/kubernetes/images.rs",
            "src/sandbox/docker/mod.rs",
        ),
        (
            "src/sandbox/kubernetes/pod.rs",
            "src/sandbox/docker/layer.rs",
        ),
        ("src/job/runner.rs", "src/sandbox/docker/mod.rs"),
        ("src/sandbox/choose.rs", "src/sandbox/docker/mod.rs"),
        ("src/sandbox/fake.rs", "src/sandbox/kubernetes/mod.rs"),
    ] {
        edges
            .entry(a.to_string())
            .or_default()
            .insert(b.to_string());
    }
    let bad: Vec<String> = wing_violations(&edges)
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    assert_eq!(
        bad,
        [
            "src/job/runner.rs",
            "src/sandbox/docker/mod.rs",
            "src/sandbox/fake.rs",
            "src/sandbox/kubernetes/pod.rs"
        ]
    );
    let text =
        "// bollard in a comment\nuse bollard::Docker; // and kube::Api\nlet s: KubeSettings;\n";
    assert_eq!(backend_words(text), [(2, "bollard"), (3, "KubeSettings")]);
}
