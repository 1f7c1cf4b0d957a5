//! The change-set helpers: collapse, summary, hashing, the changes file, the record.

use super::*;

#[test]
fn collapse_sorts_merges_drops_mount_points_and_marks_implied_parents() {
    let raw = vec![
        add("/usr/local/bin/x"),
        ChangeEntry::new("/usr", ChangeKind::Modified, FileType::Dir),
        ChangeEntry::new("/usr/local/bin", ChangeKind::Modified, FileType::Dir),
        ChangeEntry::new("/usr/local", ChangeKind::Modified, FileType::Dir),
        ChangeEntry::new("/tmp", ChangeKind::Modified, FileType::Dir),
        ChangeEntry::new("/.arbiter", ChangeKind::Added, FileType::Dir),
        ChangeEntry::new("/.arbiter/toolbox", ChangeKind::Added, FileType::Dir),
        add("//usr/local/bin/./x"),
        delete("/usr-old"),
    ];
    let out = collapse(raw);
    let listing: Vec<(&str, bool)> = out.iter().map(|e| (e.path.as_str(), e.implied)).collect();
    assert_eq!(
        listing,
        [
            ("/tmp", false),
            ("/usr", true),
            ("/usr/local", true),
            ("/usr/local/bin", true),
            ("/usr/local/bin/x", false),
            ("/usr-old", false),
        ]
    );
}

#[test]
fn summary_counts_real_changes_only() {
    let im = Image::debian();
    let changes = collapsed(
        &im,
        vec![
            add("/app/out.txt"),
            file("/app/main.py", ChangeKind::Modified, 0o644),
            add_exe("/usr/local/bin/tool"),
            delete("/usr/bin/cat"),
        ],
    );
    let s = summarize(&changes, "/app");
    assert_eq!(
        s,
        ChangeSummary {
            added: 2,
            modified: 1,
            deleted: 1,
            outside_workdir: 2,
            file: "agent/changes.json".into(),
        }
    );
    assert_eq!(
        serde_json::to_value(&s).unwrap(),
        serde_json::json!({"added": 2, "modified": 1, "deleted": 1, "outside_workdir": 2, "file": "agent/changes.json"})
    );
    // A working dir of / exempts nothing.
    assert_eq!(summarize(&changes, "/").outside_workdir, 4);
}

#[test]
fn hashing_is_capped_and_says_what_it_skipped() {
    let mut big = add("/usr/local/share/big.bin");
    big.size = Some(100);
    let mut unknown = add("/usr/local/share/unknown");
    unknown.size = None;
    let mut changes = collapse(vec![
        add("/app/out.txt"),
        add("/usr/local/bin/a"),
        add("/usr/local/bin/b"),
        add("/usr/local/bin/c"),
        modify("/usr/bin/zz-modified"),
        add("/usr/local/bin/finding"),
        big,
        unknown,
        add_dir("/usr/local/share/dir"),
        delete("/usr/bin/gone"),
    ]);
    let caps = HashCaps {
        max_file_bytes: 50,
        max_files: 3,
        max_total_bytes: 1_000,
    };
    let first = BTreeSet::from(["/usr/local/bin/finding".to_string()]);
    let (plan, mut report) = plan_hashes(&mut changes, "/app", &caps, &first);
    let planned: Vec<&str> = plan.iter().map(|&i| changes[i].path.as_str()).collect();
    assert_eq!(
        planned,
        [
            "/usr/local/bin/finding",
            "/usr/bin/zz-modified",
            "/usr/local/bin/a"
        ]
    );
    let skipped = |p: &str| {
        changes
            .iter()
            .find(|e| e.path == p)
            .and_then(|e| e.hash_skipped)
    };
    assert_eq!(skipped("/app/out.txt"), Some(HashSkip::InWorkdir));
    assert_eq!(
        skipped("/usr/local/share/big.bin"),
        Some(HashSkip::TooLarge)
    );
    assert_eq!(
        skipped("/usr/local/share/unknown"),
        Some(HashSkip::Unreadable)
    );
    assert_eq!(skipped("/usr/local/bin/b"), Some(HashSkip::OverCount));
    assert_eq!(skipped("/usr/local/share/dir"), None);
    assert_eq!(skipped("/usr/bin/gone"), None);
    assert_eq!(report.planned, 3);
    assert_eq!(report.planned_bytes, 30);
    assert_eq!(report.skipped[&HashSkip::OverCount], 2);

    // Byte cap.
    let mut changes2 = vec![add("/opt/a"), add("/opt/b")];
    let caps2 = HashCaps {
        max_file_bytes: 50,
        max_files: 10,
        max_total_bytes: 15,
    };
    let (plan2, _) = plan_hashes(&mut changes2, "/app", &caps2, &BTreeSet::new());
    assert_eq!(plan2, [0]);
    assert_eq!(changes2[1].hash_skipped, Some(HashSkip::OverBytes));

    // Recording outcomes.
    let i = plan[0];
    record_hash(&mut changes[i], Some("ab".repeat(32)), &mut report);
    assert_eq!(changes[i].sha256.as_deref(), Some("ab".repeat(32).as_str()));
    let j = plan[1];
    record_hash(&mut changes[j], None, &mut report);
    assert_eq!(changes[j].hash_skipped, Some(HashSkip::Unreadable));
    assert_eq!(report.planned, 2);
    assert_eq!(report.skipped[&HashSkip::Unreadable], 2);
}

