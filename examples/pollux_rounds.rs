//! Dumps real rounds of the `pollux` policy, so that its search can be measured against Pollux's own
//! genetic algorithm on the same inputs (`testdata/pollux_ga/README.md`):
//! `cargo run --release --example pollux_rounds -- OUT.json [WORKLOAD.csv [FEWEST_JOBS]]`.
//!
//! It runs `pollux` on Pollux's workload 1 (16 nodes of 4 T4, 60 s rounds, as `benches/elastic.rs`
//! does) or the workload given, picks 10 busy rounds (`FEWEST_JOBS`, 20 by default, to 60 active
//! jobs) spread over the run, and writes, for each of
//! them and the two rounds before it (so that a GA can carry its population over, as Pollux's does),
//! per job: the policy's speedup on every spread Pollux could give it (`speedup[n - 1][k]`: `n`
//! nodes and `r = n + k` replicas, up to 4 per node; on one node up to 64, for the fair share), its
//! restarts, age and restart factor, its most replicas, its attained GPU-seconds and arrival (Pollux's
//! order), the replicas it holds on each node now, the GPUs `pollux` granted it, and the replicas it
//! holds on each node once the round's grants were placed.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use gangway::core::cluster::{Cluster, GpuTypeId};
use gangway::core::engine::Change;
use gangway::core::job::JobId;
use gangway::core::placement::PackingPlacer;
use gangway::core::policy::pollux::Pollux;
use gangway::core::policy::{Grant, Policy, RoundInput};
use gangway::core::sim::Simulation;
use gangway::core::throughput::goodput::restart_factor;
use gangway::core::trace::TraceOptions;
use gangway::scenario;

const T4: GpuTypeId = GpuTypeId(0);
const ROUNDS: usize = 10;
const BEFORE: usize = 2;

/// `pollux`, with what it saw and decided in the rounds asked for.
#[derive(Default)]
struct Recorder {
    inner: Pollux,
    round: usize,
    /// (round, time, active jobs) of every round.
    seen: Vec<(usize, f64, usize)>,
    dump: BTreeSet<usize>,
    dumped: Vec<Value>,
    /// Every round's time, and per job: the GPUs it held and the GPUs granted.
    grants: Vec<(f64, Held)>,
}

/// Per job: the GPUs it held before a round, and the GPUs the round granted it.
type Held = HashMap<JobId, (u32, u32)>;

impl Recorder {
    /// Rounds in which some job got other than the GPUs granted once the grants were placed, and
    /// (job, round) pairs granted GPUs that got none, by the run's stops and starts.
    fn unrealized(&self, changes: &[(f64, Change)]) -> (usize, usize) {
        let mut at: HashMap<u64, Vec<&Change>> = HashMap::new();
        for (t, change) in changes {
            at.entry(t.to_bits()).or_default().push(change);
        }
        let (mut rounds, mut left_out) = (0, 0);
        for (now, jobs) in &self.grants {
            let mut held: HashMap<JobId, u32> = jobs.iter().map(|(j, (h, _))| (*j, *h)).collect();
            for change in at.get(&now.to_bits()).into_iter().flatten() {
                match change {
                    Change::Stopped { job, .. } => {
                        held.entry(*job).and_modify(|h| *h = 0);
                    }
                    Change::Started { job, gpus, .. } => {
                        held.entry(*job).and_modify(|h| *h = gpus.len() as u32);
                    }
                    Change::Retuned { .. } => {}
                }
            }
            let differ = jobs.iter().filter(|(j, (_, g))| held[*j] != *g).count();
            left_out += jobs
                .iter()
                .filter(|(j, (_, g))| *g > 0 && held[*j] == 0)
                .count();
            rounds += usize::from(differ > 0);
        }
        (rounds, left_out)
    }
}

/// Replicas per node of `gpus`.
fn row(
    cluster: &Cluster,
    gpus: impl IntoIterator<Item = gangway::core::cluster::GpuId>,
) -> Vec<u32> {
    let mut row = vec![0; cluster.nodes().len()];
    for gpu in gpus {
        row[cluster.node_of(gpu).0 as usize] += 1;
    }
    row
}

impl Recorder {
    fn log(&mut self, input: &RoundInput<'_>, grants: &[Grant]) {
        let granted: HashMap<JobId, u32> = grants.iter().map(|g| (g.job, g.gpus)).collect();
        let jobs = input
            .jobs
            .iter()
            .map(|v| {
                let held = v.running.map_or(0, |r| r.gpus.len() as u32);
                (v.id(), (held, granted.get(&v.id()).copied().unwrap_or(0)))
            })
            .collect();
        self.grants.push((input.now, jobs));
    }
}

