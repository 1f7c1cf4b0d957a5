//! The harness toolbox against a real engine: `docker/toolbox/build.sh` builds a directory
//! that arbiter's validator accepts, and that directory, bind-mounted read-only, runs
//! commands in a container whose image holds nothing but one text file (no shell, no libc).

mod common;

use std::path::Path;
use std::process::Command;

use common::{docker_available, image_tag, repo};

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("run docker")
}

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Removes the container and image when the test ends, however it ends.
struct Cleanup {
    container: Option<String>,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(id) = &self.container {
            let _ = docker(&["rm", "-f", id]);
        }
        let _ = docker(&["rmi", "-f", &self.image]);
    }
}

fn build_toolbox(dir: &Path) -> std::process::Output {
    Command::new("bash")
        .arg(repo().join("docker/toolbox/build.sh"))
        .arg(dir)
        .output()
        .expect("run build.sh")
}

#[test]
fn toolbox_runs_commands_in_an_image_without_a_shell() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("toolbox");

    // Build, then build again: the second run leaves it alone.
    let first = build_toolbox(&dir);
    assert_eq!(ok(&first, "build.sh").trim(), dir.to_string_lossy());
    let mtime = |p: &Path| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .expect("mtime")
    };
    let before = mtime(&dir.join("busybox"));
    let second = build_toolbox(&dir);
    ok(&second, "build.sh again");
    assert!(String::from_utf8_lossy(&second.stderr).contains("up to date"));
    assert_eq!(mtime(&dir.join("busybox")), before);

    let toolbox = arbiter::sandbox::toolbox::validate_toolbox(&dir).expect("valid toolbox");
    assert_eq!(toolbox.dir, dir);

    // An image of exactly one text file.
    let unique = image_tag(tmp.path());
    let image = format!("arbiter-test/noshell:{unique}");
    let mut cleanup = Cleanup {
        container: None,
        image: image.clone(),
    };
    let mut tarball = tar::Builder::new(Vec::new());
    let text = b"nothing else lives here\n";
    let mut header = tar::Header::new_gnu();
    header.set_size(text.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    tarball
        .append_data(&mut header, "hello.txt", &text[..])
        .expect("tar");
    let tarball = tarball.into_inner().expect("tar");
    let mut import = Command::new("docker")
        .args([
            "import",
            "--change",
            "LABEL arbiter.managed=true",
            "-",
            &image,
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("docker import");
    {
        use std::io::Write;
        let mut stdin = import.stdin.take().expect("stdin");
        stdin.write_all(&tarball).expect("write tar");
    }
    ok(&import.wait_with_output().expect("import"), "docker import");

    // The keep-alive itself comes from the toolbox: the image has no shell to run one.
    let bind = toolbox.bind();
    let keepalive = "trap '' TERM INT HUP; while :; do /.arbiter/toolbox/busybox sleep 3600; done";
    let created = docker(&[
        "create",
        "--label",
        "arbiter.managed=true",
        "--network",
        "none",
        "--init",
        "-v",
        &bind,
        &image,
        "/.arbiter/toolbox/busybox",
        "sh",
        "-c",
        keepalive,
    ]);
    let id = ok(&created, "docker create").trim().to_string();
    cleanup.container = Some(id.clone());
    ok(&docker(&["start", &id]), "docker start");

    let exec = |argv: &[&str]| {
        let mut args = vec!["exec", id.as_str()];
        args.extend_from_slice(argv);
        docker(&args)
    };
    let echoed = exec(&["/.arbiter/toolbox/busybox", "sh", "-c", "echo ok"]);
    assert_eq!(ok(&echoed, "exec echo").trim(), "ok");
    let cat = exec(&["/.arbiter/toolbox/busybox", "cat", "/hello.txt"]);
    assert_eq!(ok(&cat, "exec cat"), "nothing else lives here\n");

    // There is no shell of the image's own, and the toolbox cannot be written to.
    assert!(!exec(&["/bin/sh", "-c", "true"]).status.success());
    let write = exec(&[
        "/.arbiter/toolbox/busybox",
        "touch",
        "/.arbiter/toolbox/planted",
    ]);
    assert!(!write.status.success(), "toolbox mount must be read-only");
    assert!(!dir.join("planted").exists());
}
