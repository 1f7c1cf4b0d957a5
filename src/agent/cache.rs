//! The host cache of installed agent CLIs (SPEC §12).
//!
//! Layout: `<root>/<name>/<version>/` holds the agent's files plus `manifest.json`, where
//! `<root>` is `$ARBITER_AGENT_CACHE`, else `$XDG_CACHE_HOME/arbiter/agents`, else
//! `~/.cache/arbiter/agents`. An entry is built in a temporary sibling directory and renamed
//! into place, so a reader sees a complete entry or none. Entries are mounted read-only into
//! task containers at `/opt/arbiter/agents/<name>` (see [`mount_point`]): nothing is installed
//! into the task's filesystem.
//!
//! The manifest records the source (package, version, integrity digest of what was fetched)
//! and a digest over the entry's file listing (path, type, size, mode), which `agents install`
//! checks to tell a complete entry from a damaged one without hashing hundreds of megabytes.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::digest::sha256_hex;

/// Env var naming the cache root.
pub const CACHE_ENV: &str = "ARBITER_AGENT_CACHE";
/// Manifest file name inside an entry.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Schema id of the manifest.
pub const MANIFEST_SCHEMA: &str = "arbiter.agent-cache.v1";
/// Container directory under which entries are mounted.
pub const MOUNT_ROOT: &str = "/opt/arbiter/agents";

/// Container path an agent's cache entry is mounted at.
pub fn mount_point(name: &str) -> String {
    format!("{MOUNT_ROOT}/{name}")
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot locate the agent cache: set {CACHE_ENV}, XDG_CACHE_HOME or HOME (none is set)")]
    NoRoot,
    #[error(
        "{name} {version} is not installed in the agent cache ({dir}); run: arbiter agents install {name}@{version}"
    )]
    NotInstalled {
        name: String,
        version: String,
        dir: PathBuf,
    },
    #[error(
        "{name} {version} in the agent cache ({dir}) is damaged ({why}); run: arbiter agents install --force {name}@{version}"
    )]
    Damaged {
        name: String,
        version: String,
        dir: PathBuf,
        why: String,
    },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CacheError + 'a {
    move |source| CacheError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Where a cache entry came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// `npm` or `pypi`.
    pub registry: String,
    /// Package name as the registry knows it (`@anthropic-ai/claude-code-linux-x64`).
    pub package: String,
    /// Version as requested from the registry.
    pub version: String,
    /// The registry's digest of what was fetched (npm `integrity`; for PyPI the sha256 of the
    /// sorted wheel list with each wheel's sha256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<String>,
}

/// `manifest.json` of a cache entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema: String,
    pub name: String,
    pub version: String,
    pub source: Source,
    /// The agent's executable, relative to the entry.
    pub entry_point: String,
    /// For Python agents: the interpreter the venv was built with (`/usr/bin/python3`) and its
    /// `major.minor`; the task image must provide the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PythonInfo>,
    pub files: u64,
    pub bytes: u64,
    /// sha256 over the sorted listing `type path size mode` of every entry below the root
    /// (the manifest excluded).
    pub tree_sha256: String,
    pub installed_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PythonInfo {
    pub interpreter: String,
    pub version: String,
}

/// A complete entry found in the cache.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheEntry {
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// The cache at a root directory.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentCache {
    root: PathBuf,
}

/// Listing facts of a tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TreeSummary {
    pub files: u64,
    pub bytes: u64,
    pub sha256: String,
}

impl AgentCache {
    pub fn at(root: impl Into<PathBuf>) -> Self {
        AgentCache { root: root.into() }
    }

    /// The cache root from the environment (see the module doc).
    pub fn from_env() -> Result<Self, CacheError> {
        Self::from_vars(|name| std::env::var_os(name).filter(|v| !v.is_empty()))
    }

