//! The harness toolbox in pods without an init container: its static busybox and its relay
//! in two ConfigMaps of the namespace, named by the toolbox's content and created once
//! (however many jobs share the namespace), which every pod mounts read-only at
//! `/.arbiter/toolbox` through one projected volume (pod.rs).
//!
//! An init container that copied the toolbox into an emptyDir cost every pod a container
//! start and the kubelet's next relist before the main container could start (measured on
//! the test cluster: 0.96 s from create to a first exec, against 0.36 s without one). A
//! ConfigMap volume is as read-only as that emptyDir was (the kubelet writes it; the pod
//! mounts it read-only), so the agent, root or not, can no more replace the busybox or the
//! relay the harness runs than on Docker's read-only bind mount. A ConfigMap holds at most
//! 1 MiB: docker/toolbox/build.sh builds both under that (the busybox with musl-gcc, the
//! relay for Rust's musl target), so each runs from the volume as it is, unpacked nowhere.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, KeyToPath, ProjectedVolumeSource, Volume, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};

use super::KubernetesSandbox;
use super::error::{KubeError, api_status};
use super::names::TOOLBOX_VOLUME;
use crate::sandbox::SandboxError;

/// What the API admits in one ConfigMap (its data and binaryData together).
pub(crate) const CONFIGMAP_LIMIT: usize = 1024 * 1024;
/// Label of the toolbox's ConfigMaps: the toolbox's content id.
const LABEL_TOOLBOX: &str = "arbiter.toolbox";
/// The relay's name in the toolbox volume (as in the toolbox's directory).
pub(crate) const RELAY: &str = "relay";

/// The relay's path in a pod (the toolbox volume's file, run as it is).
pub(crate) fn relay_path() -> String {
    format!("{}/{RELAY}", crate::sandbox::toolbox::TOOLBOX_MOUNT)
}

/// The two ConfigMaps of one toolbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolboxMaps {
    pub busybox: String,
    pub relay: String,
}

impl ToolboxMaps {
    /// The maps of the toolbox whose content sha256 is `content_sha256`.
    pub(crate) fn of(content_sha256: &str) -> ToolboxMaps {
        let id = toolbox_id(content_sha256);
        ToolboxMaps {
            busybox: format!("arbiter-toolbox-{id}"),
            // Not `arbiter-relay-<id>`: arbiter before the musl relay kept it gzipped under
            // that name (key `relay.gz`), for a toolbox of the same content too.
            relay: format!("arbiter-relay-exe-{id}"),
        }
    }

    /// The pod's toolbox volume: both maps, projected into one read-only directory.
    pub(crate) fn volume(&self) -> Volume {
        let item = |map: &str, key: &str, mode: i32| VolumeProjection {
            config_map: Some(ConfigMapProjection {
                name: map.to_string(),
                items: Some(vec![KeyToPath {
                    key: key.to_string(),
                    path: key.to_string(),
                    mode: Some(mode),
                }]),
                optional: Some(false),
            }),
            ..Default::default()
        };
        Volume {
            name: TOOLBOX_VOLUME.to_string(),
            projected: Some(ProjectedVolumeSource {
                default_mode: Some(0o444),
                sources: Some(vec![
                    item(&self.busybox, "busybox", 0o555),
                    item(&self.relay, RELAY, 0o555),
                ]),
            }),
            ..Default::default()
        }
    }
}

fn toolbox_id(content_sha256: &str) -> &str {
    &content_sha256[..content_sha256.len().min(16)]
}

/// One map of `key` = `bytes`, or why it cannot be one.
fn map_of(name: &str, id: &str, key: &str, bytes: Vec<u8>) -> Result<ConfigMap, SandboxError> {
    if bytes.len() > CONFIGMAP_LIMIT {
        return Err(KubeError::Setup(format!(
            "the toolbox's {key} is {} bytes, more than a ConfigMap holds ({CONFIGMAP_LIMIT}): rebuild the toolbox with docker/toolbox/build.sh without ARBITER_BUSYBOX",
            bytes.len()
        ))
        .into());
    }
    Ok(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                LABEL_TOOLBOX.to_string(),
                id.to_string(),
            )])),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(key.to_string(), ByteString(bytes))])),
        immutable: Some(true),
        ..Default::default()
    })
}

