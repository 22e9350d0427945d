//! Invariants of the simulator, for every registered policy, on random clusters and traces:
//! no GPU is held twice, capacity is never exceeded, gangs are all-or-nothing (the simulator's audit
//! checks these after every scheduling pass), every job finishes or is reported, GPU-time adds up, and
//! the same inputs give byte-identical results. Under Synergy's mechanisms (`+tune`, `+opt`) on servers of
//! varied CPUs and memory, no server ever holds more CPUs or memory than it has (the audit again).

use gangway_core::cluster::{Cluster, GpuTypeId};
use gangway_core::engine::{Engine, EngineConfig};
use gangway_core::job::{Job, JobId, Trace, WorkUnit};
use gangway_core::placement::PackingPlacer;
use gangway_core::policy::{self, Grant, Policy, PolicyConfig, RoundInput};
use gangway_core::sim::{SimConfig, SimResult, Simulation};
use gangway_core::throughput::ThroughputModel;
use gangway_core::throughput::resources::{ResourceModel, ResourceProfiles};
use proptest::prelude::*;
use std::sync::Arc;

/// Rates that differ by job type and GPU type; type 2 cannot run job type 3 at all.
struct TestModel;

impl ThroughputModel for TestModel {
    fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, gpus: u32) -> Option<f64> {
        let (jt, t) = (job.job_type.0, gpu_type.0 as u32);
        // Its own gang or any power-of-two one, so that resizing policies (gandiva:grow=1) can resize.
        ((gpus == job.gpus || gpus.is_power_of_two()) && !(jt == 3 && t == 2))
            .then(|| f64::from(1 + (jt + 2 * t) % 5) * f64::from(gpus).sqrt())
    }

    /// Packed, each job keeps 35% to 65% of its rate alone: some pairs beat time-slicing, some interfere.
    fn packed_steps_per_second(
        &self,
        a: &Job,
        b: &Job,
        gpu_type: GpuTypeId,
        gpus: u32,
    ) -> Option<(f64, f64)> {
        let ra = self.steps_per_second(a, gpu_type, gpus)?;
        let rb = self.steps_per_second(b, gpu_type, gpus)?;
        let kept =
            0.35 + 0.1 * f64::from((a.job_type.0 + b.job_type.0 + u32::from(gpu_type.0)) % 4);
        Some((ra * kept, rb * kept))
    }
}

fn cluster() -> impl Strategy<Value = Cluster> {
    prop::collection::vec(
        (0u8..3, 1u32..4, prop::sample::select(vec![1u32, 2, 4, 8])),
        1..5,
    )
    .prop_map(|groups| {
        let names = ["v100", "p100", "k80"];
        Cluster::from_nodes(groups.iter().flat_map(|&(t, count, gpus)| {
            (0..count).map(move |_| (names[t as usize], gpus, gpus * 3, 64.0))
        }))
    })
}

fn trace() -> impl Strategy<Value = Trace> {
    let job = (
        0.0f64..3000.0,
        0u32..4,
        prop::sample::select(vec![1u32, 1, 1, 2, 4, 8]),
        10.0f64..20_000.0,
    );
    prop::collection::vec(job, 1..50).prop_map(|rows| {
        let mut trace = Trace::new("proptest", WorkUnit::Steps);
        for name in ["a", "b", "c", "d"] {
            trace.intern_job_type(name);
        }
        let tenant = trace.intern_tenant("default");
        let mut arrival = 0.0;
        for (i, (gap, jt, gpus, steps)) in rows.into_iter().enumerate() {
            arrival += gap;
            trace.jobs.push(
                Job::new(JobId(i as u32), arrival, gpus, steps)
                    .with_type(gangway_core::job::JobTypeId(jt))
                    .with_weight(1.0 + (i % 3) as f64)
                    .with_tenant(tenant),
            );
        }
        trace
    })
}

fn run(trace: &Trace, cluster: &Cluster, name: &str, config: &SimConfig) -> SimResult {
    run_on(trace, cluster, name, config, &TestModel)
}

