//! `arbiter agents install NAME[@VERSION]`: fetch a preset agent into the host cache.
//!
//! - Claude Code and Codex: `npm pack <package>@<version>` on the host (no node runtime is
//!   needed to run them), then the ELF (Codex: its vendor directory, minus the voice host) is
//!   taken out of the tarball.
//! - mini-swe-agent and aider: wheels fetched on the host with `pip download` for the Python
//!   of the image the venv is built in (default `arbiter/debian:bookworm`), then a venv built
//!   inside a container of that image with network `none`, at the very path it is mounted at
//!   in task containers (`/opt/arbiter/agents/<name>`, a bind mount of the staging directory),
//!   and precompiled to bytecode (a read-only mount cannot cache `.pyc` files).
//!
//! Every entry is staged in a temporary directory and renamed into place (see
//! [`super::cache`]); an entry that verifies is left alone (idempotent), a damaged one is
//! fetched again.
//!
//! Over 600 lines: two install paths (npm tarballs, Python venvs built in a container) with their checks and tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::cache::{AgentCache, CacheEntry, CacheError, PythonInfo, Source, mount_point};
use super::presets::{PresetKind, Registry, claude_code, codex};
use crate::sandbox::{
    Base, ContainerLimits, ContainerSpec, ExecEnd, ExecSpec, ImageRef, Mount, Network, Owner,
    Resource, Role, Sandbox, SandboxError,
};

/// Image the Python venvs are built in unless told otherwise.
pub const DEFAULT_PYTHON_IMAGE: &str = "arbiter/debian:bookworm";
/// Label on the short-lived venv build container.
pub const LABEL_PURPOSE: &str = "arbiter.purpose";
const HOST_COMMAND_TIMEOUT: Duration = Duration::from_secs(30 * 60);
const VENV_BUILD_TIMEOUT: Duration = Duration::from_secs(20 * 60);

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{spec:?} is not an agent preset (expected one of: {known})")]
    UnknownAgent { spec: String, known: String },
    #[error("{spec:?}: the version after `@` is empty")]
    EmptyVersion { spec: String },
    #[error("running `{command}`: {source} (is it installed and on PATH?)")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` {how}{tail}")]
    Command {
        command: String,
        how: String,
        tail: String,
    },
    #[error("npm pack printed no package description: {0}")]
    NpmOutput(String),
    #[error("{path} from {package} is not an ELF executable")]
    NotElf { package: String, path: String },
    #[error("{image} has Python {found}; {agent} needs Python 3.10 or newer in the task image")]
    PythonTooOld {
        image: String,
        found: String,
        agent: String,
    },
    #[error("building the {agent} venv in {image}: {message} (output in {log})")]
    Venv {
        agent: String,
        image: String,
        message: String,
        log: PathBuf,
    },
    #[error(
        "{agent}: only linux x86_64 builds are wired (this host is {platform}); task containers run them under the same architecture"
    )]
    Platform { agent: String, platform: String },
    #[error("{agent} is a Python venv built inside a container: it needs a container engine")]
    NoEngine { agent: String },
    #[error("the container engine: {0}")]
    Engine(#[from] SandboxError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `NAME[@VERSION]` → kind and version (default: the pinned one).
pub fn parse_spec(spec: &str) -> Result<(PresetKind, String), InstallError> {
    let (name, version) = match spec.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (spec, None),
    };
    let kind = PresetKind::from_name(name).ok_or_else(|| InstallError::UnknownAgent {
        spec: spec.to_string(),
        known: PresetKind::ALL.map(|k| k.name()).join(", "),
    })?;
    let version = match version {
        Some("") => {
            return Err(InstallError::EmptyVersion {
                spec: spec.to_string(),
            });
        }
        Some(v) => v.to_string(),
        None => kind.pinned_version().to_string(),
    };
    super::presets::validate(
        kind,
        &super::PresetAgent {
            version: Some(version.clone()),
            ..super::PresetAgent::default()
        },
    )
    .map_err(|e| InstallError::UnknownAgent {
        spec: spec.to_string(),
        known: e.message,
    })?;
    Ok((kind, version))
}

