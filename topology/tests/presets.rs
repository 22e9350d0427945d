//! Each preset against its published link structure, and placement search behaviour.

use gangway_topology::graph::{LinkKind, Vertex};
use gangway_topology::placement::{PlacementSearch, Strategy};
use gangway_topology::presets::Preset;
use gangway_topology::topology::{ClusterSpec, Topology};
use petgraph::visit::EdgeRef;

/// NVLink peers and link counts of GPU `g` (local index) in a single-server topology.
fn nvlink_peers(t: &Topology, g: usize) -> Vec<(usize, u8)> {
    let v = t.gpus[g].vertex;
    let mut peers: Vec<(usize, u8)> = t
        .graph
        .edges(v)
        .filter_map(|e| {
            let other = if e.source() == v {
                e.target()
            } else {
                e.source()
            };
            match (e.weight().kind, &t.graph[other]) {
                (LinkKind::NvLink { links, .. }, Vertex::Gpu { index, .. }) => {
                    Some((*index as usize, links))
                }
                _ => None,
            }
        })
        .collect();
    peers.sort_unstable();
    peers
}

#[test]
fn dgx1_is_a_hybrid_cube_mesh() {
    let t = ClusterSpec::single(Preset::Dgx1V100).build();
    assert_eq!(t.num_gpus(), 8);
    for g in 0..8 {
        let peers = nvlink_peers(&t, g);
        assert_eq!(peers.len(), 4, "GPU {g} has NVLinks to 4 peers: {peers:?}");
        assert_eq!(
            peers.iter().map(|p| u32::from(p.1)).sum::<u32>(),
            6,
            "V100 has 6 NVLink links"
        );
        // Three of the four peers are in its own quad, one in the other quad (its mirror, g +- 4).
        let quad = g / 4;
        let same: Vec<usize> = peers
            .iter()
            .map(|p| p.0)
            .filter(|p| p / 4 == quad)
            .collect();
        assert_eq!(same.len(), 3, "GPU {g}");
        assert!(peers.iter().any(|p| p.0 == (g + 4) % 8));
    }
    let mut search = PlacementSearch::new(t.clone());
    // A quad's ring runs on NVLink only; a set that straddles the quads without NVLink between all
    // neighbours must cross the sockets.
    assert!(search.score(&[0, 1, 2, 3]) > search.score(&[0, 1, 6, 7]));
    assert!(search.score(&[1, 2, 3, 5]) < search.score(&[4, 5, 6, 7]));
    // Equal rings: the quad wins on its tree (more double links), so the search prefers it.
    assert!(t.set_quality(&[0, 1, 2, 3]).1 > t.set_quality(&[0, 1, 4, 5]).1);
    let best4 = search
        .find(&search.all_free(), 4, Strategy::Consolidate, 0.0)
        .unwrap();
    let mut quads = best4.gpus.clone();
    quads.sort_unstable();
    assert!(quads == [0, 1, 2, 3] || quads == [4, 5, 6, 7], "{quads:?}");
    assert_eq!(t.hosts[0].path_kind[3], "NV2", "GPU0-GPU3 is a double link");
    assert_eq!(
        t.hosts[0].path_kind[5], "SYS",
        "GPU0-GPU5 has no NVLink and crosses sockets"
    );
}

#[test]
fn pcie_server_scores_cross_socket_pairs_lower() {
    let t = ClusterSpec::single(Preset::Pcie8Gpu).build();
    assert!(nvlink_peers(&t, 0).is_empty());
    let same_switch = t.pair_bandwidth(0, 1);
    let same_socket = t.pair_bandwidth(0, 2);
    let cross_socket = t.pair_bandwidth(0, 7);
    assert!(
        cross_socket < same_switch,
        "{cross_socket} vs {same_switch}"
    );
    assert!(cross_socket < same_socket);
    let m = t.bandwidth_matrix(&[0, 1, 7]);
    assert_eq!(
        (m[1], m[2], m[5]),
        (same_switch, cross_socket, t.pair_bandwidth(1, 7))
    );
    assert!(m[0].is_infinite(), "a GPU with itself");
    let mut search = PlacementSearch::new(t.clone());
    assert!(search.score(&[0, 7]) < search.score(&[0, 1]));
    assert_eq!(t.hosts[0].path_kind[1], "PIX");
    assert_eq!(t.hosts[0].path_kind[2], "NODE");
    assert_eq!(t.hosts[0].path_kind[7], "SYS");
}

