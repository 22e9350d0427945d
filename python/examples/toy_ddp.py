#!/usr/bin/env python3
"""Deterministic toy DDP training on CPU (gloo) that cooperates with gangway's launcher.

    torchrun --standalone --nproc-per-node=2 examples/toy_ddp.py --steps 200 --out params.json

Stopping it (stop file or SIGTERM) and resuming gives bit-for-bit the same final parameters as an
uninterrupted run at the same world size, because everything that determines step k is restored:
  - model parameters and optimizer state (Adam moments and step counts);
  - every rank's torch RNG state (dropout draws from it, and each rank's stream is different);
  - the data position: batches are a pure function of the global step, so step k sees the same
    samples no matter when the process started;
and the gradients are summed in the same order whatever DDP's bucket layout (its all-reduce
would round a resumed run's first step differently at more than two ranks).
At another world size the global batch is kept (micro-batch x accumulation, from plan()), so the
run is the same optimisation up to float rounding, but not bit-exact.

Without torchrun it runs as a single process (world size 1).
"""

import argparse
import contextlib
import gc
import json
import os
import sys
import time

# Run from a source checkout without installing the package.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gangway_worker as gw  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="total optimizer steps")
    parser.add_argument("--save-every", type=int, default=50, help="checkpoint every K steps (0: never)")
    parser.add_argument("--global-batch", type=int, default=16, help="used when the launcher sets no batch")
    parser.add_argument("--micro-batch", type=int, default=4, help="used when the launcher sets no batch")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--step-sleep", type=float, default=0.0,
                        help="seconds to sleep after each step (lets tests stop it mid-run)")
    parser.add_argument("--timing", action="store_true",
                        help="rank 0 prints `timing: EVENT=UNIX_SECONDS` lines (for launch overheads)")
    parser.add_argument("--interpreter-exit", action="store_true",
                        help="at a stop, return through the interpreter's teardown instead of "
                             "gw.exit_now (what the stop cost before; for stop_overhead.py)")
    parser.add_argument("--out", help="rank 0 writes the final parameters here (JSON of float.hex)")
    args = parser.parse_args()
    if args.steps < 0 or args.save_every < 0:
        parser.error("--steps and --save-every must be >= 0")
    return parser, args


