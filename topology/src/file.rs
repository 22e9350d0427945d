//! Topology files (TOML or JSON): a cluster as groups of servers of a preset design under racks.
//!
//! ```toml
//! hosts_per_rack = 16      # servers per top-of-rack switch (default 16)
//! uplink_factor = 4.0      # rack uplink = this x one server's NIC bandwidth (default 4)
//!
//! [[servers]]
//! preset = "dgx1-v100"     # see `gangway topology --list`
//! count = 4
//!
//! [[servers]]
//! preset = "philly-2gpu"
//! count = 10
//! ```

use serde::Deserialize;

use crate::presets::Preset;
use crate::topology::ClusterSpec;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default = "default_hosts_per_rack")]
    hosts_per_rack: usize,
    #[serde(default = "default_uplink_factor")]
    uplink_factor: f64,
    servers: Vec<Servers>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Servers {
    preset: String,
    #[serde(default = "one")]
    count: usize,
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
    pub source_name: String,
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
    if file.servers.is_empty() {
        return Err(err("no [[servers]] groups".into()));
    }
    let mut groups = Vec::new();
    for (i, s) in file.servers.iter().enumerate() {
        let preset = Preset::parse(&s.preset).ok_or_else(|| {
            let known: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
            err(format!(
                "servers[{i}]: unknown preset `{}` (known: {})",
                s.preset,
                known.join(", ")
            ))
        })?;
        if s.count == 0 {
            return Err(err(format!("servers[{i}]: count must be at least 1")));
        }
        groups.push((preset, s.count));
    }
    if file.hosts_per_rack == 0 || !file.uplink_factor.is_finite() || file.uplink_factor <= 0.0 {
        return Err(err(
            "hosts_per_rack and uplink_factor must be positive".into()
        ));
    }
    Ok(ClusterSpec {
        groups,
        hosts_per_rack: file.hosts_per_rack,
        uplink_factor: file.uplink_factor,
    })
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
        assert_eq!(spec.groups, vec![(Preset::Dgx1V100, 3)]);
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
    }
}
