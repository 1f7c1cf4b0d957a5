//! `/logs` read by the stop that ends a pod's processes: what a trial reads next from a
//! stopped pod is its logs (the agent's, then the verifier's), and nothing can change them
//! until the next exec, so the stop's own exec sends an archive of `/logs` after its count
//! line (when `/logs` is a plain directory and the archive is small), and a download at or
//! beneath `/logs` is made from it on the host: one request, not two.
//!
//! The archive made from it is the one the pod's own `tar` would make of that path (names
//! relative to the path's parent, links kept as links); where the two could differ (a
//! symlink on the way, which the kernel would follow; a hard link, whose first name decides
//! which entry holds the content) nothing is made here and the download goes to the pod.
//! What the stream brought is checked against the size and sha256 the pod wrote before it;
//! short or different, it is not used. Any exec into the pod (`exec.rs`'s `attach`) drops it.
//!
//! The first stop of an agent's pod also sends the walk of its root filesystem along (the
//! change set's, `changes.rs`), after the logs and framed the same way: the change set that
//! follows reads it instead of walking in another exec. And what the change set reads next,
//! the content of what changed: an archive of every entry whose ctime is younger than the
//! pod's first process (plus a margin), listed without recursion. Nothing in a container can
//! set a ctime back, and every entry its processes wrote has one from after they started, so
//! the archive holds all of what changed, and maybe more. Whether it holds all of a path that
//! is asked for is decided by the walk taken in the same stop: a download is made from it only
//! when every entry the walk has at or beneath that path is in it (no mount point there, and
//! every directory on the way a directory); else the pod is asked.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::walk::Walk;
use crate::digest::sha256_hex;
use crate::sandbox::{Download, Extent, Fetched, SandboxError};

/// The most bytes of `/logs` a stop sends along.
pub(super) const LOGS_MAX: u64 = 4 << 20;

/// The most bytes of a walk a stop sends along (a bigger one is walked in its own exec).
pub(super) const WALK_MAX: u64 = 32 << 20;

/// The most bytes of the archive of recent changes a stop sends along (a bigger one is not
/// sent: the change set reads its paths in an exec).
pub(super) const CHANGED_MAX: u64 = 8 << 20;

/// The line before the archive in the stop's stdout.
const HEAD: &str = "arbiter-logs ";
/// The line before the walk in the stop's stdout.
const WALK_HEAD: &str = "arbiter-walk ";
/// The line before the archive of recent changes in the stop's stdout.
const CHANGED_HEAD: &str = "arbiter-changed ";

