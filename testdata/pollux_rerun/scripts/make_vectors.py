# Golden vectors from Pollux's simulator code (adaptdl osdi21-artifact @ c793c70), for tests.
import json, sys, math
import numpy as np
sys.path.insert(0, "/work/peers/adaptdl/simulator")
from applications import APPLICATIONS
from goodput import GoodputFunction, fit_perf_params
from speedup import SpeedupFunction

out = {"source": "petuum/adaptdl osdi21-artifact @ c793c70, simulator/ (applications.py, goodput.py, speedup.py)", "apps": {}}
# placements to probe the true (trace-interpolated) throughput
probe_placements = [(1,), (2,), (4,), (1, 1), (2, 2), (4, 4), (4, 2), (2, 4), (1, 3), (3, 1), (4, 4, 4, 4), (4,)*5, (4,)*8, (4,)*16, (1,)*6, (2,)*5, (3,)*7]
for name, app in APPLICATIONS.items():
    rec = {"init_batch_size": int(app.init_batch_size), "max_batch_size": int(app.max_batch_size),
           "min_local_bsz": int(app.min_local_bsz), "max_local_bsz": int(app.max_local_bsz),
           "max_epochs": int(app.max_epochs),
           "progress_at_epoch": [float(app.get_progress(e)) for e in range(app.max_epochs + 1)]}
    # true throughput
    tp = []
    bszs = sorted(set([int(app.min_local_bsz), int(app.max_local_bsz), int((app.min_local_bsz + app.max_local_bsz) // 2)]))
    for pl in probe_placements:
        for b in bszs:
            try:
                st, sy = app.get_throughput(pl, b)
                tp.append({"placement": list(pl), "local_bsz": b, "step_time": float(st), "sync_time": float(sy)})
            except Exception as e:
                tp.append({"placement": list(pl), "local_bsz": b, "error": type(e).__name__ + ": " + str(e)[:80]})
    rec["true_throughput"] = tp
    # grad stats interpolation
    gs = []
    vb = list(app.validation)
    for b in sorted(set(vb + [int((vb[0] + vb[1]) // 2), int((vb[-2] + vb[-1]) // 2)])):
        for e in [0, app.max_epochs // 2, app.max_epochs - 1]:
            s, v = app.get_grad_stats(b, e)
            gs.append({"batch_size": b, "epoch": e, "grad_sqr": float(s), "grad_var": float(v)})
    rec["grad_stats"] = gs
    # online fits: observations accumulated like Job.update_params does
    seq = [(1, (1,), int(app.init_batch_size if app.init_batch_size <= app.max_local_bsz else app.max_local_bsz))]
    lb = int(app.max_local_bsz)
    seq += [(2, (2,), lb), (4, (4,), lb), (8, (4, 4), lb), (16, (4, 4, 4, 4), int(app.min_local_bsz))]
    prof = {}
    fits = []
    g_sqr, g_var = app.get_grad_stats(int(app.init_batch_size), 0)
    for (_, pl, b) in seq:
        pid = int("".join(map(str, pl)))
        rows = app.placements[app.placements.placement == pid]
        if len(rows):
            b = int(min(b, rows.local_bsz.max()))
        st, sy = app.get_throughput(pl, b)
        prof[(len(pl), sum(pl), b)] = (float(st), float(sy))
        nn = np.array([k[0] for k in prof]); nr = np.array([k[1] for k in prof]); lbz = np.array([k[2] for k in prof])
        stt = np.array([v[0] for v in prof.values()]); syt = np.array([v[1] for v in prof.values()])
        params = fit_perf_params(nn, nr, lbz, stt - syt, stt)
        gf = GoodputFunction(params, (g_sqr, g_var), app.init_batch_size)
        opt = []
        for (n, r) in [(1, 1), (1, 2), (1, 4), (2, 8), (4, 16), (8, 32)]:
            if r * app.min_local_bsz > app.max_batch_size:
                continue
            g, a, acc = gf.optimize(n, r, app.max_batch_size, (app.min_local_bsz, app.max_local_bsz), accumulation=True)
            thr = gf.throughput(n, r, a, acc)
            eff = gf.efficiency(r * a * (acc + 1))
            opt.append({"num_nodes": n, "num_replicas": r, "goodput": float(g), "atomic_bsz": int(a), "accum_steps": int(acc),
                        "throughput": float(thr), "efficiency": float(eff)})
        sp = SpeedupFunction(gf, app.max_batch_size, (app.min_local_bsz, app.max_local_bsz), accumulation=True)
        fits.append({"observations": [{"num_nodes": k[0], "num_replicas": k[1], "local_bsz": k[2], "step_time": v[0], "sync_time": v[1]} for k, v in prof.items()],
                     "perf_params": dict(zip(["alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma"], map(float, params))),
                     "grad_params": {"sqr": float(g_sqr), "var": float(g_var)},
                     "optimize": opt,
                     "speedup_vs_1x1": {f"{n}x{r}": float(sp(n, r)) for (n, r) in [(1, 1), (1, 2), (1, 4), (2, 8), (4, 16)] if r * app.min_local_bsz <= app.max_batch_size}})
    rec["online_fits"] = fits
    out["apps"][name] = rec
json.dump(out, open(sys.argv[1], "w"), indent=1)
print("ok")
