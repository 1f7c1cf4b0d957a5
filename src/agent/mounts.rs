//! Host paths of read-only `mounts` (SPEC §3): relative paths are resolved against the job
//! file's directory and every path is checked to exist before anything starts.

use std::path::Path;

use super::{Agent, AgentKind, Mount};

/// A `mounts` entry that cannot be used: the field (relative to the agent entry) and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct MountError {
    pub field: String,
    pub message: String,
}

/// Resolve every `mounts[i].host` of `agent` against `base` (the directory of the job file)
/// and check that it exists and that `mounts[i].container` is absolute. Call it from job
/// config resolution, once per agent, before the agent is validated or planned; report the
/// error as `<job file>:agents[<n>].<field>: <message>` (exit 2). Kinds without mounts pass.
pub fn resolve_mounts(agent: &mut Agent, base: &Path) -> Result<(), MountError> {
    let mounts: &mut Vec<Mount> = match &mut agent.kind {
        AgentKind::Command(cmd) => &mut cmd.mounts,
        AgentKind::Aworld(aw) => &mut aw.mounts,
        _ => return Ok(()),
    };
    for (i, mount) in mounts.iter_mut().enumerate() {
        if mount.host.as_os_str().is_empty() {
            return Err(MountError {
                field: format!("mounts[{i}].host"),
                message: "must not be empty".to_string(),
            });
        }
        if mount.host.is_relative() {
            mount.host = base.join(&mount.host);
        }
        let shown = mount.host.display().to_string();
        match std::fs::canonicalize(&mount.host) {
            Ok(path) => mount.host = path,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(MountError {
                    field: format!("mounts[{i}].host"),
                    message: format!("{shown} does not exist"),
                });
            }
            Err(e) => {
                return Err(MountError {
                    field: format!("mounts[{i}].host"),
                    message: format!("{shown}: {e}"),
                });
            }
        }
        if !mount.container.starts_with('/') {
            return Err(MountError {
                field: format!("mounts[{i}].container"),
                message: format!("{:?} must be an absolute container path", mount.container),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(yaml: &str) -> Agent {
        serde_yaml::from_str(yaml).expect("parses")
    }

    fn hosts(agent: &Agent) -> Vec<std::path::PathBuf> {
        match &agent.kind {
            AgentKind::Command(c) => c.mounts.iter().map(|m| m.host.clone()).collect(),
            AgentKind::Aworld(a) => a.mounts.iter().map(|m| m.host.clone()).collect(),
            _ => Vec::new(),
        }
    }

    #[test]
    fn relative_hosts_resolve_against_the_job_dir() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(tmp.path().join("adapters")).expect("mkdir");
        let mut a = agent(
            "name: x\nkind: command\nrun: [\"true\"]\nmounts:\n  - {host: ./adapters, container: /opt/a}\n",
        );
        resolve_mounts(&mut a, tmp.path()).expect("resolves");
        let expected = std::fs::canonicalize(tmp.path().join("adapters")).expect("canon");
        assert_eq!(hosts(&a), std::slice::from_ref(&expected));
        assert!(hosts(&a)[0].is_absolute());
        // Bare names are paths too, never engine volume names.
        std::fs::create_dir(tmp.path().join("dist")).expect("mkdir");
        let mut a =
            agent("name: aw\nkind: aworld\nmounts:\n  - {host: dist, container: /opt/aworld}\n");
        resolve_mounts(&mut a, tmp.path()).expect("resolves");
        assert_eq!(
            hosts(&a),
            [std::fs::canonicalize(tmp.path().join("dist")).expect("canon")]
        );
    }

    #[test]
    fn errors_name_the_field() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(tmp.path().join("ok")).expect("mkdir");
        let mut a = agent(
            "name: x\nkind: command\nrun: [\"true\"]\nmounts:\n  - {host: ok, container: /a}\n  - {host: ./missing, container: /b}\n",
        );
        let err = resolve_mounts(&mut a, tmp.path()).expect_err("missing");
        assert_eq!(
            err.to_string(),
            format!(
                "mounts[1].host: {}/./missing does not exist",
                tmp.path().display()
            )
        );
        let mut a = agent(
            "name: x\nkind: command\nrun: [\"true\"]\nmounts:\n  - {host: ok, container: rel}\n",
        );
        let err = resolve_mounts(&mut a, tmp.path()).expect_err("relative container");
        assert_eq!(
            err.to_string(),
            "mounts[0].container: \"rel\" must be an absolute container path"
        );
    }

    #[test]
    fn kinds_without_mounts_pass() {
        let mut a = Agent::builtin("oracle").expect("oracle");
        resolve_mounts(&mut a, Path::new("/nonexistent")).expect("nothing to do");
    }
}
