//! Pollux's throughput model (Qiao et al., OSDI'21, section 4.1): how long a training step takes as a
//! function of the replicas, the nodes they span, the per-replica batch and gradient accumulation, and its
//! fit to measured steps.
//!
//! - compute per micro-step: `T_c(m) = alpha_c + beta_c * m` (m = per-replica batch);
//! - synchronization: `T_n = alpha_n + beta_n * (r - 2)` across nodes, `alpha_r + beta_r * (r - 2)` within
//!   one node, about 0 for one replica;
//! - the last micro-step overlaps the synchronization: `T_o = (T_c^gamma + T_n^gamma)^(1/gamma)`;
//! - a step with `s` extra accumulation micro-steps: `T = s * T_c + T_o`.
//!
//! The fit minimizes the root-mean-square log error of the compute time and of the step time over the
//! measured configurations, plus Pollux's small regularizers; parameters the data cannot tell are fixed,
//! as Pollux fixes them. It is a quasi-Newton search (BFGS, numeric gradients) in log space, written here.

/// The model's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerfParams {
    /// Fixed compute seconds per micro-step.
    pub alpha_c: f64,
    /// Compute seconds per sample of the per-replica batch.
    pub beta_c: f64,
    /// Fixed synchronization seconds across nodes.
    pub alpha_n: f64,
    /// Synchronization seconds across nodes per replica beyond two.
    pub beta_n: f64,
    /// Fixed synchronization seconds within one node.
    pub alpha_r: f64,
    /// Synchronization seconds within one node per replica beyond two.
    pub beta_r: f64,
    /// How much the last micro-step's compute and the synchronization overlap: 1 adds them (no
    /// overlap), larger tends to the longer of the two; the fit keeps it in 1..=10.
    pub gamma: f64,
}

/// A measured step: on `nodes` nodes with `replicas` replicas at per-replica batch `local`, a step (no
/// accumulation) took `step_time` seconds, `sync_time` of them synchronizing.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Observation {
    /// Nodes the replicas spanned.
    pub nodes: u32,
    /// Data-parallel replicas.
    pub replicas: u32,
    /// Per-replica batch of one micro-step, in samples.
    pub local: f64,
    /// Seconds per step without accumulation, synchronization included.
    pub step_time: f64,
    /// Seconds of the step spent synchronizing gradients.
    pub sync_time: f64,
}

impl Observation {
    /// What live workers measured (the worker helper's `GoodputMeter`) on `nodes` nodes, as a step
    /// without accumulation: the time not synchronizing is split evenly over the micro-steps, and the
    /// step keeps one micro-step of it and the synchronization.
    pub fn from_measured(nodes: u32, measured: &gangway_protocol::worker::Measured) -> Observation {
        let accum = f64::from(measured.accum_steps.max(1));
        Observation {
            nodes,
            replicas: measured.replicas,
            local: f64::from(measured.replica_batch) / accum,
            step_time: measured.compute_seconds() / accum + measured.sync_seconds,
            sync_time: measured.sync_seconds,
        }
    }
}

/// An observation as the fitting objective reads it: its shape, and the logs of its measured compute
/// and step times.
struct Target {
    nodes: u32,
    replicas: u32,
    local: f64,
    log_compute: f64,
    log_step: f64,
}

impl Target {
    fn of(o: &Observation) -> Self {
        Self {
            nodes: o.nodes,
            replicas: o.replicas,
            local: o.local,
            log_compute: (o.step_time - o.sync_time).max(FLOOR).ln(),
            log_step: o.step_time.max(FLOOR).ln(),
        }
    }
}

/// Smallest value a time parameter takes.
const FLOOR: f64 = 1e-8;

impl PerfParams {
    /// Compute time of one micro-step at per-replica batch `local`.
    pub fn compute(&self, local: f64) -> f64 {
        self.alpha_c + self.beta_c * local
    }

    /// Synchronization time on `nodes` nodes with `replicas` replicas.
    pub fn network(&self, nodes: u32, replicas: u32) -> f64 {
        let extra = (f64::from(replicas) - 2.0).max(FLOOR);
        if nodes > 1 {
            self.alpha_n + self.beta_n * extra
        } else if replicas > 1 {
            self.alpha_r + self.beta_r * extra
        } else {
            FLOOR + FLOOR * extra
        }
    }

    /// Time of the last micro-step, overlapped with the synchronization.
    pub fn overlapped(&self, nodes: u32, replicas: u32, local: f64) -> f64 {
        let (c, n) = (self.compute(local), self.network(nodes, replicas));
        (c.powf(self.gamma) + n.powf(self.gamma)).powf(1.0 / self.gamma)
    }

    /// Seconds per optimizer step with `accum` extra accumulation micro-steps.
    pub fn step_time(&self, nodes: u32, replicas: u32, local: f64, accum: u32) -> f64 {
        f64::from(accum) * self.compute(local) + self.overlapped(nodes, replicas, local)
    }

