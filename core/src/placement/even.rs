//! Gangs spread evenly: as many GPUs on every server a gang spans.
//!
//! torchrun starts the same number of workers on every node, so a launcher that runs one agent per
//! node (Slurm's, `elastic-run --backend slurm`) cannot run a 4-GPU gang placed 2 + 1 + 1. [`Even`]
//! wraps any placer: its answer stands when it is even; otherwise the gang goes on the fewest servers
//! that can each take an equal part, the fullest that fit first (best fit, as [`super::PackingPlacer`]
//! keeps large blocks free); and when no equal split fits, the gang waits, fragmented.
//!
//! A hybrid-parallel job's groups (its `tp x pp` GPUs, [`crate::job::Sizes::multiple`]) stay whole on
//! one server: `elastic-run` refuses a plan that splits a tensor group across machines, so every
//! server's part is a multiple of the group. (Pipeline stages could span servers; keeping the whole
//! group is the simple rule that never splits a tensor group.)

use super::{FreeGpus, Locality, PlaceRequest, Placed, Placer, Unplaced};
use crate::cluster::{Cluster, GpuId, GpuSet};

/// `inner`'s placements, made even where they are not.
pub struct Even<P> {
    inner: P,
}

impl<P: Placer> Even<P> {
    /// Evens out `inner`'s placements.
    pub fn new(inner: P) -> Self {
        Even { inner }
    }
}

/// Whether every server of `gpus` holds as many of them, in whole groups of `group`.
fn is_even(cluster: &Cluster, gpus: &[GpuId], group: u32) -> bool {
    let per_node = cluster.gpus_per_node(gpus);
    per_node
        .iter()
        .all(|&(_, c)| c == per_node[0].1 && c.is_multiple_of(group))
}

impl<P: Placer> Placer for Even<P> {
    fn place(
        &mut self,
        cluster: &Cluster,
        free: &FreeGpus,
        request: &PlaceRequest<'_>,
    ) -> Result<Placed, Unplaced> {
        let placed = self.inner.place(cluster, free, request)?;
        let group = request.job.group_on(request.gpu_type);
        if is_even(cluster, &placed.gpus, group) {
            return Ok(placed);
        }
        let (gpu_type, gpus) = (request.gpu_type, request.gpus);
        // The fewest servers first: 2 servers of 4 before 4 of 2.
        let splits =
            (2..=gpus).filter(|k| gpus.is_multiple_of(*k) && (gpus / k).is_multiple_of(group));
        for servers in splits {
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

    fn fork(&self) -> Option<Box<dyn Placer>> {
        Some(Box::new(Even::new(self.inner.fork()?)))
    }

    fn accepts(&self, cluster: &Cluster, request: &PlaceRequest<'_>, gpus: &[GpuId]) -> bool {
        is_even(cluster, gpus, request.job.group_on(request.gpu_type))
            && self.inner.accepts(cluster, request, gpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuTypeId;
    use crate::job::{Job, JobId};
    use crate::placement::PackingPlacer;

    fn job() -> Job {
        Job::new(JobId(0), 0.0, 4, 1.0)
    }

    fn place(free: &FreeGpus, cluster: &Cluster, gpus: u32) -> Result<Placed, Unplaced> {
        place_job(free, cluster, gpus, &job())
    }

    fn place_job(
        free: &FreeGpus,
        cluster: &Cluster,
        gpus: u32,
        job: &Job,
    ) -> Result<Placed, Unplaced> {
        let request = PlaceRequest {
            job,
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
        assert!(is_even(&cluster, &placed.gpus, 1), "{:?}", placed.gpus);
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

    #[test]
    fn a_hybrid_parallel_gang_keeps_its_groups_whole_on_each_server() {
        // Three servers of 8: 4, 2 and 6 GPUs free.
        let cluster = Cluster::parse_spec("gpu=3x8", 8).unwrap();
        let mut free = FreeGpus::new(&cluster);
        let taken: Vec<GpuId> = [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 16, 17]
            .map(GpuId)
            .to_vec();
        free.take(&cluster, &taken);
        let pairs = |multiple| Job {
            sizes: Some(crate::job::Sizes {
                min: multiple,
                max: 8,
                multiple,
            }),
            ..job()
        };
        // 8 GPUs in groups of 4: two servers of 4 (the 2-GPU server's part would split a group).
        let placed = place_job(&free, &cluster, 8, &pairs(4)).unwrap();
        let per_node = cluster.gpus_per_node(&placed.gpus);
        assert!(per_node.iter().all(|&(_, c)| c == 4), "{per_node:?}");
        // 4 GPUs in one group of 4: one server, never 2 + 2.
        let placed = place_job(&free, &cluster, 4, &pairs(4)).unwrap();
        assert_eq!(cluster.gpus_per_node(&placed.gpus).len(), 1);
        // In groups of 8 nothing fits: no server has 8 free.
        assert!(place_job(&free, &cluster, 8, &pairs(8)).is_err());
    }
}
