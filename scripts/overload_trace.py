#!/usr/bin/env python3
"""A Tiresias-format trace (job_id,num_gpu,submit_time,iterations,model_name,duration,interval) of short
one-GPU jobs arriving at a steady rate: the overload of issue 28, item 10.

Jobs arrive every 1/RATE seconds and last a whole number of seconds drawn uniformly from 1 to 5. On
Gavel's 108-GPU cluster with its 360 s rounds a round starts at most 108 of them, so 10 jobs/s (3,600
per round) grows the backlog by about 3,500 jobs a round, while 0.25 jobs/s (90 per round) is feasible.

Usage: scripts/overload_trace.py JOBS RATE SEED > trace.csv
"""
import random
import sys

MODELS = ["resnet50", "vgg19", "lstm", "transformer"]


def main():
    jobs, rate, seed = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    out = sys.stdout
    out.write("job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n")
    for job in range(jobs):
        duration = rng.randint(1, 5)
        out.write(f"{job},1,{job / rate:.3f},{duration},{rng.choice(MODELS)},{duration},1\n")


if __name__ == "__main__":
    main()