    /// Fits the parameters to `observations` (at least one).
    pub fn fit(observations: &[Observation]) -> PerfParams {
        // Pollux starts gamma at 1.001 in a bounded search; through the logistic map below that start
        // would leave gamma's gradient about 1000 times too small to move, so it starts mid-range.
        let init = [0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 2.0];
        let mut fixed: [Option<f64>; 7] = [None; 7];
        let distinct_batches = {
            let mut b: Vec<u64> = observations.iter().map(|o| o.local.to_bits()).collect();
            b.sort_unstable();
            b.dedup();
            b.len()
        };
        if distinct_batches <= 1 {
            let mean = observations
                .iter()
                .map(|o| o.step_time - o.sync_time)
                .sum::<f64>()
                / observations.len().max(1) as f64;
            fixed[0] = Some((mean / 2.0).max(FLOOR));
        }
        if !observations.iter().any(|o| o.nodes > 1) {
            fixed[2] = Some(FLOOR);
            fixed[3] = Some(FLOOR);
        }
        if !observations.iter().any(|o| o.nodes == 1 && o.replicas > 1) {
            fixed[4] = Some(FLOOR);
            fixed[5] = Some(FLOOR);
        }
        if !observations.iter().any(|o| o.replicas > 2) {
            fixed[3] = Some(FLOOR);
            fixed[5] = Some(FLOOR);
        }
        let free: Vec<usize> = (0..7).filter(|&k| fixed[k].is_none()).collect();
        // Search space: the log of each time parameter; gamma = 1 + 9 / (1 + e^-z) stays in [1, 10].
        let to_params = |z: &[f64]| {
            let mut p = [0.0; 7];
            let mut k = 0;
            for i in 0..7 {
                p[i] = match fixed[i] {
                    Some(v) => v,
                    None => {
                        let x = z[k];
                        k += 1;
                        if i == 6 {
                            1.0 + 9.0 / (1.0 + (-x).exp())
                        } else {
                            x.exp().max(FLOOR)
                        }
                    }
                }
            }
            PerfParams::from_array(p)
        };
        let start: Vec<f64> = free
            .iter()
            .map(|&i| {
                if i == 6 {
                    let y: f64 = (init[6] - 1.0) / 9.0;
                    (y / (1.0 - y)).ln()
                } else {
                    f64::ln(init[i])
                }
            })
            .collect();
        let targets: Vec<Target> = observations.iter().map(Target::of).collect();
        let objective = |z: &[f64]| to_params(z).loss_against(&targets);
        let best = minimize(&objective, start);
        let mut params = to_params(&best);
        if !observations.iter().any(|o| o.nodes > 1) {
            params.alpha_n = params.alpha_n.max(1.1 * params.alpha_r);
            params.beta_n = params.beta_n.max(1.1 * params.beta_r);
        }
        params
    }

    fn from_array(p: [f64; 7]) -> PerfParams {
        PerfParams {
            alpha_c: p[0],
            beta_c: p[1],
            alpha_n: p[2],
            beta_n: p[3],
            alpha_r: p[4],
            beta_r: p[5],
            gamma: p[6],
        }
    }

    /// Pollux's fitting objective: RMSLE of compute time plus RMSLE of step time, plus regularizers.
    pub fn loss(&self, observations: &[Observation]) -> f64 {
        self.loss_against(&observations.iter().map(Target::of).collect::<Vec<_>>())
    }

    /// [`PerfParams::loss`] against targets taken once per fit rather than once per evaluation.
    fn loss_against(&self, targets: &[Target]) -> f64 {
        let n = targets.len().max(1) as f64;
        let (mut compute, mut step) = (0.0, 0.0);
        for t in targets {
            let c = (self.compute(t.local).ln() - t.log_compute).powi(2);
            let s = (self.overlapped(t.nodes, t.replicas, t.local).ln() - t.log_step).powi(2);
            compute += c;
            step += s;
        }
        let reg = 1e-3 * (self.gamma - 1.0).powi(2)
            + 1e-2 * ((self.beta_n / self.alpha_n).powi(2) + (self.beta_r / self.alpha_r).powi(2));
        (compute / n).sqrt() + (step / n).sqrt() + reg
    }

    /// Root-mean-square relative error of the predicted step time over `observations`.
    pub fn step_error(&self, observations: &[Observation]) -> f64 {
        let n = observations.len().max(1) as f64;
        let sum: f64 = observations
            .iter()
            .map(|o| {
                let predicted = self.overlapped(o.nodes, o.replicas, o.local);
                ((predicted - o.step_time) / o.step_time).powi(2)
            })
            .sum();
        (sum / n).sqrt()
    }
}

