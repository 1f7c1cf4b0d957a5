//! The model gateway's added latency and memory (issue 11, "measured, not asserted").
//!
//! A fake Anthropic upstream on 127.0.0.1 answers a canned body (and a canned SSE stream);
//! the same client calls it directly and through the gateway, alternating, one call at a
//! time. Prints median and p99 per path, the gateway's added latency, CPU time of this process
//! per 1,000 gateway calls, and RSS after warm-up and at the end.
//!
//! `cargo run --release --example gateway_latency -- [CALLS]` (default 5,000 per path).

use std::net::TcpListener;
use std::time::{Duration, Instant};

use arbiter::gateway::{Budget, Gateway, ModelConfig, TrialGrant};
use axum::response::IntoResponse;

const BODY: &str = r#"{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":5}}"#;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn cpu_secs() -> f64 {
    // utime + stime of this process, in clock ticks (100 Hz on Linux).
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1;
            let f: Vec<&str> = after.split_whitespace().collect();
            let ut: f64 = f.get(11)?.parse().ok()?;
            let st: f64 = f.get(12)?.parse().ok()?;
            Some((ut + st) / 100.0)
        })
        .unwrap_or(0.0)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5000);

    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = upstream.local_addr().unwrap();
    let app = axum::Router::new()
        .fallback(|| async { ([("content-type", "application/json")], BODY).into_response() });
    tokio::spawn(async move { axum::serve(upstream, app).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let cfg: ModelConfig = serde_yaml::from_str(&format!(
        "{{name: a, api: anthropic, base_url: 'http://{up_addr}', api_key: '${{K}}', max_concurrency: 4}}"
    ))
    .unwrap();
    let model = cfg
        .resolve_with(0, dir.path(), |_| Some("sk-bench".into()))
        .unwrap();
    let gateway = Gateway::start(vec![model]).unwrap();
    let handle = gateway
        .serve(TcpListener::bind("127.0.0.1:0").unwrap())
        .unwrap();
    let token = gateway
        .register_trial(TrialGrant {
            trial_id: "bench".into(),
            provider: "a".into(),
            model: "m".into(),
            budget: Budget::default(),
            ledger_path: dir.path().join("calls.jsonl"),
        })
        .unwrap();

    let client = reqwest::Client::new();
    let body = r#"{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;
    let direct_url = format!("http://{up_addr}/v1/messages");
    let gw_url = format!("http://{}/v1/messages", handle.addr);
    let call = |url: String| {
        let client = client.clone();
        let tok = token.as_str().to_string();
        async move {
            let t = Instant::now();
            let r = client
                .post(url)
                .header("x-api-key", tok)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            r.bytes().await.unwrap();
            t.elapsed()
        }
    };

    // Warm-up.
    for _ in 0..200 {
        call(direct_url.clone()).await;
        call(gw_url.clone()).await;
    }
    // Sample buffers are touched before the first RSS reading, so they are not counted as growth.
    let mut direct = vec![Duration::ZERO; calls];
    let mut via = vec![Duration::ZERO; calls];
    let rss_start = rss_kib();
    let mut gw_cpu = 0.0;
    for i in 0..calls {
        direct[i] = call(direct_url.clone()).await;
        let c0 = cpu_secs();
        via[i] = call(gw_url.clone()).await;
        gw_cpu += cpu_secs() - c0;
    }
    let rss_end = rss_kib();
    direct.sort();
    via.sort();
    let usage = gateway.finish_trial(&token).await.unwrap();
    assert_eq!(usage.requests as usize, calls + 200);

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("calls per path: {calls} (sequential, non-streaming, 127.0.0.1)");
    println!(
        "direct   median {:.3} ms  p99 {:.3} ms",
        ms(pct(&direct, 0.5)),
        ms(pct(&direct, 0.99))
    );
    println!(
        "gateway  median {:.3} ms  p99 {:.3} ms",
        ms(pct(&via, 0.5)),
        ms(pct(&via, 0.99))
    );
    println!(
        "added    median {:.3} ms  p99 {:.3} ms",
        ms(pct(&via, 0.5)) - ms(pct(&direct, 0.5)),
        ms(pct(&via, 0.99)) - ms(pct(&direct, 0.99))
    );
    println!(
        "process CPU during gateway calls (client + gateway + upstream): {:.3} s per 1,000 calls",
        gw_cpu / calls as f64 * 1000.0
    );
    println!("RSS after warm-up {rss_start} KiB, after {calls} more calls {rss_end} KiB");
}
