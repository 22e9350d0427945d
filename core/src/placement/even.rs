//! Gangs spread evenly: as many GPUs on every server a gang spans.
//!
//! torchrun starts the same number of workers on every node, so a launcher that runs one agent per
//! node (Slurm's, `elastic-run --backend slurm`) cannot run a 4-GPU gang placed 2 + 1 + 1. [`Even`]
//! wraps any placer: its answer stands when it is even; otherwise the gang goes on the fewest servers
//! that can each take an equal part, the fullest that fit first (best fit, as [`super::PackingPlacer`]
//! keeps large blocks free); and when no equal split fits, the gang waits, fragmented.

use super::{FreeGpus, Locality, PlaceRequest, Placed, Placer, Unplaced};
use crate::cluster::{Cluster, GpuId, GpuSet};

/// `inner`'s placements, made even where they are not.
pub struct Even<P> {
    inner: P,
}

impl<P: Placer> Even<P> {
    pub fn new(inner: P) -> Self {
        Even { inner }
    }
}

/// Whether every server of `gpus` holds as many of them.
fn is_even(cluster: &Cluster, gpus: &[GpuId]) -> bool {
    let per_node = cluster.gpus_per_node(gpus);
    per_node.iter().all(|&(_, c)| c == per_node[0].1)
}

impl<P: Placer> Placer for Even<P> {
    fn place(
        &mut self,
        cluster: &Cluster,
        free: &FreeGpus,
        request: &PlaceRequest<'_>,
    ) -> Result<Placed, Unplaced> {
        let placed = self.inner.place(cluster, free, request)?;
        if is_even(cluster, &placed.gpus) {
            return Ok(placed);
        }
        let (gpu_type, gpus) = (request.gpu_type, request.gpus);
        // The fewest servers first: 2 servers of 4 before 4 of 2.
        for servers in (2..=gpus).filter(|k| gpus.is_multiple_of(*k)) {
            let each = gpus / servers;
            let mut chosen = GpuSet::new();
            let mut used = 0;
            for count in each..=free.widest(gpu_type) {
                for &node in free.nodes_with_exactly(gpu_type, count) {
                    if used == servers {
                        break;
                    }
                    chosen.extend(free.free_gpus_of(cluster, node).take(each as usize));
                    used += 1;
                }
            }
            if used == servers {
                return Ok(Placed {
                    locality: self.inner.locality(cluster, &chosen),
                    gpus: chosen,
                });
            }
        }
        Err(Unplaced::Fragmented {
            gpu_type,
            wanted: gpus,
            free: free.free_of_type(gpu_type),
        })
    }

    fn locality(&mut self, cluster: &Cluster, gpus: &[GpuId]) -> Locality {
        self.inner.locality(cluster, gpus)
    }

    fn changes_with_time(&self) -> bool {
        self.inner.changes_with_time()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuTypeId;
    use crate::job::{Job, JobId, JobTypeId, TenantId};
    use crate::placement::PackingPlacer;

    fn job() -> Job {
        Job {
            id: JobId(0),
            arrival: 0.0,
            job_type: JobTypeId(0),
            gpus: 4,
            total_steps: 1.0,
            weight: 1.0,
            tenant: TenantId(0),
            batch: None,
            sizes: None,
            min_batch: None,
        }
    }

    fn place(free: &FreeGpus, cluster: &Cluster, gpus: u32) -> Result<Placed, Unplaced> {
        let job = job();
        let request = PlaceRequest {
            job: &job,
            gpu_type: GpuTypeId(0),
            gpus,
            previous: &[],
            waited: 0.0,
            sensitivity: 0.0,
            consolidate: false,
        };
        Even::new(PackingPlacer).place(cluster, free, &request)
    }

    #[test]
    fn an_uneven_spread_becomes_an_even_one_or_waits() {
        // Three servers of 4: 2, 1 and 3 GPUs free.
        let cluster = Cluster::parse_spec("gpu=3x4", 4).unwrap();
        let mut free = FreeGpus::new(&cluster);
        let taken: Vec<GpuId> = [0, 1, 4, 5, 6, 8].map(GpuId).to_vec();
        free.take(&cluster, &taken);
        // Packing would take 3 + 1 (servers 3 and 1); even is 2 + 2 (servers 1 and 3).
        let placed = place(&free, &cluster, 4).unwrap();
        assert!(is_even(&cluster, &placed.gpus), "{:?}", placed.gpus);
        assert_eq!(placed.gpus.len(), 4);
        // 5 GPUs: prime, so one server or none; none holds 5.
        let waits = place(&free, &cluster, 5).unwrap_err();
        assert!(matches!(
            waits,
            Unplaced::NoCapacity { .. } | Unplaced::Fragmented { .. }
        ));
        // 3 GPUs fit on server 3 alone: the inner answer stands.
        assert_eq!(place(&free, &cluster, 3).unwrap().gpus.len(), 3);
    }
}
