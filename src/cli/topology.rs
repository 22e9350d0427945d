//! `gangway topology`: a cluster's GPU topology, as a matrix, DOT or a picture.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::scenario;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("source").args(["preset", "file", "discover", "list"])))]
pub(super) struct TopologyArgs {
    /// A server design; `--list` shows them.
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// Servers of the preset, for a cluster of them.
    #[arg(long, default_value_t = 1, value_name = "N")]
    servers: usize,
    /// Servers per rack, with --servers.
    #[arg(long, default_value_t = 16, value_name = "N")]
    servers_per_rack: usize,
    /// A topology file (TOML or JSON): `[[servers]] preset = "...", count = N`, `hosts_per_rack`.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Read this machine's GPUs through NVML.
    #[arg(long)]
    discover: bool,
    /// List the presets.
    #[arg(long)]
    list: bool,
    /// Which server's matrix to show.
    #[arg(long, default_value_t = 0, value_name = "INDEX")]
    server: usize,
    /// Write the whole graph in Graphviz's DOT language.
    #[arg(long, value_name = "PATH")]
    dot: Option<PathBuf>,
    /// Write a picture of the server's GPU links.
    #[arg(long, value_name = "PATH")]
    svg: Option<PathBuf>,
}

/// Runs `gangway topology`.
pub(super) fn topology(args: TopologyArgs) -> Result<()> {
    use crate::topology::presets::Preset;
    use crate::topology::topology::ClusterSpec;
    if args.list {
        for p in Preset::ALL {
            let d = p.design();
            println!(
                "  {:<15} {} x {} ({} GB)",
                d.name,
                d.gpus(),
                d.gpu_model,
                d.gpu_memory_gb
            );
        }
        return Ok(());
    }
    let spec = if let Some(name) = &args.preset {
        scenario::preset_cluster(name, args.servers, args.servers_per_rack)?
    } else if let Some(path) = &args.file {
        scenario::topology_file(path)?
    } else if args.discover {
        let found = crate::topology::discover::discover()?;
        print!("{}", found.text());
        println!();
        match found.design("this-machine") {
            Ok(design) => ClusterSpec {
                groups: vec![(design, 1)],
                hosts_per_rack: 1,
                uplink_factor: 1.0,
            },
            Err(why) => {
                eprintln!(
                    "gangway: this machine does not fit a server design ({why}); describe it in a topology file"
                );
                return Ok(());
            }
        }
    } else {
        bail!("say which topology: --preset NAME, --file PATH, --discover, or --list");
    };
    let topology = spec.build();
    if args.server >= topology.hosts.len() {
        bail!(
            "--server {} is out of range: the cluster has {} servers",
            args.server,
            topology.hosts.len()
        );
    }
    if topology.hosts.len() > 1 {
        print!("{}", topology.summary_text());
        println!();
    }
    print!("{}", topology.matrix_text(args.server));
    if let Some(path) = &args.dot {
        std::fs::write(path, topology.to_dot())
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("gangway: wrote {}", path.display());
    }
    if let Some(path) = &args.svg {
        topology_svg(path, &topology, args.server)?;
        eprintln!("gangway: wrote {}", path.display());
    }
    Ok(())
}

#[cfg(feature = "plots")]
fn topology_svg(
    path: &std::path::Path,
    topology: &crate::topology::topology::Topology,
    server: usize,
) -> Result<()> {
    crate::topology_view::write_svg(path, topology, server)
}

#[cfg(not(feature = "plots"))]
fn topology_svg(
    path: &std::path::Path,
    _: &crate::topology::topology::Topology,
    _: usize,
) -> Result<()> {
    bail!(
        "--svg {}: this gangway was built without the `plots` feature",
        path.display()
    )
}
