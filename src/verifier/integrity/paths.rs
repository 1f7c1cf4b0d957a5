//! Absolute-path helpers and symlink resolution over a virtual filesystem (the environment
//! image, optionally with the agent's changes laid over it). Nothing here touches the disk.

use std::collections::VecDeque;

/// Lexically normalise an absolute path: collapse `//` and `.`, apply `..` (never above `/`),
/// drop a trailing slash. A relative path is taken as relative to `/`.
pub(crate) fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        "/".to_string()
    } else {
        let mut s = String::with_capacity(path.len());
        for p in parts {
            s.push('/');
            s.push_str(p);
        }
        s
    }
}

/// `path` equals `base` or lies beneath it (component-wise; both normalised).
pub(crate) fn is_at_or_under(path: &str, base: &str) -> bool {
    if base == "/" {
        return true;
    }
    path == base
        || (path.len() > base.len()
            && path.starts_with(base)
            && path.as_bytes()[base.len()] == b'/')
}

/// `path` lies strictly beneath `base`.
pub(crate) fn is_under(path: &str, base: &str) -> bool {
    path != base && is_at_or_under(path, base)
}

/// The parent of a normalised absolute path (`None` for `/`).
pub(crate) fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

/// The last component of a normalised path (`""` for `/`).
pub(crate) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or("")
}

pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// Sort key for change lists, ordering paths component by component (`/` sorts below every
/// other byte; paths hold no NUL), so a directory comes right before everything beneath it.
pub(crate) fn order_key(path: &str) -> Vec<u8> {
    path.bytes()
        .map(|b| if b == b'/' { 0 } else { b })
        .collect()
}

/// What one path is, without following it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    Absent,
    File { mode: Option<u32> },
    Dir { mode: Option<u32> },
    Symlink(String),
    Other,
}

/// A filesystem that can answer `lstat` for a path whose parents are real directories.
pub(crate) trait View {
    fn lstat(&self, path: &str) -> Node;
}

/// Maximum symlinks followed while resolving one path (Linux's limit).
const MAX_HOPS: usize = 40;

/// Resolve `path` the way the kernel would: every symlink in a parent position is followed,
/// the last one too when `follow_last`. Components that do not exist are kept as they are
/// (like `realpath -m`). Returns the resolved path and what is there, or `None` on a loop.
pub fn resolve(view: &dyn View, path: &str, follow_last: bool) -> Option<(String, Node)> {
    let mut pending: VecDeque<String> = components(path).collect();
    let mut resolved = String::from("/");
    let mut node = Node::Dir { mode: None };
    let mut hops = 0;
    while let Some(comp) = pending.pop_front() {
        if comp == ".." {
            resolved = parent(&resolved).unwrap_or("/").to_string();
            node = Node::Dir { mode: None };
            continue;
        }
        let candidate = join(&resolved, &comp);
        let here = view.lstat(&candidate);
        let last = pending.is_empty();
        match here {
            Node::Symlink(target) if !last || follow_last => {
                hops += 1;
                if hops > MAX_HOPS {
                    return None;
                }
                let mut next: VecDeque<String> = components(&target).collect();
                next.extend(pending.drain(..));
                pending = next;
                if target.starts_with('/') {
                    resolved = String::from("/");
                }
                node = Node::Dir { mode: None };
            }
            other => {
                resolved = candidate;
                node = other;
            }
        }
    }
    Some((resolved, node))
}

fn components(path: &str) -> impl Iterator<Item = String> + '_ {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
}

