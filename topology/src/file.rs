//! Topology files (TOML or JSON): a cluster as groups of servers under racks. A group names a preset
//! (`gangway topology --list`) or a design the file declares itself.
//!
//! ```toml
//! hosts_per_rack = 16      # servers per top-of-rack switch (default 16)
//! uplink_factor = 4.0      # rack uplink = this x one server's NIC bandwidth (default 4)
//!
//! [[designs]]              # a server of your own
//! name = "a10-box"
//! gpu_model = "A10"
//! gpu_memory_gb = 24
//! sockets = 2
//! switches_per_socket = 1
//! gpus_per_switch = 2
//! pcie_generation = 4
//! nvlink_generation = 3
//! nvlinks = [[0, 1, 4], [2, 3, 4]]   # [gpu a, gpu b, bonded links]; or nvswitch_links = 12
//! nics = 1
//! nic_gbps = 25.0                    # GB/s per NIC
//! network = "ethernet"               # or "infiniband"
//!
//! [[servers]]
//! preset = "dgx1-v100"
//! count = 4
//!
//! [[servers]]
//! design = "a10-box"
//! count = 10
//! ```

use serde::Deserialize;

use crate::presets::{Design, Preset};
use crate::topology::ClusterSpec;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default = "default_hosts_per_rack")]
    hosts_per_rack: usize,
    #[serde(default = "default_uplink_factor")]
    uplink_factor: f64,
    #[serde(default)]
    designs: Vec<Design>,
    servers: Vec<Servers>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Servers {
    preset: Option<String>,
    design: Option<String>,
    #[serde(default = "one")]
    count: usize,
}

/// Most servers under one top-of-rack switch: no more than a cluster may have GPUs.
pub const MAX_HOSTS_PER_RACK: usize = crate::topology::MAX_CLUSTER_GPUS;

/// The most a rack's uplink may be, in multiples of one server's NIC bandwidth.
pub const MAX_UPLINK_FACTOR: f64 = 1024.0;

/// The fastest NIC a declared design may have, in GB/s (today's fastest are 50 to 100 GB/s): beyond
/// it bandwidths are a unit mistake, and sums of them overflow.
pub const MAX_NIC_GBPS: f64 = 10_000.0;

/// A number as people read it, for messages: plainly when it is short (`86400`, `0.5`), in exponent
/// form when it is not (`1e300`, `1e-9`), never 300 digits.
pub fn number(value: f64) -> String {
    let magnitude = value.abs();
    if value == 0.0 || (1e-3..1e8).contains(&magnitude) || !value.is_finite() {
        format!("{value}")
    } else {
        format!("{value:e}")
    }
}

fn default_hosts_per_rack() -> usize {
    16
}

fn default_uplink_factor() -> f64 {
    4.0
}

fn one() -> usize {
    1
}

/// A topology file that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct FileError {
    /// The file's name, as given to [`parse`].
    pub source_name: String,
    /// What is wrong, with the line where the parser tells.
    pub message: String,
}