/// The registered policies that can run on `model` (those that need a goodput model, resource
/// profiles or what else it lacks are refused by the registry, and tested where they have them).
fn runnable_on(model: &dyn ThroughputModel) -> impl Iterator<Item = &'static str> {
    let has = policy::Capabilities::of(model);
    policy::builtin()
        .entries()
        .filter(move |p| p.requirements().unmet(&has).is_empty())
        .map(|p| p.name())
}

fn run_on(
    trace: &Trace,
    cluster: &Cluster,
    name: &str,
    config: &SimConfig,
    model: &dyn ThroughputModel,
) -> SimResult {
    let mut sim = Simulation::new(trace, cluster, model);
    sim.config = config.clone();
    let mut policy = policy::build(name, &PolicyConfig::seeded(config.seed), model).unwrap();
    sim.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {})
}

fn sim_config() -> impl Strategy<Value = SimConfig> {
    (
        prop::sample::select(vec![60.0, 360.0]),
        0.0f64..50.0,
        any::<bool>(),
        any::<bool>(),
        0u64..4,
    )
        .prop_map(|(round, cost, on_arrival, on_completion, seed)| SimConfig {
            engine: EngineConfig {
                round_length: round,
                preempt_cost: cost,
                restore_cost: cost / 2.0,
                migrate_cost: cost / 4.0,
                schedule_on_arrival: on_arrival,
                schedule_on_completion: on_completion,
                audit: true,
            },
            seed,
            log_changes: false,
        })
}

/// Policies with non-default knobs that change what the simulator must handle (resizing, long leases).
const KNOB_SPECS: &[&str] = &["gandiva:grow=1", "themis:f=0:lease=1800"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_policy_keeps_the_invariants(trace in trace(), cluster in cluster(), config in sim_config()) {
        let specs = runnable_on(&TestModel).chain(KNOB_SPECS.iter().copied());
        for name in specs {
            let result = run(&trace, &cluster, name, &config);
            prop_assert_eq!(result.records.len(), trace.jobs.len(), "{}: a job went missing", name);
            let mut finished = 0;
            for (record, job) in result.records.iter().zip(&trace.jobs) {
                prop_assert_eq!(record.id, job.id);
                if let Some(finish) = record.finish {
                    finished += 1;
                    let start = record.first_start.expect("a finished job started");
                    prop_assert!(job.arrival <= start && start <= finish, "{}: job {} times out of order", name, job.id);
                }
            }
            // A finite trace runs to the end: every job that can ever fit finishes.
            prop_assert_eq!(finished + result.unschedulable.len(), trace.jobs.len(), "{}: unfinished jobs", name);
            let held: f64 = result.records.iter().flat_map(|r| r.gpu_seconds.iter()).sum();
            prop_assert!((held - result.busy_gpu_seconds).abs() <= 1e-6 * held.max(1.0),
                "{}: GPU-time does not add up: {} vs {}", name, held, result.busy_gpu_seconds);
        }
    }

    #[test]
    fn same_inputs_give_identical_results(trace in trace(), cluster in cluster(), config in sim_config()) {
        for name in runnable_on(&TestModel) {
            let a = run(&trace, &cluster, name, &config);
            let b = run(&trace, &cluster, name, &config);
            let json = |r: &SimResult| serde_json::to_string(&r.records).unwrap();
            prop_assert_eq!(json(&a), json(&b), "{} is not deterministic", name);
            prop_assert_eq!(&a.utilization, &b.utilization);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// A live engine's pauses (`Engine::defer`, after starts that failed) under every policy, shown
    /// every job or keeping a queue of its own: the engine's audit holds after every pass, and a
    /// paused job runs on no GPU before its pause is over.
    #[test]
    fn every_policy_leaves_a_paused_job_out_until_its_pause_is_over(
        trace in trace(),
        cluster in cluster(),
        pauses in prop::collection::vec((0usize..50, 1.0f64..900.0), 1..20),
    ) {
        let model: Arc<dyn ThroughputModel> = Arc::new(TestModel);
        for name in runnable_on(&TestModel) {
            let config = EngineConfig { audit: true, ..EngineConfig::default() };
            let cluster = Arc::new(cluster.clone());
            let mut engine = Engine::new(cluster, model.clone(), config, trace.names.clone(), 0.0);
            let mut policy = policy::build(name, &PolicyConfig::seeded(0), &TestModel).unwrap();
            for job in &trace.jobs {
                let _ = engine.submit(job.clone(), 0.0);
            }
            let mut paused = std::collections::HashMap::new();
            for (k, &(pick, pause)) in pauses.iter().enumerate() {
                let now = 60.0 * k as f64;
                let id = trace.jobs[pick % trace.jobs.len()].id;
                if engine.defer(id, now, now + pause).is_ok() {
                    paused.insert(id, now + pause);
                }
                engine.schedule(policy.as_mut(), &mut PackingPlacer, now);
                engine.audit();
                for (id, &until) in &paused {
                    let runs = engine.status(*id).is_some_and(|s| s.gpus.is_some());
                    prop_assert!(until <= now || !runs, "{}: job {} runs while paused", name, id);
                }
            }
        }
    }
}

/// Servers of 1 to 8 GPUs with 1 to 12 CPUs and 16 to 250 GB per GPU.
fn resource_cluster() -> impl Strategy<Value = Cluster> {
    prop::collection::vec(
        (
            1u32..4,
            prop::sample::select(vec![1u32, 2, 4, 8]),
            1u32..13,
            16.0f64..250.0,
        ),
        1..5,
    )
    .prop_map(|groups| {
        Cluster::from_nodes(groups.iter().flat_map(|&(count, gpus, cpus, memory)| {
            (0..count).map(move |_| ("v100", gpus, gpus * cpus, f64::from(gpus) * memory))
        }))
    })
}

/// The trace's job types named after Synergy's profiles: sensitive image models and insensitive
/// language ones.
fn resource_trace() -> impl Strategy<Value = Trace> {
    trace().prop_map(|mut trace| {
        trace.names.job_types = ["alexnet", "gnmt", "res50", "res18"]
            .map(String::from)
            .to_vec();
        trace
    })
}

fn resource_model(trace: &Trace, cluster: &Cluster) -> ResourceModel<TestModel> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/synergy_profiles_small.json"
    );
    let profiles = ResourceProfiles::load(std::path::Path::new(path), "models").unwrap();
    ResourceModel::new(TestModel, Arc::new(profiles), &trace.names, cluster)
}

