//! Text and Graphviz views of a topology.

use std::fmt::Write as _;

use petgraph::dot::{Config, Dot};

use crate::graph::{LinkKind, Vertex};
use crate::topology::Topology;

impl Topology {
    /// The GPU-to-GPU matrix of one server in the style of `nvidia-smi topo -m`, followed by the
    /// bandwidth matrix in GB/s and each GPU's bandwidth out of the server.
    pub fn matrix_text(&self, host: usize) -> String {
        let h = &self.hosts[host];
        let n = h.num_gpus;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} ({}, rack {})",
            h.name, self.designs[h.design].name, h.rack
        );
        let header: String = (0..n)
            .map(|j| format!("{:>7}", format!("GPU{j}")))
            .collect();
        let _ = writeln!(out, "{:7}{header}", "");
        for i in 0..n {
            let row: String = (0..n)
                .map(|j| format!("{:>7}", h.path_kind[i * n + j]))
                .collect();
            let _ = writeln!(out, "{:<7}{row}", format!("GPU{i}"));
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Bandwidth, GB/s per direction (egress = out of the server):"
        );
        let _ = writeln!(out, "{:7}{header}{:>9}", "", "egress");
        for i in 0..n {
            let row: String = (0..n)
                .map(|j| {
                    if i == j {
                        format!("{:>7}", "X")
                    } else {
                        format!("{:>7.1}", h.intra[i * n + j])
                    }
                })
                .collect();
            let _ = writeln!(out, "{:<7}{row}{:>9.1}", format!("GPU{i}"), h.egress[i]);
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Legend: X = self; NV# = # bonded NVLinks (or via NVSwitch); PIX = one PCIe switch; \
             NODE = PCIe through one CPU socket; SYS = across the inter-socket link"
        );
        out
    }

    /// A one-line-per-server summary of a cluster.
    pub fn summary_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} GPUs on {} servers in {} racks",
            self.num_gpus(),
            self.hosts.len(),
            self.rack_uplink.len()
        );
        let mut groups: Vec<(String, usize)> = Vec::new();
        for h in &self.hosts {
            match groups.last_mut() {
                Some((name, count)) if *name == self.designs[h.design].name => *count += 1,
                _ => groups.push((self.designs[h.design].name.clone(), 1)),
            }
        }
        for (name, count) in groups {
            let _ = writeln!(out, "  {count} x {name}");
        }
        out
    }

    /// The graph in Graphviz's DOT language, with vertices labelled by kind and edges by link.
    pub fn to_dot(&self) -> String {
        let dot = Dot::with_attr_getters(
            &self.graph,
            &[Config::EdgeNoLabel, Config::NodeNoLabel],
            &|_, e| {
                let link = e.weight();
                let color = match link.kind {
                    LinkKind::NvLink { .. } => "green",
                    LinkKind::Pcie { .. } => "blue",
                    LinkKind::InterSocket => "red",
                    LinkKind::InfiniBand | LinkKind::Ethernet => "gray40",
                    LinkKind::Membership => "gray80",
                };
                format!(
                    "label=\"{} {:.0}\" color={color}",
                    link.kind.short(),
                    link.bandwidth_gbps
                )
            },
            &|_, (_, v)| {
                let (label, shape) = match v {
                    Vertex::Host { name } => (name.clone(), "box3d"),
                    Vertex::Socket { index, .. } => (format!("CPU{index}"), "box"),
                    Vertex::PcieSwitch { index, .. } => (format!("PCIe{index}"), "diamond"),
                    Vertex::Gpu { index, model, .. } => (format!("GPU{index} {model}"), "ellipse"),
                    Vertex::NvSwitch { index, .. } => (format!("NVSwitch{index}"), "hexagon"),
                    Vertex::Nic { index, .. } => (format!("NIC{index}"), "cds"),
                    Vertex::NetworkSwitch { name, .. } => (name.clone(), "octagon"),
                };
                format!("label=\"{label}\" shape={shape}")
            },
        );
        format!("{dot:?}")
    }
}

#[cfg(test)]
mod tests {
    use crate::presets::Preset;
    use crate::topology::ClusterSpec;

    #[test]
    fn matrix_and_dot_show_the_links() {
        let t = ClusterSpec::single(Preset::Dgx1V100).build();
        let text = t.matrix_text(0);
        assert!(
            text.contains("GPU7") && text.contains("NV2") && text.contains("SYS"),
            "{text}"
        );
        assert!(
            text.contains("50.0"),
            "double NVLink shows 50 GB/s:\n{text}"
        );
        let dot = t.to_dot();
        assert!(
            dot.starts_with("graph {") && dot.contains("NV2 50") && dot.contains("GPU0 V100"),
            "{dot}"
        );
        assert!(t.summary_text().contains("1 x dgx1-v100"));
    }
}
