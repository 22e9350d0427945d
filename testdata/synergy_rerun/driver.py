"""Driver for msr-fiddle/synergy's simulator (commit 1bb2bed), run from outside the repo.

Mimics runner.benchmark() for ONE scheduler string (e.g. 'FIFO+fair', 'SRTF+tune', 'FIFO+opt'):
the same flag derivation (placement/fair/tune/opt from substrings), random.seed(seed) before
building the Runner, and the same Runner arguments. It only adds read-only instrumentation
(wrappers that record what Job.allocate / Solver.allocate_round / Runner.finish_job did) and
writes per-job and per-round CSVs. No simulator logic is changed.
"""
import argparse, csv, logging, os, random, sys, time

SIM = '/work/peers/synergy/simulator'
os.chdir(SIM)
sys.path.insert(0, SIM)

import numpy as np
import runner as R
from jobs.job import Job
from opt_algo.synergy_opt import Solver
from events.cluster_event import ClusterEvent

ap = argparse.ArgumentParser()
ap.add_argument('--sched', required=True)          # e.g. FIFO+fair, SRTF+tune, FIFO+opt
ap.add_argument('--trace', required=True)
ap.add_argument('--static', action='store_true')
ap.add_argument('--config', default='configs/deployment.ini')
ap.add_argument('--seed', type=int, default=42)
ap.add_argument('--out', required=True)            # prefix for CSVs
ap.add_argument('--log', required=True)
# DEVIATION switch (off by default): replace GLPK_MI in opt's phase-1 MILP by another cvxpy solver
ap.add_argument('--phase1-solver', default=None)
args = ap.parse_args()

logging.basicConfig(filename=args.log, filemode='w',
                    format='%(module)s - %(funcName)s - %(levelname)s - %(message)s', level=logging.INFO)

rounds = {}      # (job_id, round_time) -> dict
finish = {}      # job_id -> finish time
t0 = time.time()

_orig_alloc = Job.allocate
def _alloc(self, gpus, time_=None, res_map=None, fair=True, simulate=True):
    before = self.job_executed_iteration
    _orig_alloc(self, gpus, time_, res_map, fair, simulate)
    rt = ClusterEvent.runner.get_time()
    servers = sorted({g.machine_id for g in self.gpus})
    eff = 1.0
    if len(servers) > 1:
        eff *= self.job_placement_penalty
    if not fair:
        eff *= self.synergy_speedup
    rounds[(self.job_id, rt)] = dict(gpus=len(self.gpus), cpus=self.cpus, mem=self.mem,
                                     servers='|'.join(map(str, servers)), speed=eff,
                                     iters=self.job_executed_iteration - self.last_round_progress)
Job.allocate = _alloc

_orig_round = Solver.allocate_round
def _round(self, job):
    before = job.job_executed_iteration
    _orig_round(self, job)
    rt = ClusterEvent.runner.get_time()
    g = job.job_gpu_demand
    cpu_idx = job.get_idx(job.cpu_val, job.cpu_demand / g)
    mem_idx = job.get_idx(job.mem_val, job.mem_demand / g)
    rounds[(job.job_id, rt)] = dict(gpus=g, cpus=float(job.cpu_demand), mem=float(job.mem_demand),
                                    servers='|'.join(str(s) for s in sorted(job.res_map.keys())),
                                    speed=float(job.tput[cpu_idx, mem_idx]),
                                    iters=job.job_executed_iteration - before)
Solver.allocate_round = _round

_orig_first = Solver.SolveFirstLP
def _first(self, jobs, ilp=False, solver=None):
    s = time.time()
    if args.phase1_solver:
        solver = args.phase1_solver
    _orig_first(self, jobs, ilp, solver)
    print("[driver] sim_t=%.0f phase1 jobs=%d took %.1fs (wall %.0fs) finished=%d" % (
        ClusterEvent.runner.get_time(), len(jobs), time.time() - s, time.time() - t0, len(finish)),
        file=sys.stderr, flush=True)