/// Parses a topology file; `name` (a path) is used in messages, and its extension picks JSON or TOML.
pub fn parse(name: &str, text: &str) -> Result<ClusterSpec, FileError> {
    let err = |message: String| FileError {
        source_name: name.to_owned(),
        message,
    };
    let file: File = if name.ends_with(".json") {
        serde_json::from_str(text).map_err(|e| err(format!("line {}: {e}", e.line())))?
    } else {
        toml::from_str(text).map_err(|e| err(e.to_string()))?
    };
    for (i, d) in file.designs.iter().enumerate() {
        d.validate()
            .map_err(|m| err(format!("designs[{i}]: {m}")))?;
        if d.nic_gbps > MAX_NIC_GBPS {
            return Err(err(format!(
                "designs[{i}]: nic_gbps = {} is out of range (more than 0 to {MAX_NIC_GBPS} GB/s)",
                number(d.nic_gbps)
            )));
        }
        if Preset::parse(&d.name).is_some() || file.designs[..i].iter().any(|o| o.name == d.name) {
            return Err(err(format!(
                "designs[{i}]: the name `{}` is already taken",
                d.name
            )));
        }
    }
    if file.servers.is_empty() {
        return Err(err("no [[servers]] groups".into()));
    }
    let mut groups = Vec::new();
    for (i, s) in file.servers.iter().enumerate() {
        let design = match (&s.preset, &s.design) {
            (Some(p), None) => Preset::parse(p)
                .ok_or_else(|| {
                    let known: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
                    err(format!(
                        "servers[{i}]: unknown preset `{p}` (known: {})",
                        known.join(", ")
                    ))
                })?
                .design(),
            (None, Some(d)) => file
                .designs
                .iter()
                .find(|x| x.name == *d)
                .cloned()
                .ok_or_else(|| err(format!("servers[{i}]: no [[designs]] entry is named `{d}`")))?,
            _ => {
                return Err(err(format!(
                    "servers[{i}]: give exactly one of `preset` and `design`"
                )));
            }
        };
        if s.count == 0 {
            return Err(err(format!("servers[{i}]: count must be at least 1")));
        }
        groups.push((design, s.count));
    }
    if !(1..=MAX_HOSTS_PER_RACK).contains(&file.hosts_per_rack) {
        return Err(err(format!(
            "hosts_per_rack = {} is out of range (1 to {MAX_HOSTS_PER_RACK})",
            file.hosts_per_rack
        )));
    }
    if !(file.uplink_factor.is_finite()
        && file.uplink_factor > 0.0
        && file.uplink_factor <= MAX_UPLINK_FACTOR)
    {
        return Err(err(format!(
            "uplink_factor = {} is out of range (more than 0 to {MAX_UPLINK_FACTOR})",
            number(file.uplink_factor)
        )));
    }
    let spec = ClusterSpec {
        groups,
        hosts_per_rack: file.hosts_per_rack,
        uplink_factor: file.uplink_factor,
    };
    spec.check().map_err(err)?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_toml_and_json() {
        let spec = parse(
            "c.toml",
            "hosts_per_rack = 2\n[[servers]]\npreset = \"dgx1-v100\"\ncount = 3\n",
        )
        .unwrap();
        assert_eq!(spec.groups, vec![(Preset::Dgx1V100.design(), 3)]);
        let t = spec.build();
        assert_eq!((t.num_gpus(), t.rack_uplink.len()), (24, 2));
        let spec = parse(
            "c.json",
            r#"{"servers": [{"preset": "g4dn.12xlarge", "count": 16}]}"#,
        )
        .unwrap();
        assert_eq!(spec.build().num_gpus(), 64);
    }

    #[test]
    fn a_file_can_declare_its_own_server_design() {
        let text = "[[designs]]\nname = \"a10-box\"\ngpu_model = \"A10\"\ngpu_memory_gb = 24\nsockets = 2\n\
                    switches_per_socket = 1\ngpus_per_switch = 2\npcie_generation = 4\nnvlink_generation = 3\n\
                    nvlinks = [[0, 1, 4], [2, 3, 4]]\nnics = 1\nnic_gbps = 25.0\nnetwork = \"ethernet\"\n\n\
                    [[servers]]\ndesign = \"a10-box\"\ncount = 2\n\n[[servers]]\npreset = \"philly-2gpu\"\n";
        let t = parse("mine.toml", text).unwrap().build();
        assert_eq!(t.num_gpus(), 10);
        assert_eq!(t.design_of(0).name, "a10-box");
        assert_eq!(t.gpus[0].model, "A10");
        // The bonded NVLink pair (4 x 25 GB/s) beats the pair across sockets.
        assert_eq!(t.pair_bandwidth(0, 1), 100.0);
        assert!(t.pair_bandwidth(0, 2) < t.pair_bandwidth(0, 1));
        assert_eq!(t.hosts[0].path_kind[1], "NV4");
        let bad = text.replace("[[0, 1, 4], [2, 3, 4]]", "[[0, 9, 4]]");
        let e = parse("mine.toml", &bad).unwrap_err().to_string();
        assert!(
            e.starts_with("mine.toml: designs[0]: design `a10-box`: NVLink [0, 9, 4]"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let e = parse("c.toml", "[[servers]]\npreset = \"dgx-9\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("c.toml: servers[0]: unknown preset `dgx-9`"),
            "{e}"
        );
        let e = parse("c.toml", "[[servers]]\npreset = \"dgx-a100\"\ncolour = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("c.toml") && e.contains("colour"), "{e}");
        let e = parse("c.toml", "[[servers]]\ndesign = \"mine\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no [[designs]] entry is named `mine`"), "{e}");
        let e = parse("c.toml", "[[servers]]\ncount = 2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("exactly one of `preset` and `design`"), "{e}");
    }

    /// Sizes that once wrapped around or exhausted memory are refused, naming the limit.
    #[test]
    fn oversized_clusters_and_designs_name_the_limit() {
        let design = "[[designs]]\nname = \"big\"\ngpu_model = \"X\"\ngpu_memory_gb = 8\nsockets = 2\n\
                      switches_per_socket = 1\ngpus_per_switch = 2\npcie_generation = 4\nnics = 1\n\
                      nic_gbps = 25.0\nnetwork = \"ethernet\"\n[[servers]]\ndesign = \"big\"\n";
        assert!(parse("d.toml", design).is_ok());
        for (from, to, says) in [
            // 2 x 2147483652 wraps a u32 to 8, which looked like a valid server.
            (
                "switches_per_socket = 1",
                "switches_per_socket = 2147483652",
                "switches_per_socket = 2147483652 is out of range (1 to 16)",
            ),
            (
                "nics = 1",
                "nics = 100000000",
                "nics = 100000000 is out of range (1 to 64)",
            ),
            (
                "gpus_per_switch = 2",
                "gpus_per_switch = 16",
                "has 32 GPUs; 1 to 16",
            ),
        ] {
            let e = parse("d.toml", &design.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{to}: {e}");
        }
        let e = parse(
            "c.toml",
            "[[servers]]\npreset = \"dgx1-v100\"\ncount = 1000000000000\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("8000000000000 GPUs; at most 1048576 are supported"),
            "{e}"
        );
        let e = parse(
            "c.toml",
            "[[servers]]\npreset = \"dgx1-v100\"\ncount = 9223372036854775807\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("overflows; at most 1048576"), "{e}");
    }

    /// Numbers past any real network were accepted: an uplink of 1e300 NICs, a NIC of 1e300 GB/s.
    #[test]
    fn network_numbers_name_their_range() {
        let one = "[[servers]]\npreset = \"dgx1-v100\"\n";
        for (head, says) in [
            (
                "uplink_factor = 1e300\n",
                "uplink_factor = 1e300 is out of range (more than 0 to 1024)",
            ),
            (
                "hosts_per_rack = 0\n",
                "hosts_per_rack = 0 is out of range (1 to 1048576)",
            ),
        ] {
            let e = parse("c.toml", &format!("{head}{one}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{head}: {e}");
        }
        let design = "[[designs]]\nname = \"fast\"\ngpu_model = \"X\"\ngpu_memory_gb = 8\nsockets = 1\n\
                      switches_per_socket = 1\ngpus_per_switch = 2\npcie_generation = 4\nnics = 1\n\
                      nic_gbps = 1e300\nnetwork = \"ethernet\"\n[[servers]]\ndesign = \"fast\"\n";
        let e = parse("d.toml", design).unwrap_err().to_string();
        assert!(
            e.contains("designs[0]: nic_gbps = 1e300 is out of range"),
            "{e}"
        );
        assert!(parse("d.toml", &design.replace("1e300", "25.0")).is_ok());
    }
}
