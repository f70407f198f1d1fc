//! Where the topology comes from, for the commands that plan (`plan`, `irq`).

use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use flowlane_numa_sched::Topology;

/// Where the topology comes from (`plan`, `irq`).
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct TopologyArgs {
    /// Load an hwloc XML export (`lstopo --of xml FILE`) instead of probing this machine.
    #[arg(long, value_name = "FILE", conflicts_with = "synthetic")]
    pub topology_xml: Option<PathBuf>,
    /// Use an hwloc synthetic topology, e.g. "package:2 numa:2 core:4 pu:2".
    #[arg(long, value_name = "DESC")]
    pub synthetic: Option<String>,
}

impl TopologyArgs {
    /// Whether the topology is this machine's (so the process's CPU affinity applies).
    pub(crate) fn is_machine(&self) -> bool {
        self.topology_xml.is_none() && self.synthetic.is_none()
    }

    /// Loads the topology.
    pub(crate) fn load(&self) -> Result<Topology> {
        if let Some(p) = &self.topology_xml {
            // hwloc's own complaint about a file that is not its XML is
            // internal (errno structs): say what the flag wants instead.
            return Topology::from_xml_file(p).map_err(|e| match e {
                flowlane_numa_sched::Error::Hwloc(m) if m.starts_with("cannot read") => {
                    anyhow!("--topology-xml: {m}")
                }
                _ => anyhow!(
                    "--topology-xml {} is not an hwloc topology export (make one with `lstopo --of xml FILE`)",
                    p.display()
                ),
            });
        }
        if let Some(d) = &self.synthetic {
            return Ok(Topology::from_synthetic_description(d)?);
        }
        Topology::from_system().context("probing this machine's topology")
    }
}
