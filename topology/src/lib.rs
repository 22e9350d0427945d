//! gangway-topology: where GPUs sit, and how well a set of them talks.
//!
//! - [`graph`]: the hardware graph (petgraph): hosts, sockets, PCIe switches, GPUs, NVSwitches, NICs and
//!   network switches, joined by NVLink, PCIe, inter-socket, InfiniBand and Ethernet links.
//! - [`presets`]: server designs from public documentation (DGX-1, DGX A100, DGX H100, PCIe servers,
//!   g4dn.12xlarge, Philly's 2/4/8-GPU servers), and [`topology::ClusterSpec`] to put them under racks.
//! - [`topology`]: pairwise bandwidths and the all-reduce bandwidth of a set.
//! - [`placement`]: the best free set for a gang, exact inside a server and greedy across servers.
//!
//! ```
//! use gangway_topology::{placement::{PlacementSearch, Strategy}, presets::Preset, topology::ClusterSpec};
//!
//! let dgx = ClusterSpec::single(Preset::Dgx1V100).build();
//! let mut search = PlacementSearch::new(dgx.clone());
//! // Four GPUs of one NVLink quad beat four that straddle the quads.
//! assert!(search.score(&[0, 1, 2, 3]) > search.score(&[0, 1, 6, 7]));
//! let best = search.find(&search.all_free(), 4, Strategy::Consolidate, 0.0).unwrap();
//! assert_eq!(best.score, 100.0);
//! ```
#![deny(missing_docs)]

pub mod discover;
pub mod file;
pub mod graph;
pub mod placement;
pub mod presets;
pub mod topology;
pub mod view;