/// What `install` did.
#[derive(Debug)]
pub enum Installed {
    /// A verified entry was already there; nothing fetched.
    Present(CacheEntry),
    /// Fetched (the previous entry, if any, was damaged or `--force` replaced it).
    Fetched {
        entry: CacheEntry,
        replaced: Option<String>,
    },
}

/// Options of one install.
#[derive(Debug, Clone)]
pub struct InstallOptions {
    /// Fetch again even when a verified entry exists.
    pub force: bool,
    /// Image whose Python the venvs are built for (Python agents only).
    pub python_image: String,
}

impl Default for InstallOptions {
    fn default() -> Self {
        InstallOptions {
            force: false,
            python_image: DEFAULT_PYTHON_IMAGE.to_string(),
        }
    }
}

/// Whether `kind@version` must be fetched: `Ok(entry)` when a verified entry exists (and
/// `force` is off), `Err(reason)` with why it must be fetched otherwise.
pub fn existing(
    cache: &AgentCache,
    kind: PresetKind,
    version: &str,
    force: bool,
) -> Result<CacheEntry, Option<String>> {
    match cache.verify(kind.name(), version) {
        Ok(entry) if !force => Ok(entry),
        Ok(_) => Err(Some("--force".to_string())),
        Err(CacheError::NotInstalled { .. }) => Err(None),
        Err(e) => Err(Some(e.to_string())),
    }
}

/// Install `kind@version` into `cache` unless a verified entry is there. Python agents need
/// `sandbox` (a container engine); npm agents never touch it.
pub async fn install<S: Sandbox + ?Sized>(
    cache: &AgentCache,
    kind: PresetKind,
    version: &str,
    options: &InstallOptions,
    sandbox: Option<&S>,
) -> Result<Installed, InstallError> {
    if std::env::consts::ARCH != "x86_64" || std::env::consts::OS != "linux" {
        return Err(InstallError::Platform {
            agent: kind.name().to_string(),
            platform: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        });
    }
    let replaced = match existing(cache, kind, version, options.force) {
        Ok(entry) => return Ok(Installed::Present(entry)),
        Err(why) => why,
    };
    if let Some(why) = &replaced {
        tracing::warn!(agent = kind.name(), version, "fetching again: {why}");
    }
    let entry = match kind.source(version).registry {
        Registry::Npm => install_npm(cache, kind, version).await?,
        Registry::Pypi => {
            let Some(sandbox) = sandbox else {
                return Err(InstallError::NoEngine {
                    agent: kind.name().to_string(),
                });
            };
            install_pypi(cache, kind, version, &options.python_image, sandbox).await?
        }
    };
    Ok(Installed::Fetched { entry, replaced })
}

/// Run a host command to completion; its stdout on success.
async fn run_host(program: &str, args: &[&str], cwd: &Path) -> Result<Vec<u8>, InstallError> {
    let command = format!("{program} {}", args.join(" "));
    tracing::info!("running {command}");
    let child = tokio::process::Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| InstallError::Spawn {
            command: command.clone(),
            source,
        })?;
    let out = match tokio::time::timeout(HOST_COMMAND_TIMEOUT, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(source)) => return Err(InstallError::Spawn { command, source }),
        Err(_) => {
            return Err(InstallError::Command {
                command,
                how: format!("did not finish in {} s", HOST_COMMAND_TIMEOUT.as_secs()),
                tail: String::new(),
            });
        }
    };
    if !out.status.success() {
        return Err(InstallError::Command {
            command,
            how: format!("failed ({})", out.status),
            tail: tail_of(&out.stderr),
        });
    }
    Ok(out.stdout)
}

/// `: <last line of output>` for error messages (one line), or nothing.
fn tail_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| format!(": {l}"))
        .unwrap_or_default()
}

