//! The change list of a pod computed from two walks of a root filesystem (pure: tested
//! without a cluster). `changes.rs` runs the walks; this file reads them and compares.
//!
//! A cluster gives no access to a container's overlay layers, so the Docker backend's rule
//! (`layer_changes.rs`: walk the writable layer, look each entry up in the image's layers) is
//! rebuilt from inside: one walk of the image (a pod of it nothing ran in), one of the
//! container, each entry with its `lstat` fields. What the writable layer holds is what has a
//! ctime other than the image's: nothing in a container can set ctime, and overlayfs gives
//! every copied-up or created entry (and each parent it copies up) a new inode with a new
//! ctime, while an entry never touched shows the lower layer's inode, whose ctime is fixed
//! once the node unpacked the image (so an image walk is valid on its node only).
//!
//! The list is then the engine's, path for path:
//! - a path the image does not have is `Added` (and so everything beneath it);
//! - an image path the container no longer has is `Deleted` when its parent is still a
//!   directory (a directory removed whole is one entry, as one deletion marker is);
//! - a non-directory the image has is `Modified` when its ctime differs and its type, mode,
//!   owner, device, size or mtime differ, or, all of those alike, its content does (asked of
//!   both sides by the caller: [`Pending::ambiguous`]); a directory when its type, mode or
//!   owner differ, or anything beneath it changed (never the root).

use std::collections::{BTreeMap, BTreeSet, HashSet};

#[cfg(test)]
use crate::sandbox::Change;
use crate::sandbox::ChangeKind;

/// `S_IFMT` and the directory type.
const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;

/// The `stat -c` format each walk prints per path: 15 fields without spaces or newlines
/// (the two dates are three fields each), then the name as given.
pub(super) const STAT_FORMAT: &str = "%f %u %g %s %Y %y %z %t %T %i %h %n";
const FIELDS: usize = 15;

/// One path's `lstat`, as the walk printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stat {
    /// Type and permission bits.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime: i64,
    pub mtime_ns: u32,
    /// The change time as printed (date, time with nanoseconds, zone): compared whole.
    pub ctime: String,
    pub rdev: (u32, u32),
    pub ino: u64,
    pub nlink: u64,
}

impl Stat {
    pub(super) fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }

    /// The engine's rule (see `layer_changes.rs::stat_differs`): type and mode, owner,
    /// device, and for anything but a directory its size and mtime (seconds, and nanoseconds
    /// when both have them).
    fn differs(&self, other: &Stat) -> bool {
        let mtime_differs = self.mtime != other.mtime
            || (self.mtime_ns != other.mtime_ns && self.mtime_ns != 0 && other.mtime_ns != 0);
        self.mode != other.mode
            || self.uid != other.uid
            || self.gid != other.gid
            || self.rdev != other.rdev
            || (!other.is_dir() && (self.size != other.size || mtime_differs))
    }
}

/// One walk of a root filesystem: every path on it, and the mount points (other
/// filesystems: the kubelet's files, the harness's volumes, `/proc`, `/sys`, `/dev`), whose
/// entries show another filesystem and are left out of every comparison.
#[derive(Debug, Default, Clone)]
pub(super) struct Walk {
    pub entries: BTreeMap<Vec<u8>, Stat>,
    pub mounts: HashSet<Vec<u8>>,
}