impl Policy for Recorder {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let round = self.round;
        self.round += 1;
        self.seen.push((round, input.now, input.jobs.len()));
        if !self.dump.contains(&round) {
            let grants = self.inner.allocate(input);
            self.log(input, &grants);
            return grants;
        }
        let elastic = input.model.elastic().expect("a goodput model");
        // What the restart factor counts is the policy's state before it decides.
        let restarts: Vec<u32> = input
            .jobs
            .iter()
            .map(|v| self.inner.restarts(v.id()))
            .collect();
        let start = Instant::now();
        let grants = self.inner.allocate(input);
        let seconds = start.elapsed().as_secs_f64();
        self.log(input, &grants);
        let granted: HashMap<JobId, u32> = grants.iter().map(|g| (g.job, g.gpus)).collect();
        let total: u32 = input.capacity.iter().sum();
        let fair = total.div_ceil(input.jobs.len().max(1) as u32).max(1);
        let size = elastic.node_size(T4);
        let nodes = input.cluster.nodes().len() as u32;
        let jobs: Vec<Value> = input
            .jobs
            .iter()
            .zip(restarts)
            .map(|(view, restarts)| {
                let job = view.job;
                let app = elastic.application(job).expect("an application");
                let profile = elastic.profile(job, T4).expect("a T4 profile");
                let most = self.inner.most_replicas(job, app, profile).min(total);
                let speedup: Vec<Vec<f64>> = (1..=nodes)
                    .map(|n| {
                        let top = if n == 1 { total } else { (n * size).min(total) };
                        (n..=top)
                            .map(|r| {
                                self.inner
                                    .speedup(elastic, job, T4, fair, (n, r))
                                    .expect("a speedup")
                            })
                            .collect()
                    })
                    .collect();
                let age = input.now - job.arrival;
                let penalty = elastic.restart_penalty(job);
                let current = row(
                    input.cluster,
                    view.running.map_or(&[][..], |r| r.gpus).iter().copied(),
                );
                json!({
                    "id": job.id.0,
                    "app": app.name,
                    "arrival": job.arrival,
                    "age": age,
                    "attained": view.attained_gpu_seconds,
                    "restarts": restarts,
                    "penalty": penalty,
                    "restart_factor": restart_factor(age, penalty, restarts),
                    "max_replicas": most,
                    "current": current,
                    "granted": granted.get(&job.id).copied().unwrap_or(0),
                    "speedup": speedup,
                })
            })
            .collect();
        self.dumped.push(json!({
            "round": round,
            "now": input.now,
            "fair": fair,
            "gpus": total,
            "nodes": nodes,
            "node_size": size,
            "allocate_seconds": seconds,
            "jobs": jobs,
        }));
        grants
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let out = args
        .next()
        .context("usage: pollux_rounds OUT.json [WORKLOAD.csv [FEWEST_JOBS]]")?;
    let workload = args.next().unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/data/pollux/workloads/workload-1.csv")
            .display()
            .to_string()
    });
    let fewest: usize = args.next().map_or(Ok(20), |a| a.parse())?;
    let table = scenario::load_throughputs(None)?;
    let trace = scenario::load_trace(Some(&workload), &TraceOptions::default(), &table)?;
    let cluster = Cluster::parse_spec("t4=16x4", 1)?;
    let model = scenario::model_for(&trace, &cluster, &table)?;
    let mut simulation = Simulation::new(&trace, &cluster, model.as_ref());
    simulation.config.engine.round_length = 60.0;
    simulation.config.log_changes = true;

    // A first run finds the busy rounds; the second (the same, deterministic) dumps them.
    let mut first = Recorder::default();
    simulation.run(&mut first, &mut PackingPlacer, &mut |_, _| {});
    let busy: Vec<usize> = first
        .seen
        .iter()
        .filter(|(round, _, jobs)| *round >= BEFORE && (fewest..=60).contains(jobs))
        .map(|(round, _, _)| *round)
        .collect();
    let most = first.seen.iter().map(|s| s.2).max().unwrap_or(0);
    anyhow::ensure!(
        busy.len() >= ROUNDS,
        "only {} busy rounds of {} (at most {most} jobs)",
        busy.len(),
        first.seen.len()
    );
    let targets: Vec<usize> = (0..ROUNDS)
        .map(|k| busy[k * (busy.len() - 1) / (ROUNDS - 1)])
        .collect();
    let mut second = Recorder {
        dump: targets.iter().flat_map(|&t| t - BEFORE..=t).collect(),
        ..Recorder::default()
    };
    let result = simulation.run(&mut second, &mut PackingPlacer, &mut |_, _| {});
    anyhow::ensure!(second.seen == first.seen, "the two runs differ");

    // Where each job ran once a round's grants were placed: its GPUs then, after the stops and starts
    // at that time.
    let mut rounds = std::mem::take(&mut second.dumped);
    for round in &mut rounds {
        let now = round["now"].as_f64().unwrap_or_default();
        let number = round["round"].as_u64().unwrap_or_default() as usize;
        round["warmup"] = json!(!targets.contains(&number));
        let mut placed: HashMap<u32, Vec<u32>> = HashMap::new();
        for job in round["jobs"].as_array().into_iter().flatten() {
            let id = job["id"].as_u64().unwrap_or_default() as u32;
            let current: Vec<u32> = serde_json::from_value(job["current"].clone())?;
            placed.insert(id, current);
        }
        for (at, change) in &result.changes {
            if *at != now {
                continue;
            }
            match change {
                Change::Stopped { job, .. } => {
                    if let Some(r) = placed.get_mut(&job.0) {
                        r.iter_mut().for_each(|c| *c = 0);
                    }
                }
                Change::Started { job, gpus, .. } => {
                    if let Some(r) = placed.get_mut(&job.0) {
                        *r = row(&cluster, gpus.iter().copied());
                    }
                }
                Change::Retuned { .. } => {}
            }
        }
        for job in round["jobs"].as_array_mut().into_iter().flatten() {
            let id = job["id"].as_u64().unwrap_or_default() as u32;
            job["placed"] = json!(placed[&id]);
        }
    }
    let summary: Vec<(u64, usize)> = rounds
        .iter()
        .filter(|r| r["warmup"] == json!(false))
        .map(|r| {
            (
                r["round"].as_u64().unwrap_or_default(),
                r["jobs"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    std::fs::write(&out, serde_json::to_string(&json!({ "rounds": rounds }))?)?;
    println!("rounds (number, jobs) dumped to {out}: {summary:?}");
    let (unrealized, left_out) = second.unrealized(&result.changes);
    println!(
        "of {} rounds, {unrealized} placed some job on other than the GPUs granted; {left_out} times a job granted GPUs got none",
        second.grants.len()
    );
    Ok(())
}
