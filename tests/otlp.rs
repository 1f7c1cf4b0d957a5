//! Traces out (SPEC §17) against a real OpenTelemetry Collector: `arbiter run --otlp URL` on
//! the real engine sends one trace per trial — the trial, its phases, its model calls under
//! the agent phase — whose token counts and cost are the gateway's; `arbiter export otlp`
//! sends the same ids again; a dead endpoint fails no trial; a bad URL is refused up front.
//!
//! The collector (OTLP receiver → file exporter) is built by scripts/otelcol, which
//! scripts/test runs first: `ARBITER_OTELCOL`, else `~/.cache/arbiter/otelcol/*/otelcol`.
//! Without one these tests skip, or fail under `ARBITER_REQUIRE_DOCKER=1` (CI).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{arbiter, docker_available, repo, result, stderr, stdout, unique_name, write_job};
use serde_json::Value;

const TASK: &str = "exact-deliverable";
const CALLER: &str = "exact-deliverable__caller__default__1";
const NOP: &str = "exact-deliverable__nop__default__1";

/// The collector binary, or `None` (skip) — a failure under CI.
fn otelcol() -> Option<PathBuf> {
    let found = std::env::var_os("ARBITER_OTELCOL")
        .map(PathBuf::from)
        .or_else(|| {
            let cache = PathBuf::from(std::env::var_os("HOME")?).join(".cache/arbiter/otelcol");
            std::fs::read_dir(cache)
                .ok()?
                .flatten()
                .map(|e| e.path().join("otelcol"))
                .find(|p| p.is_file())
        })
        .filter(|p| p.is_file());
    if found.is_none() {
        if std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() == Ok("1") {
            panic!(
                "ARBITER_REQUIRE_DOCKER=1 but no collector (run scripts/otelcol, or set ARBITER_OTELCOL)"
            );
        }
        eprintln!("skipping: no OpenTelemetry Collector (scripts/otelcol)");
    }
    found
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A collector on 127.0.0.1 writing what it receives to `file` (OTLP JSON, a line per batch);
/// killed on drop.
struct Collector {
    child: Child,
    url: String,
    file: PathBuf,
}

impl Collector {
    fn start(bin: &Path, dir: &Path) -> Collector {
        let port = free_port();
        let file = dir.join("received.jsonl");
        let config = dir.join("otelcol.yaml");
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n\
                 exporters:\n  file:\n    path: {}\n    flush_interval: 100ms\n\
                 service:\n  telemetry:\n    metrics:\n      level: none\n    logs:\n      level: warn\n  \
                 pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [file]\n",
                file.display()
            ),
        )
        .expect("collector config");
        let log = std::fs::File::create(dir.join("otelcol.log")).expect("log");
        let child = Command::new(bin)
            .arg(format!("--config=file:{}", config.display()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the collector");
        let mut collector = Collector {
            child,
            url: format!("http://127.0.0.1:{port}"),
            file,
        };
        // Ready when its receiver accepts connections (a generous bound, not a measurement).
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = collector.child.try_wait() {
                panic!("the collector exited ({status}): {}", collector.log(dir));
            }
            assert!(
                Instant::now() < deadline,
                "the collector never listened: {}",
                collector.log(dir)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        collector
    }

    fn log(&self, dir: &Path) -> String {
        std::fs::read_to_string(dir.join("otelcol.log")).unwrap_or_default()
    }

    /// Every span received so far, with its resource's attributes.
    fn spans(&self) -> Vec<Received> {
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        let mut out = Vec::new();
        // The last line may be half written while the collector flushes.
        for line in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            for rs in line["resourceSpans"].as_array().into_iter().flatten() {
                let resource = attributes(&rs["resource"]["attributes"]);
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for span in ss["spans"].as_array().into_iter().flatten() {
                        out.push(Received {
                            resource: resource.clone(),
                            scope: ss["scope"]["name"].as_str().unwrap_or_default().to_string(),
                            span: span.clone(),
                            attrs: attributes(&span["attributes"]),
                        });
                    }
                }
            }
        }
        out
    }

    /// The spans once at least `n` have arrived (bounded wait for the exporter's flush).
    fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let spans = self.spans();
            if spans.len() >= n || Instant::now() > deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Clone)]