/// Minimizes `f` from `x` by BFGS with central-difference gradients and a backtracking line search.
fn minimize(f: &dyn Fn(&[f64]) -> f64, mut x: Vec<f64>) -> Vec<f64> {
    let n = x.len();
    if n == 0 {
        return x;
    }
    let gradient = |x: &[f64]| -> Vec<f64> {
        let mut g = vec![0.0; n];
        let mut probe = x.to_vec();
        for k in 0..n {
            let h = 1e-6 * (1.0 + x[k].abs());
            probe[k] = x[k] + h;
            let up = f(&probe);
            probe[k] = x[k] - h;
            let down = f(&probe);
            probe[k] = x[k];
            g[k] = (up - down) / (2.0 * h);
        }
        g
    };
    // Inverse Hessian estimate, row-major.
    let mut h = identity(n);
    let mut fx = f(&x);
    let mut g = gradient(&x);
    for _ in 0..200 {
        let norm: f64 = g.iter().map(|v| v * v).sum::<f64>().sqrt();
        if !norm.is_finite() || norm < 1e-9 {
            break;
        }
        let mut d: Vec<f64> = (0..n)
            .map(|i| -(0..n).map(|j| h[i * n + j] * g[j]).sum::<f64>())
            .collect();
        let mut slope: f64 = d.iter().zip(&g).map(|(a, b)| a * b).sum();
        if slope >= 0.0 {
            // Not a descent direction: restart from steepest descent.
            h = identity(n);
            d = g.iter().map(|v| -v).collect();
            slope = -norm * norm;
        }
        let mut step = 1.0;
        let mut next = x.clone();
        let mut f_next = f64::INFINITY;
        for _ in 0..40 {
            for k in 0..n {
                next[k] = x[k] + step * d[k];
            }
            f_next = f(&next);
            if f_next.is_finite() && f_next <= fx + 1e-4 * step * slope {
                break;
            }
            step *= 0.5;
        }
        // No decrease (or NaN): the line search failed, stop here.
        if f_next.partial_cmp(&fx) != Some(std::cmp::Ordering::Less) {
            break;
        }
        let g_next = gradient(&next);
        let s: Vec<f64> = (0..n).map(|k| next[k] - x[k]).collect();
        let y: Vec<f64> = (0..n).map(|k| g_next[k] - g[k]).collect();
        let sy: f64 = s.iter().zip(&y).map(|(a, b)| a * b).sum();
        let improvement = fx - f_next;
        x = next;
        fx = f_next;
        g = g_next;
        if sy > 1e-12 {
            let hy: Vec<f64> = (0..n)
                .map(|i| (0..n).map(|j| h[i * n + j] * y[j]).sum())
                .collect();
            let yhy: f64 = y.iter().zip(&hy).map(|(a, b)| a * b).sum();
            for i in 0..n {
                for j in 0..n {
                    h[i * n + j] +=
                        (sy + yhy) * s[i] * s[j] / (sy * sy) - (hy[i] * s[j] + s[i] * hy[j]) / sy;
                }
            }
        }
        if improvement < 1e-12 * (1.0 + fx.abs()) {
            break;
        }
    }
    x
}

fn identity(n: usize) -> Vec<f64> {
    let mut m = vec![0.0; n * n];
    for k in 0..n {
        m[k * n + k] = 1.0;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth() -> PerfParams {
        PerfParams {
            alpha_c: 0.02,
            beta_c: 0.0015,
            alpha_n: 0.15,
            beta_n: 0.01,
            alpha_r: 0.03,
            beta_r: 0.004,
            gamma: 1.8,
        }
    }

    fn observe(p: &PerfParams, nodes: u32, replicas: u32, local: f64) -> Observation {
        let step = p.overlapped(nodes, replicas, local);
        Observation {
            nodes,
            replicas,
            local,
            step_time: step,
            sync_time: step - p.compute(local),
        }
    }

    #[test]
    fn the_fit_recovers_a_model_from_its_own_steps() {
        let p = truth();
        let mut obs = Vec::new();
        for (n, r) in [(1, 1), (1, 2), (1, 4), (2, 8), (4, 16)] {
            for m in [16.0, 32.0, 64.0, 128.0] {
                obs.push(observe(&p, n, r, m));
            }
        }
        let fit = PerfParams::fit(&obs);
        assert!(
            fit.step_error(&obs) < 0.02,
            "{fit:?}: {}",
            fit.step_error(&obs)
        );
        // It predicts a configuration it has not seen.
        let (want, got) = (p.overlapped(3, 12, 48.0), fit.overlapped(3, 12, 48.0));
        assert!((got / want - 1.0).abs() < 0.1, "{got} vs {want}");
    }

    #[test]
    fn one_gpu_observations_predict_no_network_time() {
        let p = truth();
        let obs: Vec<Observation> = [16.0, 64.0].iter().map(|&m| observe(&p, 1, 1, m)).collect();
        let fit = PerfParams::fit(&obs);
        // Scaling is then linear: the predicted step barely grows with replicas (Sia's assumption
        // that throughput doubles with GPUs before it has seen more).
        let one = fit.step_time(1, 1, 32.0, 0);
        let eight = fit.step_time(2, 8, 32.0, 0);
        assert!(eight / one < 1.05, "{one} -> {eight}");
    }
}
