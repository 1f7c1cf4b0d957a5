//! The house has no loops: no two source files of `src/` depend on each other, directly or
//! through others (issue 24). A file depends on another when it names it by a `crate::…` or
//! `super::…` path (a `use`, or a path in code), its unit tests left out. A new loop fails
//! here, naming its files.

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

/// Every `crate::a::b` / `super::super::c` path in `text`, as segments.
fn paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(i) = text[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            let before = at.checked_sub(1).map(|j| bytes[j]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
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

#[test]
fn no_two_source_files_depend_on_each_other() {
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
    for path in &all {
        let r = rel(path);
        let name = path.file_name().unwrap().to_string_lossy();
        if name == "tests.rs" || name.starts_with("tests_") || r.contains("/tests/") {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        let here = module_of(r.trim_start_matches("src/"));
        let deps = edges.entry(r.clone()).or_default();
        for segs in paths(without_tests(&text)) {
            if let Some(target) = resolve(&here, &segs, &files)
                && *target != r
            {
                deps.insert(target.clone());
            }
        }
    }
    assert!(edges.len() > 100, "read {} files", edges.len());
    let found = loops(&edges);
    let known: Vec<Vec<String>> = KNOWN
        .iter()
        .map(|l| l.iter().map(|s| s.to_string()).collect())
        .collect();
    let new: Vec<&Vec<String>> = found.iter().filter(|l| !known.contains(l)).collect();
    assert!(new.is_empty(), "files that depend on each other: {new:#?}");
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