/// Shell lines killing every process but PID 1, the shell itself (and the keep-alive's own
/// sleep, which PID 1 starts again) until none is left, or 3 s passed: `$n` is how many
/// are left. `$_rp`, when set, is a process spared too: the relay that carries the command
/// of a wrapper (`exec.rs`'s `r`), its parent. A macro, so that `concat!` takes it into the
/// scripts (the stop's, which sets `_rp` empty, and the exec wrapper's halt).
macro_rules! kill_all {
    () => {
        r#"i=0
while :; do
  if [ -n "$_rp" ]; then
    for d in /proc/[0-9]*; do p=${d#/proc/}; case $p in 1|$$|$_rp) ;; *) kill -KILL "$p" 2>/dev/null;; esac; done
  else kill -KILL -1 2>/dev/null; fi
  n=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    { [ "$p" = 1 ] || [ "$p" = $$ ] || [ "$p" = "$_rp" ]; } && continue
    read -r s 2>/dev/null <"$d/stat" || continue
    r=${s##*) }; set -- $r
    [ "$1" = Z ] && continue
    if [ "$2" = 1 ]; then c=; { while IFS= read -r -d '' w; do c="$c$w "; done; } 2>/dev/null <"$d/cmdline"; [ "$c" = "/.arbiter/toolbox/busybox sleep 3600 " ] && continue; fi
    n=$((n+1))
  done
  [ "$n" = 0 ] && break
  i=$((i+1)); [ "$i" -ge 150 ] && break
  usleep 20000
done
"#
    };
}
pub(super) use kill_all;

/// Shell lines the stop runs once every process is gone: `/logs` archived into a part file
/// (sent by [`SEND_PARTS`]), when it is under `$_lc` bytes (else nothing is sent).
pub(super) const SEND_LOGS: &str = r#"_pf=
if [ -n "$_lc" ] && [ -d /logs ] && [ ! -L /logs ]; then
  t=/.arbiter/scratch/stop-$$.logs; set -o pipefail
  if tar -c -f - -C / logs 2>/dev/null | head -c "$_lc" >"$t"; then _pf="$_pf logs:$t"; else unlink "$t"; fi 2>/dev/null
fi"#;

/// Shell lines the stop runs after [`SEND_LOGS`]: the toolbox relay's walk (`changes.rs`'s
/// `walk_argv`, its format `$_wf`) run into a part file, sent when it exited 0 within 20 s under
/// `$_wk` bytes (else nothing is sent, and the change set walks in its own exec). With
/// `$_cc` set, the same walk lists what [`SEND_CHANGED`] archives into `$_cl`: every entry
/// of the root filesystem whose ctime is younger than the pod's first process plus two
/// minutes (`--recent`, as `find / -xdev -cmin` listed them).
pub(super) const SEND_WALK: &str = r#"_cl=
if [ -n "$_wk" ]; then
  t=/.arbiter/scratch/stop-$$.walk; _r=
  if [ -n "$_cc" ] && read -r s </proc/1/stat && set -- ${s##*) } && read -r up x </proc/uptime && up=${up%.*}; then
    _r=$(( (up - ${20}/100) / 60 + 2 )) && _cl=$t.list
  fi
  if [ -n "$_cl" ]; then set -- --recent "$_r" "$_cl"; else set --; fi
  if timeout 20 /.arbiter/toolbox/relay walk "$_wf" "$@" >"$t" 2>/dev/null; then _pf="$_pf walk:$t"; else unlink "$t"; unlink "$_cl"; _cl=; fi 2>/dev/null
fi"#;

/// Shell lines the stop runs after [`SEND_WALK`] (when it walked and listed): what the walk
/// listed, archived without recursion into a part file, sent when all of it was archived
/// under `$_cc` bytes (else nothing is sent).
pub(super) const SEND_CHANGED: &str = r#"if [ -n "$_cl" ]; then
  t=/.arbiter/scratch/stop-$$.changed; set -o pipefail
  tar -c -f - -C / --no-recursion -T "$_cl" 2>/dev/null | head -c "$_cc" >"$t" && _pf="$_pf changed:$t"
  unlink "$_cl" 2>/dev/null
fi"#;

/// Shell lines the stop runs after its parts were made (`$_pf`: `KIND:FILE` words in the
/// order made): each part under its bound is sent after a line `arbiter-KIND SIZE SHA256`,
/// in that order; one `wc`, one `sha256sum` and one `cat` for all of them (a process costs
/// a loaded node about a millisecond), each figure taken only where its line names the file.
pub(super) const SEND_PARTS: &str = r#"if [ -n "$_pf" ]; then
  _fs=; for e in $_pf; do _fs="$_fs ${e#*:}"; done
  _sz=$(wc -c $_fs 2>/dev/null); _sh=$(sha256sum $_fs 2>/dev/null); _out=
  for e in $_pf; do k=${e%%:*} t=${e#*:} n= s=
    set -- $_sz; while [ $# -ge 2 ]; do [ "$2" = "$t" ] && { n=$1; break; }; shift 2; done
    set -- $_sh; while [ $# -ge 2 ]; do [ "$2" = "$t" ] && { s=$1; break; }; shift 2; done
    case $k in logs) c=$_lc;; walk) c=$_wk;; *) c=$_cc;; esac
    [ -n "$n" ] && [ -n "$s" ] && [ "$n" -lt "$c" ] && { echo "arbiter-$k $n $s" >"$t.h"; _out="$_out $t.h $t"; }
  done
  [ -z "$_out" ] || $B cat $_out
  for t in $_fs; do unlink "$t"; unlink "$t.h"; done 2>/dev/null; :
fi"#;

/// An archive of the names at and beneath a path (relative to `/`: its `top`), as a pod sent
/// it: (top, archive).
type Sent = (String, Arc<Vec<u8>>);

/// Archives of `/logs`, walks and archives of recent changes by pod, as their stops sent them.
#[derive(Default)]
pub(super) struct StoppedLogs {
    /// An archive of the names at and beneath a path (relative to `/`), by pod.
    logs: Mutex<HashMap<String, Sent>>,
    /// Pods halted by a command's own wrapper, and what it sent along (`exec.rs`).
    halted: Mutex<HashMap<String, Option<Vec<u8>>>>,
    walks: Mutex<HashMap<String, Walk>>,
    changed: Mutex<HashMap<String, Arc<Changed>>>,
}

/// An archive of a pod's recent changes, and what the walk of the same stop says of each path.
pub(super) struct Changed {
    archive: Vec<u8>,
    /// The names the archive holds (relative to `/`, as the walk's paths without the slash).
    names: HashSet<Vec<u8>>,
    /// Every path of the walk, and whether it is a directory.
    dirs: BTreeMap<Vec<u8>, bool>,
    /// The walk's mount points.
    mounts: HashSet<Vec<u8>>,
}

impl Changed {
    /// Index an archive against the walk of the same stop; `None` when it holds a hard link
    /// (which name carries the content depends on what is archived).
    fn new(archive: Vec<u8>, walk: &Walk) -> Option<Changed> {
        let mut names = HashSet::new();
        let mut entries = tar::Archive::new(&archive[..]);
        for entry in entries.entries().ok()? {
            let entry = entry.ok()?;
            if entry.header().entry_type().is_hard_link() {
                return None;
            }
            let raw = entry.path_bytes();
            let name = raw.strip_suffix(b"/").unwrap_or(&raw);
            names.insert(name.to_vec());
        }
        let dirs = walk
            .entries
            .iter()
            .map(|(path, stat)| (path.clone(), stat.is_dir()))
            .collect();
        Some(Changed {
            archive,
            names,
            dirs,
            mounts: walk.mounts.clone(),
        })
    }

    /// The archive the pod's `tar` would make of `path`, when this one holds all of it.
    fn sub_archive(&self, path: &str, entry_only: bool) -> Option<Made> {
        let path = path.trim_end_matches('/');
        let rel = path.strip_prefix('/')?;
        if rel.is_empty()
            || rel
                .split('/')
                .any(|part| part.is_empty() || part == "." || part == "..")
        {
            return None;
        }
        // Every directory on the way a directory (the kernel would follow a symlink), and
        // the path itself one the walk saw: else only the pod can say.
        let mut at = 0;
        while let Some(i) = rel[at..].find('/') {
            let up = &path[..=at + i];
            if self.dirs.get(up.as_bytes()) != Some(&true) {
                return None;
            }
            at += i + 1;
        }
        let is_dir = *self.dirs.get(path.as_bytes())?;
        let below = format!("{path}/").into_bytes();
        let needed: Vec<&[u8]> = if entry_only || !is_dir {
            vec![path.as_bytes()]
        } else {
            // A mount point beneath it: its tar would read another filesystem.
            if self
                .mounts
                .iter()
                .any(|m| m == path.as_bytes() || m.starts_with(&below))
            {
                return None;
            }
            let from = path.as_bytes().to_vec();
            let mut all = vec![path.as_bytes()];
            all.extend(
                self.dirs
                    .range(from..)
                    .skip(1)
                    .map(|(p, _)| p.as_slice())
                    .take_while(|p| p.starts_with(&below)),
            );
            all
        };
        if needed.iter().any(|p| !self.names.contains(&p[1..])) {
            return None;
        }
        sub_archive(&self.archive, path, entry_only, None)
    }
}

impl StoppedLogs {
    /// Keep what the stop of `pod` sent after its count line (`out`: its stdout), each part
    /// when it arrived as the pod wrote it.
    pub(super) fn keep(&self, pod: &str, out: &[u8]) {
        let mut walk = None;
        for (head, bytes) in checked_parts(out) {
            if head == HEAD {
                lock(&self.logs).insert(
                    pod.to_string(),
                    ("logs".to_string(), Arc::new(bytes.to_vec())),
                );
            } else if head == WALK_HEAD {
                match Walk::parse(bytes) {
                    Ok(w) => walk = Some(w),
                    Err(e) => tracing::debug!(pod, "the walk the stop sent: {e}"),
                }
            } else if head == CHANGED_HEAD
                && let Some(walk) = &walk
                && let Some(changed) = Changed::new(bytes.to_vec(), walk)
            {
                lock(&self.changed).insert(pod.to_string(), Arc::new(changed));
            }
        }
        if let Some(walk) = walk {
            lock(&self.walks).insert(pod.to_string(), walk);
        }
    }

    /// A halting command's wrapper halted `pod` once it ended (`exec.rs`), and sent `sent`.
    pub(super) fn halted(&self, pod: &str, sent: Option<Vec<u8>>) {
        lock(&self.halted).insert(pod.to_string(), sent);
    }

    /// Whether the pod's last command halted it, and what it sent along, once.
    pub(super) fn take_halted(&self, pod: &str) -> Option<Option<Vec<u8>>> {
        lock(&self.halted).remove(pod)
    }

    /// Keep the archive a halting command sent of `path` (as `tar -c -C / ${path#/}` makes
    /// it): downloads at or beneath `path` are made from it.
    pub(super) fn keep_sent(&self, pod: &str, path: &str, archive: Vec<u8>) {
        let top = path.trim_matches('/').to_string();
        if top.is_empty()
            || top
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return;
        }
        lock(&self.logs).insert(pod.to_string(), (top, Arc::new(archive)));
    }

    /// Something may change the pod's files: what was kept is stale.
    pub(super) fn drop_pod(&self, pod: &str) {
        lock(&self.logs).remove(pod);
        lock(&self.halted).remove(pod);
        lock(&self.walks).remove(pod);
        lock(&self.changed).remove(pod);
    }

    /// The walk `pod`'s stop sent, once.
    pub(super) fn take_walk(&self, pod: &str) -> Option<Walk> {
        lock(&self.walks).remove(pod)
    }

    /// `want` made from the `/logs` (or the recent changes) `pod`'s stop sent; `None` when
    /// there is none, or when only the pod can say.
    pub(super) fn download(
        &self,
        pod: &str,
        want: Download<'_>,
    ) -> Option<Result<Fetched, SandboxError>> {
        let (to, limit) = (want.to, want.limit);
        let entry_only = want.extent == Extent::Entry;
        let logs = lock(&self.logs).get(pod).cloned();
        let made =
            match logs.and_then(|(top, a)| sub_archive(&a, want.path, entry_only, Some(&top))) {
                Some(made) => made,
                None => {
                    let changed = lock(&self.changed).get(pod).cloned()?;
                    changed.sub_archive(want.path, entry_only)?
                }
            };
        Some(match made {
            Made::NotFound => Ok(Fetched::NotFound),
            Made::Archive(bytes) if bytes.len() as u64 > limit => Ok(Fetched::TooLarge { limit }),
            Made::Archive(bytes) => std::fs::write(to, &bytes)
                .map(|()| Fetched::Archive {
                    bytes: bytes.len() as u64,
                })
                .map_err(SandboxError::io(to.to_path_buf())),
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The size of the part a line of a stop's stdout heads (`arbiter-logs SIZE SHA256` and the
/// like, as [`checked_parts`] reads them); `None`: the line heads none.
pub(super) fn part_size(line: &[u8]) -> Option<usize> {
    let head = [HEAD, WALK_HEAD, CHANGED_HEAD]
        .into_iter()
        .find(|h| line.starts_with(h.as_bytes()))?;
    let (size, _) = std::str::from_utf8(&line[head.len()..])
        .ok()?
        .split_once(' ')?;
    size.parse().ok()
}

/// The parts of a stop's stdout, each after a line `HEAD SIZE SHA256` (`arbiter-logs `,
/// `arbiter-walk `, `arbiter-changed `), in order, as long as each is whole and the same; lines before the first
/// (the count line) are skipped.
fn checked_parts(out: &[u8]) -> Vec<(&'static str, &[u8])> {
    let mut parts = Vec::new();
    let mut rest = out;
    while let Some(end) = rest.iter().position(|&b| b == b'\n') {
        let line = &rest[..end];
        let Some(head) = [HEAD, WALK_HEAD, CHANGED_HEAD]
            .into_iter()
            .find(|h| line.starts_with(h.as_bytes()))
        else {
            if !parts.is_empty() {
                break;
            }
            rest = &rest[end + 1..];
            continue;
        };
        let Some((size, sha)) = std::str::from_utf8(&line[head.len()..])
            .ok()
            .and_then(|l| l.split_once(' '))
        else {
            break;
        };
        let Ok(size) = size.parse::<usize>() else {
            break;
        };
        let body = &rest[end + 1..];
        if body.len() < size || sha256_hex(&body[..size]) != sha {
            break;
        }
        parts.push((head, &body[..size]));
        rest = &body[size..];
    }
    parts
}

/// The archive after the `arbiter-logs SIZE SHA256` line in `out`, when whole and the same.
#[cfg(test)]
fn checked(out: &[u8]) -> Option<&[u8]> {
    checked_parts(out)
        .into_iter()
        .find(|(head, _)| *head == HEAD)
        .map(|(_, bytes)| bytes)
}

#[derive(Debug, PartialEq)]
enum Made {
    NotFound,
    Archive(Vec<u8>),
}

/// The archive the pod's `tar -c -C DIR NAME` would make of `path` (`DIR/NAME`), from an
/// archive of the names beneath `/` made by the pod's `tar` (of `/logs` when `top` is
/// `Some("logs")`: `None` when `path` is not at or beneath it); `None` when the pod must say.
fn sub_archive(logs: &[u8], path: &str, entry_only: bool, top: Option<&str>) -> Option<Made> {
    let rel = path.trim_end_matches('/').strip_prefix('/')?;
    if let Some(top) = top
        && rel != top
        && !rel.starts_with(&format!("{top}/"))
    {
        return None;
    }
    if rel
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return None;
    }
    let parent = rel.rsplit_once('/').map_or("", |(dir, _)| dir);
    let mut found = false;
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Complete);
    let mut archive = tar::Archive::new(logs);
    for entry in archive.entries().ok()? {
        let entry = entry.ok()?;
        let kind = entry.header().entry_type();
        if kind.is_hard_link() {
            return None;
        }
        let raw = String::from_utf8(entry.path_bytes().into_owned()).ok()?;
        let name = raw.trim_start_matches("./").trim_end_matches('/');
        // A symlink (or anything but a directory) on the way: the kernel would follow it.
        if rel.starts_with(&format!("{name}/")) && !kind.is_dir() {
            return None;
        }
        let inside = name == rel || (!entry_only && name.starts_with(&format!("{rel}/")));
        if !inside {
            continue;
        }
        found = true;
        let short = match parent {
            "" => name,
            dir => name.strip_prefix(dir)?.trim_start_matches('/'),
        };
        let mut header = entry.header().clone();
        let link = entry.link_name().ok()?.map(|l| l.into_owned());
        let appended = match (kind.is_file(), link) {
            (true, _) => builder.append_data(&mut header, short, entry),
            (false, Some(link)) => builder.append_link(&mut header, short, link),
            (false, None) => builder.append_data(&mut header, short, std::io::empty()),
        };
        appended.ok()?;
    }
    if !found {
        return Some(Made::NotFound);
    }
    builder.into_inner().ok().map(Made::Archive)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::kubernetes::walk::tests::{D, F, L};
    use std::path::Path;

    fn logs_archive(symlinked_agent: bool, hard_link: bool) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let dir = |b: &mut tar::Builder<Vec<u8>>, name: &str| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o755);
            h.set_size(0);
            b.append_data(&mut h, name, std::io::empty()).unwrap();
        };
        dir(&mut b, "logs/");
        let file = |b: &mut tar::Builder<Vec<u8>>, name: &str, body: &[u8]| {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_size(body.len() as u64);
            b.append_data(&mut h, name, body).unwrap();
        };
        if symlinked_agent {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, "logs/agent", "/etc").unwrap();
        } else {
            dir(&mut b, "logs/agent/");
            file(&mut b, "logs/agent/out.txt", b"agent says");
        }
        dir(&mut b, "logs/verifier/");
        file(&mut b, "logs/verifier/reward.txt", b"1");
        if hard_link {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Link);
            h.set_size(0);
            b.append_link(&mut h, "logs/verifier/again", "logs/verifier/reward.txt")
                .unwrap();
        }
        b.into_inner().unwrap()
    }

    fn names(archive: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut a = tar::Archive::new(archive);
        a.entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let name = e.path().unwrap().display().to_string();
                let mut body = Vec::new();
                std::io::Read::read_to_end(&mut e, &mut body).unwrap();
                (name, body)
            })
            .collect()
    }

    #[test]
    fn a_path_beneath_logs_is_archived_as_the_pods_tar_would() {
        let logs = logs_archive(false, false);
        let Some(Made::Archive(a)) = sub_archive(&logs, "/logs/verifier", false, Some("logs"))
        else {
            panic!("made")
        };
        assert_eq!(
            names(&a),
            [
                ("verifier".to_string(), vec![]),
                ("verifier/reward.txt".to_string(), b"1".to_vec())
            ]
        );
        let Some(Made::Archive(a)) = sub_archive(&logs, "/logs/agent/out.txt", false, Some("logs"))
        else {
            panic!("made")
        };
        assert_eq!(names(&a), [("out.txt".to_string(), b"agent says".to_vec())]);
        let Some(Made::Archive(a)) = sub_archive(&logs, "/logs/", true, Some("logs")) else {
            panic!("made")
        };
        assert_eq!(names(&a), [("logs".to_string(), vec![])]);
        let Some(Made::Archive(a)) = sub_archive(&logs, "/logs", false, Some("logs")) else {
            panic!("made")
        };
        assert_eq!(names(&a).len(), 5);
        assert_eq!(
            sub_archive(&logs, "/logs/nothing", false, Some("logs")),
            Some(Made::NotFound)
        );
        assert_eq!(
            sub_archive(&logs, "/logs/agent/none/deeper", false, Some("logs")),
            Some(Made::NotFound)
        );
    }

    #[test]
    fn the_pod_says_what_only_it_can() {
        // Not beneath /logs, or not a plain path.
        let logs = logs_archive(false, false);
        assert_eq!(sub_archive(&logs, "/app", false, Some("logs")), None);
        assert_eq!(sub_archive(&logs, "/logsx", false, Some("logs")), None);
        assert_eq!(
            sub_archive(&logs, "/logs/../etc", false, Some("logs")),
            None
        );
        // A symlink on the way: the kernel follows it.
        let linked = logs_archive(true, false);
        assert_eq!(
            sub_archive(&linked, "/logs/agent/out.txt", false, Some("logs")),
            None
        );
        // The symlink itself is archived as a link.
        let Some(Made::Archive(a)) = sub_archive(&linked, "/logs/agent", false, Some("logs"))
        else {
            panic!("made")
        };
        assert_eq!(names(&a), [("agent".to_string(), vec![])]);
        // A hard link: which name holds the content depends on the walk.
        assert_eq!(
            sub_archive(
                &logs_archive(false, true),
                "/logs/verifier",
                false,
                Some("logs")
            ),
            None
        );
    }

    #[test]
    fn only_an_archive_that_arrived_as_sent_is_kept() {
        let archive = logs_archive(false, false);
        let mut after =
            format!("arbiter-logs {} {}\n", archive.len(), sha256_hex(&archive)).into_bytes();
        after.extend_from_slice(&archive);
        assert_eq!(checked(&after), Some(&archive[..]));
        assert_eq!(checked(&after[..after.len() - 1]), None, "short");
        let mut other = after.clone();
        let last = other.len() - 600;
        other[last] ^= 1;
        assert_eq!(checked(&other), None, "changed");
        assert_eq!(checked(b"oom_kill=0\n"), None);
        // After the count line, and followed by a walk: both kept, in order.
        let walk = crate::sandbox::kubernetes::walk::tests::walk(&[(D, 0, "0", "0", b"/")]);
        let mut both = b"oom_kill=0\n".to_vec();
        both.extend_from_slice(&after);
        both.extend_from_slice(
            format!("arbiter-walk {} {}\n", walk.len(), sha256_hex(&walk)).as_bytes(),
        );
        both.extend_from_slice(&walk);
        assert_eq!(
            checked_parts(&both),
            vec![(HEAD, &archive[..]), (WALK_HEAD, &walk[..])]
        );
        // A walk that came short is not kept; the logs before it are.
        assert_eq!(
            checked_parts(&both[..both.len() - 1]),
            vec![(HEAD, &archive[..])]
        );
        let walks = StoppedLogs::default();
        walks.keep("w", &both);
        assert!(
            walks
                .download(
                    "w",
                    Download::whole("/logs", Path::new("/dev/null"), 1 << 20)
                )
                .is_some()
        );
        let taken = walks.take_walk("w").expect("the walk");
        assert_eq!(taken.entries.len(), 1);
        assert!(walks.take_walk("w").is_none(), "once");
        walks.keep("w", &both);
        walks.drop_pod("w");
        assert!(walks.take_walk("w").is_none(), "dropped by an exec");
        let kept = StoppedLogs::default();
        kept.keep("p", &after);
        let to = tempfile::NamedTempFile::new().unwrap();
        let want = |limit| Download::whole("/logs/verifier", to.path(), limit);
        let got = kept.download("p", want(1 << 20));
        assert!(matches!(got, Some(Ok(Fetched::Archive { .. }))), "{got:?}");
        let small = kept.download("p", want(10));
        assert!(matches!(small, Some(Ok(Fetched::TooLarge { limit: 10 }))));
        kept.drop_pod("p");
        assert!(kept.download("p", want(1 << 20)).is_none());
    }

    /// An archive of recent changes as the pod's `tar --no-recursion` makes it.
    fn changed_archive(hard_link: bool) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, body) in [
            ("app/", None),
            ("app/a.txt", Some(&b"new"[..])),
            ("usr/lib/", None),
            ("etc/", None),
            ("etc/ho sts", Some(&b"127.0.0.1 pod"[..])),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            match body {
                None => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    b.append_data(&mut h, name, std::io::empty()).unwrap();
                }
                Some(body) => {
                    h.set_size(body.len() as u64);
                    b.append_data(&mut h, name, body).unwrap();
                }
            }
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "app/link", "a.txt").unwrap();
        if hard_link {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Link);
            h.set_size(0);
            b.append_link(&mut h, "app/again", "app/a.txt").unwrap();
        }
        b.into_inner().unwrap()
    }

    /// The walk of the same stop: more than the archive holds (what did not change).
    fn changed_walk() -> Vec<u8> {
        crate::sandbox::kubernetes::walk::tests::walk(&[
            (D, 0, "0", "0", b"/"),
            (D, 0, "0", "0", b"/app"),
            (F, 3, "0", "0", b"/app/a.txt"),
            (L, 5, "0", "0", b"/app/link"),
            (D, 0, "0", "0", b"/usr"),
            (D, 0, "0", "0", b"/usr/lib"),
            (F, 9, "0", "0", b"/usr/lib/old"),
            (L, 4, "0", "0", b"/lnk"),
            (D, 0, "0", "0", b"/etc"),
            (F, 13, "0", "0", b"/etc/ho sts"),
        ])
    }

    fn part(head: &str, bytes: &[u8]) -> Vec<u8> {
        let mut out = format!("{head}{} {}\n", bytes.len(), sha256_hex(bytes)).into_bytes();
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn what_changed_is_made_from_the_stop_only_where_the_walk_says_it_is_all_there() {
        let walk = Walk::parse(&changed_walk()).unwrap();
        let changed = Changed::new(changed_archive(false), &walk).unwrap();
        let made = |path, entry| match changed.sub_archive(path, entry) {
            Some(Made::Archive(a)) => Some(names(&a)),
            Some(Made::NotFound) => panic!("{path}: the walk has it"),
            None => None,
        };
        assert_eq!(
            made("/app", false),
            Some(vec![
                ("app".to_string(), vec![]),
                ("app/a.txt".to_string(), b"new".to_vec()),
                ("app/link".to_string(), vec![]),
            ])
        );
        assert_eq!(
            made("/app/a.txt", false),
            Some(vec![("a.txt".to_string(), b"new".to_vec())])
        );
        assert_eq!(made("/app/", true), Some(vec![("app".to_string(), vec![])]));
        // A file beneath that did not change is not in the archive: the pod says.
        assert_eq!(made("/usr/lib", false), None);
        assert_eq!(
            made("/usr/lib", true),
            Some(vec![("lib".to_string(), vec![])])
        );
        assert_eq!(made("/usr/lib/old", false), None);
        // A symlink on the way, a path the walk has not, the root, a mount point beneath.
        assert_eq!(made("/lnk/a.txt", false), None);
        assert_eq!(made("/app/none", false), None);
        assert_eq!(made("/", false), None);
        assert_eq!(made("/app/../etc", false), None);
        assert_eq!(made("/etc", false), None);
        assert_eq!(made("/etc", true), Some(vec![("etc".to_string(), vec![])]));
        // A hard link anywhere: which name holds the content depends on what was archived.
        assert!(Changed::new(changed_archive(true), &walk).is_none());
    }

    #[test]
    fn recent_changes_are_kept_only_with_the_walk_of_the_same_stop() {
        let (walk, changed) = (changed_walk(), changed_archive(false));
        let mut out = b"oom_kill=0\n".to_vec();
        out.extend(part(WALK_HEAD, &walk));
        out.extend(part(CHANGED_HEAD, &changed));
        let to = tempfile::NamedTempFile::new().unwrap();
        let kept = StoppedLogs::default();
        kept.keep("p", &out);
        let got = kept.download("p", Download::whole("/app", to.path(), 1 << 20));
        assert!(matches!(got, Some(Ok(Fetched::Archive { .. }))), "{got:?}");
        assert_eq!(names(&std::fs::read(to.path()).unwrap()).len(), 3);
        let small = kept.download("p", Download::whole("/app", to.path(), 10));
        assert!(matches!(small, Some(Ok(Fetched::TooLarge { limit: 10 }))));
        assert!(
            kept.download("p", Download::whole("/usr", to.path(), 1 << 20))
                .is_none()
        );
        // Taking the walk (the change set) leaves the archive's index in place.
        assert!(kept.take_walk("p").is_some());
        assert!(
            kept.download("p", Download::whole("/app", to.path(), 1 << 20))
                .is_some()
        );
        kept.drop_pod("p");
        assert!(
            kept.download("p", Download::whole("/app", to.path(), 1 << 20))
                .is_none()
        );
        // Without the walk, or with one that came short, the archive is not used.
        let mut alone = b"oom_kill=0\n".to_vec();
        alone.extend(part(CHANGED_HEAD, &changed));
        kept.keep("q", &alone);
        assert!(
            kept.download("q", Download::whole("/app", to.path(), 1 << 20))
                .is_none()
        );
    }

    /// SEND_PARTS run by the toolbox's shell: each part under its bound is sent after its
    /// head line, in the order made, and the host reads them back whole; a part at its bound
    /// (cut short by the `head -c` that made it) is not sent; every part file is removed.
    #[test]
    fn the_parts_go_out_in_order_with_their_heads_and_the_files_go() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("stop-1.logs");
        let walk = dir.path().join("stop-1.walk");
        let changed = dir.path().join("stop-1.changed");
        let body = |n: usize| (0..n).map(|i| (i * 7 % 256) as u8).collect::<Vec<u8>>();
        std::fs::write(&logs, body(3000)).unwrap();
        std::fs::write(&walk, b"one line\n\0two").unwrap();
        std::fs::write(&changed, body(50)).unwrap();
        let script = format!(
            "_lc=$1 _wk=$2 _cc=$3 _pf=\"logs:{} walk:{} changed:{}\"\n{SEND_PARTS}",
            logs.display(),
            walk.display(),
            changed.display()
        );
        let Some(mut cmd) =
            super::super::hot::tests::toolbox_sh(&script, &["stop", "3001", "100", "50"])
        else {
            return;
        };
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{:?}", out.status);
        assert!(out.stderr.is_empty(), "{:?}", out.stderr);
        let parts = checked_parts(&out.stdout);
        assert_eq!(
            parts,
            [
                (HEAD, &body(3000)[..]),
                (WALK_HEAD, &b"one line\n\0two"[..])
            ],
            "the changes at their bound are not sent"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