/// The ordering policies Synergy's mechanisms are applied to, each with every mechanism.
const RESOURCE_SPECS: &[&str] = &[
    "fifo+tune",
    "fifo+opt",
    "srtf+tune",
    "srtf+opt",
    "las+tune",
    "las+opt",
    "ftf+tune",
    "ftf+opt",
    "tiresias+tune",
    "tiresias+opt",
    "srtf+proportional",
    "gandiva+tune",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn no_server_holds_more_cpus_or_memory_than_it_has(
        trace in resource_trace(),
        cluster in resource_cluster(),
        config in sim_config(),
    ) {
        let model = resource_model(&trace, &cluster);
        for name in RESOURCE_SPECS {
            // The audit panics on a server over its CPUs or memory, after every pass.
            let result = run_on(&trace, &cluster, name, &config, &model);
            let finished = result.records.iter().filter(|r| r.finish.is_some()).count();
            prop_assert_eq!(finished + result.unschedulable.len(), trace.jobs.len(), "{}: unfinished jobs", name);
            prop_assert!(result.records.iter().all(|r| r.finish.is_none_or(|f| f.is_finite())));
        }
    }
}

#[test]
fn tune_gives_sensitive_jobs_more_than_their_share_and_stays_within_capacity() {
    // One server of 8 GPUs, 24 CPUs, 500 GB: four alexnets (best case 12 CPUs, 125 GB each) and four
    // gnmts (1 CPU, 20 GB). Proportionally every job gets 3 CPUs; tune lets the gnmts give theirs up.
    let cluster = Cluster::from_nodes([("v100", 8, 24, 500.0)]);
    let mut trace = Trace::new("t", WorkUnit::Steps);
    trace.names.job_types = ["alexnet", "gnmt", "res50", "res18"]
        .map(String::from)
        .to_vec();
    let tenant = trace.intern_tenant("default");
    for i in 0..8u32 {
        trace.jobs.push(
            Job::new(JobId(i), 0.0, 1, 36_000.0)
                .with_type(gangway_core::job::JobTypeId(i % 2))
                .with_tenant(tenant),
        );
    }
    let model = resource_model(&trace, &cluster);
    let config = SimConfig {
        engine: EngineConfig {
            round_length: 300.0,
            audit: true,
            ..EngineConfig::default()
        },
        ..SimConfig::default()
    };
    let alexnet_jct = |name: &str| {
        let result = run_on(&trace, &cluster, name, &config, &model);
        let jct = |i: usize| result.records[i].jct().unwrap();
        (jct(0) + jct(2) + jct(4) + jct(6)) / 4.0
    };
    let (proportional, tune, opt) = (
        alexnet_jct("fifo+proportional"),
        alexnet_jct("fifo+tune"),
        alexnet_jct("fifo+opt"),
    );
    // Tune, in FIFO order: the first alexnet takes its best case (12 CPUs), the others fall back to
    // their share (3), and the last gnmt makes the first alexnet give its 9 extra CPUs back: while the
    // gnmts run, all alexnets run at their share (Synergy's greedy). Once the gnmts finish, their CPUs go
    // to the alexnets. Opt chooses all points at once and does better.
    assert!(
        tune < 0.85 * proportional && opt < tune,
        "alexnet's average JCT: proportional {proportional}, tune {tune}, opt {opt}"
    );
}

