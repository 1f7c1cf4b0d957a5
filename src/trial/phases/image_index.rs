//! An index of an environment image's files (what the integrity classifier calls
//! "original"), built once per image per job from one archive of the image's whole
//! filesystem (headers only, plus the few small files the classifier reads), and kept on the
//! host under the image's content id (see [`IndexCache`]) so the next job on the same image
//! does not read the image again. Also the tar walk both this index and the change set use.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sandbox::{
    Base, ContainerLimits, ContainerSpec, Fetched, ImageRef, Network, Owner, Resource, Sandbox,
    SandboxError,
};
use crate::verifier::integrity::{FileType, OriginalFile};

/// What reading an image's files needs from the trial: its backend, the owner of the
/// (never started) container of the image, its limits and a scratch file on the host. A
/// value, so this module sits below the phases' context.
pub(crate) struct Reader<'a, S: Sandbox + ?Sized> {
    pub sb: &'a S,
    pub owner: Owner,
    pub limits: ContainerLimits,
    pub scratch: PathBuf,
}

/// Files whose content the classifier may read (`.pth`, account databases), at most this size.
pub(super) const MAX_TEXT_BYTES: u64 = 64 * 1024;
/// Bytes of tar read to index an environment image, at most.
const MAX_INDEX_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// An index of an environment image's files (what the classifier calls "original").
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct ImageIndex {
    pub(super) files: HashMap<String, OriginalFile>,
    pub(super) texts: HashMap<String, String>,
    /// The image's own environment (`PATH=…`): which commands the verifier finds first. Not
    /// kept in the cache (asked of the backend each job, which knows it without reading files).
    #[serde(skip)]
    pub(super) env: Vec<String>,
    /// The working dir the image's containers start in (`WORKDIR`); asked of the backend
    /// like `env`.
    #[serde(skip)]
    pub(super) workdir: Option<String>,
}

impl ImageIndex {
    fn set_config(&mut self, config: crate::sandbox::ImageConfig) {
        self.env = config.env;
        self.workdir = config.workdir;
    }
}

/// What a cached index file holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct CachedIndex {
    schema: String,
    image_id: String,
    index: ImageIndex,
}

const INDEX_SCHEMA: &str = "arbiter.image-index.v1";
/// Overrides where indexes are kept; empty: not kept at all.
const INDEX_CACHE_ENV: &str = "ARBITER_IMAGE_INDEX_CACHE";

/// Indexes of environment images kept between jobs, one file per image content id:
/// `$ARBITER_IMAGE_INDEX_CACHE`, else `$XDG_CACHE_HOME/arbiter/image-index/1`, else
/// `$HOME/.cache/arbiter/image-index/1`. Reading a large image takes seconds of engine work
/// (its whole filesystem as one archive); an id names the image's files exactly, and nothing
/// in a trial can write here, so a kept index is as good as a fresh one. A file that does not
/// parse, or names another id, is ignored and replaced.
#[derive(Debug)]
struct IndexCache {
    dir: std::path::PathBuf,
}

impl IndexCache {
    fn from_env() -> Option<IndexCache> {
        let var = |k: &str| std::env::var_os(k);
        let dir = match var(INDEX_CACHE_ENV) {
            Some(d) if d.is_empty() => return None,
            Some(d) => std::path::PathBuf::from(d),
            None => match var("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
                Some(d) => std::path::PathBuf::from(d).join("arbiter/image-index/1"),
                None => std::path::PathBuf::from(var("HOME").filter(|d| !d.is_empty())?)
                    .join(".cache/arbiter/image-index/1"),
            },
        };
        Some(IndexCache { dir })
    }

    fn path(&self, id: &str) -> Option<std::path::PathBuf> {
        let hex = id.strip_prefix("sha256:")?;
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| self.dir.join(format!("{hex}.json")))
    }

    fn load(&self, id: &str) -> Option<ImageIndex> {
        let text = std::fs::read(self.path(id)?).ok()?;
        let cached: CachedIndex = serde_json::from_slice(&text).ok()?;
        (cached.schema == INDEX_SCHEMA && cached.image_id == id).then_some(cached.index)
    }

    fn store(&self, id: &str, index: &ImageIndex) {
        let Some(path) = self.path(id) else { return };
        let body = serde_json::json!({"schema": INDEX_SCHEMA, "image_id": id, "index": index});
        let written = std::fs::create_dir_all(&self.dir).and_then(|()| {
            crate::job::write_atomic(&path, body.to_string().as_bytes())
                .map_err(std::io::Error::other)
        });
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), "keeping the image index: {e}");
        }
    }
}

/// Environment images indexed so far in this job (each is indexed once; shared by its trials).
#[derive(Debug, Default)]
pub(crate) struct ImageIndexes {
    cells: tokio::sync::Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Arc<ImageIndex>>>>>,
    /// Where indexes are kept between jobs: `None` until asked (then from the environment).
    cache: std::sync::OnceLock<Option<IndexCache>>,
}

impl ImageIndexes {
    /// Indexes kept in `dir` between jobs (what the environment says otherwise).
    #[cfg(test)]
    pub(crate) fn kept_in(dir: &Path) -> ImageIndexes {
        let indexes = ImageIndexes::default();
        let _ = indexes.cache.set(Some(IndexCache {
            dir: dir.to_path_buf(),
        }));
        indexes
    }

    fn cache(&self) -> Option<&IndexCache> {
        self.cache.get_or_init(IndexCache::from_env).as_ref()
    }