#[test]
fn nvswitch_servers_are_uniform_and_fast() {
    for (preset, per_gpu) in [(Preset::DgxA100, 300.0), (Preset::DgxH100, 450.0)] {
        let t = ClusterSpec::single(preset).build();
        for a in 0..8 {
            for b in 0..8 {
                if a != b {
                    assert_eq!(t.pair_bandwidth(a, b), per_gpu, "{preset:?} {a}-{b}");
                }
            }
        }
        assert!(t.hosts[0].path_kind[1].starts_with("NV"));
    }
}

#[test]
fn small_presets_have_their_gpu_counts() {
    for (preset, gpus) in [
        (Preset::G4dn12xlarge, 4),
        (Preset::Philly2Gpu, 2),
        (Preset::Philly4Gpu, 4),
        (Preset::Philly8Gpu, 8),
    ] {
        let t = ClusterSpec::single(preset).build();
        assert_eq!(t.num_gpus(), gpus, "{preset:?}");
        assert!(
            t.hosts[0].egress.iter().all(|&e| e > 0.0),
            "{preset:?} GPUs reach the network"
        );
        assert_eq!(Preset::parse(preset.name()), Some(preset));
    }
}

#[test]
fn across_servers_is_slower_than_inside_and_racks_matter() {
    let t = ClusterSpec::of(Preset::Philly8Gpu, 4, 2).build();
    assert_eq!(t.num_gpus(), 32);
    let inside = t.pair_bandwidth(0, 1);
    let same_rack = t.pair_bandwidth(0, 8);
    assert!(same_rack < inside);
    assert!(t.pair_bandwidth(0, 16) <= same_rack);
    assert_eq!(t.hosts[2].rack, 1);
}

#[test]
fn search_is_exact_inside_a_server_and_consolidates_on_request() {
    let t = ClusterSpec::of(Preset::Dgx1V100, 2, 2).build();
    let mut search = PlacementSearch::new(t.clone());
    let mut free = search.all_free();
    // Take GPU 0 of server 0: four GPUs now fit best as a whole quad elsewhere.
    free[0] &= !1;
    let p = search.find(&free, 4, Strategy::Consolidate, 0.0).unwrap();
    assert_eq!(p.score, 100.0);
    let hosts: Vec<usize> = p.gpus.iter().map(|&g| t.gpus[g].host).collect();
    assert!(hosts.iter().all(|&h| h == hosts[0]));
    // Best fit: the partly used server, keeping server 1 whole for an 8-GPU gang.
    assert_eq!(hosts[0], 0, "{p:?}");
    assert_eq!(p.gpus, vec![4, 5, 6, 7]);
    // An 8-GPU gang cannot fit on server 0 any more; it takes server 1.
    let eight = search.find(&free, 8, Strategy::Consolidate, 0.0).unwrap();
    assert!(eight.gpus.iter().all(|&g| t.gpus[g].host == 1));
    // With 6 free on each server, a strict 8-GPU gang waits; a relaxed one spreads.
    let mut half = search.all_free();
    half[0] = 0b0011_1111;
    half[1] = 0b1111_1100;
    assert!(search.find(&half, 8, Strategy::Consolidate, 0.0).is_none());
    let spread = search.find(&half, 8, Strategy::Relaxed, 0.0).unwrap();
    assert_eq!(spread.gpus.len(), 8);
    assert!(spread.score < 100.0);
    // The Philly guideline: strict at first, relaxed after waiting.
    assert!(
        search
            .find(&half, 8, Strategy::RelaxAfter(600.0), 100.0)
            .is_none()
    );
    assert!(
        search
            .find(&half, 8, Strategy::RelaxAfter(600.0), 700.0)
            .is_some()
    );
}
