//! Commands in a pod over the pods/exec subresource (a websocket), with the Docker
//! backend's deadline rule and real exit codes.
//!
//! A pod has no per-exec user, working dir or environment, so every exec runs the toolbox's
//! shell as root with [`WRAPPER`]: it reads the exec's environment from stdin (never in the
//! request URL, which an apiserver may log), enters the working dir, resolves the user as
//! Docker does (a name or uid from the container's `/etc/passwd`, an optional `:group`; a
//! uid not in passwd runs with gid 0), resolves the command through `PATH` itself (the
//! toolbox's busybox would otherwise run its own applet of that name) and runs it through
//! busybox `nsenter -S uid -G gid` (which sets uid and gid and clears supplementary groups).
//!
//! On the deadline every process of the container but PID 1 gets SIGTERM (`kill -TERM -1`
//! from the toolbox, in a second exec), then after the grace period SIGKILL; the pod itself
//! lives on. The exit code is the status the API sends at the end (`NonZeroExitCode`, cause
//! `ExitCode`); a stream that ends without one is a kill.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::AttachedProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::KubernetesSandbox;
use super::carried::{Carried, Unplaced};
use super::ended::Ended;
use super::error::{KubeError, api_status};
use super::exit_status::{exit_code_of, not_running_yet};
use super::hot::HotExec;
use super::relay::{Carrier, Ungreeted};
use crate::digest::sha256_hex;
use crate::sandbox::sink::CappedSink;
use crate::sandbox::toolbox::toolbox_argv;
use crate::sandbox::{ExecEnd, ExecOutcome, ExecSpec, SandboxError};

/// Shell lines that resolve the command `$1` through `PATH` as the engine does (the
/// toolbox's busybox would otherwise run its own applet of that name): then `"$@"` starts
/// with its path. A macro, not a const, so that `concat!` takes it into the scripts.
macro_rules! resolve_command {
    () => {
        r#"c=$1
case $c in
  */*) ;;
  *) p=
    IFS=:; set -f
    for d in $PATH; do [ -n "$d" ] || d=.; if [ -f "$d/$c" ] && [ -x "$d/$c" ]; then p=$d/$c; break; fi; done
    unset IFS; set +f
    [ -n "$p" ] || { echo "exec: \"$c\": executable file not found in \$PATH" >&2; exit 127; }
    shift; set -- "$p" "$@";;
esac
"#
    };
}
pub(super) use resolve_command;

/// Shell lines writing the facts of the kept files `$k.o` and `$k.e` of a command that
/// ended with `$rc` to `$k.f` and into `$f`: `arbiter-kept CODE OUT_BYTES ERR_BYTES
/// SHA256_OF_OUT SHA256_OF_ERR` (kept.rs's `KEEP`; the exec wrapper has them from `keep`, with
/// `t<OUT>:<ERR>`, the bytes the command wrote to each stream in all, after them: a count that
/// never depends on the exec's stream, which can lose its tail with exit 0,
/// kubernetes#124571). A macro, so that `concat!` takes it into the script. Two processes
/// (one `wc`, one `sha256sum`, each of both files), each figure only where its line names its
/// file.
macro_rules! facts_line {
    () => {
        concat!(
            r#"set -- $($B wc -c "$k.o" "$k.e" 2>/dev/null); o= e=; [ "$2" = "$k.o" ] && o=$1; [ "$4" = "$k.e" ] && e=$3
set -- $(sha256sum "$k.o" "$k.e" 2>/dev/null); so= se=; [ "$2" = "$k.o" ] && so=$1; [ "$4" = "$k.e" ] && se=$3
f="arbiter-kept $rc $((o+0)) $((e+0)) ${so%% *} ${se%% *}"; printf '%s\n' "$f" >"$k.f""#
        )
    };
}
pub(super) use facts_line;

/// A new stem for the files that keep an exec's output in the pod (`kept.rs`).
pub(super) fn new_stem() -> String {
    format!(
        "{}/keep-{}",
        super::names::SCRATCH,
        super::names::random_suffix()
    )
}

/// Shell lines after `kill_all!` (after_stop.rs) in the wrapper of a halting command (`$_h`,
/// the path to send along; their stderr is not the command's: dropped): `$hf` becomes ` s0`
/// (every process gone) or ` s1`, and once all are gone ` l<SIZE>:<SHA256>:<BASE64>` after
/// it, the archive of `$_h` as `tar -c -C / ${_h#/}` makes it, when every directory on the way
/// is one and it is under 48 KiB. A macro, so that `concat!` takes it into the wrapper.
macro_rules! halt_send {
    () => {
        r#"hf=" s1"
if [ "$n" = 0 ]; then hf=" s0"; t=$k.h; q=${_h#/}; a=/
  while [ "${q#*/}" != "$q" ]; do a=$a${q%%/*}; q=${q#*/}; [ -d "$a" ] && [ ! -L "$a" ] || a=; [ -n "$a" ] || break; a=$a/; done
  if [ -n "$a" ] && { [ -e "$_h" ] || [ -L "$_h" ]; }; then
    set -o pipefail
    if $B tar -c -f - -C / "${_h#/}" 2>/dev/null | head -c 49153 >"$t"; then
      n=$($B wc -c <"$t"); n=$((n+0)); s=$(sha256sum <"$t")
      [ "$n" -lt 49153 ] && hf="$hf l$n:${s%% *}:$($B base64 -w 0 <"$t")"
    fi
    unlink "$t"
  fi
fi
"#
    };
}
/// Bytes a [`Sink::Held`] holds back for a halting command: more than its facts line with
/// the archive sent along (at most 48 KiB: `halt_send!`'s `49153` is one more), in base64.
pub(super) const HOLD_HALT: usize = 72 * 1024;