#[test]
fn changes_file_round_trips_with_its_schema_tag() {
    let mut e = link("/app/l", ChangeKind::Added, "x");
    e.mode = Some(0o777);
    let mut h = add("/opt/f");
    h.sha256 = Some("00".repeat(32));
    let mut s = add("/app/f");
    s.hash_skipped = Some(HashSkip::InWorkdir);
    let file = ChangesFile::new(
        "/app",
        HashReport {
            caps: HashCaps::default(),
            planned: 1,
            planned_bytes: 10,
            skipped: BTreeMap::from([(HashSkip::InWorkdir, 1)]),
        },
        vec![e, h, s, delete("/gone")],
    );
    let json = serde_json::to_value(&file).unwrap();
    assert_eq!(json["schema"], "arbiter.changes.v1");
    assert_eq!(json["hashing"]["skipped"]["in_workdir"], 1);
    assert_eq!(
        json["entries"][0],
        serde_json::json!({"path": "/app/l", "kind": "added", "file_type": "symlink", "mode": 511, "link_target": "x"})
    );
    assert_eq!(json["entries"][2]["hash_skipped"], "in_workdir");
    assert_eq!(
        json["entries"][3],
        serde_json::json!({"path": "/gone", "kind": "deleted", "file_type": "other"})
    );
    let back: ChangesFile = serde_json::from_value(json).unwrap();
    assert_eq!(back, file);
}

#[test]
fn integrity_status_and_record_shape() {
    let f = Finding {
        path: "/usr/bin/python3".into(),
        class: ToolchainModified,
        why: "pre-existing executable modified or replaced".into(),
    };
    assert_eq!(verdict(vec![]), IntegrityStatus::Clean);
    assert_eq!(
        Integrity::judge(vec![], VerifiedOn::PristineToolchain).status,
        IntegrityStatus::Clean
    );
    assert_eq!(
        Integrity::judge(vec![f.clone()], VerifiedOn::PristineToolchain).status,
        IntegrityStatus::Restored
    );
    let rec = Integrity::judge(vec![f], VerifiedOn::AgentFilesystem);
    assert_eq!(
        serde_json::to_value(&rec).unwrap(),
        serde_json::json!({"status": "suspect", "findings": [
            {"path": "/usr/bin/python3", "class": "toolchain_modified", "why": "pre-existing executable modified or replaced"}
        ]})
    );
    for (class, name) in [
        (PathShadowing, "path_shadowing"),
        (LoaderInjection, "loader_injection"),
        (StartupHook, "startup_hook"),
        (FakeTestRunner, "fake_test_runner"),
        (ModuleShadowing, "module_shadowing"),
        (VerifierPaths, "verifier_paths"),
        (AccountDb, "account_db"),
        (Protected, "protected"),
    ] {
        assert_eq!(serde_json::to_value(class).unwrap(), name);
    }
}

