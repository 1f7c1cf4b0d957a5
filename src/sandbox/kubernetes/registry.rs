//! The image registry over the distribution API: does it answer, which digest a tag names,
//! and what an image's config sets (its `Env`, `WorkingDir`, `User`). Plain HTTP for a
//! registry on the loopback (as `docker push` allows), HTTPS elsewhere; anonymous bearer
//! tokens when a registry asks for one.

use std::time::Duration;

use serde::Deserialize;

use super::error::KubeError;
use crate::sandbox::ImageConfig;

const MANIFEST_TYPES: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// A registry host (`host[:port]`) and how to reach it.
#[derive(Debug, Clone)]
pub(crate) struct Registry {
    pub host: String,
    base: String,
    http: reqwest::Client,
}

/// `host[:port]/repo/path:tag` or `…@sha256:…` split into its parts; Docker Hub's implicit
/// host and `library/` are made explicit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reference {
    pub host: String,
    pub repository: String,
    /// A tag or a digest.
    pub reference: String,
}

impl Reference {
    pub(crate) fn parse(image: &str) -> Reference {
        let (first, rest) = image.split_once('/').unwrap_or(("", image));
        let explicit_host = !first.is_empty()
            && (first.contains('.') || first.contains(':') || first == "localhost");
        let (host, path) = if explicit_host {
            (first.to_string(), rest.to_string())
        } else {
            ("registry-1.docker.io".to_string(), image.to_string())
        };
        let (path, reference) = match path.split_once('@') {
            Some((p, digest)) => (p.to_string(), digest.to_string()),
            None => match path.rsplit_once(':') {
                Some((p, tag)) if !tag.contains('/') => (p.to_string(), tag.to_string()),
                _ => (path.clone(), "latest".to_string()),
            },
        };
        let repository = if host == "registry-1.docker.io" && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        Reference {
            host,
            repository,
            reference,
        }
    }
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(rename = "mediaType", default)]
    media_type: Option<String>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Descriptor {
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    architecture: String,
    os: String,
}

#[derive(Deserialize)]
struct ConfigBlob {
    #[serde(default)]
    config: Option<ConfigFields>,
}

#[derive(Deserialize)]
struct ConfigFields {
    #[serde(rename = "Env", default)]
    env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    working_dir: Option<String>,
    #[serde(rename = "User", default)]
    user: Option<String>,
    #[serde(rename = "Entrypoint", default)]
    entrypoint: Option<Vec<String>>,
}

/// Whether `host` is this machine (plain HTTP, as `docker push` does for it).
fn is_loopback(host: &str) -> bool {
    let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
    name == "localhost" || name.starts_with("127.") || name == "[::1]"
}

