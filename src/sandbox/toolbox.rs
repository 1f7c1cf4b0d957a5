//! The harness toolbox (SPEC §5, "Harness commands"): a host directory holding a static
//! busybox, the static in-pod end of the Kubernetes backend's loopback relay
//! (`docker/toolbox/relay`) and a manifest, built by `docker/toolbox/build.sh` (scripts/bootstrap
//! runs it), bind-mounted read-only at [`TOOLBOX_MOUNT`] in every container arbiter creates (a
//! pod mounts it from ConfigMaps: sandbox/kubernetes/toolbox_maps.rs). Every
//! command arbiter itself runs in a container is `/.arbiter/toolbox/busybox <applet> …`
//! ([`toolbox_argv`]): never resolved through the container's `PATH` or shell, so it works in
//! an image with no shell and nothing the agent planted runs with the harness's authority.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::digest::sha256_hex;

/// Where the toolbox is mounted (read-only) in every container.
pub(crate) const TOOLBOX_MOUNT: &str = "/.arbiter/toolbox";
/// The toolbox layout this arbiter expects (`toolbox_version` in docker/toolbox/build.sh).
pub const TOOLBOX_VERSION: &str = "4";
/// Schema tag of the toolbox's `manifest.json`.
pub const TOOLBOX_SCHEMA: &str = "arbiter.toolbox.v1";
/// The static executables a toolbox must hold (each listed, executable, no `PT_INTERP`).
pub(crate) const TOOLBOX_EXECUTABLES: [&str; 2] = ["busybox", "relay"];
/// Environment variable naming a toolbox dir to use instead of the default.
pub const TOOLBOX_ENV: &str = "ARBITER_TOOLBOX";

const HINT: &str = "run scripts/bootstrap (or docker/toolbox/build.sh) to build it";

/// `argv` for a harness command: `/.arbiter/toolbox/busybox <applet> <args…>`.
pub(crate) fn toolbox_argv(applet: &str, args: &[&str]) -> Vec<String> {
    let mut argv = Vec::with_capacity(args.len() + 2);
    argv.push(format!("{TOOLBOX_MOUNT}/busybox"));
    argv.push(applet.to_string());
    argv.extend(args.iter().map(|a| a.to_string()));
    argv
}

/// The container's keep-alive entrypoint, from the toolbox: ignores TERM/INT/HUP, sleeps.
/// Every command inside the script is an absolute toolbox path (busybox's shell prefers its
/// own applets anyway, but nothing here relies on that).
pub(crate) fn keepalive_argv() -> Vec<String> {
    let script =
        format!("trap '' TERM INT HUP; while :; do {TOOLBOX_MOUNT}/busybox sleep 3600; done");
    toolbox_argv("sh", &["-c", &script])
}

/// A validated toolbox on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolbox {
    pub dir: PathBuf,
    /// sha256 of its busybox, as the manifest says and the file is.
    pub busybox_sha256: String,
    /// sha256 over every file's name and sha256: the same id, the same toolbox (what the
    /// Kubernetes backend names its toolbox ConfigMaps by).
    pub content_sha256: String,
}

impl Toolbox {
    /// The bind for `HostConfig.binds`: `<dir>:/.arbiter/toolbox:ro`.
    pub fn bind(&self) -> String {
        format!("{}:{TOOLBOX_MOUNT}:ro", self.dir.display())
    }
}

/// Why the toolbox cannot be used. Every message says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum ToolboxError {
    #[error("harness toolbox not found at {dir}; {HINT}")]
    Missing { dir: PathBuf },
    #[error("harness toolbox: cannot read {path}: {source}; {HINT}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("harness toolbox: {path}: {message}; {HINT}")]
    Manifest { path: PathBuf, message: String },
    #[error(
        "harness toolbox at {dir} is version {found}, this arbiter needs {TOOLBOX_VERSION}; {HINT}"
    )]
    Version { dir: PathBuf, found: String },
    #[error("harness toolbox: {path} does not match its manifest ({problem}); {HINT}")]
    Mismatch { path: PathBuf, problem: String },
    #[error(
        "harness toolbox: {path} is dynamically linked (it must run in an image without a libc); {HINT}"
    )]
    NotStatic { path: PathBuf },
    #[error("harness toolbox: {path} is not in its manifest; {HINT}")]
    Unlisted { path: PathBuf },
}