Solver.SolveFirstLP = _first

if args.phase1_solver:
    # with a non-GLPK MILP solver, snap boolean variables to exact 0/1 so that Synergy's exact-equality
    # table lookups (Job.get_idx) keep working; part of the same labelled deviation
    import cvxpy as cp
    _orig_solve = cp.Problem.solve
    def _solve(self, *a, **k):
        r = _orig_solve(self, *a, **k)
        for v in self.variables():
            if v.attributes.get('boolean') and v.value is not None:
                v.value = np.round(v.value)
        return r
    cp.Problem.solve = _solve

_orig_finish = R.Runner.finish_job
def _finish(self, job):
    finish[job.job_id] = self.time
    _orig_finish(self, job)
    print("[driver] finished job %d at sim %.0fs (wall %.0fs), %d done" % (
        job.job_id, self.time, time.time() - t0, len(finish)), file=sys.stderr, flush=True)
R.Runner.finish_job = _finish

# --- same as runner.benchmark() for one scheduler ---
scheduler = args.sched
placement = fair = tune = opt = False
if 'place' in scheduler: placement = True
if 'fair' in scheduler: fair = True
if 'tune' in scheduler: tune = True
if 'opt' in scheduler: opt = True
random.seed(args.seed)
runner = R.Runner(cluster_job_log=None, scheduler=scheduler.split('+')[0], jobs_per_hour=9.0,
                  model_class_split=(20, 70, 10), exponential=True, philly_arrival=False,
                  multigpu=False, small_trace=False, static=args.static, placement=placement,
                  prioritize=False, fair=fair, tune=tune, opt=opt, simulate=True, conn_list=None,
                  config_file=args.config, num_jobs_default=0, record_trace=False,
                  rec_trace_file='./record', trace=args.trace)
runner.run_simulation()
wall = time.time() - t0

jobs = {j.job_id: j for j in runner.finished_jobs}
with open(args.out + '_jobs.csv', 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['job_id', 'model', 'gpus', 'arrival_s', 'start_s', 'finish_s', 'jct_s', 'total_iters',
                'iter_time_fair_s', 'rounds_run', 'cpus_first_round', 'mem_gb_first_round',
                'cpus_mean', 'mem_gb_mean', 'speed_mean'])
    for jid in sorted(jobs):
        j = jobs[jid]
        rs = sorted((t, r) for (i, t), r in rounds.items() if i == jid)
        w.writerow([jid, j.job_model.model_name, j.job_gpu_demand, j.job_arrival_time,
                    rs[0][0] if rs else '', finish[jid], finish[jid] - j.job_arrival_time,
                    j.job_total_iteration, j.job_iteration_time, len(rs),
                    rs[0][1]['cpus'] if rs else '', rs[0][1]['mem'] if rs else '',
                    round(np.mean([r['cpus'] for _, r in rs]), 4) if rs else '',
                    round(np.mean([r['mem'] for _, r in rs]), 4) if rs else '',
                    round(np.mean([r['speed'] for _, r in rs]), 4) if rs else ''])
with open(args.out + '_rounds.csv', 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['job_id', 'round_start_s', 'gpus', 'cpus', 'mem_gb', 'servers', 'speed', 'iters'])
    for (jid, t), r in sorted(rounds.items()):
        w.writerow([jid, t, r['gpus'], r['cpus'], r['mem'], r['servers'], r['speed'], r['iters']])

jct = np.array([finish[j] - jobs[j].job_arrival_time for j in jobs]) / 3600
print("RESULT sched=%s trace=%s finished=%d/%d makespan_h=%.4f avg_jct_h=%.4f p99_jct_h=%.4f wall_s=%.1f" % (
    args.sched, os.path.basename(args.trace), len(jobs), len(runner.workload.jobs),
    max(finish.values()) / 3600 if finish else float('nan'), jct.mean(), np.percentile(jct, 99), wall), flush=True)