#[test]
fn an_oversized_gang_is_reported_not_lost() {
    let cluster = Cluster::parse_spec("v100=4", 1).unwrap();
    let mut trace = Trace::new("t", WorkUnit::Steps);
    let jt = trace.intern_job_type("a");
    let tenant = trace.intern_tenant("default");
    for (i, gpus) in [1u32, 8, 2].into_iter().enumerate() {
        trace.jobs.push(
            Job::new(JobId(i as u32), i as f64, gpus, 100.0)
                .with_type(jt)
                .with_tenant(tenant),
        );
    }
    let result = run(
        &trace,
        &cluster,
        "fifo",
        &SimConfig {
            engine: EngineConfig {
                audit: true,
                ..EngineConfig::default()
            },
            ..SimConfig::default()
        },
    );
    assert_eq!(result.unschedulable, vec![JobId(1)]);
    assert!(result.records[0].finish.is_some() && result.records[2].finish.is_some());
    assert!(result.records[1].finish.is_none());
}

#[test]
fn preemption_costs_delay_the_preempted_job() {
    // Two single-GPU jobs share one GPU under LAS: they alternate, so each start after the first pays
    // the checkpoint and restore cost, and finishes later than without it.
    let cluster = Cluster::parse_spec("v100=1", 1).unwrap();
    let mut trace = Trace::new("t", WorkUnit::Steps);
    let jt = trace.intern_job_type("a");
    let tenant = trace.intern_tenant("default");
    for i in 0..2 {
        trace.jobs.push(
            Job::new(JobId(i), 0.0, 1, 3600.0)
                .with_type(jt)
                .with_tenant(tenant),
        );
    }
    let free = run(
        &trace,
        &cluster,
        "las",
        &SimConfig {
            engine: EngineConfig {
                audit: true,
                ..EngineConfig::default()
            },
            ..SimConfig::default()
        },
    );
    let costly = run(
        &trace,
        &cluster,
        "las",
        &SimConfig {
            engine: EngineConfig {
                preempt_cost: 20.0,
                restore_cost: 10.0,
                audit: true,
                ..EngineConfig::default()
            },
            ..SimConfig::default()
        },
    );
    let last = |r: &SimResult| {
        r.records
            .iter()
            .filter_map(|x| x.finish)
            .fold(0.0, f64::max)
    };
    assert!(
        free.records.iter().all(|r| r.preemptions > 0),
        "LAS should time-slice one GPU"
    );
    assert!(
        last(&costly) > last(&free) + 30.0,
        "{} vs {}",
        last(&costly),
        last(&free)
    );
    // Without costs the GPU never idles: two jobs of 3600 steps at 1 step/s take 7200 s.
    assert!((last(&free) - 7200.0).abs() < 1e-6, "{}", last(&free));
}

