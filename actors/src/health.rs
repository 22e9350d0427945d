//! GPU health: NVML when a driver is present (utilization, memory, uncorrected ECC errors, critical
//! XID events), and a switch for fake GPUs and fault-injection tests.
//!
//! NVML is behind this crate's `nvml` feature (on by default). Built without it, [`NvmlProbe`] still
//! names the type, but [`NvmlProbe::for_all_gpus`] finds no GPUs, as on a machine without a driver.

use std::sync::Arc;
#[cfg(feature = "nvml")]
use std::sync::OnceLock;
#[cfg(feature = "nvml")]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicBool, Ordering};

use gangway_core::cluster::GpuId;
#[cfg(feature = "nvml")]
use nvml_wrapper::{
    Nvml,
    bitmasks::event::EventTypes,
    enum_wrappers::device::{EccCounter, MemoryError},
    enums::event::XidError,
    error::NvmlError,
};
use serde::Serialize;

/// What a probe saw.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Health {
    /// Whether the GPU may be leased.
    pub healthy: bool,
    /// Why it is unhealthy.
    pub reason: Option<String>,
    /// GPU utilization over NVML's last sample period, in percent (NVML only).
    pub utilization_pct: Option<u32>,
    /// Device memory in use, in bytes (NVML only).
    pub memory_used_bytes: Option<u64>,
}

impl Health {
    /// Healthy, with nothing measured.
    pub fn healthy() -> Self {
        Health {
            healthy: true,
            reason: None,
            utilization_pct: None,
            memory_used_bytes: None,
        }
    }

    /// Unhealthy, for `reason`.
    pub fn unhealthy(reason: impl Into<String>) -> Self {
        Health {
            healthy: false,
            reason: Some(reason.into()),
            ..Health::healthy()
        }
    }
}

/// Looks at one GPU. Called for the GPU's actor on a timer, on a thread of its own for each check
/// (unless it is [`quick`](HealthProbe::quick)): a probe that hangs holds up only its own GPU's next
/// checks, and takes that GPU out of service after [`UNANSWERED_CHECKS`](crate::gpu::UNANSWERED_CHECKS)
/// ticks' time until it answers; one that panics is not called again, and its GPU keeps the health
/// the probe last gave.
pub trait HealthProbe: Send {
    /// The health of GPU `gpu` now.
    fn check(&mut self, gpu: GpuId) -> Health;

    /// Whether [`check`](HealthProbe::check) only reads memory and returns at once: then it is
    /// called on the GPU actor's own thread, which spares a thread per GPU and check (a cluster of
    /// thousands of GPUs checks them all at each tick). Asked once, when the probe is given.
    fn quick(&self) -> bool {
        false
    }
}

/// NVML, initialized once per process; `None` where there is no driver (`Nvml::init` fails within a
/// millisecond there).
#[cfg(feature = "nvml")]
pub fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| match Nvml::init() {
        Ok(nvml) => Some(nvml),
        Err(e) => {
            tracing::info!(error = %e, "no NVML: GPUs are fake or simulated");
            None
        }
    })
    .as_ref()
}

/// Health from NVML. A GPU is unhealthy once it shows uncorrected ECC errors, has had a critical XID
/// error, or cannot be queried (fallen off the bus).
#[cfg(feature = "nvml")]
pub struct NvmlProbe {
    nvml: &'static Nvml,
    /// The last critical XID per device (0: none), written by the watcher thread.
    xid: Arc<[AtomicU64]>,
}

#[cfg(feature = "nvml")]
impl NvmlProbe {
    /// One probe per GPU shares a watcher thread for XID events; `None` without NVML.
    pub fn for_all_gpus() -> Option<Vec<NvmlProbe>> {
        let nvml = nvml()?;
        let count = nvml.device_count().ok()?;
        let xid: Arc<[AtomicU64]> = (0..count).map(|_| AtomicU64::new(0)).collect();
        spawn_xid_watcher(nvml, Arc::clone(&xid));
        Some(
            (0..count)
                .map(|_| NvmlProbe {
                    nvml,
                    xid: Arc::clone(&xid),
                })
                .collect(),
        )
    }

