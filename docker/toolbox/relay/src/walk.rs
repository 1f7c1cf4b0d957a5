//! `arbiter-relay walk FORMAT [ROOT]`: the walk of a root filesystem the Kubernetes backend's
//! change set reads (`src/sandbox/kubernetes/walk.rs` parses it), in one process: what the
//! toolbox's busybox made with `cat`, `find -xdev -print0`, `xargs` and `stat -c FORMAT` (five
//! processes and one `stat` process per few thousand paths; 150 ms of CPU for a Debian image
//! of 9,000 paths), byte for byte:
//!
//! - `/proc/self/mountinfo`, then a NUL;
//! - every path at and beneath ROOT (default `/`), NUL-terminated, then a NUL: directories
//!   before what they hold, each directory's entries in the order the kernel lists them, every
//!   entry by `lstat` (a symlink is never followed). A directory on another filesystem than
//!   ROOT's (a mount point) is listed but not entered, as `find -xdev` does; a file on another
//!   one (a bind-mounted `/etc/hosts`) is listed;
//! - one line per path in the same order: `%f %u %g %s %Y %y %z %t %T %i %h %n` as busybox's
//!   `stat -c` prints it with `TZ=UTC0` (mode and device numbers in hex, the two dates as
//!   `YYYY-MM-DD HH:MM:SS.NNNNNNNNN +0000`), the name last, as listed.
//!
//! With `--recent MINUTES LIST` it also writes LIST: every path it walked whose ctime is less
//! than MINUTES minutes old but ROOT itself, without its leading `/`, one per line: what the
//! stop's `find / -xdev -cmin -MINUTES | sed 's|^/||'` listed for `tar --no-recursion -T` (the
//! archive of what changed, after_stop.rs), without walking again.
//!
//! Only that format: another is a usage error (2). Nothing is written unless the whole walk
//! was read: exit 90 when the mount table cannot be read, 91 when a directory or a path
//! cannot (the path and the error on stderr), 92 when stdout cannot be written, 93 when LIST
//! cannot.