mod topology_placement {
    use super::*;
    use gangway_core::placement::{PlacementMode, TopologyPlacer};
    use gangway_topology::presets::Preset;
    use gangway_topology::topology::{ClusterSpec, Topology};
    use std::sync::Arc;

    fn topology(groups: Vec<(Preset, usize)>) -> Arc<Topology> {
        Arc::new(
            ClusterSpec {
                groups: groups.into_iter().map(|(p, n)| (p.design(), n)).collect(),
                hosts_per_rack: 2,
                uplink_factor: 2.0,
            }
            .build(),
        )
    }

    fn run_on(
        trace: &Trace,
        topology: &Arc<Topology>,
        policy: &str,
        mode: PlacementMode,
    ) -> SimResult {
        let cluster = Cluster::from_topology(topology).unwrap();
        let mut sim = Simulation::new(trace, &cluster, &TestModel);
        sim.config = SimConfig {
            engine: EngineConfig {
                audit: true,
                round_length: 120.0,
                ..EngineConfig::default()
            },
            ..SimConfig::default()
        };
        let mut placer = TopologyPlacer::new(Arc::clone(topology), &cluster, mode, 0).unwrap();
        let mut policy = policy::build(policy, &PolicyConfig::seeded(0), &TestModel).unwrap();
        sim.run(policy.as_mut(), &mut placer, &mut |_, _| {})
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

        #[test]
        fn every_policy_and_mode_keeps_the_invariants(trace in trace()) {
            let t = topology(vec![(Preset::Philly8Gpu, 2), (Preset::Philly4Gpu, 1), (Preset::Philly2Gpu, 2)]);
            for mode in [PlacementMode::Consolidate, PlacementMode::Relaxed, PlacementMode::RelaxAfter(600.0), PlacementMode::SensitiveOnly, PlacementMode::Random] {
                for name in runnable_on(&TestModel) {
                    let result = run_on(&trace, &t, name, mode);
                    let finished = result.records.iter().filter(|r| r.finish.is_some()).count();
                    prop_assert_eq!(finished + result.unschedulable.len(), trace.jobs.len(), "{} {:?}", name, mode);
                }
            }
        }
    }

    #[test]
    fn a_spread_gang_runs_slower_than_a_consolidated_one() {
        let mut trace = Trace::new("t", WorkUnit::Steps);
        trace.intern_job_type("VGG19");
        let tenant = trace.intern_tenant("default");
        trace
            .jobs
            .push(Job::new(JobId(0), 0.0, 8, 10_000.0).with_tenant(tenant));
        // Two DGX-1s: the best 8 GPUs are one server (NVLink rings at 25 GB/s); a random 8 of the 16
        // almost surely spans both, and its ring crosses the 12.5 GB/s network.
        let dgx = topology(vec![(Preset::Dgx1V100, 2)]);
        let whole = run_on(&trace, &dgx, "fifo", PlacementMode::Relaxed);
        let split = run_on(&trace, &dgx, "fifo", PlacementMode::Random);
        let jct = |r: &SimResult| r.records[0].jct().unwrap();
        assert!(
            jct(&split) > 1.2 * jct(&whole),
            "{} vs {}",
            jct(&split),
            jct(&whole)
        );
        // A gang larger than any server spans the fewest servers even under strict consolidation.
        let strict = run_on(
            &trace,
            &topology(vec![(Preset::Philly4Gpu, 2)]),
            "fifo",
            PlacementMode::Consolidate,
        );
        assert!(strict.records[0].finish.is_some());
    }
}