    pub(crate) fn from_vars(
        var: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Self, CacheError> {
        if let Some(dir) = var(CACHE_ENV) {
            return Ok(Self::at(dir));
        }
        if let Some(dir) = var("XDG_CACHE_HOME") {
            return Ok(Self::at(PathBuf::from(dir).join("arbiter/agents")));
        }
        match var("HOME") {
            Some(home) => Ok(Self::at(PathBuf::from(home).join(".cache/arbiter/agents"))),
            None => Err(CacheError::NoRoot),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory of `name` at `version` (whether or not it exists).
    pub fn entry_dir(&self, name: &str, version: &str) -> PathBuf {
        self.root.join(name).join(version)
    }

    /// The installed entry, cheaply checked: the manifest parses, names this agent and
    /// version, and its entry point exists. Meant for job resolution, before any trial.
    pub fn lookup(&self, name: &str, version: &str) -> Result<CacheEntry, CacheError> {
        let dir = self.entry_dir(name, version);
        let manifest_path = dir.join(MANIFEST_FILE);
        let bytes = match fs::read(&manifest_path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(CacheError::NotInstalled {
                    name: name.to_string(),
                    version: version.to_string(),
                    dir,
                });
            }
            Err(e) => return Err(io_err("reading", &manifest_path)(e)),
        };
        let damaged = |why: String| CacheError::Damaged {
            name: name.to_string(),
            version: version.to_string(),
            dir: dir.clone(),
            why,
        };
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| damaged(format!("{MANIFEST_FILE} does not parse: {e}")))?;
        if manifest.schema != MANIFEST_SCHEMA {
            return Err(damaged(format!(
                "{MANIFEST_FILE} has schema {:?}, expected {MANIFEST_SCHEMA:?}",
                manifest.schema
            )));
        }
        if manifest.name != name || manifest.version != version {
            return Err(damaged(format!(
                "{MANIFEST_FILE} describes {} {}",
                manifest.name, manifest.version
            )));
        }
        if !dir.join(&manifest.entry_point).is_file() {
            return Err(damaged(format!("{} is missing", manifest.entry_point)));
        }
        Ok(CacheEntry {
            dir: dir.clone(),
            manifest,
        })
    }

    /// `lookup`, then the full listing check (every file present with its recorded size and
    /// mode). Used by `agents install` to decide whether an entry must be refetched.
    pub fn verify(&self, name: &str, version: &str) -> Result<CacheEntry, CacheError> {
        let entry = self.lookup(name, version)?;
        let tree = summarize_tree(&entry.dir)?;
        if tree.sha256 != entry.manifest.tree_sha256 {
            return Err(CacheError::Damaged {
                name: name.to_string(),
                version: version.to_string(),
                dir: entry.dir.clone(),
                why: format!(
                    "its files differ from {MANIFEST_FILE} ({} files, {} bytes now; {} files, {} bytes recorded)",
                    tree.files, tree.bytes, entry.manifest.files, entry.manifest.bytes
                ),
            });
        }
        Ok(entry)
    }

    /// A fresh, empty staging directory next to where `name`'s entries live (same file system,
    /// so the final rename is atomic). Removed when the guard drops unless committed.
    pub fn staging(&self, name: &str, version: &str) -> Result<Staging, CacheError> {
        let parent = self.root.join(name);
        fs::create_dir_all(&parent).map_err(io_err("creating", &parent))?;
        let dir = tempfile::Builder::new()
            .prefix(&format!(".tmp-{version}-"))
            .tempdir_in(&parent)
            .map_err(io_err("creating a staging directory in", &parent))?;
        Ok(Staging {
            dir,
            name: name.to_string(),
            version: version.to_string(),
        })
    }

    /// Write the manifest into `staging` and move it into place as the entry. An existing
    /// entry (damaged, or being replaced with `--force`) is moved aside first and removed
    /// after the rename; a concurrent installer that finished first wins and its entry is kept.
    pub fn commit(
        &self,
        staging: Staging,
        source: Source,
        entry_point: &str,
        python: Option<PythonInfo>,
    ) -> Result<CacheEntry, CacheError> {
        let staged = staging.dir.path().to_path_buf();
        if !staged.join(entry_point).is_file() {
            return Err(CacheError::Damaged {
                name: staging.name.clone(),
                version: staging.version.clone(),
                dir: staged,
                why: format!("the fetched files have no {entry_point}"),
            });
        }
        let tree = summarize_tree(&staged)?;
        let manifest = Manifest {
            schema: MANIFEST_SCHEMA.to_string(),
            name: staging.name.clone(),
            version: staging.version.clone(),
            source,
            entry_point: entry_point.to_string(),
            python,
            files: tree.files,
            bytes: tree.bytes,
            tree_sha256: tree.sha256,
            installed_at: crate::timefmt::now_rfc3339(),
        };
        let manifest_path = staged.join(MANIFEST_FILE);
        let json = serde_json::to_vec_pretty(&manifest).map_err(|e| CacheError::Io {
            action: "encoding",
            path: manifest_path.clone(),
            source: io::Error::other(e),
        })?;
        fs::write(&manifest_path, json).map_err(io_err("writing", &manifest_path))?;
        let dest = self.entry_dir(&staging.name, &staging.version);
        let aside = if dest.exists() {
            let aside =
                staged.with_file_name(format!(".old-{}-{}", staging.version, std::process::id()));
            fs::rename(&dest, &aside).map_err(io_err("moving aside", &dest))?;
            Some(aside)
        } else {
            None
        };
        let staged = staging.dir.keep();
        if let Err(e) = fs::rename(&staged, &dest) {
            let _ = fs::remove_dir_all(&staged);
            return Err(io_err("renaming into", &dest)(e));
        }
        if let Some(aside) = aside
            && let Err(e) = fs::remove_dir_all(&aside)
        {
            tracing::warn!(
                "could not remove the replaced entry {}: {e}",
                aside.display()
            );
        }
        Ok(CacheEntry {
            dir: dest,
            manifest,
        })
    }
}

/// A staging directory for one entry; removed on drop unless committed.
#[derive(Debug)]
pub struct Staging {
    dir: tempfile::TempDir,
    name: String,
    version: String,
}

impl Staging {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Count and digest the listing of `root` (the manifest file at the top excluded). Symlinks
/// are listed with their target, not followed.
pub(crate) fn summarize_tree(root: &Path) -> Result<TreeSummary, CacheError> {
    use std::os::unix::fs::PermissionsExt;
    let mut lines = Vec::new();
    let mut files = 0u64;
    let mut bytes = 0u64;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let read = fs::read_dir(&dir).map_err(io_err("listing", &dir))?;
        for item in read {
            let item = item.map_err(io_err("listing", &dir))?;
            let path = item.path();
            let rel = path
                .strip_prefix(root)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            if rel == MANIFEST_FILE {
                continue;
            }
            let meta = fs::symlink_metadata(&path).map_err(io_err("reading", &path))?;
            let mode = meta.permissions().mode() & 0o7777;
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).map_err(io_err("reading", &path))?;
                lines.push(format!("l {rel} -> {}", target.display()));
            } else if meta.is_dir() {
                lines.push(format!("d {rel} {mode:o}"));
                stack.push(path);
            } else {
                files += 1;
                bytes += meta.len();
                lines.push(format!("f {rel} {} {mode:o}", meta.len()));
            }
        }
    }
    lines.sort();
    let mut listing = lines.join("\n");
    listing.push('\n');
    Ok(TreeSummary {
        files,
        bytes,
        sha256: sha256_hex(listing.as_bytes()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn source() -> Source {
        Source {
            registry: "npm".into(),
            package: "@scope/pkg".into(),
            version: "1.2.3".into(),
            integrity: Some("sha512-x".into()),
        }
    }

    fn install(cache: &AgentCache, name: &str, version: &str, body: &[u8]) -> CacheEntry {
        let staging = cache.staging(name, version).expect("staging");
        fs::create_dir_all(staging.path().join("bin")).expect("mkdir");
        fs::write(staging.path().join("bin/tool"), body).expect("write");
        cache
            .commit(staging, source(), "bin/tool", None)
            .expect("commit")
    }

    #[test]
    fn root_follows_the_documented_precedence() {
        let vars = |set: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                set.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        static ALL: [(&str, &str); 3] =
            [(CACHE_ENV, "/c"), ("XDG_CACHE_HOME", "/x"), ("HOME", "/h")];
        let all: &'static [(&str, &str)] = &ALL;
        assert_eq!(
            AgentCache::from_vars(vars(all)).expect("root").root(),
            Path::new("/c")
        );
        assert_eq!(
            AgentCache::from_vars(vars(&all[1..])).expect("root").root(),
            Path::new("/x/arbiter/agents")
        );
        assert_eq!(
            AgentCache::from_vars(vars(&all[2..])).expect("root").root(),
            Path::new("/h/.cache/arbiter/agents")
        );
        assert!(matches!(
            AgentCache::from_vars(vars(&[])),
            Err(CacheError::NoRoot)
        ));
    }

    #[test]
    fn commit_moves_a_complete_entry_into_place_and_leaves_no_staging() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = AgentCache::at(tmp.path());
        let entry = install(&cache, "codex", "1.0", b"#!/bin/sh\n");
        assert_eq!(entry.dir, tmp.path().join("codex/1.0"));
        assert_eq!(entry.manifest.files, 1);
        assert_eq!(entry.manifest.bytes, 10);
        let listed: Vec<String> = fs::read_dir(tmp.path().join("codex"))
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(listed, ["1.0"], "no staging or aside dirs remain");
        let found = cache.verify("codex", "1.0").expect("verifies");
        assert_eq!(found.manifest, entry.manifest);
        let on_disk: Manifest =
            serde_json::from_slice(&fs::read(entry.dir.join(MANIFEST_FILE)).expect("manifest"))
                .expect("parses");
        assert_eq!(on_disk.schema, MANIFEST_SCHEMA);
        assert_eq!(on_disk.source.package, "@scope/pkg");
    }

    #[test]
    fn a_dropped_staging_dir_leaves_nothing_behind() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = AgentCache::at(tmp.path());
        {
            let staging = cache.staging("aider", "0.1").expect("staging");
            fs::write(staging.path().join("half"), b"x").expect("write");
        }
        assert_eq!(
            fs::read_dir(tmp.path().join("aider")).expect("ls").count(),
            0
        );
        assert!(matches!(
            cache.lookup("aider", "0.1"),
            Err(CacheError::NotInstalled { .. })
        ));
    }

    #[test]
    fn missing_entry_error_names_the_install_command() {
        let cache = AgentCache::at("/nonexistent/cache");
        let err = cache.lookup("claude-code", "2.1.332").expect_err("missing");
        assert_eq!(
            err.to_string(),
            "claude-code 2.1.332 is not installed in the agent cache (/nonexistent/cache/claude-code/2.1.332); run: arbiter agents install claude-code@2.1.332"
        );
    }

    #[test]
    fn damage_is_detected_cheaply_or_by_the_listing() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = AgentCache::at(tmp.path());
        let entry = install(&cache, "mini-swe-agent", "2.4.6", b"python");
        // A truncated file passes the cheap lookup but not the listing check.
        fs::write(entry.dir.join("bin/tool"), b"py").expect("truncate");
        cache
            .lookup("mini-swe-agent", "2.4.6")
            .expect("cheap check");
        let err = cache
            .verify("mini-swe-agent", "2.4.6")
            .expect_err("damaged");
        assert!(
            err.to_string().contains("is damaged (its files differ"),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("arbiter agents install --force mini-swe-agent@2.4.6")
        );
        // A missing entry point fails the cheap check.
        fs::remove_file(entry.dir.join("bin/tool")).expect("rm");
        let err = cache
            .lookup("mini-swe-agent", "2.4.6")
            .expect_err("damaged");
        assert!(err.to_string().contains("(bin/tool is missing)"), "{err}");
        // A manifest for something else.
        fs::write(entry.dir.join(MANIFEST_FILE), b"{not json").expect("write");
        assert!(matches!(
            cache.lookup("mini-swe-agent", "2.4.6"),
            Err(CacheError::Damaged { .. })
        ));
    }

    #[test]
    fn reinstalling_replaces_the_entry_atomically() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = AgentCache::at(tmp.path());
        install(&cache, "codex", "1.0", b"old");
        let entry = install(&cache, "codex", "1.0", b"newer");
        assert_eq!(
            fs::read(entry.dir.join("bin/tool")).expect("read"),
            b"newer"
        );
        assert_eq!(
            fs::read_dir(tmp.path().join("codex")).expect("ls").count(),
            1
        );
        cache.verify("codex", "1.0").expect("verifies");
    }

    #[test]
    fn commit_refuses_a_staging_dir_without_the_entry_point() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = AgentCache::at(tmp.path());
        let staging = cache.staging("codex", "1.0").expect("staging");
        let err = cache
            .commit(staging, source(), "bin/codex", None)
            .expect_err("no entry point");
        assert!(
            err.to_string()
                .contains("the fetched files have no bin/codex")
        );
        assert!(!tmp.path().join("codex/1.0").exists());
    }

    #[test]
    fn listing_digest_sees_modes_and_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tmp");
        fs::write(tmp.path().join("a"), b"x").expect("write");
        let before = summarize_tree(tmp.path()).expect("sum");
        fs::set_permissions(tmp.path().join("a"), fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let chmodded = summarize_tree(tmp.path()).expect("sum");
        assert_ne!(before.sha256, chmodded.sha256);
        std::os::unix::fs::symlink("/usr/bin/python3", tmp.path().join("python")).expect("ln");
        let linked = summarize_tree(tmp.path()).expect("sum");
        assert_ne!(linked.sha256, chmodded.sha256);
        assert_eq!(linked.files, 1, "a symlink is not a file");
    }
}