use std::ffi::OsStr;
use std::fs::Metadata;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The one format this walk prints (the backend's `walk::STAT_FORMAT`).
pub const FORMAT: &str = "%f %u %g %s %Y %y %z %t %T %i %h %n";

pub fn run(args: &[String]) -> ! {
    let (format, rest) = args.split_first().unwrap_or_else(|| usage());
    let (root, rest) = match rest {
        [root, rest @ ..] if !root.starts_with("--") => (root.as_str(), rest),
        rest => ("/", rest),
    };
    let recent = match rest {
        [] => None,
        [flag, minutes, list] if flag == "--recent" => match minutes.parse::<i64>() {
            Ok(minutes) => Some((minutes, list)),
            Err(_) => usage(),
        },
        _ => usage(),
    };
    if format != FORMAT {
        eprintln!("walk: only the format {FORMAT:?}");
        std::process::exit(2);
    }
    let mounts = std::fs::read("/proc/self/mountinfo").unwrap_or_else(|e| {
        eprintln!("walk: cannot read /proc/self/mountinfo: {e}");
        std::process::exit(90)
    });
    let walked = walk(root.as_bytes()).unwrap_or_else(|(path, e)| {
        eprintln!("walk: {}: {e}", String::from_utf8_lossy(&path));
        std::process::exit(91)
    });
    if let Some((minutes, list)) = recent {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let written = std::fs::write(list, walked.recent(root.as_bytes(), now, minutes));
        if let Err(e) = written {
            eprintln!("walk: cannot write {list}: {e}");
            std::process::exit(93);
        }
    }
    let mut out = io::stdout().lock();
    let written = out
        .write_all(&mounts)
        .and_then(|()| out.write_all(b"\0"))
        .and_then(|()| out.write_all(&walked.paths))
        .and_then(|()| out.write_all(b"\0"))
        .and_then(|()| out.write_all(&walked.lines))
        .and_then(|()| out.flush());
    if let Err(e) = written {
        eprintln!("walk: cannot write the walk: {e}");
        std::process::exit(92);
    }
    std::process::exit(0);
}

fn usage() -> ! {
    eprintln!("usage: arbiter-relay walk '{FORMAT}' [ROOT] [--recent MINUTES LIST]");
    std::process::exit(2);
}

/// The paths (NUL-terminated) and their stat lines, in walk order, and each path's ctime.
#[derive(Default)]
pub struct Walked {
    pub paths: Vec<u8>,
    pub lines: Vec<u8>,
    ctimes: Vec<i64>,
}

impl Walked {
    fn add(&mut self, path: &[u8], meta: &Metadata) {
        self.paths.extend_from_slice(path);
        self.paths.push(0);
        stat_line(&mut self.lines, path, meta);
        self.ctimes.push(meta.ctime());
    }

    /// Busybox `find -cmin -MINUTES` at `now` (an age in whole seconds under MINUTES * 60),
    /// `root` left out, each path without its leading `/` on a line.
    fn recent(&self, root: &[u8], now: i64, minutes: i64) -> Vec<u8> {
        let mut out = Vec::new();
        let paths = self.paths.split(|&b| b == 0);
        for (path, ctime) in paths.zip(&self.ctimes) {
            if path != root && now - ctime < minutes * 60 {
                out.extend_from_slice(path.strip_prefix(b"/").unwrap_or(path));
                out.push(b'\n');
            }
        }
        out
    }
}

/// Walk `root` (see the header); the first path that could not be read, and why, fails it.
pub fn walk(root: &[u8]) -> Result<Walked, (Vec<u8>, io::Error)> {
    let meta = std::fs::symlink_metadata(as_path(root)).map_err(|e| (root.to_vec(), e))?;
    let dev = meta.dev();
    let mut walked = Walked::default();
    // Paths still to visit, the next one last; a directory's entries go on in reverse so that
    // they come off in the kernel's order, each directory's before its next sibling's.
    let mut stack = vec![(root.to_vec(), meta)];
    while let Some((path, meta)) = stack.pop() {
        walked.add(&path, &meta);
        if !meta.is_dir() || meta.dev() != dev {
            continue;
        }
        let failed = |e| (path.clone(), e);
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(as_path(&path)).map_err(failed)? {
            let entry = entry.map_err(failed)?;
            let child = join(&path, entry.file_name().as_bytes());
            // `DirEntry::metadata` is an `lstat` relative to the open directory.
            match entry.metadata() {
                Ok(meta) => entries.push((child, meta)),
                Err(e) => return Err((child, e)),
            }
        }
        stack.extend(entries.into_iter().rev());
    }
    Ok(walked)
}

fn as_path(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

/// `dir/name` as busybox's `concat_path_file` makes it (no second slash after `/`).
fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut path = Vec::with_capacity(dir.len() + 1 + name.len());
    path.extend_from_slice(dir);
    if !dir.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    path
}

/// One [`FORMAT`] line, as busybox 1.35's `stat -c` prints it (coreutils/stat.c: `%lx` for
/// the mode and the device numbers, decimal for the rest (`%Y` signed), `human_time` for the
/// dates).
fn stat_line(out: &mut Vec<u8>, path: &[u8], meta: &Metadata) {
    let rdev = meta.rdev();
    // glibc's and musl's major() and minor().
    let major = ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff);
    let minor = ((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff);
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "{:x} {} {} {} {} ",
        meta.mode(),
        meta.uid(),
        meta.gid(),
        meta.size(),
        meta.mtime(),
    );
    human_time(out, meta.mtime(), meta.mtime_nsec());
    out.push(b' ');
    human_time(out, meta.ctime(), meta.ctime_nsec());
    let _ = write!(out, " {major:x} {minor:x} {} {} ", meta.ino(), meta.nlink());
    out.extend_from_slice(path);
    out.push(b'\n');
}