impl KubernetesSandbox {
    /// The toolbox's ConfigMaps in the namespace: listed (one request), the missing ones
    /// created (a map another job created meanwhile is as good: same name, same content).
    pub(super) async fn toolbox_maps(&self) -> Result<ToolboxMaps, SandboxError> {
        self.toolbox_maps
            .get_or_try_init(|| async {
                let toolbox = self.toolbox.as_ref().ok_or_else(|| {
                    KubeError::Setup("no harness toolbox (run scripts/bootstrap)".to_string())
                })?;
                let id = toolbox_id(&toolbox.content_sha256);
                let maps = ToolboxMaps::of(&toolbox.content_sha256);
                let api: Api<ConfigMap> =
                    Api::namespaced(self.client.clone(), &self.resolved.namespace);
                let present = api
                    .list_metadata(&ListParams::default().labels(&format!("{LABEL_TOOLBOX}={id}")))
                    .await
                    .map_err(KubeError::api("list the toolbox's configmaps"))?;
                let have = |name: &str| {
                    present
                        .items
                        .iter()
                        .any(|m| m.metadata.name.as_deref() == Some(name))
                };
                let read = |name: &str| {
                    let path = toolbox.dir.join(name);
                    std::fs::read(&path).map_err(SandboxError::io(path))
                };
                let mut wanted = Vec::new();
                if !have(&maps.busybox) {
                    wanted.push(map_of(&maps.busybox, id, "busybox", read("busybox")?)?);
                }
                if !have(&maps.relay) {
                    wanted.push(map_of(&maps.relay, id, RELAY, read(RELAY)?)?);
                }
                for map in wanted {
                    match api.create(&PostParams::default(), &map).await {
                        Ok(_) => {}
                        Err(e) if api_status(&e) == Some(409) => {}
                        Err(e) => {
                            return Err(KubeError::Api {
                                op: "create the toolbox's configmap",
                                source: e,
                            }
                            .into());
                        }
                    }
                }
                Ok::<_, SandboxError>(maps)
            })
            .await
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_maps_are_named_by_the_toolbox_content_and_projected_read_only() {
        let maps = ToolboxMaps::of("0123456789abcdef0123");
        assert_eq!(maps.busybox, "arbiter-toolbox-0123456789abcdef");
        assert_eq!(maps.relay, "arbiter-relay-exe-0123456789abcdef");
        let volume = maps.volume();
        let projected = volume.projected.unwrap();
        let sources = projected.sources.unwrap();
        let items: Vec<(String, String, i32)> = sources
            .iter()
            .map(|s| {
                let map = s.config_map.as_ref().unwrap();
                let item = &map.items.as_ref().unwrap()[0];
                (map.name.clone(), item.path.clone(), item.mode.unwrap())
            })
            .collect();
        assert_eq!(
            items,
            [
                (maps.busybox.clone(), "busybox".to_string(), 0o555),
                (maps.relay.clone(), RELAY.to_string(), 0o555),
            ]
        );
    }

    #[test]
    fn a_file_larger_than_a_configmap_holds_is_refused_by_name() {
        let err = map_of("m", "id", "busybox", vec![0; CONFIGMAP_LIMIT + 1]).unwrap_err();
        assert!(
            err.to_string()
                .contains("the toolbox's busybox is 1048577 bytes")
        );
        let ok = map_of("m", "id", "busybox", vec![1; 10]).unwrap();
        assert_eq!(ok.immutable, Some(true));
        assert_eq!(ok.binary_data.unwrap()["busybox"].0, vec![1; 10]);
    }
}
