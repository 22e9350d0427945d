//! What-if placements for policies that must know whether a pick fits before they grant it (Sia's
//! and Pollux's goodput programs count GPUs per type, not per server): a [`PlacementProbe`] in the
//! round's input hands out [`Scratch`] copies of the GPUs in service, placed on by the engine's own
//! placer (a fork of it, so that a what-if never moves its state), so that a policy predicts the
//! placement the engine will make, whatever the placer, its rules or the GPUs out of service.

use std::cell::RefCell;

use super::{FreeGpus, PackingPlacer, PlaceRequest, Placed, Placer, Unplaced};
use crate::cluster::{Cluster, GpuId, NodeId};

/// Hands out scratch copies of the GPUs in service for what-if placements (see the module's doc).
pub trait PlacementProbe {
    /// The GPUs in service, every one free (as if every run had stopped), placed on by the engine's
    /// placer.
    fn scratch(&self) -> Scratch<'_>;
}

/// Places a request on scratch free GPUs.
type PlaceFn<'p> =
    Box<dyn FnMut(&Cluster, &FreeGpus, &PlaceRequest<'_>) -> Result<Placed, Unplaced> + 'p>;

/// A scratch copy of free GPUs: runs that stay are held, new gangs placed, none of it real.
pub struct Scratch<'p> {
    cluster: &'p Cluster,
    free: FreeGpus,
    place: PlaceFn<'p>,
}

impl<'p> Scratch<'p> {
    /// Every GPU of `cluster` free but `out_of_service`, placed on by `place`.
    pub fn new(cluster: &'p Cluster, out_of_service: &[bool], place: PlaceFn<'p>) -> Self {
        let mut free = FreeGpus::new(cluster);
        let off: Vec<GpuId> = (0..cluster.num_gpus())
            .map(GpuId)
            .filter(|g| out_of_service.get(g.0 as usize).copied().unwrap_or(false))
            .collect();
        free.take(cluster, &off);
        Scratch {
            cluster,
            free,
            place,
        }
    }

    /// Holds the GPUs of a run that stays (those of them in service).
    pub fn hold(&mut self, gpus: &[GpuId]) {
        let held: Vec<GpuId> = gpus
            .iter()
            .copied()
            .filter(|&g| self.free.is_free(g))
            .collect();
        self.free.take(self.cluster, &held);
    }

    /// Places `request` as the engine's placer would on what is free here, and holds what it got.
    pub fn place(&mut self, request: &PlaceRequest<'_>) -> Result<Placed, Unplaced> {
        let placed = (self.place)(self.cluster, &self.free, request)?;
        self.free.take(self.cluster, &placed.gpus);
        Ok(placed)
    }

    /// Places `request` as [`Scratch::place`] does, on the free GPUs each server keeps by
    /// `keep(server, free there)` (see [`FreeGpus::keeping`]): a gang with CPUs and memory, on what
    /// its servers can feed, as the engine places it.
    pub fn place_within(
        &mut self,
        request: &PlaceRequest<'_>,
        keep: impl Fn(NodeId, u32) -> u32,
    ) -> Result<Placed, Unplaced> {
        let view = self.free.keeping(self.cluster, keep);
        let placed = (self.place)(self.cluster, view.as_ref().unwrap_or(&self.free), request)?;
        self.free.take(self.cluster, &placed.gpus);
        Ok(placed)
    }

    /// What is free here now.
    pub fn free(&self) -> &FreeGpus {
        &self.free
    }
}

/// The engine's probe: its cluster, its GPUs out of service, and its placer (forked for each scratch,
/// or, for a placer that cannot fork, used itself).
pub struct EngineProbe<'e> {
    cluster: &'e Cluster,
    out_of_service: &'e [bool],
    placer: RefCell<&'e mut dyn Placer>,
}

impl<'e> EngineProbe<'e> {
    /// A probe over `cluster`'s GPUs but `out_of_service`, with `placer`.
    pub fn new(
        cluster: &'e Cluster,
        out_of_service: &'e [bool],
        placer: &'e mut dyn Placer,
    ) -> Self {
        EngineProbe {
            cluster,
            out_of_service,
            placer: RefCell::new(placer),
        }
    }
}

impl PlacementProbe for EngineProbe<'_> {
    fn scratch(&self) -> Scratch<'_> {
        let fork = self.placer.borrow().fork();
        let place: PlaceFn<'_> = match fork {
            Some(mut forked) => {
                Box::new(move |cluster, free, request| forked.place(cluster, free, request))
            }
            // What-ifs go through the placer itself.
            None => Box::new(move |cluster, free, request| {
                self.placer.borrow_mut().place(cluster, free, request)
            }),
        };
        Scratch::new(self.cluster, self.out_of_service, place)
    }
}

/// Best fit over every GPU of a cluster: the probe for a round input made by hand (benchmarks,
/// tools, tests), where no engine runs.
pub struct PackingProbe<'c> {
    cluster: &'c Cluster,
}

impl<'c> PackingProbe<'c> {
    /// Every GPU of `cluster`, in service, placed on by [`PackingPlacer`].
    pub fn new(cluster: &'c Cluster) -> Self {
        PackingProbe { cluster }
    }
}

impl PlacementProbe for PackingProbe<'_> {
    fn scratch(&self) -> Scratch<'_> {
        let mut placer = PackingPlacer;
        Scratch::new(
            self.cluster,
            &[],
            Box::new(move |cluster, free, request| placer.place(cluster, free, request)),
        )
    }
}