/// `strftime("%Y-%m-%d %H:%M:%S.<nanoseconds> %z")` of a time in UTC.
fn human_time(out: &mut Vec<u8>, secs: i64, nanos: i64) {
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let _ = write!(
        out,
        "{year}-{month:02}-{day:02} {:02}:{:02}:{:02}.{nanos:09} +0000",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
    );
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, as arbiter's `src/timefmt.rs` has it: the relay is a crate of its own,
/// std only, and takes nothing of arbiter's).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn human_time(secs: i64, nanos: i64) -> String {
        let mut out = Vec::new();
        super::human_time(&mut out, secs, nanos);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn dates_are_the_calendar_days() {
        assert_eq!(human_time(0, 0), "1970-01-01 00:00:00.000000000 +0000");
        assert_eq!(
            human_time(1_796_664_749, 295_293_570),
            "2026-12-07 17:32:29.295293570 +0000"
        );
        // A leap day, the last second of a century that is not a leap year, and before 1970.
        assert_eq!(
            human_time(951_782_400, 1),
            "2000-02-29 00:00:00.000000001 +0000"
        );
        assert_eq!(
            human_time(4_107_542_399, 0),
            "2100-02-28 23:59:59.000000000 +0000"
        );
        assert_eq!(human_time(-1, 5), "1969-12-31 23:59:59.000000005 +0000");
    }

    /// The walk of a fresh tree `name` under the temp dir that `make` made; the tree is
    /// removed again.
    fn walked(name: &str, make: impl Fn(&Path)) -> (std::path::PathBuf, Walked) {
        let root = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        make(&root);
        let walked = walk(root.as_os_str().as_bytes()).unwrap();
        let _ = std::fs::remove_dir_all(&root);
        (root, walked)
    }

    #[test]
    fn recent_paths_are_those_find_cmin_lists() {
        let (root, walked) = walked("relay-recent", |root| {
            std::fs::create_dir(root.join("d")).unwrap();
            std::fs::write(root.join("d/f"), b"x").unwrap();
        });
        let now = *walked.ctimes.iter().max().unwrap();
        let rel = root.to_string_lossy()[1..].to_string();
        let listed = String::from_utf8(walked.recent(root.as_os_str().as_bytes(), now, 2)).unwrap();
        assert_eq!(listed, format!("{rel}/d\n{rel}/d/f\n"), "the root left out");
        // An age of exactly MINUTES * 60 seconds is no longer recent.
        let later = walked.recent(root.as_os_str().as_bytes(), now + 120, 2);
        assert!(later.is_empty(), "{}", String::from_utf8_lossy(&later));
    }

    #[test]
    fn paths_join_as_busybox_joins_them() {
        assert_eq!(join(b"/", b"etc"), b"/etc");
        assert_eq!(join(b"/etc", b"hosts"), b"/etc/hosts");
    }

    #[test]
    fn a_tree_is_walked_directories_first_without_following_links() {
        let (root, walked) = walked("relay-walk", |root| {
            std::fs::create_dir_all(root.join("a/b")).unwrap();
            std::fs::write(root.join("a/b/f"), b"xy").unwrap();
            std::os::unix::fs::symlink("a", root.join("l")).unwrap();
        });
        let paths: Vec<String> = walked
            .paths
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).replace(&*root.to_string_lossy(), "R"))
            .collect();
        let at = |p: &str| paths.iter().position(|q| q == p).unwrap();
        assert_eq!(paths.len(), 5, "{paths:?}");
        assert_eq!(at("R"), 0);
        assert!(at("R/a") < at("R/a/b") && at("R/a/b") < at("R/a/b/f"));
        let lines = String::from_utf8_lossy(&walked.lines).to_string();
        let link = lines.lines().find(|l| l.ends_with("/l")).unwrap();
        // A symlink: mode 0120777, its size the target's length.
        let fields: Vec<&str> = link.split(' ').collect();
        assert_eq!((fields[0], fields[3]), ("a1ff", "1"), "{link}");
        let file = lines.lines().find(|l| l.ends_with("/a/b/f")).unwrap();
        assert_eq!(file.split(' ').nth(3), Some("2"), "{file}");
        assert_eq!(
            file.split(' ').count(),
            16,
            "15 fields and the name: {file}"
        );
    }
}