impl Walk {
    /// Read a walk's output: the mount table (`/proc/self/mountinfo`), a NUL, every path
    /// NUL-terminated, a NUL, then one [`STAT_FORMAT`] line per path in the same order (a
    /// name may hold a newline: each line is read knowing the name it must end with).
    pub(super) fn parse(out: &[u8]) -> Result<Walk, String> {
        let nul = |from: usize| out[from..].iter().position(|&b| b == 0).map(|i| from + i);
        let end_mounts = nul(0).ok_or("no end of the mount table")?;
        let mounts = mount_points(&out[..end_mounts]);
        let mut names = Vec::new();
        let mut at = end_mounts + 1;
        loop {
            let end = nul(at).ok_or("no end of the path list")?;
            if end == at {
                at += 1;
                break;
            }
            names.push(&out[at..end]);
            at = end + 1;
        }
        let mut entries = BTreeMap::new();
        for name in names {
            let (stat, next) = stat_line(out, at, name)?;
            at = next;
            entries.insert(name.to_vec(), stat);
        }
        if at != out.len() {
            return Err(format!("{} bytes after the last path", out.len() - at));
        }
        Ok(Walk { entries, mounts })
    }

    /// Whether `path` is a mount point (or beneath one, but `/`).
    fn mounted(&self, path: &[u8]) -> bool {
        self.mounts.contains(path)
    }
}

/// The mount points of a mount table other than `/`, with the kernel's octal escapes undone.
fn mount_points(table: &[u8]) -> HashSet<Vec<u8>> {
    let mut out = HashSet::new();
    for line in table.split(|&b| b == b'\n') {
        let Some(field) = line.split(|&b| b == b' ').nth(4) else {
            continue;
        };
        let point = unescape(field);
        if point != b"/" {
            out.insert(point);
        }
    }
    out
}