#[derive(Debug, Deserialize)]
struct Manifest {
    schema: String,
    version: String,
    files: Vec<ManifestFile>,
}

#[derive(Debug, Deserialize)]
struct ManifestFile {
    path: String,
    sha256: String,
    size: u64,
}

/// Find and validate the toolbox: `$ARBITER_TOOLBOX` if set, else
/// `${XDG_CACHE_HOME:-$HOME/.cache}/arbiter/toolbox/<TOOLBOX_VERSION>/`.
pub fn locate_toolbox() -> Result<Toolbox, ToolboxError> {
    let dir = default_dir(|k| std::env::var_os(k).map(PathBuf::from));
    validate_toolbox(&dir)
}

/// The toolbox dir chosen from the environment (`lookup` reads a variable).
pub(crate) fn default_dir(lookup: impl Fn(&str) -> Option<PathBuf>) -> PathBuf {
    let non_empty = |k: &str| lookup(k).filter(|p| !p.as_os_str().is_empty());
    if let Some(dir) = non_empty(TOOLBOX_ENV) {
        return dir;
    }
    let cache = non_empty("XDG_CACHE_HOME")
        .or_else(|| non_empty("HOME").map(|h| h.join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    cache.join("arbiter/toolbox").join(TOOLBOX_VERSION)
}

/// Check a toolbox dir: its manifest (schema, version), every listed file present, a
/// regular file, of the listed size and sha256, nothing unlisted, `busybox` listed,
/// executable and statically linked.
pub fn validate_toolbox(dir: &Path) -> Result<Toolbox, ToolboxError> {
    if !dir.is_dir() {
        return Err(ToolboxError::Missing {
            dir: dir.to_path_buf(),
        });
    }
    let manifest_path = dir.join("manifest.json");
    let bytes = std::fs::read(&manifest_path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ToolboxError::Missing {
            dir: dir.to_path_buf(),
        },
        _ => ToolboxError::Io {
            path: manifest_path.clone(),
            source,
        },
    })?;
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| ToolboxError::Manifest {
            path: manifest_path.clone(),
            message: format!("not a toolbox manifest: {e}"),
        })?;
    if manifest.schema != TOOLBOX_SCHEMA {
        return Err(ToolboxError::Manifest {
            path: manifest_path,
            message: format!("schema {:?}, expected {TOOLBOX_SCHEMA:?}", manifest.schema),
        });
    }
    if manifest.version != TOOLBOX_VERSION {
        return Err(ToolboxError::Version {
            dir: dir.to_path_buf(),
            found: manifest.version,
        });
    }
    let mut busybox_sha256 = None;
    for file in &manifest.files {
        let ok_name = !file.path.is_empty()
            && !file.path.contains('/')
            && file.path != "."
            && file.path != ".."
            && file.path != "manifest.json";
        if !ok_name {
            return Err(ToolboxError::Manifest {
                path: manifest_path,
                message: format!("bad file name {:?}", file.path),
            });
        }
        let path = dir.join(&file.path);
        let io = |source| ToolboxError::Io {
            path: path.clone(),
            source,
        };
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ToolboxError::Mismatch {
                    path,
                    problem: "missing".into(),
                });
            }
            Err(e) => return Err(io(e)),
        };
        if !meta.is_file() {
            return Err(ToolboxError::Mismatch {
                path,
                problem: "not a regular file".into(),
            });
        }
        if meta.len() != file.size {
            return Err(ToolboxError::Mismatch {
                path,
                problem: format!("{} bytes, manifest says {}", meta.len(), file.size),
            });
        }
        let content = std::fs::read(&path).map_err(io)?;
        let got = sha256_hex(&content);
        if !got.eq_ignore_ascii_case(&file.sha256) {
            return Err(ToolboxError::Mismatch {
                path,
                problem: format!("sha256 {got}, manifest says {}", file.sha256),
            });
        }
        if TOOLBOX_EXECUTABLES.contains(&file.path.as_str()) {
            use std::os::unix::fs::PermissionsExt;
            if meta.permissions().mode() & 0o111 == 0 {
                return Err(ToolboxError::Mismatch {
                    path,
                    problem: "not executable".into(),
                });
            }
            if !is_static_elf(&content) {
                return Err(ToolboxError::NotStatic { path });
            }
            if file.path == "busybox" {
                busybox_sha256 = Some(got.clone());
            }
        }
    }
    let busybox_sha256 = busybox_sha256.ok_or_else(|| ToolboxError::Manifest {
        path: manifest_path.clone(),
        message: "lists no busybox".into(),
    })?;
    if let Some(name) = TOOLBOX_EXECUTABLES
        .iter()
        .find(|name| !manifest.files.iter().any(|f| f.path == **name))
    {
        return Err(ToolboxError::Manifest {
            path: manifest_path,
            message: format!("lists no {name}"),
        });
    }
    let mut listed: Vec<String> = manifest
        .files
        .iter()
        .map(|f| format!("{} {}\n", f.path, f.sha256.to_ascii_lowercase()))
        .collect();
    listed.sort();
    let content_sha256 = sha256_hex(listed.concat().as_bytes());
    let entries = std::fs::read_dir(dir).map_err(|source| ToolboxError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| ToolboxError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name != "manifest.json" && !manifest.files.iter().any(|f| f.path == name) {
            return Err(ToolboxError::Unlisted { path: entry.path() });
        }
    }
    Ok(Toolbox {
        dir: dir.to_path_buf(),
        busybox_sha256,
        content_sha256,
    })
}