struct Received {
    resource: BTreeMap<String, Value>,
    scope: String,
    span: Value,
    attrs: BTreeMap<String, Value>,
}

impl Received {
    fn id(&self) -> &str {
        self.span["spanId"].as_str().unwrap_or_default()
    }
    fn trace(&self) -> &str {
        self.span["traceId"].as_str().unwrap_or_default()
    }
    fn parent(&self) -> &str {
        self.span["parentSpanId"].as_str().unwrap_or_default()
    }
    fn name(&self) -> &str {
        self.span["name"].as_str().unwrap_or_default()
    }
    fn text(&self, key: &str) -> String {
        self.attrs
            .get(key)
            .and_then(|v| v["stringValue"].as_str())
            .unwrap_or_else(|| panic!("{key} on {}: {:?}", self.name(), self.attrs))
            .to_string()
    }
    /// OTLP JSON writes 64-bit integers as strings.
    fn int(&self, key: &str) -> u64 {
        self.attrs
            .get(key)
            .and_then(|v| v["intValue"].as_str())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{key} on {}: {:?}", self.name(), self.attrs))
    }
    fn float(&self, key: &str) -> f64 {
        self.attrs
            .get(key)
            .and_then(|v| v["doubleValue"].as_f64())
            .unwrap_or_else(|| panic!("{key} on {}: {:?}", self.name(), self.attrs))
    }
    fn flag(&self, key: &str) -> bool {
        self.attrs
            .get(key)
            .and_then(|v| v["boolValue"].as_bool())
            .unwrap_or(false)
    }
    fn nanos(&self, key: &str) -> u128 {
        self.span[key]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{key} of {}", self.name()))
    }
}

fn attributes(list: &Value) -> BTreeMap<String, Value> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|kv| Some((kv["key"].as_str()?.to_string(), kv["value"].clone())))
        .collect()
}

/// The job: the gateway-caller agent solving the task with two scripted model calls (cache
/// tokens and a price, so every count and the cost are non-zero), and nop failing it.
fn job(dir: &Path) -> PathBuf {
    std::fs::write(
        dir.join("script.json"),
        r#"{"turns": [
            {"run": "bash /opt/solution/solve.sh >/dev/null", "usage": {"input_tokens": 120, "output_tokens": 12, "cache_read_tokens": 40, "cache_write_tokens": 8}},
            {"say": "Done: /app/out/report.txt is written.", "usage": {"input_tokens": 300, "output_tokens": 30, "cache_read_tokens": 100}}
        ]}"#,
    )
    .expect("script");
    let repo = repo();
    write_job(
        dir,
        &format!(
            "tasks: [{task}]\nretries: {{max: 0}}\nconcurrency: 2\nmodels:\n  - {{name: fake, api: scripted, script: script.json, price: {{input_per_mtok: 3.0, output_per_mtok: 15.0, cache_read_per_mtok: 0.3, cache_write_per_mtok: 3.75}}}}\nagents:\n  - name: caller\n    kind: command\n    run: [python3, /opt/caller/agent.py]\n    model: {{provider: fake, name: scripted-model}}\n    mounts:\n      - {{host: {agent}, container: /opt/caller}}\n      - {{host: {solution}, container: /opt/solution}}\n  - nop\n",
            task = repo.join("tasks").join(TASK).display(),
            agent = repo.join("tests/fixtures/agents/gateway-caller").display(),
            solution = repo.join("tasks").join(TASK).join("solution").display(),
        ),
    )
}

fn ledger(job_dir: &Path, trial: &str) -> Vec<Value> {
    let path = job_dir
        .join("trials")
        .join(trial)
        .join("agent/model-calls.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a ledger line"))
        .collect()
}

