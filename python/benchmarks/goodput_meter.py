#!/usr/bin/env python3
"""What GoodputMeter and allreduce_in_rank_order cost per optimizer step, against plain DDP.

    torchrun --standalone --nproc-per-node=2 python/benchmarks/goodput_meter.py [--params 4e6]

CPU and gloo. Each mode trains the same MLP for --steps steps after --warmup; rank 0 prints the
median step time of each mode and its ratio to plain DDP. The modes run in turn, twice, so that
drift on a shared machine shows as disagreement between the two rounds.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gangway_worker as gw  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=4e6, help="model parameters (about)")
    parser.add_argument("--batch", type=int, default=32, help="samples per replica per step")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    width = int((args.params / 3) ** 0.5)  # three width x width layers

    def build(mode):
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.ReLU(),
            torch.nn.Linear(width, width), torch.nn.ReLU(),
            torch.nn.Linear(width, width),
        )
        model = DDP(net)
        meter = None
        if mode == "meter":
            meter = gw.GoodputMeter(model)
        elif mode == "meter+rank-order":
            meter = gw.GoodputMeter(model, reduce=gw.allreduce_in_rank_order)
        return model, meter

    def run(mode):
        model, meter = build(mode)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(args.batch, width)
        times = []
        for step in range(args.warmup + args.steps):
            began = time.perf_counter()
            block = meter.step(args.batch, world) if meter else _nothing()
            with block:
                opt.zero_grad(set_to_none=True)
                F.mse_loss(model(x), x).backward()
                opt.step()
            if step >= args.warmup:
                times.append(time.perf_counter() - began)
        return statistics.median(times)

    modes = ["ddp", "meter", "meter+rank-order"]
    rounds = [{mode: run(mode) for mode in modes} for _ in range(2)]
    if rank == 0:
        print(f"{world} ranks, {3 * width * width / 1e6:.1f}M parameters, batch {args.batch} per replica")
        for mode in modes:
            seconds = [r[mode] for r in rounds]
            ratios = [r[mode] / r["ddp"] for r in rounds]
            print(f"{mode:>17}: median step {seconds[0] * 1e3:7.1f} / {seconds[1] * 1e3:7.1f} ms, "
                  f"x{ratios[0]:.2f} / x{ratios[1]:.2f} of plain DDP")
    dist.barrier()  # tear down together: a rank leaving early can abort the other
    dist.destroy_process_group()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
