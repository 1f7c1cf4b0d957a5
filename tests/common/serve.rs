//! Helpers of the `arbiter serve` tests (tests/serve.rs, tests/web.rs): the real binary on a
//! free port, plain HTTP/1.1 requests, a job's event stream.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `arbiter serve`, killed on drop.
pub struct Server {
    pub child: Child,
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn serve_command(root: &Path, db: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_arbiter"));
    cmd.args(["serve", "--port", "0", "--root"])
        .arg(root)
        .arg("--db")
        .arg(db)
        .args(extra)
        .env_remove("ARBITER_SERVE_TOKEN")
        .env("ARBITER_DB", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

pub fn start(root: &Path, db: &Path, extra: &[&str]) -> Server {
    let mut child = serve_command(root, db, extra).spawn().expect("spawn serve");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("serve ended before it listened")
            .expect("stderr line");
        if let Some(addr) = line.strip_prefix("arbiter serve: listening on http://") {
            break addr.to_string();
        }
        eprintln!("serve: {line}");
    };
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            eprintln!("serve: {line}");
        }
    });
    Server { child, addr }
}

/// One HTTP/1.1 request; (status, body).
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String) {
    let (status, _, body) = http_with_head(addr, method, path, token, body);
    (status, body)
}

/// A GET; (status, head lowercased, body).
pub fn page(addr: &str, path: &str) -> (u16, String, String) {
    http_with_head(addr, "GET", path, None, "")
}

/// One HTTP/1.1 request; (status, the head lowercased, body).
pub fn http_with_head(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .expect("timeout");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{auth}\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, head.to_lowercase(), body.to_string())
}

pub fn get(addr: &str, path: &str) -> (u16, Value) {
    let (status, body) = http(addr, "GET", path, None, "");
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

pub fn post(addr: &str, path: &str, token: Option<&str>, body: &Value) -> (u16, String) {
    http(addr, "POST", path, token, &body.to_string())
}

/// A refusal: exactly one line, a JSON object with `error`.
pub fn one_line_error(body: &str) -> String {
    assert_eq!(body.trim_end().lines().count(), 1, "one line: {body:?}");
    let v: Value = serde_json::from_str(body.trim_end()).expect("JSON error");
    v["error"].as_str().expect("error field").to_string()
}

/// The events of a job, up to `ended` (or the deadline), as (name, data).
pub struct Events {
    reader: BufReader<TcpStream>,
}

impl Events {
    pub fn open(addr: &str, id: &str) -> Events {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(300)))
            .expect("timeout");
        write!(
            stream,
            "GET /api/jobs/{id}/events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .expect("write");
        Events {
            reader: BufReader::new(stream),
        }
    }

    /// The next event (chunk-size lines and comments skipped).
    pub fn next(&mut self) -> Option<(String, Value)> {
        let mut name = None;
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end();
            if let Some(n) = line.strip_prefix("event: ") {
                name = Some(n.to_string());
            } else if let Some(d) = line.strip_prefix("data: ")
                && let Some(n) = name.take()
            {
                return Some((n, serde_json::from_str(d).expect("event data")));
            }
        }
    }

    pub fn until_end(&mut self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        while let Some(event) = self.next() {
            let end = event.0 == "ended";
            out.push(event);
            if end {
                break;
            }
        }
        out
    }
}

pub fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("root");
    std::fs::create_dir_all(&root).expect("root");
    let db = tmp.path().join("results.db");
    (tmp, root, db)
}

pub fn wait_ended(addr: &str, id: &str) -> Vec<(String, Value)> {
    let mut events = Events::open(addr, id);
    events.until_end()
}

pub fn job_of(addr: &str, id: &str) -> Value {
    let (status, job) = get(addr, &format!("/api/jobs/{id}"));
    assert_eq!(status, 200, "{job}");
    job
}

/// A command agent that sleeps: its trials run until they are stopped.
pub const SLEEPER: &str = "tasks: [tasks/quick]\nattempts: 3\nconcurrency: 2\nagents:\n  - name: sleeper\n    kind: command\n    run: [sh, -c, \"sleep 300\"]\n";

pub fn wait_running(addr: &str, id: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let job = job_of(addr, id);
        let running: Vec<String> = job["running"]
            .as_array()
            .expect("running")
            .iter()
            .filter(|t| t["phase"] == "agent")
            .map(|t| t["trial"].as_str().expect("trial").to_string())
            .collect();
        if running.len() >= n {
            return running;
        }
        assert!(Instant::now() < deadline, "no {n} agents running: {job}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