    fn query(&self, index: u32) -> Result<Health, NvmlError> {
        let device = self.nvml.device_by_index(index)?;
        let utilization = device.utilization_rates()?;
        let memory = device.memory_info()?;
        let mut health = Health {
            utilization_pct: Some(utilization.gpu),
            memory_used_bytes: Some(memory.used),
            ..Health::healthy()
        };
        // Consumer GPUs have no ECC; only an error count that exists and is non-zero counts.
        if let Ok(n) = device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            && n > 0
        {
            health.healthy = false;
            health.reason = Some(format!("{n} uncorrected ECC errors"));
        }
        let xid = self.xid[index as usize].load(Ordering::Relaxed);
        if xid != 0 {
            health.healthy = false;
            health.reason = Some(format!("critical XID {xid}"));
        }
        Ok(health)
    }
}

#[cfg(feature = "nvml")]
impl HealthProbe for NvmlProbe {
    fn check(&mut self, gpu: GpuId) -> Health {
        self.query(gpu.0)
            .unwrap_or_else(|e| Health::unhealthy(format!("NVML: {e}")))
    }
}

/// Waits for critical XID events on every device, on a thread of its own (the wait blocks).
#[cfg(feature = "nvml")]
fn spawn_xid_watcher(nvml: &'static Nvml, xid: Arc<[AtomicU64]>) {
    let spawned = std::thread::Builder::new()
        .name("gangway-xid".into())
        .spawn(move || {
            let Ok(mut set) = nvml.create_event_set() else {
                return;
            };
            for index in 0..xid.len() as u32 {
                let Ok(device) = nvml.device_by_index(index) else {
                    continue;
                };
                set = match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                    Ok(set) => set,
                    Err(e) => {
                        tracing::info!(index, error = %e.error, "XID events unavailable");
                        return;
                    }
                };
            }
            loop {
                let Ok(event) = set.wait(10_000) else {
                    continue;
                };
                let index = event.device.index().unwrap_or(u32::MAX) as usize;
                let code = match event.event_data {
                    Some(XidError::Value(v)) => v.max(1),
                    _ => 999,
                };
                if let Some(slot) = xid.get(index) {
                    slot.store(code, Ordering::Relaxed);
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "could not start the XID watcher");
    }
}

/// Health from NVML, in a build without it: there is never one ([`NvmlProbe::for_all_gpus`] is `None`),
/// as on a machine without a driver.
#[cfg(not(feature = "nvml"))]
pub struct NvmlProbe {
    never: std::convert::Infallible,
}

#[cfg(not(feature = "nvml"))]
impl NvmlProbe {
    /// `None`: this build has no NVML (gangway-actors without its `nvml` feature).
    pub fn for_all_gpus() -> Option<Vec<NvmlProbe>> {
        tracing::info!("built without the nvml feature: no NVML health probes");
        None
    }
}

#[cfg(not(feature = "nvml"))]
impl HealthProbe for NvmlProbe {
    fn check(&mut self, _: GpuId) -> Health {
        match self.never {}
    }
}

/// A health switch, for fake GPUs: healthy until someone flips it (fault injection in tests, or an
/// operator draining a GPU).
#[derive(Clone, Default)]
pub struct Switch(Arc<AtomicBool>);

impl Switch {
    /// Marks the GPU failed (`true`) or healthy again (`false`).
    pub fn set_failed(&self, failed: bool) {
        self.0.store(failed, Ordering::Relaxed);
    }
}

impl HealthProbe for Switch {
    fn check(&mut self, _: GpuId) -> Health {
        if self.0.load(Ordering::Relaxed) {
            Health::unhealthy("marked failed")
        } else {
            Health::healthy()
        }
    }

    fn quick(&self) -> bool {
        true
    }
}