impl Registry {
    pub(crate) fn new(host: &str) -> Result<Registry, KubeError> {
        let scheme = if is_loopback(host) { "http" } else { "https" };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| KubeError::Registry {
                registry: host.to_string(),
                message: e.to_string(),
            })?;
        Ok(Registry {
            host: host.to_string(),
            base: format!("{scheme}://{host}"),
            http,
        })
    }

    fn failed(&self, message: impl Into<String>) -> KubeError {
        KubeError::Registry {
            registry: self.host.clone(),
            message: message.into(),
        }
    }

    /// `GET /v2/`: 200, or 401 (it answers; credentials are another matter).
    pub(crate) async fn ping(&self) -> Result<(), KubeError> {
        let got = self
            .http
            .get(format!("{}/v2/", self.base))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| self.failed(format!("does not answer: {e}")))?;
        match got.status().as_u16() {
            200 | 401 => Ok(()),
            code => Err(self.failed(format!("answered HTTP {code} to /v2/"))),
        }
    }

    /// A GET (or HEAD) with an anonymous bearer token when the registry asks for one.
    async fn request(
        &self,
        head: bool,
        url: &str,
        accept: &str,
    ) -> Result<reqwest::Response, KubeError> {
        let send = |token: Option<&str>| {
            let mut req = if head {
                self.http.head(url)
            } else {
                self.http.get(url)
            };
            req = req.header("Accept", accept);
            if let Some(token) = token {
                req = req.bearer_auth(token);
            }
            req.send()
        };
        let got = send(None).await.map_err(|e| self.failed(e.to_string()))?;
        if got.status().as_u16() != 401 {
            return Ok(got);
        }
        let challenge = got
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let token = self.anonymous_token(&challenge).await?;
        send(Some(&token))
            .await
            .map_err(|e| self.failed(e.to_string()))
    }

    async fn anonymous_token(&self, challenge: &str) -> Result<String, KubeError> {
        let Some(params) = challenge.strip_prefix("Bearer ") else {
            return Err(self.failed("asks for credentials arbiter does not have"));
        };
        let field = |name: &str| {
            params.split(',').find_map(|kv| {
                let (k, v) = kv.trim().split_once('=')?;
                (k == name).then(|| v.trim_matches('"').to_string())
            })
        };
        let realm = field("realm").ok_or_else(|| self.failed("token challenge without a realm"))?;
        let mut query = Vec::new();
        for key in ["service", "scope"] {
            if let Some(v) = field(key) {
                query.push((key, v));
            }
        }
        #[derive(Deserialize)]
        struct Token {
            #[serde(default)]
            token: Option<String>,
            #[serde(default)]
            access_token: Option<String>,
        }
        let got: Token = self
            .http
            .get(&realm)
            .query(&query)
            .send()
            .await
            .map_err(|e| self.failed(format!("token: {e}")))?
            .bytes()
            .await
            .map_err(|e| self.failed(format!("token: {e}")))
            .and_then(|b| {
                serde_json::from_slice(&b).map_err(|e| self.failed(format!("token: {e}")))
            })?;
        got.token
            .or(got.access_token)
            .ok_or_else(|| self.failed("token reply without a token"))
    }

    /// The digest `repository:reference` names, or `None` when the registry has no such
    /// manifest.
    pub(crate) async fn digest(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<String>, KubeError> {
        let url = format!("{}/v2/{repository}/manifests/{reference}", self.base);
        let got = self.request(true, &url, MANIFEST_TYPES).await?;
        match got.status().as_u16() {
            200 => got
                .headers()
                .get("docker-content-digest")
                .and_then(|v| v.to_str().ok())
                .map(|d| Some(d.to_string()))
                .ok_or_else(|| self.failed("manifest without Docker-Content-Digest")),
            404 => Ok(None),
            code => Err(self.failed(format!(
                "HTTP {code} for the manifest of {repository}:{reference}"
            ))),
        }
    }

    /// What the image's config sets (for linux/amd64 when the reference is an index).
    pub(crate) async fn image_config(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<ImageConfig, KubeError> {
        let fields = self.config_fields(repository, reference).await?;
        Ok(ImageConfig {
            env: fields
                .as_ref()
                .and_then(|c| c.env.clone())
                .unwrap_or_default(),
            workdir: fields
                .as_ref()
                .and_then(|c| c.working_dir.clone())
                .filter(|d| d.starts_with('/')),
            user: fields
                .as_ref()
                .and_then(|c| c.user.clone())
                .filter(|u| !u.is_empty()),
        })
    }

    /// The image's ENTRYPOINT (`None`: it has none).
    pub(crate) async fn image_entrypoint(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<Vec<String>>, KubeError> {
        let fields = self.config_fields(repository, reference).await?;
        Ok(fields.and_then(|c| c.entrypoint).filter(|e| !e.is_empty()))
    }

    async fn config_fields(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<ConfigFields>, KubeError> {
        let mut reference = reference.to_string();
        for _ in 0..2 {
            let url = format!("{}/v2/{repository}/manifests/{reference}", self.base);
            let got = self.request(false, &url, MANIFEST_TYPES).await?;
            if !got.status().is_success() {
                return Err(self.failed(format!(
                    "HTTP {} for the manifest of {repository}:{reference}",
                    got.status()
                )));
            }
            let manifest: Manifest = got
                .bytes()
                .await
                .map_err(|e| self.failed(format!("manifest: {e}")))
                .and_then(|b| {
                    serde_json::from_slice(&b).map_err(|e| self.failed(format!("manifest: {e}")))
                })?;
            if let Some(config) = manifest.config {
                let url = format!("{}/v2/{repository}/blobs/{}", self.base, config.digest);
                let blob: ConfigBlob = self
                    .request(false, &url, "*/*")
                    .await?
                    .bytes()
                    .await
                    .map_err(|e| self.failed(format!("config: {e}")))
                    .and_then(|b| {
                        serde_json::from_slice(&b).map_err(|e| self.failed(format!("config: {e}")))
                    })?;
                return Ok(blob.config);
            }
            let chosen = manifest
                .manifests
                .iter()
                .find(|m| {
                    m.platform
                        .as_ref()
                        .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
                })
                .or_else(|| manifest.manifests.first())
                .ok_or_else(|| {
                    self.failed(format!(
                        "manifest of {repository}:{reference} ({}) names no image",
                        manifest.media_type.unwrap_or_default()
                    ))
                })?;
            reference = chosen.digest.clone();
        }
        Err(self.failed(format!("nested indexes for {repository}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_split_as_the_engine_does() {
        let r = Reference::parse("127.0.0.1:5000/arbiter-env/hello:abc");
        assert_eq!(r.host, "127.0.0.1:5000");
        assert_eq!(r.repository, "arbiter-env/hello");
        assert_eq!(r.reference, "abc");
        let hub = Reference::parse("debian:bookworm-slim");
        assert_eq!(hub.host, "registry-1.docker.io");
        assert_eq!(hub.repository, "library/debian");
        let digest = Reference::parse("ghcr.io/o/i@sha256:00");
        assert_eq!(digest.repository, "o/i");
        assert_eq!(digest.reference, "sha256:00");
        assert_eq!(Reference::parse("localhost/x").reference, "latest");
        assert!(is_loopback("127.0.0.1:5000") && !is_loopback("registry.example.com"));
    }
}