def main():
    # First thing, before the slow torch import: until the handler exists, SIGTERM kills us outright.
    gw.install_sigterm_handler()
    parser, args = parse_args()

    def timing(event):
        if args.timing and os.environ.get("RANK", "0") == "0":
            print(f"timing: {event}={time.time():.6f}", flush=True)

    timing("worker_started")
    try:
        plan = gw.plan(global_batch=args.global_batch, micro_batch=args.micro_batch)
    except gw.PlanError as e:
        parser.error(str(e))  # exits 2 (EXIT_USAGE): a configuration error, never worth retrying
    if plan.tp != 1 or plan.pp != 1:
        parser.error(f"this toy only does data parallelism, got tp={plan.tp} pp={plan.pp}")

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    # One thread: both for bit-exact reproducibility and because the ranks share a few CPU cores.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if "RANK" in os.environ:
        dist.init_process_group("gloo")  # torchrun's env:// rendezvous
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    rank, world = dist.get_rank(), dist.get_world_size()
    timing("rendezvous_done")

    # What this rank was allotted, and where it really runs (a real script would size its
    # DataLoader with gw.dataloader_workers(); this toy keeps one thread, for bit-exact results).
    # One write per line: every rank shares the log, and print() writes the newline separately.
    mine = gw.resources()
    sys.stdout.write(f"resources: rank={rank} cpus={mine.cpus} memory_gb={mine.memory_gb} "
                     f"loader_workers={gw.dataloader_workers()} "
                     f"affinity={','.join(map(str, sorted(os.sched_getaffinity(0))))}\n")
    sys.stdout.flush()

    # Same initial weights everywhere (DDP would broadcast rank 0's anyway), then a different RNG
    # stream per rank, as real jobs have (dropout masks must differ between data shards).
    torch.manual_seed(args.seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1)
    )
    w_true = torch.randn(8, 1, generator=torch.Generator().manual_seed(args.seed + 1))
    model = DDP(net)
    # The meter sees each gradient bucket before and after its all-reduce (for the gradient noise
    # scale) and times the step. Gradients are summed in rank order: with more than two ranks,
    # DDP's own all-reduce rounds a resumed run's first step differently (gangway_worker.reproducible).
    meter = gw.GoodputMeter(model, reduce=gw.allreduce_in_rank_order)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    torch.manual_seed(args.seed + 1000 + rank)

    def batch_for_step(step):
        # The global batch of step k depends only on (seed, k): resuming at k continues the stream.
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        x = torch.randn(plan.global_batch, 8, generator=g)
        y = x @ w_true + 0.1 * torch.randn(plan.global_batch, 1, generator=g)
        return x, y

    def make_state():
        # Collective (all ranks call it): rank 0 writes the checkpoint, but it must hold every
        # rank's RNG state, since each rank's dropout stream is different.
        # (all_gather of the uint8 state tensors: all_gather_object would need numpy.)
        mine = torch.get_rng_state()
        rng_states = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(rng_states, mine)
        return {"model": net.state_dict(), "optim": opt.state_dict(), "rng": rng_states, "world_size": world}

    def checkpoint(step):
        # Without GANGWAY_CHECKPOINT_DIR (a bare torchrun run) there is nowhere to save: skip.
        if plan.checkpoint_dir is not None:
            gw.save(make_state(), step)

    def teardown():
        # Together: a rank that destroys its gloo group while rank 0 still evaluates can abort
        # ("terminate called without an active exception") and fail a finished run. And the DDP
        # model goes first, with its communication hook: freed at interpreter exit, after the
        # group, it could abort the same way.
        nonlocal model, meter
        dist.barrier()
        del model, meter
        gc.collect()
        dist.destroy_process_group()

    start = 0
    resumed = gw.load(fallback=True)
    if resumed is not None:
        state, start = resumed
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        if state["world_size"] == world:
            torch.set_rng_state(state["rng"][rank])
        else:
            # RNG streams cannot be remapped across world sizes; reseed deterministically instead.
            torch.manual_seed(args.seed + 1000 + rank + 7919 * start)
    if rank == 0:
        print(f"plan: world={world} dp={plan.dp} global={plan.global_batch} micro={plan.micro_batch} "
              f"accum={plan.accum_steps} devices={os.environ.get('CUDA_VISIBLE_DEVICES', '')}; " + (f"resumed from step {start}" if resumed else "starting from scratch"),
              flush=True)

    last_saved = start if resumed else None
    for step in range(start, args.steps):
        if gw.should_stop():
            timing("stop_seen")
            if last_saved != step:
                checkpoint(step)
            timing("checkpoint_saved")
            if rank == 0:
                print(f"stop requested: saved step {step}, exiting {gw.EXIT_PREEMPTED_OK}", flush=True)
            # As at the end: tear down together, or a rank can abort while another still saves.
            teardown()
            timing("teardown_done")
            if args.interpreter_exit:
                return gw.EXIT_PREEMPTED_OK
            # Saved and the group destroyed: nothing left worth the interpreter's teardown (about
            # a second per worker unloading torch, where a resize waits for it).
            gw.exit_now(gw.EXIT_PREEMPTED_OK)

        # The scheduler may retune the batch while the job keeps its GPUs (Pollux does).
        new = gw.retuned(plan)
        if new is not None:
            plan = new
            if rank == 0:
                print(f"retuned at step {step}: global={plan.global_batch} micro={plan.micro_batch} "
                      f"accum={plan.accum_steps}", flush=True)
        model.train()
        with meter.step(plan.micro_batch * plan.accum_steps, plan.dp, plan.accum_steps):
            opt.zero_grad(set_to_none=True)
            x, y = batch_for_step(step)
            for a in range(plan.accum_steps):
                lo = (a * plan.dp + rank) * plan.micro_batch  # each sample used by exactly one rank
                rows = slice(lo, lo + plan.micro_batch)
                # Only the last micro-batch all-reduces gradients; DDP then averages over ranks, so
                # the update is the mean over the whole global batch whatever dp and accum are.
                sync = contextlib.nullcontext() if a == plan.accum_steps - 1 else model.no_sync()
                with sync:
                    loss = F.mse_loss(model(x[rows]), y[rows]) / plan.accum_steps
                    loss.backward()
            opt.step()

        done = step + 1
        gw.report_progress(done, total_steps=args.steps, goodput=meter.summary())
        if step == start:
            timing("first_step")
        if args.save_every and done % args.save_every == 0 and done < args.steps:
            checkpoint(done)
            last_saved = done
        if args.step_sleep:
            time.sleep(args.step_sleep)

    # Save the final state too: if a stop request raced with the end of training, the relaunched
    # job resumes at the last step and finishes at once instead of redoing work.
    if last_saved != args.steps:
        checkpoint(args.steps)

    if rank == 0:
        g = torch.Generator().manual_seed(args.seed + 2)
        x_eval = torch.randn(256, 8, generator=g)
        net.eval()
        with torch.no_grad():
            final_loss = F.mse_loss(net(x_eval), x_eval @ w_true).item()
        print(f"final loss: {final_loss:.6f}", flush=True)
        if args.out:
            # float.hex is exact, so equal files mean bit-identical parameters.
            params = {k: [float.hex(v) for v in t.flatten().tolist()] for k, t in net.state_dict().items()}
            with open(args.out, "w") as f:
                json.dump({"steps": args.steps, "final_loss": final_loss, "params": params}, f, indent=1)
    teardown()
    return gw.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