    pub(super) async fn get<S: Sandbox + ?Sized>(
        &self,
        ctx: &Reader<'_, S>,
        image: &ImageRef,
    ) -> Result<Arc<ImageIndex>, SandboxError> {
        let cell = {
            let mut cells = self.cells.lock().await;
            cells.entry(image.to_string()).or_default().clone()
        };
        let index = cell
            .get_or_try_init(|| async {
                cached_or_indexed(ctx, image, self.cache())
                    .await
                    .map(Arc::new)
            })
            .await?;
        Ok(index.clone())
    }
}

/// Whether the classifier may want a file's text (small, and of a kind it reads; see
/// `Filesystems::agent_text`). A text it asks for and does not get makes most rules assume
/// the worst, but not the pytest-plugin rule: every package has an `entry_points.txt`.
pub(super) fn wants_text(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let parent = path.rsplit_once('/').map_or("", |(dir, _)| dir);
    path.ends_with(".pth")
        || (name == "entry_points.txt"
            && (parent.ends_with(".dist-info") || parent.ends_with(".egg-info")))
        || matches!(name, ".npmrc" | "npmrc")
        || crate::verifier::integrity::text_wanted(path)
        || matches!(
            path,
            "/etc/passwd"
                | "/etc/shadow"
                | "/etc/group"
                | "/etc/gshadow"
                | "/etc/sudoers"
                | "/etc/ld.so.preload"
        )
}

/// One pass over an archive of `root` (as the backend packs it: names relative to the root's
/// parent), calling `visit` with each entry's absolute path, its header and a reader.
pub(super) fn walk(
    tar_path: &Path,
    root: &str,
    mut visit: impl FnMut(String, &tar::Header, &mut dyn Read),
) -> std::io::Result<()> {
    let parent = match root.rfind('/') {
        Some(0) | None => "/".to_string(),
        Some(i) => root[..i].to_string(),
    };
    let mut archive = tar::Archive::new(std::fs::File::open(tar_path)?);
    for entry in archive.entries()? {
        let mut entry = entry?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let joined = if name.starts_with('/') {
            name
        } else {
            format!("{parent}/{name}")
        };
        let path = normalize(&joined);
        let header = entry.header().clone();
        visit(path, &header, &mut entry);
    }
    Ok(())
}

fn normalize(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    format!("/{}", parts.join("/"))
}

pub(super) fn file_type(header: &tar::Header) -> FileType {
    let kind = header.entry_type();
    if kind.is_dir() {
        FileType::Dir
    } else if kind.is_symlink() {
        FileType::Symlink
    } else if kind.is_file() || kind.is_hard_link() {
        FileType::File
    } else {
        FileType::Other
    }
}

pub(super) fn link_target(header: &tar::Header) -> Option<String> {
    header
        .link_name_bytes()
        .map(|l| String::from_utf8_lossy(&l).into_owned())
}

/// The image's index from the host cache when its content id has one, else read from the
/// image (and kept when the reading was whole).
async fn cached_or_indexed<S: Sandbox + ?Sized>(
    ctx: &Reader<'_, S>,
    image: &ImageRef,
    cache: Option<&IndexCache>,
) -> Result<ImageIndex, SandboxError> {
    let id = match cache {
        Some(_) => ctx.sb.image_id(image).await?,
        None => None,
    };
    if let (Some(cache), Some(id)) = (cache, &id)
        && let Some(mut index) = cache.load(id)
    {
        tracing::debug!(%image, id, "image index from the host cache");
        index.set_config(ctx.sb.image_config(image).await?);
        return Ok(index);
    }
    let (index, whole) = index_image(ctx, image).await?;
    if let (Some(cache), Some(id), true) = (cache, &id, whole) {
        cache.store(id, &index);
    }
    Ok(index)
}

/// Index the image's files from a created (never started) container of it; `true` when the
/// whole filesystem was read.
async fn index_image<S: Sandbox + ?Sized>(
    ctx: &Reader<'_, S>,
    image: &ImageRef,
) -> Result<(ImageIndex, bool), SandboxError> {
    let spec = ContainerSpec {
        base: Base::Image(image.clone()),
        owner: ctx.owner.clone(),
        env: Vec::new(),
        limits: ctx.limits,
        network: Network::None,
        workdir: None,
        mounts: Vec::new(),
        start: crate::sandbox::StartSpec::default(),
    };
    let id = ctx.sb.create(&spec).await?;
    let scratch = &ctx.scratch;
    let fetched = ctx
        .sb
        .download(
            &id,
            crate::sandbox::Download::whole("/", scratch, MAX_INDEX_BYTES),
        )
        .await;
    let removed = ctx.sb.remove(&Resource::Container(id)).await;
    let mut index = ImageIndex::default();
    let mut whole = false;
    if let Fetched::Archive { .. } = fetched? {
        let walked = walk(scratch, "/", |path, header, body| {
            if wants_text(&path) && header.size().unwrap_or(u64::MAX) <= MAX_TEXT_BYTES {
                let mut text = String::new();
                if body.read_to_string(&mut text).is_ok() {
                    index.texts.insert(path.clone(), text);
                }
            }
            index.files.insert(
                path,
                OriginalFile {
                    file_type: file_type(header),
                    mode: header.mode().ok(),
                    link_target: link_target(header),
                },
            );
        });
        match walked {
            Ok(()) => whole = true,
            Err(e) => tracing::warn!(%image, "indexing the image: {e}"),
        }
    }
    let _ = std::fs::remove_file(scratch);
    removed?;
    index.set_config(ctx.sb.image_config(image).await?);
    Ok((index, whole))
}
