//! The one place above the wings that knows which backends exist: the `backend:` block of
//! job.yaml (SPEC §14; its shape: `kind` and, for Kubernetes, where its pods go), the flags
//! over it, and connecting the chosen backend once, erased to an `Arc<dyn Sandbox>` that
//! everything above the seam uses without learning which one it is.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::docker::DockerSandbox;
use super::kubernetes::{KubeSettings, KubernetesSandbox};
use super::toolbox::Toolbox;
use super::{Sandbox, SandboxError};

/// Which backend runs a job's containers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    #[default]
    Docker,
    Kubernetes,
}

impl BackendKind {
    pub const NAMES: &'static str = "docker or kubernetes";

    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Docker => "docker",
            BackendKind::Kubernetes => "kubernetes",
        }
    }

    pub fn parse(raw: &str) -> Option<BackendKind> {
        match raw {
            "docker" => Some(BackendKind::Docker),
            "kubernetes" | "k8s" => Some(BackendKind::Kubernetes),
            _ => None,
        }
    }
}

/// The backend flags of `arbiter run` (and `gc`), laid over `backend:`.
#[derive(Debug, Clone, Default)]
pub struct BackendFlags {
    pub kind: Option<BackendKind>,
    pub namespace: Option<String>,
    pub context: Option<String>,
    pub registry: Option<String>,
}

/// `backend:` in job.yaml: the kind and, for Kubernetes, its settings beside it (`namespace`,
/// `registry`, `tolerations`, …: [`KubeSettings`]). Not part of the lock: the same job may be
/// continued on the other backend.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BackendConfig {
    pub kind: BackendKind,
    #[serde(flatten)]
    pub kubernetes: KubeSettings,
}

/// Read as one map: `kind`, then every other key is the Kubernetes settings', which refuse
/// keys they do not know (serde's `deny_unknown_fields` does not combine with `flatten`).
impl<'de> Deserialize<'de> for BackendConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut map = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let kind = match map.remove("kind") {
            Some(kind) => BackendKind::deserialize(kind).map_err(D::Error::custom)?,
            None => BackendKind::default(),
        };
        let kubernetes =
            KubeSettings::deserialize(serde_json::Value::Object(map)).map_err(D::Error::custom)?;
        Ok(BackendConfig { kind, kubernetes })
    }
}

impl BackendConfig {
    /// The config with the flags over it.
    pub fn with_flags(mut self, flags: &BackendFlags) -> BackendConfig {
        if let Some(kind) = flags.kind {
            self.kind = kind;
        }
        let k = &mut self.kubernetes;
        for (field, flag) in [
            (&mut k.namespace, &flags.namespace),
            (&mut k.context, &flags.context),
            (&mut k.registry, &flags.registry),
        ] {
            if flag.is_some() {
                *field = flag.clone();
            }
        }
        self
    }
}

/// The chosen backend could not be connected: its error and what to do about it.
#[derive(Debug, thiserror::Error)]
#[error("{source}\nhint: {hint}")]
pub struct ConnectError {
    #[source]
    pub source: SandboxError,
    pub hint: &'static str,
    /// The `--json` packet's error code (docs/json-packet.md).
    pub code: &'static str,
}

/// Connect the backend `config` chooses, with the harness toolbox when given (every command
/// arbiter runs in a container comes from it, SPEC §5).
pub async fn connect(
    config: &BackendConfig,
    toolbox: Option<&Toolbox>,
) -> Result<Arc<dyn Sandbox>, ConnectError> {
    match config.kind {
        BackendKind::Docker => {
            let engine = DockerSandbox::connect().await.map_err(|source| ConnectError {
                source,
                hint: "start a Docker engine (scripts/bootstrap does it on Debian) or set DOCKER_HOST",
                code: "engine_unavailable",
            })?;
            Ok(match toolbox {
                Some(toolbox) => Arc::new(engine.with_toolbox(toolbox)),
                None => Arc::new(engine),
            })
        }
        BackendKind::Kubernetes => {
            let cluster = KubernetesSandbox::connect(config.kubernetes.clone())
                .await
                .map_err(|e| ConnectError {
                    source: e.into(),
                    hint: "start a cluster (scripts/k8s up; eval \"$(scripts/k8s env)\") or set KUBECONFIG",
                    code: "cluster_unavailable",
                })?;
            Ok(match toolbox {
                Some(toolbox) => Arc::new(cluster.with_toolbox(toolbox)),
                None => Arc::new(cluster),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backend_block_keeps_its_shape() {
        let yaml = "kind: kubernetes\nnamespace: evals\nregistry: 127.0.0.1:5000\nwarm_pods: 2\ntolerations: [{key: a, operator: Exists}]\n";
        let config: BackendConfig = serde_yaml::from_str(yaml).expect("parses");
        assert_eq!(config.kind, BackendKind::Kubernetes);
        assert_eq!(config.kubernetes.namespace.as_deref(), Some("evals"));
        assert_eq!(config.kubernetes.warm_pods, Some(2));
        assert_eq!(config.kubernetes.tolerations.len(), 1);
        // Written back the same way, flat.
        let back = serde_yaml::to_string(&config).expect("writes");
        assert!(back.contains("kind: kubernetes"), "{back}");
        assert!(back.contains("namespace: evals"), "{back}");
        assert_eq!(
            serde_yaml::from_str::<BackendConfig>(&back).expect("reparses"),
            config
        );
        // No kind: Docker.
        let docker: BackendConfig = serde_yaml::from_str("{}").expect("parses");
        assert_eq!(docker, BackendConfig::default());
        // An unknown key or kind is refused, naming it.
        let err = serde_yaml::from_str::<BackendConfig>("kind: docker\nnamspace: x\n")
            .expect_err("unknown key")
            .to_string();
        assert!(err.contains("namspace"), "{err}");
        let err = serde_yaml::from_str::<BackendConfig>("kind: nomad\n")
            .expect_err("unknown kind")
            .to_string();
        assert!(err.contains("nomad"), "{err}");
    }

    #[test]
    fn flags_go_over_the_block() {
        let config = BackendConfig::default().with_flags(&BackendFlags {
            kind: Some(BackendKind::Kubernetes),
            namespace: Some("ns".into()),
            context: None,
            registry: Some("r".into()),
        });
        assert_eq!(config.kind, BackendKind::Kubernetes);
        assert_eq!(config.kubernetes.namespace.as_deref(), Some("ns"));
        assert_eq!(config.kubernetes.registry.as_deref(), Some("r"));
        assert_eq!(config.kubernetes.context, None);
    }
}