#[test]
fn yarn_cs_waits_for_one_server_where_fifo_spreads() {
    let cluster = Cluster::from_nodes([("v100", 4, 12, 1.0), ("v100", 4, 12, 1.0)]);
    let mut trace = Trace::new("t", WorkUnit::Steps);
    let jt = trace.intern_job_type("a");
    let tenant = trace.intern_tenant("default");
    // Two 3-GPU jobs leave one GPU free on each server; a 2-GPU job then fits only if spread.
    for (i, (gpus, steps)) in [(3, 36_000.0), (3, 72_000.0), (2, 100.0)]
        .into_iter()
        .enumerate()
    {
        trace.jobs.push(
            Job::new(JobId(i as u32), i as f64, gpus, steps)
                .with_type(jt)
                .with_tenant(tenant),
        );
    }
    let config = SimConfig {
        engine: EngineConfig {
            audit: true,
            ..EngineConfig::default()
        },
        ..SimConfig::default()
    };
    let fifo = run(&trace, &cluster, "fifo", &config);
    let yarn = run(&trace, &cluster, "yarn_cs", &config);
    let start = |r: &SimResult| r.records[2].first_start.unwrap();
    let first_done = yarn.records[0]
        .finish
        .unwrap()
        .min(yarn.records[1].finish.unwrap());
    assert!(
        start(&fifo) < 400.0,
        "fifo spreads the gang at once: {}",
        start(&fifo)
    );
    assert!(
        start(&yarn) >= first_done,
        "yarn_cs waits for a server: {} vs {first_done}",
        start(&yarn)
    );
}

/// The goodput policies on their own kind of workload: jobs whose progress follows application
/// profiles, resized and re-batched every round.
mod elastic {
    use std::path::Path;
    use std::sync::{Arc, OnceLock};

    use gangway_core::throughput::goodput::{Calibration, ProfiledWorkload, Profiles};

    use super::*;

    const POLICIES: &[&str] = &[
        "pollux",
        "sia",
        "sia:learned=1",
        "ramp",
        "ramp:learned=1",
        "optimus",
        "tiresias_pollux",
    ];

    /// Two applications profiled on one to eight T4s (Pollux's layout): one scales well, one barely.
    fn profiles() -> Arc<Profiles> {
        static PROFILES: OnceLock<Arc<Profiles>> = OnceLock::new();
        PROFILES
            .get_or_init(|| {
                let dir = tempfile::tempdir().unwrap();
                for (app, sync) in [("scales", 0.01), ("stalls", 0.2)] {
                    let folder = dir.path().join(app);
                    std::fs::create_dir_all(&folder).unwrap();
                    for batch in [32, 256] {
                        std::fs::write(
                            folder.join(format!("validation-{batch}.csv")),
                            "progress,iteration,metric,grad_sqr,grad_var\n\
                             20000,20000,0.5,1.0,8.0\n40000,40000,0.9,0.5,6.0\n",
                        )
                        .unwrap();
                    }
                    let step = |local: f64| 0.02 + local * 0.002;
                    let mut placements = String::from("placement,local_bsz,step_time,sync_time\n");
                    let mut scalability =
                        String::from("num_nodes,num_replicas,local_bsz,step_time,sync_time\n");
                    for local in [8.0, 32.0, 64.0] {
                        for (id, replicas) in [("1", 1.0), ("2", 2.0), ("4", 4.0), ("44", 8.0)] {
                            let s = sync * (replicas - 1.0_f64).max(0.0).sqrt();
                            placements.push_str(&format!("{id},{local},{},{s}\n", step(local) + s));
                        }
                        let s = sync * 4.0;
                        scalability.push_str(&format!("2,8,{local},{},{s}\n", step(local) + s));
                    }
                    std::fs::write(folder.join("placements.csv"), placements).unwrap();
                    std::fs::write(folder.join("scalability.csv"), scalability).unwrap();
                }
                Arc::new(Profiles::load(dir.path(), None::<&Path>).unwrap())
            })
            .clone()
    }