#[test]
fn clean_mode_replays_everything_but_the_findings() {
    let im = Image::debian();
    let changes = collapsed(
        &im,
        vec![
            add("/app/out.txt"),
            add_dir("/app/unittest"),
            add("/app/unittest/__init__.py"),
            add("/app/unittest/case.py"),
            add_exe("/usr/local/bin/sh"),
        ],
    );
    let findings = classify(&changes, &ctx(&im, &[]));
    let kept: Vec<&str> = without_findings(&changes, &findings)
        .iter()
        .map(|e| e.path.as_str())
        .collect();
    assert_eq!(kept, ["/app/out.txt"]);
}

#[test]
fn content_wanted_lists_what_classify_reads() {
    let im = Image::debian();
    let changes = collapsed(
        &im,
        vec![
            add("/usr/local/lib/python3.11/dist-packages/x.pth"),
            add("/usr/local/lib/python3.11/dist-packages/x-1.dist-info/entry_points.txt"),
            file("/etc/passwd", ChangeKind::Modified, 0o644),
            file("/root/.profile", ChangeKind::Modified, 0o644),
            add("/app/out.txt"),
        ],
    );
    let (agent, original) = content_wanted(&changes, &ctx(&im, &[]));
    assert_eq!(
        agent,
        [
            "/etc/passwd",
            "/root/.profile",
            "/usr/local/lib/python3.11/dist-packages/x-1.dist-info/entry_points.txt",
            "/usr/local/lib/python3.11/dist-packages/x.pth",
        ]
    );
    assert_eq!(original, ["/etc/passwd"]);
}

#[test]
fn context_reads_path_and_pythons_from_the_image() {
    assert_eq!(
        path_dirs_from_env(&["PATH=/opt/bin:relative::/usr/bin/".into()]),
        ["/opt/bin", "/usr/bin"]
    );
    assert_eq!(path_dirs_from_env(&[]).len(), 6);
    let im = Image::debian();
    let pythons = guess_pythons(&im);
    assert_eq!(pythons.len(), 1);
    assert_eq!(pythons[0].stdlib[0], "/usr/lib/python3.11");
    assert!(
        pythons[0]
            .site
            .contains(&"/usr/lib/python3/dist-packages".to_string())
    );
    // A python.org build under /usr/local.
    let mut im2 = Image::default();
    im2.file("/usr/local/lib/python3.12/os.py", 0o644);
    assert_eq!(
        guess_pythons(&im2)[0].stdlib[0],
        "/usr/local/lib/python3.12"
    );
}

/// Not quadratic: 200k changes (a debug build on a shared 2-core machine takes a few
/// seconds; anything quadratic would take hours).
#[test]
fn classify_is_fast_on_200k_files() {
    let im = Image::debian();
    for (name, make) in [
        (
            "in the working dir",
            (|i| format!("/app/many/d{}/f{i}", i % 100)) as fn(usize) -> String,
        ),
        // Outside the working dir every rule has to look (a big npm install).
        ("outside it", |i| {
            format!("/usr/local/lib/node_modules/p{}/m{i}.js", i % 500)
        }),
    ] {
        let raw = with_parents(&im, (0..200_000).map(|i| add(&make(i))).collect());
        let t0 = std::time::Instant::now();
        let changes = collapse(raw);
        let findings = classify(&changes, &ctx(&im, &[]));
        let elapsed = t0.elapsed();
        assert!(findings.is_empty(), "{name}");
        assert_eq!(
            summarize(&changes, "/app").added,
            200_000 + if name == "outside it" { 501 } else { 101 }
        );
        // A figure, not a pass condition (noisy machines): quadratic work would show here.
        eprintln!("{name}: 200,000 added paths collapsed and classified in {elapsed:?}");
    }
}

#[test]
fn relative_protect_paths_are_taken_from_the_workdir() {
    let im = Image::debian();
    let cx = ctx(&im, &["tests/data.json", "/etc/hosts"]);
    assert_eq!(cx.protect, ["/app/tests/data.json", "/etc/hosts"]);
}

#[test]
fn docker_change_kinds() {
    assert_eq!(ChangeKind::from_docker(0), Some(ChangeKind::Modified));
    assert_eq!(ChangeKind::from_docker(1), Some(ChangeKind::Added));
    assert_eq!(ChangeKind::from_docker(2), Some(ChangeKind::Deleted));
    assert_eq!(ChangeKind::from_docker(3), None);
}