#[test]
fn each_trial_is_one_trace_with_its_phases_and_model_calls_as_the_gateway_counted_them() {
    if !docker_available() {
        return;
    }
    let Some(bin) = otelcol() else { return };
    let tmp = tempfile::tempdir().expect("tmp");
    let collector = Collector::start(&bin, tmp.path());
    let config = job(tmp.path());
    let job_dir = tmp.path().join(format!("job-{}", unique_name(tmp.path())));
    let out = arbiter(&[
        "run",
        "-c",
        config.to_str().expect("utf8"),
        "--job-dir",
        job_dir.to_str().expect("utf8"),
        "--otlp",
        &collector.url,
    ]);
    let caller = result(&job_dir, CALLER);
    let nop = result(&job_dir, NOP);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(caller["verifier"]["status"], "passed", "{caller:#}");
    assert_eq!(nop["verifier"]["status"], "failed", "{nop:#}");
    let endpoint = format!("{}/v1/traces", collector.url);
    assert!(
        stdout(&out).contains(&format!("traces: 2 trials sent to {endpoint}")),
        "{}",
        stdout(&out)
    );
    // The endpoint is kept in the job's config: a resume keeps sending.
    let saved = std::fs::read_to_string(job_dir.join("job.yaml")).expect("job.yaml");
    assert!(saved.contains(&format!("endpoint: {endpoint}")), "{saved}");

    let calls = ledger(&job_dir, CALLER);
    assert_eq!(calls.len(), 2, "two scripted calls");
    let phases = |r: &Value| r["phases"].as_object().expect("phases").len();
    let expected = (1 + phases(&caller) + calls.len()) + (1 + phases(&nop));
    let spans = collector.wait_for(expected);
    assert_eq!(
        spans.len(),
        expected,
        "{:#?}",
        spans.iter().map(|s| s.name()).collect::<Vec<_>>()
    );
    assert!(spans.iter().all(|s| {
        s.resource
            .get("service.name")
            .and_then(|v| v["stringValue"].as_str())
            == Some("arbiter")
    }));
    assert!(spans.iter().all(|s| s.scope == "arbiter"));

    // One trace per trial.
    let mut traces: BTreeMap<String, Vec<Received>> = BTreeMap::new();
    for span in &spans {
        traces
            .entry(span.trace().to_string())
            .or_default()
            .push(span.clone());
    }
    assert_eq!(traces.len(), 2, "one trace per trial");
    let by_trial: BTreeMap<String, Vec<Received>> = traces
        .into_values()
        .map(|spans| {
            let roots: Vec<&Received> = spans.iter().filter(|s| s.parent().is_empty()).collect();
            assert_eq!(
                roots.len(),
                1,
                "one root per trace: {:?}",
                spans.iter().map(|s| s.name()).collect::<Vec<_>>()
            );
            (roots[0].text("arbiter.trial.id"), spans)
        })
        .collect();

    for (trial, record) in [(CALLER, &caller), (NOP, &nop)] {
        let spans = &by_trial[trial];
        let root = spans.iter().find(|s| s.parent().is_empty()).expect("root");
        assert_eq!(root.name(), format!("trial {TASK}"));
        assert_eq!(root.text("arbiter.task"), TASK);
        assert_eq!(
            root.text("arbiter.agent"),
            record["agent"].as_str().expect("agent")
        );
        assert_eq!(root.text("arbiter.variant"), "default");
        assert_eq!(root.int("arbiter.attempt"), 1);
        assert_eq!(
            root.text("arbiter.termination.kind"),
            record["termination"]["kind"].as_str().expect("kind")
        );
        assert_eq!(
            root.text("arbiter.verifier.status"),
            record["verifier"]["status"].as_str().expect("status")
        );
        assert_eq!(
            root.text("arbiter.job.id"),
            std::fs::read_to_string(job_dir.join("job-id"))
                .expect("job-id")
                .trim()
        );
        // Phases: children of the root, one per phase of the record, each as long as it.
        let children: Vec<&Received> = spans.iter().filter(|s| s.parent() == root.id()).collect();
        let mut names: Vec<&str> = children.iter().map(|s| s.name()).collect();
        names.sort();
        let mut want: Vec<&str> = record["phases"]
            .as_object()
            .expect("phases")
            .keys()
            .map(String::as_str)
            .collect();
        want.sort();
        assert_eq!(names, want, "{trial}");
        for phase in &children {
            let seconds = record["phases"][phase.name()]["seconds"]
                .as_f64()
                .expect("seconds");
            let took =
                (phase.nanos("endTimeUnixNano") - phase.nanos("startTimeUnixNano")) as f64 / 1e9;
            assert!(
                (took - seconds).abs() < 1e-3,
                "{trial} {}: {took} vs {seconds}",
                phase.name()
            );
            assert!(phase.nanos("startTimeUnixNano") >= root.nanos("startTimeUnixNano"));
            assert!(phase.nanos("endTimeUnixNano") <= root.nanos("endTimeUnixNano"));
            assert!(
                !phase.flag("arbiter.phase.start_estimated"),
                "the record has each phase's start"
            );
        }
        let agent = children
            .iter()
            .find(|s| s.name() == "agent")
            .expect("agent phase");
        let under_agent: Vec<&Received> =
            spans.iter().filter(|s| s.parent() == agent.id()).collect();
        assert_eq!(
            spans.len(),
            1 + children.len() + under_agent.len(),
            "nothing else in the trace"
        );

        if trial == NOP {
            assert!(under_agent.is_empty(), "nop made no model call");
            assert!(!root.flag("arbiter.passed"));
            continue;
        }
        assert!(root.flag("arbiter.passed"));
        assert_eq!(root.float("arbiter.reward"), 1.0);
        // Model calls: one span per ledger line, under the agent phase, GenAI conventions.
        assert_eq!(under_agent.len(), calls.len());
        let usage = &record["usage"];
        let (mut input, mut output, mut cache_read, mut cache_write, mut cost) = (0, 0, 0, 0, 0.0);
        for span in &under_agent {
            let seq = span.int("arbiter.model_call.seq");
            let line = calls
                .iter()
                .find(|c| c["seq"] == seq)
                .expect("its ledger line");
            assert_eq!(span.name(), "chat scripted-model");
            assert_eq!(span.span["kind"], 3, "SPAN_KIND_CLIENT");
            assert_eq!(span.text("gen_ai.operation.name"), "chat");
            assert_eq!(span.text("gen_ai.provider.name"), "fake");
            assert_eq!(span.text("gen_ai.request.model"), "scripted-model");
            let t = &line["tokens"];
            let n = |v: &Value| v.as_u64().expect("a count");
            assert_eq!(
                span.int("gen_ai.usage.input_tokens"),
                n(&t["input"]) + n(&t["cache_read"]) + n(&t["cache_write"])
            );
            assert_eq!(span.int("gen_ai.usage.output_tokens"), n(&t["output"]));
            assert_eq!(
                span.int("gen_ai.usage.cache_read.input_tokens"),
                n(&t["cache_read"])
            );
            assert_eq!(
                span.int("gen_ai.usage.cache_creation.input_tokens"),
                n(&t["cache_write"])
            );
            assert_eq!(
                span.float("arbiter.cost_usd"),
                line["cost_usd"].as_f64().expect("cost")
            );
            let finish = &span.attrs["gen_ai.response.finish_reasons"]["arrayValue"]["values"];
            assert_eq!(
                finish[0]["stringValue"], line["stop_reason"],
                "{:?}",
                span.attrs
            );
            let took = span.nanos("endTimeUnixNano") - span.nanos("startTimeUnixNano");
            let latency = u128::from(n(&line["latency_ms"])) * 1_000_000;
            assert!(took.abs_diff(latency) < 1_000, "{took} ns vs {latency} ns");
            input += span.int("gen_ai.usage.input_tokens");
            output += span.int("gen_ai.usage.output_tokens");
            cache_read += span.int("gen_ai.usage.cache_read.input_tokens");
            cache_write += span.int("gen_ai.usage.cache_creation.input_tokens");
            cost += span.float("arbiter.cost_usd");
        }
        // The calls add up to the trial's usage as the gateway counted it.
        let u = |k: &str| usage[k].as_u64().expect(k);
        assert_eq!(
            input,
            u("input_tokens") + u("cache_read_tokens") + u("cache_write_tokens")
        );
        // The caller speaks OpenAI Chat, which has no cache-write count: the script's 8
        // cache-write tokens reach the gateway as plain prompt tokens.
        assert_eq!(
            (input, output, cache_read, cache_write),
            (420 + 148, 42, 140, 0)
        );
        assert_eq!(output, u("output_tokens"));
        assert_eq!(cache_read, u("cache_read_tokens"));
        assert_eq!(cache_write, u("cache_write_tokens"));
        let total = usage["cost_usd"].as_f64().expect("cost");
        assert!(
            total > 0.0 && (cost - total).abs() < 1e-9,
            "{cost} vs {total}"
        );
        assert_eq!(root.int("arbiter.usage.requests"), 2);
        assert_eq!(root.int("arbiter.usage.input_tokens"), u("input_tokens"));
        // Nothing the agent sent or got: no bodies, no token.
        for span in spans {
            let text = span.span.to_string();
            assert!(
                !text.contains("report.txt is written"),
                "a response body was sent: {text}"
            );
            assert!(!text.contains("arb-"), "a gateway token was sent: {text}");
        }
    }

    // After the fact: the same trial again, with the same trace and span ids.
    let ids = |spans: &[Received]| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = spans
            .iter()
            .map(|s| (s.trace().to_string(), s.id().to_string()))
            .collect();
        v.sort();
        v
    };
    let out = arbiter(&[
        "export",
        "otlp",
        job_dir.to_str().expect("utf8"),
        "--endpoint",
        &collector.url,
        "--trial",
        CALLER,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        stdout(&out).trim(),
        format!("traces: 1 trial sent to {endpoint}")
    );
    let all = collector.wait_for(expected + by_trial[CALLER].len());
    assert_eq!(all.len(), expected + by_trial[CALLER].len());
    assert_eq!(
        ids(&all[expected..]),
        ids(&by_trial[CALLER]),
        "a re-export has the same ids"
    );
}