/// The exec wrapper (toolbox `sh -c`). Arguments: `$0` marker, `$1` user (empty: root),
/// `$2` working dir (empty: the container's), `$3` flags (`e`: the environment on stdin,
/// `export 'NAME=VALUE'` lines ending with a NUL, read by the shell itself and run at once
/// (no value holds a NUL: no process's environment can); `h`: the environment
/// sets HOME; `p` and `u`: what the command carries, below; `c`: claimed, below; `r`: its
/// parent is the loopback relay that carries it, `relay.rs`, which the halt spares), `$4` the
/// stem of the files that keep the output in the pod (empty: none), `$5` the bytes of each
/// stream kept, `$6` a path to send along after halting the pod once the command ended
/// (empty: no halt; `halt_send!`), then the argv.
///
/// Claimed (`c`, the first exec of a pod handed over early, which may be asked again): the
/// wrapper first creates `$4.c` exclusively, and where another run of the same exec created
/// it, exits 125 at once with [`CLAIMED`] as its whole stderr, so the command runs at most
/// once however often it is asked.
///
/// A command of a user other than root first makes the scratch root-only (`0700`): an
/// emptyDir is made world-writable and no init container sets it any more (pod.rs), so it
/// is done before any process not root's runs in the pod.
///
/// What a command carries runs first, as root, and the command runs only if it all held
/// (`carry.rs`): `p`, the start's proofs (on stdin after the environment, ending with a NUL:
/// the script must exit 0 and print its proof line); `u`, an upload (on stdin after those:
/// shell lines ending with a NUL that set `h`, the archive's sha256, and `d`, the directory
/// to unpack into, and make the paths to remove first the arguments; then the archive to
/// the end of stdin, checked and unpacked as
/// `transfer.rs`'s upload does). When one did not hold, the command is not run: the facts
/// line says why (`x<code> <message>` after the five facts) and the exit code is 125.
///
/// Kept (`kept.rs`), the command runs under the toolbox relay's `keep`
/// (`docker/toolbox/relay/src/keep.rs`, one process): its stdout and stderr are passed on to
/// the exec's streams as they come, their first `$5` bytes kept in `$4.o` and `$4.e`, every
/// byte counted; once the command ended, the facts line (exit code, sizes and sha256 of what
/// was kept, the bytes of each stream in all, as `keep` wrote them to `$4.n`) ends stderr
/// after a `\x1f`. The wrapper ignores SIGTERM (the deadline's) and `keep` blocks it, so that
/// what a command writes in its grace period is kept too; the command itself gets it.
const WRAPPER: &str = concat!(
    r#"B=/.arbiter/toolbox/busybox
u=$1 wd=$2 fl=$3 _k=$4 _cap=$5 _h=$6 _rp=; shift 6
case $fl in *r*) _rp=$PPID;; esac
case $fl in *c*) ( set -C; : >"$_k.c" ) 2>/dev/null || { [ -e "$_k.c" ] && { printf '\037arbiter-claimed\n' >&2; exit 125; }; };; esac
case $fl in *e*)
  IFS= read -r -d '' s && eval "$s" || exit 125;;
esac
"#,
    super::carried::carried_prelude!(),
    r#"exec </dev/null
fields() { local IFS=:; set -f; set -- $1; uid=$3 gid=$4 home=$6; set +f; }
uid=0 gid=0 home=
if [ -n "$u" ]; then
  n=${u%%:*} g=
  case $u in *:*) g=${u#*:};; esac
  case $n in
    ''|*[!0-9]*) line=$($B awk -F: -v n="$n" '$1==n{print;exit}' /etc/passwd 2>/dev/null)
      [ -n "$line" ] || { echo "unable to find user $n: no matching entries in passwd file" >&2; exit 126; }
      fields "$line";;
    *) line=$($B awk -F: -v n="$n" '$3==n{print;exit}' /etc/passwd 2>/dev/null)
      if [ -n "$line" ]; then fields "$line"; else uid=$n gid=0 home=/; fi;;
  esac
  case $g in
    '') ;;
    *[!0-9]*) gid=$($B awk -F: -v g="$g" '$1==g{print $3;exit}' /etc/group 2>/dev/null)
      [ -n "$gid" ] || { echo "unable to find group $g: no matching entries in group file" >&2; exit 126; };;
    *) gid=$g;;
  esac
  case $fl in *h*) ;; *) [ -n "$home" ] && export HOME="$home";; esac
fi
[ "$uid" = 0 ] || chmod 0700 /.arbiter/scratch 2>/dev/null
if [ -n "$wd" ]; then cd "$wd" 2>/dev/null || { echo "cannot enter the working dir $wd" >&2; exit 126; }; fi
"#,
    resolve_command!(),
    r#"if [ -z "$_k" ] || ! { : >"$_k.o" && : >"$_k.e"; } 2>/dev/null; then
  if [ "$uid" = 0 ] && [ "$gid" = 0 ]; then exec "$@"; fi
  exec $B nsenter -S "$uid" -G "$gid" "$@"
fi
trap '' TERM INT HUP
( trap - TERM INT HUP
  if [ "$uid" = 0 ] && [ "$gid" = 0 ]; then exec /.arbiter/toolbox/relay keep "$_cap" "$_k" -- "$@"; fi
  exec /.arbiter/toolbox/relay keep "$_cap" "$_k" -- $B nsenter -S "$uid" -G "$gid" "$@" )
k=$_k rc=125 o=0 e=0 so=$_z se=$_z to=0 te=0
read -r rc o e so se to te 2>/dev/null <"$k.n"; unlink "$k.n" 2>/dev/null
hf=
if [ -n "$_h" ]; then {
"#,
    super::after_stop::kill_all!(),
    halt_send!(),
    r#"} 2>/dev/null; fi
f="arbiter-kept $rc $o $e $so $se t$to:$te$hf"; printf '%s\n' "$f" >"$k.f"
printf '\037%s\n' "$f" >&2; exit "$rc""#
);

/// The whole stderr of a claimed exec (`WRAPPER`'s `c`) that found its command run by an
/// earlier ask of the same exec.
const CLAIMED: &[u8] = b"\x1farbiter-claimed\n";

/// How long connecting an exec may keep failing (a kubelet restarting answers "pod does not
/// exist" for about a second) before it is an error.
const CONNECT_RETRY: Duration = Duration::from_secs(8);
/// The confirming exec of a pod handed over early (`confirm_running`) is asked again this
/// many times, after [`EARLY_PAUSE`] times the try's number, before the watch decides: 1 s in
/// all, the kubelet's relist period, after which the API says whether it runs.
const EARLY_TRIES: u32 = 4;
const EARLY_PAUSE: Duration = Duration::from_millis(100);

