//! Control-plane time: seconds since the journal's epoch, from the wall clock (optionally sped up, for
//! simulated workers) or set by a virtual-time driver.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where the control plane reads the time.
pub trait Clock: Send + Sync {
    /// Control-plane seconds now.
    fn now(&self) -> f64;
}

/// Time that moves only when a driver sets it (the parity tests, trace replays).
#[derive(Debug, Default)]
pub struct VirtualClock(AtomicU64);

impl VirtualClock {
    /// A clock stopped at `start` seconds.
    pub fn new(start: f64) -> Self {
        VirtualClock(AtomicU64::new(start.to_bits()))
    }

    /// Moves the time to `t` seconds.
    pub fn set(&self, t: f64) {
        self.0.store(t.to_bits(), Ordering::SeqCst);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::SeqCst))
    }
}

/// The wall clock, from an epoch that the journal keeps across restarts, running `time_scale` times
/// faster than real time (1 for real workers; more to run simulated workers faster).
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    /// The epoch, in Unix seconds: control-plane time 0.
    pub unix_epoch: f64,
    /// Control-plane seconds per real second (1 for real workers).
    pub time_scale: f64,
}

impl WallClock {
    /// The wall clock, in Unix seconds (0 if the system clock is before 1970).
    pub fn unix_now() -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64())
    }
}

impl Clock for WallClock {
    fn now(&self) -> f64 {
        (WallClock::unix_now() - self.unix_epoch).max(0.0) * self.time_scale
    }
}