#[test]
fn a_dead_endpoint_fails_no_trial_and_says_so_in_the_summary() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    // A port on the loopback nothing listens on.
    let url = format!("http://127.0.0.1:{}", free_port());
    let task = repo().join("tasks").join(TASK);
    let job_dir = tmp.path().join(format!("job-{}", unique_name(tmp.path())));
    let out = arbiter(&[
        "run",
        task.to_str().expect("utf8"),
        "--agent",
        "nop",
        "--job-dir",
        job_dir.to_str().expect("utf8"),
        "--otlp",
        &url,
    ]);
    let r = result(&job_dir, NOP);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(r["infra_error"].is_null(), "{r:#}");
    assert_eq!(r["verifier"]["status"], "failed");
    let line = stdout(&out)
        .lines()
        .find(|l| l.starts_with("traces:"))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.starts_with(&format!("traces: 1 of 1 trial not sent to {url}/v1/traces")),
        "{}",
        stdout(&out)
    );
    assert!(line.contains("(connection refused)"), "{line}");
    assert!(
        line.contains(&format!("arbiter export otlp {}", job_dir.display())),
        "{line}"
    );
    assert!(
        stderr(&out).contains("sending the trace of"),
        "a warning: {}",
        stderr(&out)
    );
    // The same after the fact: exit 1, one line.
    let out = arbiter(&[
        "export",
        "otlp",
        job_dir.to_str().expect("utf8"),
        "--endpoint",
        &url,
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).starts_with("traces: 1 of 1 trial not sent"),
        "{}",
        stdout(&out)
    );
}

/// A bad endpoint is refused before anything runs: one line naming the file and field (or
/// the flag), exit 2. Needs no engine.
#[test]
fn a_bad_endpoint_is_refused_naming_the_field() {
    let tmp = tempfile::tempdir().expect("tmp");
    let task = repo().join("tasks").join(TASK);
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nagents: [nop]\notlp: {{endpoint: 'grpc://collector:4317'}}\n",
            task.display()
        ),
    );
    let out = arbiter(&["run", "-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out).trim(),
        format!(
            "error: {}:otlp.endpoint: expected an http:// or https:// URL (OTLP/HTTP), got scheme \"grpc\"",
            config.display()
        )
    );
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nagents: [nop]\notlp: {{url: 'http://x'}}\n",
            task.display()
        ),
    );
    let out = arbiter(&["run", "-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unknown field `url`"),
        "{}",
        stderr(&out)
    );

    let out = arbiter(&[
        "run",
        task.to_str().expect("utf8"),
        "--agent",
        "nop",
        "--otlp",
        "http://user:secret@collector:4318",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("--otlp <URL>") && err.contains("OTEL_EXPORTER_OTLP_HEADERS"),
        "{err}"
    );
}