/// An ELF executable with no `PT_INTERP` program header (no dynamic loader needed).
/// 32- and 64-bit, either byte order.
fn is_static_elf(bytes: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    if bytes.len() < 0x34 || &bytes[..4] != b"\x7fELF" {
        return false;
    }
    let wide = match bytes[4] {
        1 => false,
        2 => true,
        _ => return false,
    };
    let little = match bytes[5] {
        1 => true,
        2 => false,
        _ => return false,
    };
    let read = |at: usize, len: usize| -> Option<u64> {
        let slice = bytes.get(at..at + len)?;
        let mut v: u64 = 0;
        for i in 0..len {
            let b = if little { slice[len - 1 - i] } else { slice[i] };
            v = (v << 8) | u64::from(b);
        }
        Some(v)
    };
    let (phoff, phentsize, phnum) = if wide {
        (read(0x20, 8), read(0x36, 2), read(0x38, 2))
    } else {
        (read(0x1c, 4), read(0x2a, 2), read(0x2c, 2))
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (phoff, phentsize, phnum) else {
        return false;
    };
    for i in 0..phnum {
        let Some(at) = phoff
            .checked_add(i * phentsize)
            .and_then(|a| usize::try_from(a).ok())
        else {
            return false;
        };
        match read(at, 4) {
            Some(t) if t as u32 == PT_INTERP => return false,
            Some(_) => {}
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_runs_the_applet_by_absolute_path() {
        assert_eq!(
            toolbox_argv("sh", &["-c", "echo ok"]),
            ["/.arbiter/toolbox/busybox", "sh", "-c", "echo ok"]
        );
        let keepalive = keepalive_argv();
        assert_eq!(keepalive[..3], ["/.arbiter/toolbox/busybox", "sh", "-c"]);
        assert!(keepalive[3].contains("/.arbiter/toolbox/busybox sleep 3600"));
    }

    #[test]
    fn build_script_builds_the_version_this_code_expects() {
        let script = include_str!("../../docker/toolbox/build.sh");
        assert!(script.contains(&format!("\ntoolbox_version={TOOLBOX_VERSION}\n")));
        assert!(script.contains(&format!("\ntoolbox_schema={TOOLBOX_SCHEMA}\n")));
    }

    #[test]
    fn default_dir_prefers_the_override_then_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| PathBuf::from(v))
            }
        };
        assert_eq!(
            default_dir(env(&[("ARBITER_TOOLBOX", "/opt/tb"), ("HOME", "/h")])),
            PathBuf::from("/opt/tb")
        );
        assert_eq!(
            default_dir(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            PathBuf::from(format!("/x/arbiter/toolbox/{TOOLBOX_VERSION}"))
        );
        assert_eq!(
            default_dir(env(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")])),
            PathBuf::from(format!("/h/.cache/arbiter/toolbox/{TOOLBOX_VERSION}"))
        );
    }

    /// A minimal ELF64 LE header with one program header of type `ptype`.
    fn elf64(ptype: u32) -> Vec<u8> {
        let mut b = vec![0u8; 0x40 + 0x38];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        b[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        b[0x40..0x44].copy_from_slice(&ptype.to_le_bytes());
        b
    }

    #[test]
    fn static_elf_detection() {
        assert!(is_static_elf(&elf64(1)));
        assert!(!is_static_elf(&elf64(3)));
        assert!(!is_static_elf(b"#!/bin/sh\necho hi\n"));
        let mut truncated = elf64(1);
        truncated.truncate(0x42);
        assert!(!is_static_elf(&truncated));
    }

    fn write_toolbox(dir: &Path, busybox: &[u8], version: &str) {
        use std::os::unix::fs::PermissionsExt;
        let relay = elf64(1);
        let mut files = Vec::new();
        for (name, bytes) in [("busybox", busybox), ("relay", &relay[..])] {
            let bin = dir.join(name);
            std::fs::write(&bin, bytes).unwrap();
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
            files.push(
                serde_json::json!({"path": name, "sha256": sha256_hex(bytes), "size": bytes.len()}),
            );
        }
        let manifest = serde_json::json!({
            "schema": TOOLBOX_SCHEMA,
            "version": version,
            "files": files,
        });
        std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    }

    #[test]
    fn a_good_toolbox_validates_and_binds_read_only() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = elf64(1);
        write_toolbox(tmp.path(), &bin, TOOLBOX_VERSION);
        let tb = validate_toolbox(tmp.path()).unwrap();
        assert_eq!(tb.busybox_sha256, sha256_hex(&bin));
        assert_eq!(
            tb.bind(),
            format!("{}:/.arbiter/toolbox:ro", tmp.path().display())
        );
    }

    #[test]
    fn every_broken_toolbox_is_refused_with_the_fix() {
        type Breaker = fn(&Path);
        let cases: &[(&str, Breaker, &str)] = &[
            (
                "missing dir",
                |d| std::fs::remove_dir_all(d).unwrap(),
                "not found",
            ),
            (
                "no manifest",
                |d| std::fs::remove_file(d.join("manifest.json")).unwrap(),
                "not found",
            ),
            (
                "garbage manifest",
                |d| std::fs::write(d.join("manifest.json"), "{").unwrap(),
                "not a toolbox manifest",
            ),
            (
                "tampered busybox",
                |d| {
                    let mut b = std::fs::read(d.join("busybox")).unwrap();
                    let last = b.len() - 1;
                    b[last] ^= 1;
                    std::fs::write(d.join("busybox"), b).unwrap();
                },
                "sha256",
            ),
            (
                "extra file",
                |d| std::fs::write(d.join("sh"), "x").unwrap(),
                "not in its manifest",
            ),
            (
                "old version",
                |d| write_toolbox(d, &elf64(1), "0"),
                "is version 0",
            ),
            (
                "dynamic busybox",
                |d| write_toolbox(d, &elf64(3), TOOLBOX_VERSION),
                "dynamically linked",
            ),
            (
                "dynamic relay",
                |d| {
                    let manifest = std::fs::read_to_string(d.join("manifest.json")).unwrap();
                    let old = sha256_hex(&elf64(1));
                    let dynamic = elf64(3);
                    std::fs::write(d.join("relay"), &dynamic).unwrap();
                    // Only the relay's entry (the second `old`) names the new digest.
                    let at = manifest.rfind(&old).unwrap();
                    let mut m = manifest.clone();
                    m.replace_range(at..at + old.len(), &sha256_hex(&dynamic));
                    std::fs::write(d.join("manifest.json"), m).unwrap();
                },
                "relay is dynamically linked",
            ),
            (
                "no relay (a version 1 layout)",
                |d| {
                    let manifest = std::fs::read_to_string(d.join("manifest.json")).unwrap();
                    let mut v: serde_json::Value = serde_json::from_str(&manifest).unwrap();
                    v["files"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|f| f["path"] == "busybox");
                    std::fs::write(d.join("manifest.json"), v.to_string()).unwrap();
                    std::fs::remove_file(d.join("relay")).unwrap();
                },
                "lists no relay",
            ),
        ];
        for (name, breaker, want) in cases {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tmp.path().join("tb");
            std::fs::create_dir(&dir).unwrap();
            write_toolbox(&dir, &elf64(1), TOOLBOX_VERSION);
            breaker(&dir);
            let err = validate_toolbox(&dir).unwrap_err().to_string();
            assert!(err.contains(want), "{name}: {err}");
            assert!(err.contains("run scripts/bootstrap"), "{name}: {err}");
        }
    }
}