/// A command's exec: its argv and stdin, and the loopback relay that carries it, if one does
/// (`relay.rs`: the relay's exec is the command's).
#[derive(Clone, Copy)]
struct Command<'a> {
    argv: &'a [String],
    stdin: Option<&'a [u8]>,
    carrier: Option<&'a Carrier>,
}

/// One exec of `run_reporting` or `confirm_running`.
enum Attempt {
    /// What `run_reporting` answers.
    Done(Result<RawEnd, String>),
    /// The container did not run yet (a pod handed over early): nothing ran.
    NotRunningYet(String),
}

/// How long the API may take to report the status once the streams ended.
const STATUS_WAIT: Duration = Duration::from_secs(10);

/// Bytes a [`Sink::Held`] holds back: more than a facts line.
pub(super) const HOLD: usize = 1024;

/// Where a stream of an exec goes.
pub(super) enum Sink<'a> {
    /// An [`ExecSpec`]'s capped file (or nothing).
    Capped(&'a mut CappedSink),
    /// Memory, at most `cap` bytes kept.
    Memory { buf: &'a mut Vec<u8>, cap: usize },
    /// An [`ExecSpec`]'s capped file whose last `hold` bytes ([`HOLD`], or [`HOLD_HALT`])
    /// are held back until the end, where the keeping wrapper's facts line is (`kept.rs`).
    Held {
        sink: &'a mut CappedSink,
        held: Vec<u8>,
        hold: usize,
    },
    /// A file of at most `limit` bytes: past it the exec is abandoned (`over` is set).
    Limited {
        file: &'a mut tokio::fs::File,
        path: &'a std::path::Path,
        written: u64,
        limit: u64,
        over: bool,
    },
}

impl Sink<'_> {
    /// Whether all this held sink took is [`CLAIMED`] (a claimed exec's ask that found its
    /// command run by an earlier one): then that is dropped.
    fn take_claimed(&mut self) -> bool {
        match self {
            Sink::Held { held, .. } if held.as_slice() == CLAIMED => {
                held.clear();
                true
            }
            _ => false,
        }
    }

    /// Take `bytes`; `false`: stop reading (the limit is passed).
    async fn take(&mut self, bytes: &[u8]) -> Result<bool, SandboxError> {
        match self {
            Sink::Capped(sink) => sink.write(bytes).await.map(|_| true),
            Sink::Held { sink, held, hold } => {
                held.extend_from_slice(bytes);
                // Passed on once twice the hold is held: each byte moved at most once more.
                if held.len() > 2 * *hold {
                    let pass = held.len() - *hold;
                    sink.write(&held[..pass]).await?;
                    held.drain(..pass);
                }
                Ok(true)
            }
            Sink::Memory { buf, cap } => {
                let room = cap.saturating_sub(buf.len());
                buf.extend_from_slice(&bytes[..room.min(bytes.len())]);
                Ok(true)
            }
            Sink::Limited {
                file,
                path,
                written,
                limit,
                over,
            } => {
                *written += bytes.len() as u64;
                if *written > *limit {
                    *over = true;
                    return Ok(false);
                }
                file.write_all(bytes)
                    .await
                    .map_err(SandboxError::io(path.to_path_buf()))?;
                Ok(true)
            }
        }
    }
}

/// How a raw exec ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RawEnd {
    Exited(i64),
    TimedOut,
    /// The stream ended without a status (the process or its container was killed), or a
    /// sink's limit was passed.
    Cut,
}

/// The end of an exec whose pod ended under it: killed, when what ran in the pod ended it
/// (the stop that follows reports how); the cluster's doing is an error.
pub(super) fn gone(pod: &str, how: Ended) -> Result<RawEnd, SandboxError> {
    match how {
        Ended::ByWorkload(_) => Ok(RawEnd::Cut),
        Ended::ByCluster(why) => Err(KubeError::PodGone {
            pod: pod.to_string(),
            why,
        }
        .into()),
    }
}

/// The wrapped argv of an exec and the stdin it needs (the environment, then what it
/// carries), for a container whose execs without a user run as `default_user`; `keep`: the
/// stem of the files that keep its output in the pod (what a command carries needs one);
/// `claim`: `WRAPPER`'s `c`; `relayed`: run by a loopback relay (`r`, `relay.rs`).
pub(super) fn wrapped(
    spec: &ExecSpec,
    default_user: Option<&str>,
    (keep, claim, relayed): (Option<&str>, bool, bool),
    carried: Carried<'_>,
) -> (Vec<String>, Vec<u8>) {
    use super::base64_lines::quoted;
    let user = spec.user.as_deref().or(default_user).unwrap_or("");
    let user = if user == "root" || user == "0" || user == "0:0" {
        ""
    } else {
        user
    };
    let mut flags = String::new();
    let mut stdin = Vec::new();
    if !spec.env.is_empty() {
        flags.push('e');
        let exports: String = spec
            .env
            .iter()
            .map(|(k, v)| format!("export {}\n", quoted(&format!("{k}={v}"))))
            .collect();
        stdin.extend_from_slice(exports.as_bytes());
        stdin.push(0);
    }
    if spec.env.iter().any(|(k, _)| k == "HOME") {
        flags.push('h');
    }
    if relayed {
        flags.push('r');
    }
    if keep.is_some() {
        if claim {
            flags.push('c');
        }
        if let Some(script) = carried.proofs {
            flags.push('p');
            stdin.extend_from_slice(script.as_bytes());
            stdin.push(0);
        }
        if let Some(upload) = carried.upload {
            flags.push('u');
            stdin.extend_from_slice(upload_head(upload).as_bytes());
            stdin.push(0);
            stdin.extend_from_slice(&upload.tar);
        }
    }
    if flags.is_empty() {
        flags.push('-');
    }
    let mut argv = toolbox_argv("sh", &["-c", WRAPPER, "arbiter-exec"]);
    argv.push(user.to_string());
    argv.push(spec.workdir.clone().unwrap_or_default());
    argv.push(flags);
    argv.push(keep.unwrap_or("").to_string());
    argv.push(spec.cap_bytes.to_string());
    argv.push(
        carried
            .halt
            .filter(|_| keep.is_some())
            .unwrap_or("")
            .to_string(),
    );
    argv.extend(spec.argv.iter().cloned());
    (argv, stdin)
}