/// Public top-level modules of CPython's standard library (3.11's `sys.stdlib_module_names`,
/// plus a few from other versions). A module in the working dir with one of these names
/// shadows the standard one for `python -m …` and scripts run from there.
pub(crate) const STDLIB_MODULES: &[&str] = &[
    "abc",
    "aifc",
    "antigravity",
    "argparse",
    "array",
    "ast",
    "asynchat",
    "asyncio",
    "asyncore",
    "atexit",
    "audioop",
    "base64",
    "bdb",
    "binascii",
    "bisect",
    "builtins",
    "bz2",
    "cProfile",
    "calendar",
    "cgi",
    "cgitb",
    "chunk",
    "cmath",
    "cmd",
    "code",
    "codecs",
    "codeop",
    "collections",
    "colorsys",
    "compileall",
    "concurrent",
    "configparser",
    "contextlib",
    "contextvars",
    "copy",
    "copyreg",
    "crypt",
    "csv",
    "ctypes",
    "curses",
    "dataclasses",
    "datetime",
    "dbm",
    "decimal",
    "difflib",
    "dis",
    "distutils",
    "doctest",
    "email",
    "encodings",
    "ensurepip",
    "enum",
    "errno",
    "faulthandler",
    "fcntl",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "gc",
    "genericpath",
    "getopt",
    "getpass",
    "gettext",
    "glob",
    "graphlib",
    "grp",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "idlelib",
    "imaplib",
    "imghdr",
    "imp",
    "importlib",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "lib2to3",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "mailcap",
    "marshal",
    "math",
    "mimetypes",
    "mmap",
    "modulefinder",
    "multiprocessing",
    "netrc",
    "nis",
    "nntplib",
    "ntpath",
    "nturl2path",
    "numbers",
    "opcode",
    "operator",
    "optparse",
    "os",
    "ossaudiodev",
    "pathlib",
    "pdb",
    "pickle",
    "pickletools",
    "pipes",
    "pkgutil",
    "platform",
    "plistlib",
    "poplib",
    "posix",
    "posixpath",
    "pprint",
    "profile",
    "pstats",
    "pty",
    "pwd",
    "py_compile",
    "pyclbr",
    "pydoc",
    "pydoc_data",
    "pyexpat",
    "queue",
    "quopri",
    "random",
    "re",
    "readline",
    "reprlib",
    "resource",
    "rlcompleter",
    "runpy",
    "sched",
    "secrets",
    "select",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "signal",
    "site",
    "smtpd",
    "smtplib",
    "sndhdr",
    "socket",
    "socketserver",
    "spwd",
    "sqlite3",
    "sre_compile",
    "sre_constants",
    "sre_parse",
    "ssl",
    "stat",
    "statistics",
    "string",
    "stringprep",
    "struct",
    "subprocess",
    "sunau",
    "symtable",
    "sys",
    "sysconfig",
    "syslog",
    "tabnanny",
    "tarfile",
    "telnetlib",
    "tempfile",
    "termios",
    "textwrap",
    "this",
    "threading",
    "time",
    "timeit",
    "tkinter",
    "token",
    "tokenize",
    "tomllib",
    "trace",
    "traceback",
    "tracemalloc",
    "tty",
    "turtle",
    "turtledemo",
    "types",
    "typing",
    "unicodedata",
    "unittest",
    "urllib",
    "uu",
    "uuid",
    "venv",
    "warnings",
    "wave",
    "weakref",
    "webbrowser",
    "wsgiref",
    "xdrlib",
    "xml",
    "xmlrpc",
    "zipapp",
    "zipfile",
    "zipimport",
    "zlib",
    "zoneinfo",
    "_colorize",
    "_pyrepl",
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn normalize_handles_dots_and_slashes() {
        for (input, want) in [
            ("/", "/"),
            ("//usr//bin/", "/usr/bin"),
            ("/usr/./bin/../lib", "/usr/lib"),
            ("/../..", "/"),
            ("tests/x", "/tests/x"),
        ] {
            assert_eq!(normalize(input), want, "{input}");
        }
    }

    #[test]
    fn under_is_component_wise() {
        assert!(is_at_or_under("/tests", "/tests"));
        assert!(is_at_or_under("/tests/a", "/tests"));
        assert!(!is_at_or_under("/testsuite", "/tests"));
        assert!(is_at_or_under("/anything", "/"));
        assert!(!is_under("/tests", "/tests"));
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/a/b"), Some("/a"));
        assert_eq!(parent("/"), None);
        assert_eq!(file_name("/a/b.py"), "b.py");
    }

    #[test]
    fn order_key_puts_parents_before_children() {
        let mut v = vec!["/usr/bin/x", "/usr-local", "/usr", "/usr/bin"];
        v.sort_by_key(|p| order_key(p));
        assert_eq!(v, ["/usr", "/usr/bin", "/usr/bin/x", "/usr-local"]);
        let mut w = v.clone();
        w.sort_by(|a, b| a.split('/').cmp(b.split('/')));
        assert_eq!(v, w, "same as comparing component lists");
    }

    struct Map(BTreeMap<&'static str, Node>);
    impl View for Map {
        fn lstat(&self, path: &str) -> Node {
            self.0.get(path).cloned().unwrap_or(Node::Absent)
        }
    }

    #[test]
    fn resolve_follows_parent_links_and_dotdot_after_them() {
        let fs = Map(BTreeMap::from([
            ("/bin", Node::Symlink("usr/bin".into())),
            ("/var/run", Node::Symlink("/run".into())),
            ("/app/r", Node::Symlink("/".into())),
            ("/app/a", Node::Symlink("r/tests/expected".into())),
            ("/loop", Node::Symlink("/loop".into())),
            ("/usr/bin/sh", Node::File { mode: Some(0o755) }),
        ]));
        assert_eq!(resolve(&fs, "/bin/sh", false).unwrap().0, "/usr/bin/sh");
        assert_eq!(
            resolve(&fs, "/var/run/../tests", false).unwrap().0,
            "/tests"
        );
        assert_eq!(resolve(&fs, "/app/a", true).unwrap().0, "/tests/expected");
        assert_eq!(resolve(&fs, "/app/a", false).unwrap().0, "/app/a");
        assert!(resolve(&fs, "/loop/x", false).is_none());
        assert_eq!(
            resolve(&fs, "/bin/sh", true).unwrap().1,
            Node::File { mode: Some(0o755) }
        );
    }
}
