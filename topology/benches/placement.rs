//! Locality scoring and placement search speed: `cargo bench -p gangway-topology --bench placement`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use gangway_topology::placement::{PlacementSearch, Strategy};
use gangway_topology::presets::Preset;
use gangway_topology::topology::ClusterSpec;

fn scoring(c: &mut Criterion) {
    let dgx = ClusterSpec::single(Preset::Dgx1V100).build();
    let mut search = PlacementSearch::new(dgx.clone());
    search.best_bandwidth(8);
    let all: Vec<usize> = (0..8).collect();
    c.bench_function("score_8_gpu_set_dgx1", |b| {
        b.iter(|| black_box(search.score(black_box(&all))))
    });
    let pcie = ClusterSpec::single(Preset::Pcie8Gpu).build();
    let mut search = PlacementSearch::new(pcie.clone());
    search.best_bandwidth(8);
    c.bench_function("score_8_gpu_set_pcie", |b| {
        b.iter(|| black_box(search.score(black_box(&all))))
    });
}

fn search_fragmented(c: &mut Criterion) {
    // 1,250 DGX-1 servers (10,000 GPUs) in racks of 16, half the GPUs taken in a scattered pattern.
    let topology = ClusterSpec::of(Preset::Dgx1V100, 1250, 16).build();
    let mut search = PlacementSearch::new(topology.clone());
    let mut free = search.all_free();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for mask in free.iter_mut() {
        // xorshift: take 4 of the 8 GPUs of every server, at random positions.
        let mut taken = 0;
        while taken < 4 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let bit = 1u64 << (state % 8);
            if *mask & bit != 0 {
                *mask &= !bit;
                taken += 1;
            }
        }
    }
    // Warm the per-server cache as a long-running scheduler would have.
    search.find(&free, 8, Strategy::Relaxed, 0.0);
    c.bench_function("find_8_gpus_10k_cluster_50pct_fragmented", |b| {
        b.iter(|| black_box(search.find(black_box(&free), 8, Strategy::Relaxed, 0.0)))
    });
    c.bench_function("find_4_gpus_10k_cluster_50pct_fragmented", |b| {
        b.iter(|| black_box(search.find(black_box(&free), 4, Strategy::Consolidate, 0.0)))
    });
}

criterion_group!(benches, scoring, search_fragmented);
criterion_main!(benches);
