"""What a goodput model needs from a running job, measured where it trains.

Pollux and Sia model a job's goodput as its throughput times its statistical efficiency. The
throughput half needs the step time, split into computing and synchronizing, at a known batch per
replica; the efficiency half needs the gradient noise scale (McCandlish et al., "An Empirical
Model of Large-Batch Training", 2018), which Pollux estimates from the gradients the replicas
already compute:

    |g_b|^2  the squared norm of one replica's gradient (batch b: micro-batch x accumulation),
             averaged over the replicas
    |g_B|^2  the squared norm of the all-reduced gradient (batch B = b x replicas)
    grad_sqr = (B |g_B|^2 - b |g_b|^2) / (B - b)        estimates |G|^2, the true gradient's
    grad_var = (|g_b|^2 - |g_B|^2) / (1/b - 1/B)        estimates tr(Sigma), per sample
    noise_scale = grad_var / grad_sqr                   B_noise, in samples

Both estimates are noisy step to step and are smoothed (an exponential average, bias-corrected).
With one replica there is no smaller batch to compare with, and they are left out.

``GoodputMeter`` measures all of it from a DDP communication hook (the local gradient before the
all-reduce and the reduced one after it, and when reductions are in flight) and a ``step()``
context around each optimizer step; ``summary()`` is what ``report_progress(goodput=...)`` writes
to the progress file, where the launcher passes it on to the control plane.
"""

import contextlib
import time

from . import _dist


class GoodputMeter:
    """Measures step time (computing and synchronizing), batch and gradient noise for one job.

    ``model`` is a DistributedDataParallel module; the meter registers its communication hook, which
    reduces with ``reduce`` (default: the mean over ranks; pass ``allreduce_in_rank_order`` for
    bit-exact resumption). ``smoothing`` is the weight of history in the averages (0 to 1).
    A model that is not distributed (one process) is measured for its step time only.
    """

    def __init__(self, model=None, reduce=None, smoothing=0.9):
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
        self._smoothing = smoothing
        self._reduce = reduce
        self._averages = {}  # name -> (biased average, weight of the history so far)
        self._steps = 0
        self._group = None  # DDP's process group, as its hook is given it
        self._inside = False  # within step(): only then are reductions measured
        self._reset_step()
        if model is not None and hasattr(model, "register_comm_hook"):
            model.register_comm_hook(None, self._hook)

    def _reset_step(self):
        self._local_sqr = 0.0
        self._global_sqr = 0.0
        self._in_flight = []  # (issued, done) per bucket, perf_counter seconds
        self._buckets = 0

    def _hook(self, process_group, bucket):
        import torch.distributed as dist

        self._group = process_group
        local = bucket.buffer()
        if self._inside:
            self._local_sqr += _squared_norm(local)
        issued = time.perf_counter()
        if self._reduce is not None:
            reduced = self._reduce(process_group, bucket)
        else:
            group = process_group if process_group is not None else dist.group.WORLD
            world = dist.get_world_size(group)
            work = dist.all_reduce(local, group=group, async_op=True)
            reduced = work.get_future().then(lambda f: f.value()[0].div_(world))

        def measured(future):
            out = future.value()
            if isinstance(out, list):
                out = out[0]
            if not self._inside:
                return out  # a backward pass outside step(): reduced, not measured
            self._global_sqr += _squared_norm(out)
            self._in_flight.append((issued, time.perf_counter()))
            self._buckets += 1
            return out

        return reduced.then(measured)

    @contextlib.contextmanager
    def step(self, replica_batch, replicas=1, accum_steps=1):
        """Times one optimizer step (forward, backward, all-reduce and update) inside the block.
        Every rank must use it: leaving it, the ranks average their local gradient norms (a
        collective).

        ``replica_batch``: samples one replica processes per optimizer step (micro-batch x
        accumulation); ``replicas``: data-parallel replicas (the plan's dp).
        """
        if replica_batch <= 0 or replicas <= 0 or accum_steps <= 0:
            raise ValueError("replica_batch, replicas and accum_steps must be positive")
        self._reset_step()
        self._inside = True
        began = time.perf_counter()
        try:
            yield
        finally:
            self._inside = False
        seconds = time.perf_counter() - began
        sync = _covered(self._in_flight)
        self._local_sqr, self._global_sqr = float(self._local_sqr), float(self._global_sqr)
        self._steps += 1
        self._add("step_seconds", seconds)
        self._add("sync_seconds", min(sync, seconds))
        self._batch = (replica_batch, replicas, accum_steps)
        if self._buckets and replicas > 1:
            # Every rank's local norm, averaged: one rank's alone is as unbiased but far noisier.
            local_sqr = _dist.all_mean(self._local_sqr, self._group)
            sqr, var = noise_estimates(
                local_sqr, self._global_sqr, replica_batch, replica_batch * replicas
            )
            self._add("grad_sqr", sqr)
            self._add("grad_var", var)

    def _add(self, name, value):
        average, history = self._averages.get(name, (0.0, 1.0))
        s = self._smoothing
        self._averages[name] = (s * average + (1.0 - s) * value, history * s)

    def _value(self, name):
        if name not in self._averages:
            return None
        average, history = self._averages[name]
        return average / (1.0 - history)  # bias-corrected: the average starts at 0

    def summary(self):
        """The smoothed measurements so far, as JSON-ready numbers; None before the first step."""
        if not self._steps:
            return None
        replica_batch, replicas, accum_steps = self._batch
        step = self._value("step_seconds")
        sync = self._value("sync_seconds")
        out = {
            "steps": self._steps,
            "step_seconds": step,
            "sync_seconds": sync,
            "compute_seconds": max(step - sync, 0.0),
            "replica_batch": replica_batch,
            "replicas": replicas,
            "accum_steps": accum_steps,
        }
        sqr, var = self._value("grad_sqr"), self._value("grad_var")
        if sqr is not None and var is not None:
            out["grad_sqr"] = sqr
            out["grad_var"] = var
            if sqr > 0.0:
                out["noise_scale"] = var / sqr
        return out


def _squared_norm(flat):
    """A bucket's squared norm, as a tensor on its device (one dot product; read once per step, so
    that a GPU is not made to wait for every bucket)."""
    return flat.dot(flat)


def noise_estimates(small_sqr, big_sqr, small, big):
    """Unbiased estimates of |G|^2 and tr(Sigma) from the squared norms of two mean gradients, over
    ``small`` and ``big`` samples (McCandlish et al., appendix A)."""
    if not 0 < small < big:
        raise ValueError(f"need 0 < small < big batches, got {small} and {big}")
    sqr = (big * big_sqr - small * small_sqr) / (big - small)
    var = (small_sqr - big_sqr) / (1.0 / small - 1.0 / big)
    return sqr, var


def _covered(intervals):
    """Seconds covered by at least one of the (start, end) intervals."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total