/// The shell lines that head an upload on a wrapper's stdin (`u`): its sha256 in `h`, the
/// directory it unpacks into in `d`, the paths it replaces as the arguments.
fn upload_head(upload: &super::carried::HeldUpload) -> String {
    use super::base64_lines::quoted;
    let mut head = format!(
        "h={} d={}; set --",
        sha256_hex(&upload.tar),
        quoted(&upload.dest)
    );
    for path in &upload.replacing {
        head.push(' ');
        head.push_str(&quoted(path));
    }
    head
}

impl KubernetesSandbox {
    /// Open an exec in the pod's main container, retrying a connection the API refused for
    /// a short while (nothing ran then).
    pub(super) async fn attach(
        &self,
        pod: &str,
        argv: &[String],
        stdin: bool,
    ) -> Result<AttachedProcess, SandboxError> {
        // A sidecar's id is `pod/container` (sidecar.rs).
        let (pod, container) = super::names::target(pod);
        // Whatever runs may change the pod's files: what its stop sent of them is stale.
        self.stopped_logs.drop_pod(pod);
        let params = super::hot::attach_params(container, stdin);
        let started = Instant::now();
        loop {
            match self.pods().exec(pod, argv.to_vec(), &params).await {
                Ok(process) => return Ok(process),
                Err(e) => {
                    let status = api_status(&e);
                    let retry =
                        !matches!(status, Some(401 | 403)) && started.elapsed() < CONNECT_RETRY;
                    if !retry {
                        return Err(self.exec_error(pod, e).await);
                    }
                    tracing::debug!(pod, "exec connect: {e}; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// An exec that could not connect: the pod is gone, or the API refused.
    async fn exec_error(&self, pod: &str, e: kube::Error) -> SandboxError {
        match self.pod_ended(pod).await {
            Some(how) => KubeError::PodGone {
                pod: pod.to_string(),
                why: match how {
                    Ended::ByWorkload(lost) => lost.to_string(),
                    Ended::ByCluster(why) => why,
                },
            }
            .into(),
            None => KubeError::Api {
                op: "exec",
                source: e,
            }
            .into(),
        }
    }

    /// Run `argv` in the pod: `stdin` written and closed, the streams into the sinks,
    /// `timeout` enforced by the deadline rule (SIGTERM, `grace`, SIGKILL).
    pub(super) async fn run(
        &self,
        pod: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
        out: &mut Sink<'_>,
        err: &mut Sink<'_>,
        limits: (Option<Duration>, Duration),
    ) -> Result<RawEnd, SandboxError> {
        self.run_reporting(pod, argv, stdin, out, err, limits)
            .await?
            .map_err(|message| {
                KubeError::Exec {
                    pod: pod.to_string(),
                    message,
                }
                .into()
            })
    }

    /// [`run`](Self::run), an exec whose stream ended without its status while the pod still
    /// runs being `Ok(Err(why))`: the command may still run, or have ended, in the pod.
    pub(super) async fn run_reporting(
        &self,
        pod: &str,
        argv: &[String],
        stdin: Option<&[u8]>,
        out: &mut Sink<'_>,
        err: &mut Sink<'_>,
        limits: (Option<Duration>, Duration),
    ) -> Result<Result<RawEnd, String>, SandboxError> {
        let command = Command {
            argv,
            stdin,
            carrier: None,
        };
        self.run_command(pod, command, out, err, limits).await
    }

    /// [`run_reporting`](Self::run_reporting) of a [`Command`].
    async fn run_command(
        &self,
        pod: &str,
        command: Command<'_>,
        out: &mut Sink<'_>,
        err: &mut Sink<'_>,
        limits: (Option<Duration>, Duration),
    ) -> Result<Result<RawEnd, String>, SandboxError> {
        self.ensure_confirmed(pod).await?;
        match self
            .run_attempt(pod, command, (out, err), limits, false)
            .await?
        {
            Attempt::Done(done) => Ok(done),
            Attempt::NotRunningYet(message) => Ok(Err(message)),
        }
    }

    /// [`run_reporting`](Self::run_reporting) of a claimed command (`WRAPPER`'s `c`: it runs
    /// at most once however often it is asked) in a pod handed over early (`await_running`'s
    /// `early`): its exec confirms the pod running. Asked again while the container does not
    /// run yet or the exec brings no status with nothing received, as
    /// [`confirm_running`](Self::confirm_running) asks `true`; an ask that finds the command
    /// run by an earlier one (its whole stderr [`CLAIMED`]) reports the status lost, and the
    /// caller reads the end from the pod's copy.
    async fn run_claimed(
        &self,
        pod: &str,
        (argv, stdin): (&[String], Option<&[u8]>),
        out: &mut Sink<'_>,
        err: &mut Sink<'_>,
        limits: (Option<Duration>, Duration),
    ) -> Result<Result<RawEnd, String>, SandboxError> {
        let mut tries = 0u32;
        loop {
            let early = tries <= EARLY_TRIES;
            let command = Command {
                argv,
                stdin,
                carrier: None,
            };
            let attempt = self
                .run_attempt(pod, command, (&mut *out, &mut *err), limits, early)
                .await?;
            let message = match attempt {
                Attempt::Done(done) => {
                    if early {
                        self.confirmed(pod, tries).await;
                    }
                    if matches!(done, Ok(RawEnd::Exited(125))) && err.take_claimed() {
                        return Ok(Err(
                            "an earlier ask of the exec ran the command; its end is read from the pod"
                                .to_string(),
                        ));
                    }
                    return Ok(done);
                }
                Attempt::NotRunningYet(message) => message,
            };
            tries += 1;
            // Past the last early ask the watch has had the last word: the next is not early.
            self.too_soon(pod, tries, &message).await?;
        }
    }

    /// Handed over early: confirmed running by an exec of its own first.
    pub(super) async fn ensure_confirmed(&self, pod: &str) -> Result<(), SandboxError> {
        if self.is_unconfirmed(pod).await {
            self.confirm_running(pod).await?;
        }
        Ok(())
    }

    /// An early exec confirmed `pod` running after `tries` that came too soon (or the watch
    /// did).
    async fn confirmed(&self, pod: &str, tries: u32) {
        let late = self.confirm(pod).await;
        self.early_wait.learn(tries, late);
    }

    /// The `tries`-th early exec found `pod`'s container not running yet: pause before the
    /// next, or after [`EARLY_TRIES`] let the watch decide (`true`: it did).
    async fn too_soon(&self, pod: &str, tries: u32, message: &str) -> Result<bool, SandboxError> {
        self.too_soon_now(pod).await;
        if tries > EARLY_TRIES {
            self.confirmed(pod, tries).await;
            self.await_running(pod, false).await?;
            return Ok(true);
        }
        tracing::debug!(
            pod,
            tries,
            message,
            "main container not confirmed running yet"
        );
        tokio::time::sleep(EARLY_PAUSE * tries).await;
        Ok(false)
    }

    /// Confirm that the main container of `pod`, handed over early (`await_running`'s
    /// `early`), runs: the toolbox's `true`, asked again while the exec says the container
    /// does not run yet or brings no status (nothing but `true` could have run: asking again
    /// is harmless), four times, then the watch decides. Before anything of the trial runs in
    /// it: a command whose exec came back without a status is never run again, so it must not
    /// be the first.
    pub(super) async fn confirm_running(&self, pod: &str) -> Result<(), SandboxError> {
        let argv = toolbox_argv("true", &[]);
        let mut tries = 0u32;
        loop {
            // `true` prints nothing: whatever came is dropped.
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let (mut out, mut err) = (
                Sink::Memory {
                    buf: &mut out,
                    cap: 0,
                },
                Sink::Memory {
                    buf: &mut err,
                    cap: 0,
                },
            );
            let limits = (Some(Duration::from_secs(30)), Duration::from_secs(1));
            let command = Command {
                argv: &argv,
                stdin: None,
                carrier: None,
            };
            let attempt = self
                .run_attempt(pod, command, (&mut out, &mut err), limits, true)
                .await?;
            let message = match attempt {
                Attempt::Done(Ok(RawEnd::Exited(0))) => {
                    self.confirmed(pod, tries).await;
                    return Ok(());
                }
                Attempt::NotRunningYet(message) | Attempt::Done(Err(message)) => message,
                Attempt::Done(Ok(end)) => format!("`true` ended {end:?}"),
            };
            tries += 1;
            if self.too_soon(pod, tries, &message).await? {
                return Ok(());
            }
        }
    }

    /// One exec of [`run_reporting`](Self::run_reporting) or
    /// [`confirm_running`](Self::confirm_running); `early`: the pod's container may not run
    /// yet, and a status saying so before any output is `NotRunningYet`.
    async fn run_attempt(
        &self,
        pod: &str,
        command: Command<'_>,
        (out, err): (&mut Sink<'_>, &mut Sink<'_>),
        (timeout, grace): (Option<Duration>, Duration),
        early: bool,
    ) -> Result<Attempt, SandboxError> {
        let stdin = command.stdin;
        let relayed;
        let argv = match command.carrier {
            Some(carrier) => {
                relayed = carrier.argv(command.argv);
                &relayed[..]
            }
            None => command.argv,
        };
        // A claimed warm pod's exec opened ahead (hot.rs): the argv goes first on its stdin.
        let hot = match self.warm.take_hot(pod) {
            Some(mut hot) => hot.alive().then_some(hot),
            None => None,
        };
        let exec = match hot {
            Some(mut hot) => {
                self.stopped_logs.drop_pod(pod);
                // Once it took the argv the command may run: it is never asked elsewhere.
                // Without its word the harness failed, never the command.
                if let Err(why) = hot.hand(&super::hot::argv_line(argv)).await {
                    hot.abort();
                    return Err(KubeError::Exec {
                        pod: pod.to_string(),
                        message: format!("the exec opened ahead did not take the command: {why}"),
                    }
                    .into());
                }
                tracing::debug!(pod, "the exec opened ahead runs the command");
                hot
            }
            _ => {
                let with_stdin = stdin.is_some() || command.carrier.is_some();
                HotExec::of(self.attach(pod, argv, with_stdin).await?)
            }
        };
        // The relay's exec: its greeting first, then the command's streams come as frames.
        let exec = match command.carrier {
            Some(carrier) => match self.carried(pod, carrier, exec, stdin.is_some()).await {
                Ok(exec) => exec,
                Err(Ungreeted::NotRunning(message)) if early => {
                    return Ok(Attempt::NotRunningYet(message));
                }
                Err(Ungreeted::NotRunning(message)) => {
                    return Err(KubeError::Exec {
                        pod: pod.to_string(),
                        message,
                    }
                    .into());
                }
                Err(Ungreeted::Failed(e)) => return Err(e),
            },
            None => exec,
        };
        let HotExec {
            process,
            stdin: writer,
            mut stdout,
            mut stderr,
            mut status,
        } = exec;
        let mut taken = false;
        // The status, when it came while the output was still being read; `Some(None)`: the
        // connection ended without one (the apiserver or the kubelet went away).
        let mut got_status: Option<Option<Status>> = None;
        let feed = async move {
            if let Some(mut w) = writer {
                if let Some(bytes) = stdin {
                    w.write_all(bytes).await?;
                }
                w.shutdown().await?;
            }
            Ok::<_, std::io::Error>(())
        };
        tokio::pin!(feed);
        let mut fed = false;
        let (mut out_done, mut err_done) = (stdout.is_none(), stderr.is_none());
        let mut buf_out = vec![0u8; 64 * 1024];
        let mut buf_err = vec![0u8; 16 * 1024];
        let mut deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let mut stage = 0u8;
        let mut cut = false;
        while !(out_done && err_done) {
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                fedr = &mut feed, if !fed => {
                    fed = true;
                    if let Err(e) = fedr {
                        tracing::debug!(pod, "exec stdin: {e}");
                    }
                }
                n = read(&mut stdout, &mut buf_out), if !out_done => match n {
                    Some(n) => {
                        taken = true;
                        if !out.take(&buf_out[..n]).await? { cut = true; break; }
                    }
                    None => out_done = true,
                },
                n = read(&mut stderr, &mut buf_err), if !err_done => match n {
                    Some(n) => {
                        taken = true;
                        if !err.take(&buf_err[..n]).await? { cut = true; break; }
                    }
                    None => err_done = true,
                },
                st = async {
                    match status.as_mut() {
                        Some(f) => f.await,
                        None => std::future::pending().await,
                    }
                }, if status.is_some() && got_status.is_none() => {
                    let lost = st.is_none();
                    got_status = Some(st);
                    if lost {
                        break;
                    }
                }
                _ = sleep => {
                    stage += 1;
                    match stage {
                        1 => {
                            tracing::debug!(pod, "exec deadline reached: SIGTERM, then kill after grace");
                            self.signal_all(pod, "-TERM").await;
                            deadline = Some(tokio::time::Instant::now() + grace);
                        }
                        2 => {
                            self.signal_all(pod, "-KILL").await;
                            deadline = Some(tokio::time::Instant::now() + Duration::from_secs(10));
                        }
                        _ => break,
                    }
                }
            }
        }
        if stage > 0 {
            if let Some(process) = process {
                process.abort();
            }
            return Ok(Attempt::Done(Ok(RawEnd::TimedOut)));
        }
        if cut {
            if let Some(process) = process {
                process.abort();
            }
            return Ok(Attempt::Done(Ok(RawEnd::Cut)));
        }
        let got = match (got_status, status) {
            (Some(got), _) => Ok(got),
            (None, Some(status)) => tokio::time::timeout(STATUS_WAIT, status).await,
            (None, None) => return Ok(Attempt::Done(Ok(RawEnd::Cut))),
        };
        let done = match got {
            Ok(Some(status)) => match exit_code_of(&status) {
                Ok(code) => Ok(Ok(RawEnd::Exited(code))),
                Err(message) if early && !taken && not_running_yet(&message) => {
                    return Ok(Attempt::NotRunningYet(message));
                }
                Err(message) => {
                    if let Some(how) = self.pod_ended(pod).await {
                        return gone(pod, how).map(|end| Attempt::Done(Ok(end)));
                    }
                    Err(KubeError::Exec {
                        pod: pod.to_string(),
                        message,
                    }
                    .into())
                }
            },
            // No status: the pod ended under the command (what ended it decides whose
            // result it is), or the stream to it was lost (the apiserver or the kubelet
            // restarted) while the command may still run — the harness's failure, never the
            // agent's.
            Ok(None) | Err(_) => match self.pod_settled(pod).await {
                Some(how) => gone(pod, how).map(Ok),
                None => {
                    // Why the client's side of the stream ended, if it knows.
                    let joined = async {
                        match process {
                            Some(process) => process.join().await.map_err(|e| e.to_string()),
                            None => Err("the relay that carried it ended".to_string()),
                        }
                    };
                    let why = match tokio::time::timeout(Duration::from_secs(2), joined).await {
                        Ok(Err(e)) => format!(": {e}"),
                        Ok(Ok(())) => " (closed by the far side)".to_string(),
                        Err(_) => String::new(),
                    };
                    let message = format!(
                        "the exec stream ended without the command's status while the pod still runs (the connection through the apiserver and the kubelet was lost{why})"
                    );
                    // Early, nothing came: the container may not have run yet. Only a
                    // command that may be asked again is run early (`true`, a claimed one).
                    if early && !taken {
                        tracing::debug!(pod, "an early exec ended without its status{why}");
                        return Ok(Attempt::NotRunningYet(message));
                    }
                    tracing::warn!(pod, "an exec stream ended without its status{why}");
                    Ok(Err(message))
                }
            },
        };
        done.map(Attempt::Done)
    }

    /// A toolbox command as root, its output in memory as the stream brought it (at most
    /// 64 KiB each), under a minute: for a command that must not be kept in the pod (it kills
    /// the keeping wrapper) and may be run again.
    pub(super) async fn harness_streamed(
        &self,
        pod: &str,
        argv: &[String],
    ) -> Result<(RawEnd, Vec<u8>, Vec<u8>), SandboxError> {
        self.streamed(pod, argv, 64 * 1024).await
    }

    /// [`harness_streamed`](Self::harness_streamed), at most `out_cap` bytes of stdout kept.
    pub(super) async fn streamed(
        &self,
        pod: &str,
        argv: &[String],
        out_cap: usize,
    ) -> Result<(RawEnd, Vec<u8>, Vec<u8>), SandboxError> {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let end = self
            .run(
                pod,
                argv,
                None,
                &mut Sink::Memory {
                    buf: &mut out,
                    cap: out_cap,
                },
                &mut Sink::Memory {
                    buf: &mut err,
                    cap: 64 * 1024,
                },
                (Some(Duration::from_secs(60)), Duration::from_secs(1)),
            )
            .await?;
        Ok((end, out, err))
    }

    /// `kill SIGNAL -1` from the toolbox as root: every process of the container but PID 1
    /// (and the kill itself). Best effort: failures are logged.
    pub(super) async fn signal_all(&self, pod: &str, signal: &str) {
        let argv = toolbox_argv("kill", &[signal, "-1"]);
        // Not through `run`, which calls this on its deadline.
        let sent = async {
            let mut process = self.attach(pod, &argv, false).await?;
            let status = process.take_status();
            if let Some(mut out) = process.stdout() {
                let mut sink = Vec::new();
                let _ = out.read_to_end(&mut sink).await;
            }
            if let Some(status) = status {
                let _ = status.await;
            }
            Ok::<_, SandboxError>(())
        };
        match tokio::time::timeout(Duration::from_secs(10), sent).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(pod, signal, "signal broadcast failed: {e}"),
            Err(_) => tracing::debug!(pod, signal, "signal broadcast did not finish"),
        }
    }

    /// [`Sandbox::exec`](crate::sandbox::Sandbox::exec), with what the command carries
    /// (`carry.rs`): `Ok(Err(_))` when that did not hold and the command was not run.
    pub(super) async fn exec_spec(
        &self,
        pod: &str,
        spec: &ExecSpec,
        carried: Carried<'_>,
    ) -> Result<Result<ExecOutcome, Unplaced>, SandboxError> {
        let started = Instant::now();
        let default_user = self.default_user(pod).await;
        // A sidecar's container has no scratch volume to keep the output in.
        let stem = (!super::names::is_sidecar(pod)).then(new_stem);
        debug_assert!(
            stem.is_some() || carried.is_empty(),
            "a sidecar carries nothing"
        );
        // The first exec of a pod handed over early confirms it running itself (claimed: it
        // may be asked again), not after the toolbox's `true`.
        let claim = stem.is_some() && self.is_unconfirmed(pod).await;
        // A loopback relay waiting for the pod's next command starts with it, in its exec
        // (never a claimed one's, which may be asked again: a pod handed over early starts
        // its relay in an exec of its own, `relay.rs`).
        let carrier = (stem.is_some() && !claim)
            .then(|| self.take_carrier(pod))
            .flatten();
        let (argv, stdin) = wrapped(
            spec,
            default_user.as_deref(),
            (stem.as_deref(), claim, carrier.is_some()),
            carried,
        );
        let mut unplaced = None;
        let mut stdout = CappedSink::open(spec.stdout.as_deref(), spec.cap_bytes).await?;
        let mut stderr = CappedSink::open(spec.stderr.as_deref(), spec.cap_bytes).await?;
        let mut err_sink = Sink::Held {
            sink: &mut stderr,
            held: Vec::new(),
            hold: if carried.halt.is_some() {
                HOLD_HALT
            } else {
                HOLD
            },
        };
        let begun = tokio::time::Instant::now();
        let stdin = (!stdin.is_empty()).then_some(&stdin[..]);
        let limits = (spec.timeout, spec.grace);
        let mut out_sink = Sink::Capped(&mut stdout);
        let end = if claim {
            self.run_claimed(pod, (&argv, stdin), &mut out_sink, &mut err_sink, limits)
                .await
        } else {
            let command = Command {
                argv: &argv,
                stdin,
                carrier: carrier.as_ref(),
            };
            self.run_command(pod, command, &mut out_sink, &mut err_sink, limits)
                .await
        };
        let Sink::Held { held, .. } = err_sink else {
            unreachable!("the sink stays what it was made")
        };
        let end = match (end, stem) {
            (Ok(Ok(end)), Some(stem)) => {
                let (end, why) = self
                    .check_kept_exec(pod, stem, (end, None), &held, &mut stdout, &mut stderr)
                    .await?;
                unplaced = why;
                end
            }
            // The stream lost the command's end: the pod's copy has it once it ended.
            (Ok(Err(why)), Some(stem)) => {
                let limits = (spec.timeout, spec.grace);
                match self.await_facts(pod, &stem, begun, limits).await? {
                    Some(facts) => {
                        let end = RawEnd::Exited(facts.code);
                        let known = (end, Some(facts));
                        let (end, why) = self
                            .check_kept_exec(pod, stem, known, &held, &mut stdout, &mut stderr)
                            .await?;
                        unplaced = why;
                        end
                    }
                    None if spec.timeout.is_some() => {
                        stderr.write(&held).await?;
                        RawEnd::TimedOut
                    }
                    None => {
                        return Err(KubeError::Exec {
                            pod: pod.to_string(),
                            message: why,
                        }
                        .into());
                    }
                }
            }
            (end, _) => {
                stderr.write(&held).await?;
                match end? {
                    Ok(end) => end,
                    Err(message) => {
                        return Err(KubeError::Exec {
                            pod: pod.to_string(),
                            message,
                        }
                        .into());
                    }
                }
            }
        };
        stdout.finish().await?;
        stderr.finish().await?;
        if let Some(why) = unplaced {
            return Ok(Err(why));
        }
        let end = match end {
            RawEnd::Exited(code) => ExecEnd::Exited(code),
            RawEnd::TimedOut => ExecEnd::TimedOut,
            RawEnd::Cut => ExecEnd::Killed { oom: false },
        };
        Ok(Ok(crate::sandbox::sink::exec_outcome(
            end,
            &stdout,
            &stderr,
            started.elapsed(),
        )))
    }
}

/// The next chunk of a stream (`None`: it ended or failed).
async fn read<R: tokio::io::AsyncRead + Unpin>(
    stream: &mut Option<R>,
    buf: &mut [u8],
) -> Option<usize> {
    let stream = stream.as_mut()?;
    match stream.read(buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_halting_commands_facts_line_fits_what_its_stderr_holds_back() {
        // The archive sent along is under 49153 bytes; in base64, with the rest of the line.
        assert!(WRAPPER.contains("head -c 49153"), "{WRAPPER}");
        assert!(49152_usize.div_ceil(3) * 4 + 512 < HOLD_HALT);
    }

    #[tokio::test]
    async fn only_a_stderr_that_is_all_the_claim_marker_says_claimed() {
        let mut capped = CappedSink::open(None, 1 << 20).await.unwrap();
        let mut sink = Sink::Held {
            sink: &mut capped,
            held: Vec::new(),
            hold: HOLD,
        };
        sink.take(CLAIMED).await.unwrap();
        assert!(sink.take_claimed());
        let Sink::Held { held, .. } = &sink else {
            unreachable!()
        };
        assert!(held.is_empty(), "the marker is dropped");
        // A command's own stderr before the marker: not claimed.
        sink.take(b"out of the command\n").await.unwrap();
        sink.take(CLAIMED).await.unwrap();
        assert!(!sink.take_claimed());
        let mut buf = Vec::new();
        let mut memory = Sink::Memory {
            buf: &mut buf,
            cap: 64,
        };
        memory.take(CLAIMED).await.unwrap();
        assert!(
            !memory.take_claimed(),
            "only the held stderr of a kept exec"
        );
    }

    /// A command of `argv` with `env`, its streams' cap 10 bytes, nothing else set.
    fn spec(argv: &[&str], env: &[(&str, &str)]) -> ExecSpec {
        ExecSpec {
            argv: argv.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            user: None,
            workdir: None,
            stdout: None,
            stderr: None,
            cap_bytes: 10,
            timeout: None,
            grace: Duration::ZERO,
        }
    }

    #[test]
    fn the_environment_goes_on_stdin_never_in_the_argv() {
        let spec = ExecSpec {
            workdir: Some("/app".into()),
            ..spec(&["python3", "-c", "print(1)"], &[("TOKEN", "s3cret\nline")])
        };
        let (argv, stdin) = wrapped(
            &spec,
            Some("agent"),
            (None, false, false),
            Carried::default(),
        );
        assert!(!argv.iter().any(|a| a.contains("s3cret")));
        assert_eq!(argv[0], "/.arbiter/toolbox/busybox");
        let tail: Vec<&str> = argv[5..].iter().map(String::as_str).collect();
        assert_eq!(
            tail,
            [
                "agent", "/app", "e", "", "10", "", "python3", "-c", "print(1)"
            ]
        );
        assert_eq!(stdin, b"export 'TOKEN=s3cret\nline'\n\0");
        let root = ExecSpec {
            user: Some("0".into()),
            env: Vec::new(),
            ..spec
        };
        let (argv, stdin) = wrapped(
            &root,
            Some("agent"),
            (Some("/k"), false, false),
            Carried::default(),
        );
        assert_eq!(argv[5], "", "root needs no switch");
        assert_eq!(argv[7], "-");
        assert_eq!(argv[8], "/k", "the stem of the kept output");
        assert!(stdin.is_empty());
    }

    /// The wrapper, run by the toolbox's shell, sets every variable of the environment it reads,
    /// byte for byte, whatever the values hold.
    #[test]
    fn the_wrapper_sets_the_environment_it_reads_byte_for_byte() {
        use std::io::Write;
        use std::process::Stdio;
        let env = [
            ("PLAIN", "1"),
            ("QUOTES", "it's \"quoted\" 'twice''"),
            ("LINES", "two\nlines\n"),
            ("SHELLY", "$HOME `id` $(id) ; exit 3 \\ * ~"),
            ("EMPTY", ""),
            ("UNICODE", "héllo wörld ✓"),
        ];
        let spec = spec(
            &[
                "sh",
                "-c",
                "printf '%s\\037' \"$PLAIN\" \"$QUOTES\" \"$LINES\" \"$SHELLY\" \"$EMPTY\" \"$UNICODE\"",
            ],
            &env,
        );
        let (argv, stdin) = wrapped(&spec, None, (None, false, false), Carried::default());
        let args: Vec<&str> = argv[4..].iter().map(String::as_str).collect();
        let Some(mut cmd) = super::super::hot::tests::toolbox_sh(&argv[3], &args) else {
            return;
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = String::from_utf8(out.stdout).unwrap();
        let want: String = env.iter().map(|(_, v)| format!("{v}\x1f")).collect();
        assert_eq!(got, want);
    }

    /// The keeping wrapper, run by the toolbox's shell on output past its cap: the first
    /// bytes of each stream kept, every byte counted (nothing read ahead and lost to the
    /// count), the streams passed on whole.
    #[test]
    fn the_wrapper_keeps_the_cap_and_counts_every_byte_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let stem = dir.path().join("keep-w");
        let spec = spec(
            &["sh", "-c", "head -c 100000 /dev/zero; printf err >&2"],
            &[],
        );
        let (argv, _) = wrapped(
            &spec,
            None,
            (Some(stem.to_str().unwrap()), false, false),
            Carried::default(),
        );
        let args: Vec<&str> = argv[4..].iter().map(String::as_str).collect();
        let Some(mut cmd) = super::super::hot::tests::toolbox_sh(&argv[3], &args) else {
            return;
        };
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{:?}", out.status);
        assert_eq!(out.stdout.len(), 100_000);
        let at = out
            .stderr
            .iter()
            .position(|&b| b == 0x1f)
            .expect("a facts line");
        assert_eq!(&out.stderr[..at], b"err");
        let facts = String::from_utf8(out.stderr[at + 1..].to_vec()).unwrap();
        let words: Vec<&str> = facts.split_whitespace().collect();
        assert_eq!(words[..4], ["arbiter-kept", "0", "10", "3"], "{facts}");
        assert_eq!(words[6], "t100000:3", "{facts}");
        assert_eq!(std::fs::read(stem.with_extension("o")).unwrap(), [0; 10]);
    }

    #[test]
    fn what_a_command_carries_follows_its_environment_on_stdin() {
        let spec = spec(&["true"], &[("A", "1")]);
        let upload = super::super::carried::HeldUpload {
            dest: "/".into(),
            replacing: vec!["/tests".into(), "/logs/verifier".into()],
            tar: std::sync::Arc::new(b"TARBYTES".to_vec()),
        };
        let proofs = super::super::proof::Proofs {
            handover: false,
            no_network: true,
        };
        let script = proofs.script().expect("a proof");
        let carried = Carried {
            proofs: Some(&script),
            upload: Some(&upload),
            halt: Some("/logs/verifier"),
        };
        let (argv, stdin) = wrapped(&spec, None, (Some("/k"), false, false), carried);
        assert_eq!(argv[7], "epu");
        assert_eq!(
            argv[10], "/logs/verifier",
            "the path sent along after the halt"
        );
        let argv_u = wrapped(
            &spec,
            None,
            (Some("/k"), true, false),
            Carried {
                proofs: None,
                ..carried
            },
        )
        .0;
        assert_eq!(argv_u[7], "ecu");
        // Claimed only where the output is kept (the claim is a kept file).
        assert_eq!(wrapped(&spec, None, (None, true, false), carried).0[7], "e");
        let want = format!(
            "export 'A=1'\n\0{script}\0h={} d='/'; set -- '/tests' '/logs/verifier'\0TARBYTES",
            sha256_hex(b"TARBYTES")
        );
        assert_eq!(String::from_utf8(stdin).unwrap(), want);
        // Nothing is carried without a place in the pod to report on it.
        let (argv, stdin) = wrapped(&spec, None, (None, false, false), carried);
        assert_eq!(argv[7], "e");
        assert_eq!(argv[10], "", "no halt either");
        assert_eq!(stdin, b"export 'A=1'\n\0");
    }
}
