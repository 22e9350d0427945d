//! The control plane at scale, through its HTTP API: `cargo run --release --example control_plane_scale`.
//!
//! Starts `gangway serve`'s control plane in-process on a simulated 4,096-GPU cluster (512 servers of 8
//! GPUs, three types) with the simulated executor, 600x faster than real time (a 60 s round every
//! 100 ms), then submits 10,000 jobs over HTTP from 4 client threads. Prints the API throughput, the
//! round latency (p50/p99 over every round), and the memory per job (resident set growth / jobs).
//! Optional arguments: POLICY (default tiresias) and JOBS.

use std::time::{Duration, Instant};

use gangway::actors::api::Listen;
use gangway::actors::auth::Token;
use gangway::core::cluster::Cluster;
use gangway::plane::{ApiOptions, ControlPlaneBuilder};

const CLIENTS: u32 = 16;

/// Resident memory of this process, in bytes (Linux).
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// mimalloc: the control plane's rounds send thousands of small actor messages, and the system
/// allocator spent a third of a round in malloc and free (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let policy_name = args.next().unwrap_or_else(|| "tiresias".into());
    let jobs: u32 = args
        .next()
        .map_or(10_000, |n| n.parse().expect("JOBS is a number"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let mut api = ApiOptions::new(Listen::Tcp(format!("127.0.0.1:{port}").parse().unwrap()));
    api.token_file = Some(dir.path().join("api-token"));
    let plane = ControlPlaneBuilder::new()
        .cluster(Cluster::parse_spec("v100=171x8,p100=171x8,k80=170x8", 8).unwrap())
        .policy(&policy_name)
        .simulated_workers()
        .round(60.0)
        .time_scale(600.0)
        .journal(dir.path().join("journal"))
        .listen(api)
        .start()
        .unwrap();
    let token = Token::read(&dir.path().join("api-token")).unwrap();
    let url = format!("http://127.0.0.1:{port}/jobs");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let authorization = token.header_value();
    while agent
        .get(&url)
        .header("Authorization", &authorization)
        .call()
        .is_err()
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let memory_before = resident_bytes();
    let began = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (agent, url, authorization) = (agent.clone(), url.clone(), authorization.clone());
            std::thread::spawn(move || {
                for k in (c..jobs).step_by(CLIENTS as usize) {
                    let gpus = [1, 1, 1, 1, 1, 1, 1, 2, 4, 8][(k % 10) as usize];
                    let body = serde_json::json!({
                        "gpus": gpus,
                        // 1 to 28 hours of work: some finish while the run lasts, most do not.
                        "work": 3600 + (k * 7919) % 100_000,
                        "tenant": format!("team-{}", k % 8),
                    });
                    agent
                        .post(&url)
                        .header("Authorization", &authorization)
                        .send_json(&body)
                        .expect("submit");
                }
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    let submitting = began.elapsed();
    let memory_after = resident_bytes();
    // Let rounds run on the full queue for a while (10 s wall = 100 rounds).
    std::thread::sleep(Duration::from_secs(10));
    let stats = plane.stats().unwrap();
    println!("policy {policy_name}, {jobs} jobs via HTTP on 4,096 simulated GPUs");
    println!(
        "API: {:.0} submissions/s ({CLIENTS} clients, {:.2} s)",
        f64::from(jobs) / submitting.as_secs_f64(),
        submitting.as_secs_f64()
    );
    println!(
        "rounds: {} (p50 {:.1} ms, p99 {:.1} ms, mean {:.1} ms); {} starts, {} preemptions, {} finished",
        stats.rounds,
        stats.round_latency_p50 * 1e3,
        stats.round_latency_p99 * 1e3,
        stats.round_latency_sum / stats.rounds.max(1) as f64 * 1e3,
        stats.starts,
        stats.preemptions,
        stats.finished
    );
    println!(
        "memory: {:.1} KiB per job (resident {:.0} MiB -> {:.0} MiB)",
        (memory_after.saturating_sub(memory_before)) as f64 / 1024.0 / f64::from(jobs),
        memory_before as f64 / (1 << 20) as f64,
        memory_after as f64 / (1 << 20) as f64
    );
    plane.shutdown().unwrap();
}