/// The `filename` and `integrity` of `npm pack --json` output.
pub(crate) fn parse_npm_pack(stdout: &[u8]) -> Result<(String, Option<String>), InstallError> {
    let text = String::from_utf8_lossy(stdout);
    // npm may print lifecycle noise before the JSON array.
    let start = text.find('[').unwrap_or(0);
    let value: serde_json::Value = serde_json::from_str(&text[start..])
        .map_err(|e| InstallError::NpmOutput(format!("{e}")))?;
    let first = value
        .as_array()
        .and_then(|a| a.first())
        .ok_or_else(|| InstallError::NpmOutput("an empty list".to_string()))?;
    let filename = first["filename"]
        .as_str()
        .ok_or_else(|| InstallError::NpmOutput("no filename".to_string()))?;
    // Scoped packages are packed as `scope-name-version.tgz`, never with a path.
    if filename.contains('/') || filename.contains("..") {
        return Err(InstallError::NpmOutput(format!(
            "odd filename {filename:?}"
        )));
    }
    Ok((
        filename.to_string(),
        first["integrity"].as_str().map(str::to_string),
    ))
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

async fn install_npm(
    cache: &AgentCache,
    kind: PresetKind,
    version: &str,
) -> Result<CacheEntry, InstallError> {
    let source = kind.source(version);
    let staging = cache.staging(kind.name(), version)?;
    let work = download_dir(cache)?;
    let spec = format!("{}@{}", source.package, source.version);
    let dest = work.path().to_string_lossy().into_owned();
    let out = run_host(
        "npm",
        &["pack", &spec, "--json", "--pack-destination", &dest],
        work.path(),
    )
    .await?;
    let (filename, integrity) = parse_npm_pack(&out)?;
    let tarball = work.path().join(&filename).to_string_lossy().into_owned();
    let into = staging.path().to_string_lossy().into_owned();
    match kind {
        PresetKind::ClaudeCode => {
            let strip = claude_code::TARBALL_BINARY.matches('/').count().to_string();
            let bin = staging.path().join("bin");
            std::fs::create_dir_all(&bin).map_err(|source| InstallError::Io {
                action: "creating",
                path: bin.clone(),
                source,
            })?;
            let bin_s = bin.to_string_lossy().into_owned();
            run_host(
                "tar",
                &[
                    "-xzf",
                    &tarball,
                    "-C",
                    &bin_s,
                    "--strip-components",
                    &strip,
                    claude_code::TARBALL_BINARY,
                ],
                work.path(),
            )
            .await?;
        }
        PresetKind::Codex => {
            let strip = (codex::TARBALL_DIR.matches('/').count() + 1).to_string();
            let mut args = vec![
                "-xzf".to_string(),
                tarball.clone(),
                "-C".to_string(),
                into.clone(),
                "--strip-components".to_string(),
                strip,
            ];
            for skip in codex::TARBALL_SKIP {
                args.push(format!("--exclude={}/{skip}", codex::TARBALL_DIR));
            }
            args.push(codex::TARBALL_DIR.to_string());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_host("tar", &args, work.path()).await?;
        }
        PresetKind::MiniSweAgent | PresetKind::Aider => {
            unreachable!("Python agents are not npm packages")
        }
    }
    let entry_point = staging.path().join(kind.entry_point());
    if !is_elf(&entry_point) {
        return Err(InstallError::NotElf {
            package: spec,
            path: kind.entry_point().to_string(),
        });
    }
    let entry = cache.commit(
        staging,
        Source {
            registry: "npm".to_string(),
            package: source.package,
            version: source.version,
            integrity,
        },
        kind.entry_point(),
        None,
    )?;
    Ok(entry)
}

/// pip's platform tags for a manylinux x86_64 glibc image (the task images arbiter builds
/// and the common `python:*` / Debian / Ubuntu ones).
const PIP_PLATFORMS: &[&str] = &[
    "manylinux_2_36_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
];

/// `pip download` arguments fetching `package==version` (and pip itself, to install from)
/// as wheels for CPython `python` (`3.11`).
pub(crate) fn pip_download_args(
    dest: &str,
    package: &str,
    version: &str,
    python: &str,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--dest",
        dest,
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        python,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for platform in PIP_PLATFORMS {
        args.extend(["--platform".to_string(), platform.to_string()]);
    }
    args.push(format!("{package}=={version}"));
    args.push("pip".to_string());
    args
}

/// The shell script that builds the venv at `root` from the wheels at `/wheels`.
pub(crate) fn venv_script(root: &str, package: &str, version: &str) -> String {
    format!(
        "set -eu\n\
         python3 -m venv --without-pip {root}\n\
         pip_wheel=$(ls /wheels/pip-*.whl | head -n 1)\n\
         {root}/bin/python \"$pip_wheel/pip\" install --no-index --find-links /wheels \
         --no-cache-dir --disable-pip-version-check --no-warn-script-location '{package}=={version}'\n\
         {root}/bin/python -m compileall -q -j 0 {root}/lib >/dev/null 2>&1 || true\n\
         chmod -R a+rX {root}\n"
    )
}

async fn install_pypi<S: Sandbox + ?Sized>(
    cache: &AgentCache,
    kind: PresetKind,
    version: &str,
    image: &str,
    sandbox: &S,
) -> Result<CacheEntry, InstallError> {
    let source = kind.source(version);
    let staging = cache.staging(kind.name(), version)?;
    let work = download_dir(cache)?;
    let wheels = work.path().join("wheels");
    let logs = work.path().join("logs");
    for dir in [&wheels, &logs] {
        std::fs::create_dir_all(dir).map_err(|source| InstallError::Io {
            action: "creating",
            path: dir.clone(),
            source,
        })?;
    }
    let root = mount_point(kind.name());
    let spec = ContainerSpec {
        base: Base::Image(ImageRef::new(image)),
        owner: Owner {
            job: "agent-install".to_string(),
            trial: kind.name().to_string(),
            role: Role::Agent,
            extra: BTreeMap::from([(LABEL_PURPOSE.to_string(), "agent-install".to_string())]),
        },
        env: Vec::new(),
        limits: ContainerLimits {
            cpus: 2.0,
            memory_mb: 4096,
            pids_limit: 4096,
            gpus: 0,
            storage_mb: None,
        },
        network: Network::None,
        workdir: None,
        mounts: vec![
            Mount {
                host: wheels.clone(),
                container: "/wheels".to_string(),
                read_only: true,
            },
            Mount {
                host: staging.path().to_path_buf(),
                container: root.clone(),
                read_only: false,
            },
        ],
        start: crate::sandbox::StartSpec::default(),
    };
    let id = sandbox.create(&spec).await?;
    let result = async {
        sandbox.start(&id).await?;
        let exec = |argv: Vec<String>, name: &str, timeout: Duration| ExecSpec {
            argv,
            env: vec![("PYTHONDONTWRITEBYTECODE".to_string(), String::new())],
            user: Some("0".to_string()),
            workdir: None,
            stdout: Some(logs.join(format!("{name}.stdout.log"))),
            stderr: Some(logs.join(format!("{name}.stderr.log"))),
            cap_bytes: 4 * 1024 * 1024,
            timeout: Some(timeout),
            grace: Duration::from_secs(2),
        };
        let venv_err = |message: String, log: &str| InstallError::Venv {
            agent: kind.name().to_string(),
            image: image.to_string(),
            message,
            log: logs.join(log),
        };
        let probe = exec(
            vec![
                "python3".to_string(),
                "-c".to_string(),
                "import sys; print('%d.%d' % sys.version_info[:2])".to_string(),
            ],
            "python",
            Duration::from_secs(60),
        );
        let out = sandbox.exec(&id, &probe).await?;
        if out.end != ExecEnd::Exited(0) {
            return Err(venv_err(
                "python3 does not run in the image".to_string(),
                "python.stderr.log",
            ));
        }
        let found = std::fs::read_to_string(logs.join("python.stdout.log"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let minor: Option<u32> = found.strip_prefix("3.").and_then(|m| m.parse().ok());
        if minor.is_none_or(|m| m < 10) {
            return Err(InstallError::PythonTooOld {
                image: image.to_string(),
                found,
                agent: kind.name().to_string(),
            });
        }
        let dest = wheels.to_string_lossy().into_owned();
        let args = pip_download_args(&dest, &source.package, &source.version, &found);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_host("python3", &args, work.path()).await?;
        let build = exec(
            vec![
                "sh".to_string(),
                "-c".to_string(),
                venv_script(&root, &source.package, &source.version),
            ],
            "venv",
            VENV_BUILD_TIMEOUT,
        );
        let out = sandbox.exec(&id, &build).await?;
        if out.end == ExecEnd::TimedOut {
            return Err(venv_err(
                format!("timed out after {} s", VENV_BUILD_TIMEOUT.as_secs()),
                "venv.stderr.log",
            ));
        }
        if out.end != ExecEnd::Exited(0) {
            let stderr = std::fs::read(logs.join("venv.stderr.log")).unwrap_or_default();
            return Err(venv_err(
                format!("exited with {:?}{}", out.end.exit_code(), tail_of(&stderr)),
                "venv.stderr.log",
            ));
        }
        Ok(found)
    }
    .await;
    if let Err(e) = sandbox.remove(&Resource::Container(id.clone())).await {
        tracing::warn!("removing the venv build container {id}: {e}");
    }
    let found = match result {
        Ok(found) => found,
        Err(e) => {
            // Keep the logs the error points at.
            let kept = work.keep();
            tracing::warn!("install logs kept in {}", kept.display());
            return Err(e);
        }
    };
    let interpreter = venv_interpreter(&staging.path().join("bin"));
    let integrity = wheel_digest(&wheels)?;
    let entry = cache.commit(
        staging,
        Source {
            registry: "pypi".to_string(),
            package: source.package,
            version: source.version,
            integrity: Some(integrity),
        },
        kind.entry_point(),
        Some(PythonInfo {
            interpreter,
            version: found,
        }),
    )?;
    Ok(entry)
}

/// The interpreter a venv's `bin/python` ends at (following links inside `bin/`, which the
/// host cannot resolve past: the target is a path in the build image).
fn venv_interpreter(bin: &Path) -> String {
    let mut name = PathBuf::from("python");
    for _ in 0..8 {
        match std::fs::read_link(bin.join(&name)) {
            Ok(target) if target.is_absolute() => return target.to_string_lossy().into_owned(),
            Ok(target) => name = target,
            Err(_) => break,
        }
    }
    name.to_string_lossy().into_owned()
}

/// `sha256:` over the sorted `name sha256` lines of the fetched wheels.
fn wheel_digest(dir: &Path) -> Result<String, InstallError> {
    let io = |source| InstallError::Io {
        action: "reading",
        path: dir.to_path_buf(),
        source,
    };
    let mut lines = Vec::new();
    for item in std::fs::read_dir(dir).map_err(io)? {
        let path = item.map_err(io)?.path();
        let bytes = std::fs::read(&path).map_err(io)?;
        lines.push(format!(
            "{} {}",
            path.file_name().unwrap_or_default().to_string_lossy(),
            crate::digest::sha256_hex(&bytes)
        ));
    }
    lines.sort();
    Ok(format!(
        "sha256:{}",
        crate::digest::sha256_hex(lines.join("\n").as_bytes())
    ))
}

/// A scratch directory for downloads, inside the cache (so the final rename stays on one
/// filesystem); removed when dropped.
fn download_dir(cache: &AgentCache) -> Result<tempfile::TempDir, InstallError> {
    tempfile::Builder::new()
        .prefix(".download-")
        .tempdir_in(cache.root())
        .map_err(|source| InstallError::Io {
            action: "creating a download directory in",
            path: cache.root().to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_pinned_defaults() {
        let (kind, version) = parse_spec("claude-code").expect("parses");
        assert_eq!(kind, PresetKind::ClaudeCode);
        assert_eq!(version, "2.1.332");
        let (kind, version) = parse_spec("aider@0.85.0").expect("parses");
        assert_eq!((kind, version.as_str()), (PresetKind::Aider, "0.85.0"));
        assert_eq!(
            parse_spec("claude").expect_err("unknown").to_string(),
            "\"claude\" is not an agent preset (expected one of: claude-code, codex, mini-swe-agent, aider)"
        );
        assert_eq!(
            parse_spec("codex@").expect_err("empty").to_string(),
            "\"codex@\": the version after `@` is empty"
        );
        assert!(parse_spec("codex@../../etc").is_err());
    }

    #[test]
    fn npm_pack_json_is_read_past_noise() {
        let out = br#"npm notice
[
  {
    "id": "@openai/codex@0.171.0-linux-x64",
    "name": "@openai/codex",
    "version": "0.171.0-linux-x64",
    "filename": "openai-codex-0.171.0-linux-x64.tgz",
    "integrity": "sha512-abc"
  }
]"#;
        let (file, integrity) = parse_npm_pack(out).expect("parses");
        assert_eq!(file, "openai-codex-0.171.0-linux-x64.tgz");
        assert_eq!(integrity.as_deref(), Some("sha512-abc"));
        assert!(parse_npm_pack(b"[]").is_err());
        assert!(parse_npm_pack(br#"[{"filename":"../x.tgz"}]"#).is_err());
    }

    #[test]
    fn pip_download_asks_for_wheels_of_the_image_python() {
        let args = pip_download_args("/w", "aider-chat", "0.86.2", "3.11");
        let joined = args.join(" ");
        assert!(joined.starts_with("-m pip download"));
        assert!(joined.contains("--only-binary=:all: --implementation cp --python-version 3.11"));
        assert!(joined.contains("--platform manylinux2014_x86_64"));
        assert!(joined.ends_with("aider-chat==0.86.2 pip"));
    }

    #[test]
    fn venv_is_built_at_its_mount_point_offline_and_precompiled() {
        let script = venv_script("/opt/arbiter/agents/aider", "aider-chat", "0.86.2");
        assert!(script.contains("python3 -m venv --without-pip /opt/arbiter/agents/aider"));
        assert!(script.contains("--no-index --find-links /wheels"));
        assert!(script.contains("'aider-chat==0.86.2'"));
        assert!(script.contains("-m compileall"));
    }

    #[test]
    fn a_verified_entry_is_not_fetched_again_and_a_damaged_one_is() {
        let tmp = tempfile::tempdir().expect("tmp");
        let cache = AgentCache::at(tmp.path());
        assert_eq!(
            existing(&cache, PresetKind::Codex, "1.0", false).map(|_| ()),
            Err(None)
        );
        let staging = cache.staging("codex", "1.0").expect("staging");
        std::fs::create_dir_all(staging.path().join("bin")).expect("mkdir");
        std::fs::write(staging.path().join("bin/codex"), b"\x7fELF....").expect("write");
        let source = Source {
            registry: "npm".into(),
            package: "@openai/codex".into(),
            version: "1.0-linux-x64".into(),
            integrity: None,
        };
        cache
            .commit(staging, source, "bin/codex", None)
            .expect("commit");
        assert!(existing(&cache, PresetKind::Codex, "1.0", false).is_ok());
        assert_eq!(
            existing(&cache, PresetKind::Codex, "1.0", true).map(|_| ()),
            Err(Some("--force".into()))
        );
        std::fs::write(tmp.path().join("codex/1.0/bin/codex"), b"\x7fELF").expect("truncate");
        let why = existing(&cache, PresetKind::Codex, "1.0", false)
            .map(|_| ())
            .expect_err("damaged")
            .expect("reason");
        assert!(why.contains("damaged"), "{why}");
    }

    #[test]
    fn venv_interpreter_follows_links_inside_bin() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::os::unix::fs::symlink("/usr/bin/python3", tmp.path().join("python3")).expect("ln");
        std::os::unix::fs::symlink("python3", tmp.path().join("python")).expect("ln");
        assert_eq!(venv_interpreter(tmp.path()), "/usr/bin/python3");
    }

    #[test]
    fn elf_magic_is_checked() {
        let tmp = tempfile::tempdir().expect("tmp");
        let elf = tmp.path().join("a");
        std::fs::write(&elf, b"\x7fELF\x02\x01").expect("write");
        assert!(is_elf(&elf));
        let html = tmp.path().join("b");
        std::fs::write(&html, b"<html>").expect("write");
        assert!(!is_elf(&html));
        assert!(!is_elf(&tmp.path().join("missing")));
    }
}