    fn workload() -> impl Strategy<Value = (Trace, Cluster)> {
        let job = (
            0.0f64..600.0,
            any::<bool>(),
            1u32..5,
            prop::sample::select(vec![32u32, 128]),
        );
        (prop::collection::vec(job, 1..14), 1usize..5).prop_map(|(rows, nodes)| {
            let profiles = profiles();
            let mut trace = Trace::new("elastic", WorkUnit::Progress);
            let tenant = trace.intern_tenant("default");
            let mut arrival = 0.0;
            for (i, (gap, scales, gpus, batch)) in rows.into_iter().enumerate() {
                arrival += gap;
                let app = if scales { "scales" } else { "stalls" };
                let job_type = trace.intern_job_type(app);
                trace.jobs.push(
                    Job::new(
                        JobId(i as u32),
                        arrival,
                        gpus,
                        profiles.apps[app].total_progress(),
                    )
                    .with_type(job_type)
                    .with_tenant(tenant)
                    .with_batch(batch),
                );
            }
            let cluster = Cluster::from_nodes((0..nodes).map(|_| ("t4", 4, 12, 64.0)));
            (trace, cluster)
        })
    }

    fn run(trace: &Trace, cluster: &Cluster, name: &str) -> SimResult {
        let mut policy = policy::builtin()
            .build(name, &PolicyConfig::default(), &policy::Capabilities::ALL)
            .unwrap();
        run_policy(trace, cluster, policy.as_mut())
    }

    fn run_policy(trace: &Trace, cluster: &Cluster, policy: &mut dyn Policy) -> SimResult {
        let model = ProfiledWorkload::new(profiles(), &trace.names, cluster, Calibration::Pollux);
        let mut sim = Simulation::new(trace, cluster, &model);
        sim.config.engine.round_length = 60.0;
        sim.config.engine.audit = true;
        sim.run(policy, &mut PackingPlacer, &mut |_, _| {})
    }

    /// Wraps a policy and counts its grants that the engine could not place: a job granted GPUs in
    /// one pass that, still active at the next, does not run on them.
    struct Unplaced {
        inner: Box<dyn Policy>,
        granted: Vec<Grant>,
        missed: Vec<(f64, Grant)>,
    }

    impl Policy for Unplaced {
        fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
            for g in self.granted.drain(..) {
                let Some(view) = input.jobs.iter().find(|v| v.id() == g.job) else {
                    continue;
                };
                if !view
                    .running
                    .is_some_and(|r| r.gpu_type == g.gpu_type && r.gpus.len() == g.gpus as usize)
                {
                    self.missed.push((input.now, g));
                }
            }
            self.granted = self.inner.allocate(input);
            self.granted.clone()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

        /// The goodput programs count GPUs per type; what they grant must still fit on servers.
        #[test]
        fn goodput_grants_are_placed((trace, cluster) in workload()) {
            for name in ["pollux", "sia", "sia:learned=1", "ramp"] {
                let mut watched = Unplaced {
                    inner: policy::builtin().build(name, &PolicyConfig::default(), &policy::Capabilities::ALL).unwrap(),
                    granted: Vec::new(),
                    missed: Vec::new(),
                };
                run_policy(&trace, &cluster, &mut watched);
                prop_assert!(watched.missed.is_empty(), "{}: grants left unplaced: {:?}", name, watched.missed);
            }
        }

        /// The audit checks every pass (no GPU twice, capacity, whole gangs); here: every job
        /// finishes, GPU-time adds up, and a second run is identical.
        #[test]
        fn goodput_policies_keep_the_invariants((trace, cluster) in workload()) {
            for &name in POLICIES {
                let result = run(&trace, &cluster, name);
                let finished = result.records.iter().filter(|r| r.finish.is_some()).count();
                prop_assert_eq!(finished + result.unschedulable.len(), trace.jobs.len(), "{}: unfinished jobs", name);
                let held: f64 = result.records.iter().flat_map(|r| r.gpu_seconds.iter()).sum();
                prop_assert!((held - result.busy_gpu_seconds).abs() <= 1e-6 * held.max(1.0),
                    "{}: GPU-time does not add up: {} vs {}", name, held, result.busy_gpu_seconds);
                let again = run(&trace, &cluster, name);
                let json = |r: &SimResult| serde_json::to_string(&r.records).unwrap();
                prop_assert_eq!(json(&result), json(&again), "{} is not deterministic", name);
            }
        }
    }
}
