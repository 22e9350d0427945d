#!/usr/bin/env python3
"""Convert one log of Pollux's simulator (simulator.py --output LOG, one JSON record per
60 s interval) into two compact CSVs:

  <tag>.csv        one row per job: name,application,submit_s,completion_s,jct_s,num_restarts,
                   wl_num_replicas,wl_batch_size (the workload's columns)
  <tag>_alloc.csv  one row per job each time its allocation or batch configuration changes
                   (as logged at the end of an interval, i.e. what it runs during [time, time+60)):
                   time,name,num_replicas,num_nodes,placement,nodes,batch_size,atomic_bsz,
                   accum_steps,epoch,progress
                   placement = replicas per node in the simulator's order, '-'-joined;
                   nodes = node id of each replica, '-'-joined ('' = no allocation).
"""
import csv, json, sys, os

def main(log_path, workload_csv, out_dir, tag):
    wl = {}
    with open(workload_csv) as f:
        for r in csv.DictReader(f):
            wl[r["name"]] = r
    last = {}
    alloc_rows = []
    final = None
    with open(log_path) as f:
        for line in f:
            rec = json.loads(line)
            t = rec["timestamp"]
            for j in rec["submitted_jobs"]:
                name = j["name"]
                done = j["completion_time"] is not None
                placement = [p for p in j["placement"] if p] if j["allocation"] else []
                nrep = sum(placement)
                acc = j["accum_steps"] if nrep else 0
                bsz = j["batch_size"] if nrep else 0
                atomic = bsz // (nrep * (acc + 1)) if nrep else 0
                key = (tuple(j["allocation"]), bsz, acc)
                if done:
                    if name in last and last[name] != "done":
                        last[name] = "done"
                    continue
                if last.get(name) != key:
                    last[name] = key
                    alloc_rows.append([t, name, nrep, len(placement),
                                       "-".join(map(str, placement)),
                                       "-".join(map(str, j["allocation"])),
                                       bsz, atomic, acc, j["epoch"],
                                       round(j["progress"], 3)])
            final = rec
    jobs = []
    for j in final["submitted_jobs"]:
        w = wl[j["name"]]
        ct = j["completion_time"]
        jobs.append([j["name"], w["application"], j["submission_time"], ct,
                     None if ct is None else ct - j["submission_time"],
                     j["num_restarts"], w["num_replicas"], w["batch_size"]])
    assert len(jobs) == len(wl), (len(jobs), len(wl))
    with open(os.path.join(out_dir, tag + ".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "application", "submit_s", "completion_s", "jct_s",
                    "num_restarts", "wl_num_replicas", "wl_batch_size"])
        w.writerows(jobs)
    with open(os.path.join(out_dir, tag + "_alloc.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time", "name", "num_replicas", "num_nodes", "placement", "nodes",
                    "batch_size", "atomic_bsz", "accum_steps", "epoch", "progress"])
        w.writerows(alloc_rows)

if __name__ == "__main__":
    main(*sys.argv[1:5])