/// `\040` → space and the like (mountinfo's escapes of space, tab, newline, backslash).
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && i + 3 < field.len()
            && field[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = field[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    out
}

/// The stat line at `at` that must end with `name`, and where the next begins.
fn stat_line(out: &[u8], mut at: usize, name: &[u8]) -> Result<(Stat, usize), String> {
    let mut fields: Vec<&str> = Vec::with_capacity(FIELDS);
    for _ in 0..FIELDS {
        let end = out[at..]
            .iter()
            .position(|&b| b == b' ')
            .map(|i| at + i)
            .ok_or_else(|| format!("a short stat line for {}", lossy(name)))?;
        let field = std::str::from_utf8(&out[at..end])
            .map_err(|_| format!("a stat field that is not text for {}", lossy(name)))?;
        fields.push(field);
        at = end + 1;
    }
    let end = at + name.len();
    if out.get(at..end) != Some(name) || out.get(end) != Some(&b'\n') {
        return Err(format!(
            "the stat line of {} is not where expected",
            lossy(name)
        ));
    }
    let bad = |what: &str| format!("stat {what} of {}", lossy(name));
    let hex = |s: &str, what: &str| u32::from_str_radix(s, 16).map_err(|_| bad(what));
    let dec = |s: &str, what: &str| s.parse::<u64>().map_err(|_| bad(what));
    let mtime_ns = fields[6]
        .split_once('.')
        .map_or(Ok(0), |(_, frac)| {
            let digits: String = frac.chars().chain(std::iter::repeat('0')).take(9).collect();
            digits.parse::<u32>()
        })
        .map_err(|_| bad("mtime"))?;
    let stat = Stat {
        mode: hex(fields[0], "mode")?,
        uid: dec(fields[1], "uid")? as u32,
        gid: dec(fields[2], "gid")? as u32,
        size: dec(fields[3], "size")?,
        mtime: fields[4].parse::<i64>().map_err(|_| bad("mtime"))?,
        mtime_ns,
        ctime: fields[8..11].join(" "),
        rdev: (hex(fields[11], "device")?, hex(fields[12], "device")?),
        ino: dec(fields[13], "inode")?,
        nlink: dec(fields[14], "links")?,
    };
    Ok((stat, end + 1))
}

pub(super) fn lossy(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

/// The parent of an absolute path (`/` for a top-level one).
pub(super) fn parent(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(0) | None => b"/",
        Some(i) => &path[..i],
    }
}

/// A first comparison: what is decided, and the entries whose content must be compared.
#[derive(Debug, Default)]
pub(super) struct Pending {
    pub added: BTreeSet<Vec<u8>>,
    pub deleted: BTreeSet<Vec<u8>>,
    pub modified: BTreeSet<Vec<u8>>,
    /// Files and symlinks with a new ctime and every attribute alike: modified only when
    /// their content (a file's bytes, a link's target) differs from the image's.
    pub ambiguous: Vec<Vec<u8>>,
}

/// Compare the container's walk `now` with the image's `image` (see the module's doc).
pub(super) fn compare(image: &Walk, now: &Walk) -> Pending {
    let mounted = |p: &[u8]| image.mounted(p) || now.mounted(p);
    let mut pending = Pending::default();
    for (path, stat) in &now.entries {
        if path.as_slice() == b"/" || mounted(path) {
            continue;
        }
        match image.entries.get(path) {
            None => {
                pending.added.insert(path.clone());
            }
            Some(before) if stat.is_dir() => {
                if before.differs(stat) {
                    pending.modified.insert(path.clone());
                }
            }
            Some(before) => {
                if before.differs(stat) {
                    pending.modified.insert(path.clone());
                } else if before.ctime != stat.ctime {
                    pending.ambiguous.push(path.clone());
                }
            }
        }
    }
    for path in image.entries.keys() {
        if path.as_slice() == b"/" || mounted(path) || now.entries.contains_key(path) {
            continue;
        }
        if now.entries.get(parent(path)).is_some_and(Stat::is_dir) {
            pending.deleted.insert(path.clone());
        }
    }
    pending
}

/// The change list: `pending` with the ambiguous entries found `changed` added as modified,
/// and every directory above a change marked modified (not the root), sorted by path.
#[cfg(test)]
pub(super) fn finish(image: &Walk, pending: Pending, changed: &[Vec<u8>]) -> Vec<Change> {
    finish_paths(image, pending, changed)
        .into_iter()
        .map(|(p, kind)| Change {
            path: lossy(&p),
            kind,
        })
        .collect()
}

/// [`finish`] with the paths as the filesystem has them (bytes, not always UTF-8).
pub(super) fn finish_paths(
    image: &Walk,
    mut pending: Pending,
    changed: &[Vec<u8>],
) -> Vec<(Vec<u8>, ChangeKind)> {
    pending.modified.extend(changed.iter().cloned());
    let mut above = BTreeSet::new();
    for path in pending
        .added
        .iter()
        .chain(&pending.deleted)
        .chain(&pending.modified)
    {
        let mut p = parent(path);
        while p != b"/" {
            if image.entries.contains_key(p) && !pending.added.contains(p) {
                above.insert(p.to_vec());
            }
            p = parent(p);
        }
    }
    pending.modified.extend(above);
    let mut out: Vec<(Vec<u8>, ChangeKind)> = Vec::new();
    out.extend(pending.added.into_iter().map(|p| (p, ChangeKind::Added)));
    out.extend(
        pending
            .deleted
            .into_iter()
            .map(|p| (p, ChangeKind::Deleted)),
    );
    out.extend(
        pending
            .modified
            .into_iter()
            .map(|p| (p, ChangeKind::Modified)),
    );
    out.sort();
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn line(mode: &str, size: u64, mtime: &str, ctime: &str, name: &[u8]) -> Vec<u8> {
        let mut l = format!(
            "{mode} 0 0 {size} 100 1970-01-01 00:01:40.{mtime} +0000 1970-01-01 00:00:01.{ctime} +0000 0 0 7 1 "
        )
        .into_bytes();
        l.extend_from_slice(name);
        l.push(b'\n');
        l
    }

    /// A walk's output from (mode, size, mtime ns, ctime ns, name).
    pub(in crate::sandbox::kubernetes) fn walk(
        entries: &[(&str, u64, &str, &str, &[u8])],
    ) -> Vec<u8> {
        let mut out = b"22 1 0:5 / / rw - overlay overlay rw\n23 22 0:6 / /proc rw - proc proc rw\n24 22 8:1 /x /etc/ho\\040sts rw - ext4 /dev/sda rw\n".to_vec();
        out.push(0);
        for e in entries {
            out.extend_from_slice(e.4);
            out.push(0);
        }
        out.push(0);
        for e in entries {
            out.extend(line(e.0, e.1, e.2, e.3, e.4));
        }
        out
    }

    pub(in crate::sandbox::kubernetes) const D: &str = "41ed";
    pub(in crate::sandbox::kubernetes) const F: &str = "81a4";
    pub(in crate::sandbox::kubernetes) const L: &str = "a1ff";

    #[test]
    fn a_walk_is_read_with_any_name() {
        let out = walk(&[
            (D, 0, "0", "0", b"/"),
            (F, 3, "5", "0", b"/a b"),
            (F, 3, "5", "0", b"/new\nline"),
            (F, 3, "5", "0", b"/\xff\xfe"),
            (D, 0, "0", "0", b"/proc"),
        ]);
        let w = Walk::parse(&out).expect("parses");
        assert_eq!(w.entries.len(), 5);
        assert!(w.mounts.contains(b"/proc".as_slice()));
        assert!(w.mounts.contains(b"/etc/ho sts".as_slice()));
        assert!(!w.mounts.contains(b"/".as_slice()));
        let s = &w.entries[b"/new\nline".as_slice()];
        assert_eq!((s.size, s.mtime, s.mtime_ns), (3, 100, 500_000_000));
        assert_eq!(s.mode, 0o100644);
        let mut cut = out.clone();
        cut.truncate(out.len() - 3);
        assert!(Walk::parse(&cut).is_err());
    }

    #[test]
    fn the_comparison_keeps_the_engines_rules() {
        let image = Walk::parse(&walk(&[
            (D, 0, "0", "0", b"/"),
            (D, 0, "0", "0", b"/etc"),
            (F, 4, "1", "0", b"/etc/keep"),
            (F, 4, "1", "0", b"/etc/same"),
            (F, 4, "1", "0", b"/etc/touched"),
            (F, 4, "1", "0", b"/etc/gone"),
            (D, 0, "0", "0", b"/lib"),
            (D, 0, "0", "0", b"/lib/b"),
            (F, 1, "1", "0", b"/lib/b/deep"),
            (F, 1, "1", "0", b"/lib/link"),
            (D, 0, "0", "0", b"/proc"),
        ]))
        .expect("image");
        let now = Walk::parse(&walk(&[
            (D, 0, "0", "9", b"/"),
            (D, 0, "9", "9", b"/etc"),
            (F, 4, "1", "9", b"/etc/keep"), // rewritten, size and mtime kept
            (F, 4, "1", "0", b"/etc/same"), // untouched
            (F, 4, "1", "9", b"/etc/touched"), // copied up, content the same
            (D, 0, "0", "0", b"/lib"),
            (L, 1, "2", "9", b"/lib/link"), // a symlink now
            (D, 0, "0", "0", b"/proc"),
            (D, 0, "0", "9", b"/new"),
            (F, 1, "1", "9", b"/new/f"),
        ]))
        .expect("now");
        let pending = compare(&image, &now);
        assert_eq!(
            pending.ambiguous,
            vec![b"/etc/keep".to_vec(), b"/etc/touched".to_vec()]
        );
        let list = finish(&image, pending, &[b"/etc/keep".to_vec()]);
        let got: Vec<(&str, ChangeKind)> = list.iter().map(|c| (c.path.as_str(), c.kind)).collect();
        use ChangeKind::{Added, Deleted, Modified};
        assert_eq!(
            got,
            vec![
                ("/etc", Modified),
                ("/etc/gone", Deleted),
                ("/etc/keep", Modified),
                ("/lib", Modified),
                ("/lib/b", Deleted),
                ("/lib/link", Modified),
                ("/new", Added),
                ("/new/f", Added),
            ]
        );
    }
}
