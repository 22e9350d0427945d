//! The control plane at scale, through its HTTP API: `cargo run --release --example control_plane_scale`.
//!
//! Starts `gangway serve`'s control plane in-process on a simulated cluster (servers of 8 GPUs, three
//! types; 4,096 GPUs by default) with the simulated executor, 600x faster than real time (a 60 s
//! round every 100 ms), then submits the jobs over HTTP from 16 client threads and lets rounds run on
//! the full queue for 10 s more, while one more client reads `GET /jobs` every READ_MS (a line on
//! stderr says when the submissions are in: a profiler attached then sees the steady rounds only).
//! Prints the API throughput, the round latency (p50/p99 over every round), the latency of the reads
//! made while rounds ran, and the memory per job (resident set growth / jobs).
//! Optional arguments: POLICY (default tiresias), JOBS (default 10,000), GPUS (servers of 8, over
//! three types; default 4,096, which is 171 + 171 + 170 servers) and READ_MS, the reading client's
//! pause between reads (default 100, a dashboard refreshing ten times a second; 0: back to back),
//! and READ_QUERY, what the reading client asks (default none: the whole list; `?limit=1000`: a
//! page).

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
    let gpus: u32 = args
        .next()
        .map_or(4_096, |n| n.parse().expect("GPUS is a number"));
    let read_every = Duration::from_millis(
        args.next()
            .map_or(100, |n| n.parse().expect("READ_MS is a number")),
    );
    let read_query = args.next().unwrap_or_default();
    // Servers of 8 GPUs, as evenly over the three types as they go.
    let servers = gpus / 8;
    let per_type = [servers.div_ceil(3), (servers + 1) / 3, servers / 3];
    let spec = format!(
        "v100={}x8,p100={}x8,k80={}x8",
        per_type[0], per_type[1], per_type[2]
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let mut api = ApiOptions::new(Listen::Tcp(format!("127.0.0.1:{port}").parse().unwrap()));
    api.token_file = Some(dir.path().join("api-token"));
    let plane = ControlPlaneBuilder::new()
        .cluster(Cluster::parse_spec(&spec, 8).unwrap())
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
    eprintln!(
        "submitted {jobs} jobs in {:.1} s; rounds run for 10 s more",
        submitting.as_secs_f64()
    );
    let after_submissions = plane.stats().unwrap();
    let memory_after = resident_bytes();
    // Let rounds run on the full queue for a while (10 s wall = 100 rounds), while one more client
    // reads the job list as a dashboard would.
    let reading = Instant::now();
    let mut reads = Vec::new();
    let mut listed = 0;
    while reading.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(read_every);
        let asked = Instant::now();
        let mut body = agent
            .get(format!("{url}{read_query}"))
            .header("Authorization", &authorization)
            .call()
            .expect("list")
            .into_body()
            .into_reader();
        // Read through and dropped: a client's copy of a 15 MB list (a fresh buffer grown to it,
        // each page of it faulted in) is the client's cost, and it ran on the daemon's two cores.
        listed = std::io::copy(&mut body, &mut std::io::sink()).expect("read the list");
        reads.push(asked.elapsed().as_secs_f64());
    }
    reads.sort_by(f64::total_cmp);
    let quantile = |q: f64| reads[((reads.len() - 1) as f64 * q).round() as usize] * 1e3;
    let stats = plane.stats().unwrap();
    println!("policy {policy_name}, {jobs} jobs via HTTP on {gpus} simulated GPUs ({spec})");
    println!(
        "API: {:.0} submissions/s ({CLIENTS} clients, {:.2} s)",
        f64::from(jobs) / submitting.as_secs_f64(),
        submitting.as_secs_f64()
    );
    println!(
        "rounds: {} (p50 {:.1} ms, p99 {:.1} ms, mean {:.1} ms); {} starts, {} preemptions, {} finished",
        stats.counters.rounds,
        stats.round_latency_p50 * 1e3,
        stats.round_latency_p99 * 1e3,
        stats.round_latency_sum / stats.counters.rounds.max(1) as f64 * 1e3,
        stats.counters.starts,
        stats.counters.preemptions,
        stats.counters.finished
    );
    println!(
        "solves: p50 {:.1} ms, p99 {:.1} ms, mean {:.1} ms (the policy's part of each round)",
        stats.round_solve_p50 * 1e3,
        stats.round_solve_p99 * 1e3,
        stats.round_solve_sum / stats.counters.rounds.max(1) as f64 * 1e3,
    );
    println!(
        "ledger: {} migrations, {} records refused; {} gangs leased GPU by GPU",
        stats.counters.migrations, stats.counters.violations, stats.counters.leases_in_order
    );
    // The rounds after the submissions, from the latency histogram's buckets.
    let buckets = gangway::actors::stats::LATENCY_BUCKETS;
    let within = |limit: f64, s: &gangway::actors::stats::StatsSnapshot| {
        let k = buckets.iter().position(|&b| b >= limit).expect("a bucket");
        s.round_latency_buckets[k]
    };
    let steady = stats.counters.rounds - after_submissions.counters.rounds;
    let steady_within = |limit| within(limit, &stats) - within(limit, &after_submissions);
    println!(
        "views: {} published, {:.2} ms each on average (after rounds, not in their latency)",
        stats.counters.views_published,
        stats.counters.publish_seconds / stats.counters.views_published.max(1) as f64 * 1e3
    );
    println!(
        "rounds after the submissions: {steady}, of which {} within 10 ms, {} within 50 ms",
        steady_within(0.01),
        steady_within(0.05)
    );
    println!(
        "GET /jobs{read_query} while rounds ran: {} reads of {:.1} MB (p50 {:.1} ms, p99 {:.1} ms)",
        reads.len(),
        listed as f64 / 1e6,
        quantile(0.5),
        quantile(0.99)
    );
    println!(
        "memory: {:.1} KiB per job (resident {:.0} MiB -> {:.0} MiB)",
        (memory_after.saturating_sub(memory_before)) as f64 / 1024.0 / f64::from(jobs),
        memory_before as f64 / (1 << 20) as f64,
        memory_after as f64 / (1 << 20) as f64
    );
    plane.shutdown().unwrap();
}
