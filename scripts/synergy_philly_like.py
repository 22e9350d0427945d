#!/usr/bin/env python3
"""A Philly-like multi-GPU load in Synergy's trace format (job_id,model,arrival_s,iterations,gpus).

Models are drawn with Synergy's class split (Mohan et al., OSDI'22; its default `model_class_split`):
20% image (alexnet, res18, res50, mobilenet, shufflenet), 70% language (gnmt, transformer, lstm),
10% speech (m5, deepspeech). GPU counts follow Gavel's multi-GPU draw (1, 2, 4, 8 with probability
0.7, 0.1, 0.15, 0.05). Durations at the proportional share follow Synergy's small-trace rule:
60 * 10^U(2.5, 2.7) s with probability 0.2, else 60 * 10^U(1.5, 2.5) s; iterations = duration / the
profile's iter_time. Arrivals are Poisson at RATE jobs per hour.

Usage: scripts/synergy_philly_like.py JOBS RATE SEED PROFILES.json > trace.csv
"""
import json
import random
import sys


def main():
    jobs, rate, seed, profiles = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    iter_time = {k[:-2]: v["iter_time"] for k, v in json.load(open(profiles))["models"].items()
                 if k.endswith("_1")}
    classes = [(0.2, ["alexnet", "res18", "res50", "mobilenet", "shufflenet"]),
               (0.7, ["gnmt", "transformer", "lstm"]),
               (0.1, ["m5", "deepspeech"])]
    rng = random.Random(seed)
    arrival = 0.0
    for job in range(jobs):
        u, acc = rng.random(), 0.0
        for share, models in classes:
            acc += share
            if u < acc:
                model = rng.choice(models)
                break
        else:
            model = classes[-1][1][-1]
        g = rng.random()
        gpus = 1 if g < 0.7 else 2 if g < 0.8 else 4 if g < 0.95 else 8
        if rng.random() < 0.2:
            duration = 60 * 10 ** rng.uniform(2.5, 2.7)
        else:
            duration = 60 * 10 ** rng.uniform(1.5, 2.5)
        print(f"{job},{model},{arrival:.3f},{int(duration / iter_time[model])},{gpus}")
        arrival += rng.expovariate(rate / 3600.0)


if __name__ == "__main__":
    main()
