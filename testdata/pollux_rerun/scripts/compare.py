import csv, glob, os, re, sys
import numpy as np
d = sys.argv[1]
exp = {}
# expected aggregates: /work/shared/data/pollux/expected/jct_by_workload.csv (Pollux authors' results)
for r in csv.DictReader(open(sys.argv[2] if len(sys.argv) > 2 else '/work/shared/data/pollux/expected/jct_by_workload.csv')):
    exp[(r['policy'], r['load'], r['workload'])] = r
perjob = {}
for r in csv.DictReader(open(os.path.join(d, 'expected_jct_by_job.csv'))):
    for p in ('pollux', 'optimus', 'tiresias'):
        perjob[(p, r['load'], r['workload'], r['name'])] = float(r[p + '_jct_s'])
rows = []
for f in sorted(glob.glob(os.path.join(d, '*_workload-?.csv'))):
    m = re.match(r'(\w+)_load([\d.]+)_(workload-\d)\.csv', os.path.basename(f))
    p, l, w = m.groups()
    rr = list(csv.DictReader(open(f)))
    j = [float(r['jct_s']) for r in rr if r['jct_s']]
    same = sum(1 for r in rr if r['jct_s'] and float(r['jct_s']) == perjob.get((p, l, w, r['name'])))
    e = exp[(p, l, w)]
    avg = np.mean(j); p99 = np.percentile(j, 99, interpolation='lower')
    rows.append((p, l, w, len(j), avg, float(e['avg_jct_s']), p99, float(e['p99_jct_s']), same))
print('| policy | load | workload | jobs | avg JCT re-run (s) | avg expected (s) | diff | p99 re-run (s) | p99 expected (s) | diff | jobs with identical JCT |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for p, l, w, n, a, ea, q, eq, same in rows:
    print(f'| {p} | {l} | {w} | {n} | {a:.2f} | {ea:.1f} | {100*(a-ea)/ea:+.2f}% | {q:.0f} | {eq:.0f} | {100*(q-eq)/eq:+.2f}% | {same}/{n} |')
