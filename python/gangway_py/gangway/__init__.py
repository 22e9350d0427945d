"""gangway from Python: replay a trace of deep-learning training jobs under scheduling policies.

The simulator is gangway's own (Rust), assembled exactly as ``gangway simulate`` assembles it, so
that every number is the one the command prints for the same input. It runs with the GIL released,
one thread per policy.

>>> import gangway
>>> results = gangway.simulate("synthetic:jobs=50,seed=1,rate=4",
...                            cluster="v100=4,k80=4", policies=["fifo", "tiresias"])
>>> [run.policy for run in results]
['fifo', 'tiresias']
>>> results["fifo"].summary.measured_jobs
50

Errors are :class:`GangwayError`\\ s: :class:`BadInput` (a trace, cluster, file or option),
:class:`BadPolicy` (a policy spec), :class:`SolverError` (the LP solver) and :class:`PolicyFailed`
(a policy written in Python raised an exception); a running daemon's refusals are
:class:`Refused` (its status and message), a daemon out of reach :class:`Unreachable`.

:class:`Client` speaks to a running ``gangway serve`` (submit, jobs, cancel, cordon, nodes, queue,
events), reading its token where the ``gangway`` command does.

A policy can be written in Python (:func:`register_policy`): it runs in the same engine, beside the
built-in ones.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Protocol, Sequence, Union

from gangway._native import (
    DEFAULT_POLICIES,
    BadInput,
    BadPolicy,
    Daemon,
    GangwayError,
    Grant,
    JobView,
    PolicyFailed,
    Round,
    SolverError,
)
from gangway._native import policies as _policies
from gangway._native import register_policy as _register_policy
from gangway._native import serve as _serve
from gangway._native import simulate as _simulate

from gangway.client import Client, DaemonError, Refused, Unreachable

if TYPE_CHECKING:  # pragma: no cover
    import pandas

# Where in a row an input error is, when it is in one (set on the instance by the native module;
# `record` by simulate() for rows given as dicts or a DataFrame); None otherwise.
BadInput.source = None
BadInput.line = None
BadInput.field = None
BadInput.record = None

__all__ = [
    "DEFAULT_POLICIES",
    "BadInput",
    "BadPolicy",
    "Client",
    "Daemon",
    "DaemonError",
    "GangwayError",
    "Grant",
    "JobRecord",
    "JobView",
    "Policy",
    "PolicyFailed",
    "PolicyResult",
    "Refused",
    "Results",
    "Round",
    "SolverError",
    "Summary",
    "Unreachable",
    "builtin_policies",
    "register_policy",
    "serve",
    "simulate",
]

#: What a trace may be: a path (or ``synthetic:jobs=N,seed=S[,rate=R]``), rows as dicts, or a
#: pandas DataFrame.
Trace = Union[str, "os.PathLike[str]", Sequence[Mapping[str, Any]], "pandas.DataFrame"]


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("to_pandas() needs pandas: pip install pandas") from e
    return pandas


@dataclass(frozen=True)
class Summary:
    """One policy's figures over the measured jobs, as ``gangway simulate --format json`` prints
    them. Times are in hours; ``*_ftf`` (finish-time fairness, rho) are None when not measured.

    >>> s = gangway.simulate("synthetic:jobs=20,seed=1", cluster="v100=4",
    ...                      policies=["fifo"])["fifo"].summary  # doctest: +SKIP
    >>> s.avg_jct_h > 0  # doctest: +SKIP
    True
    """

    policy: str
    jobs: int
    measured_jobs: int
    unfinished_jobs: int
    avg_jct_h: float
    p50_jct_h: float
    p95_jct_h: float
    p99_jct_h: float
    makespan_h: float
    avg_queue_h: float
    avg_ftf: Optional[float]
    max_ftf: Optional[float]
    ftf_over_1: Optional[float]
    jain_ftf: Optional[float]
    utilization: float
    idle_cpus: float
    idle_memory: float
    gpu_hours: float
    preemptions: int
    migrations: int
    wall_s: float

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> Summary:
        optional = {"avg_ftf", "max_ftf", "ftf_over_1", "jain_ftf"}
        values = {}
        for f in fields(cls):
            v = d.get(f.name)
            # JSON has no NaN: a figure over no jobs is NaN in Rust and null in JSON.
            if v is None and f.name not in optional:
                v = math.nan
            values[f.name] = v
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The figures by name, as the JSON output has them."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class JobRecord:
    """What the simulator recorded of one job. Times are seconds since the trace's start;
    ``gpu_seconds`` are by GPU type, in the order of :attr:`PolicyResult.gpu_types`."""

    id: int
    job_type: str
    gpus: int
    arrival: float
    first_start: Optional[float]
    finish: Optional[float]
    gpu_seconds: tuple[float, ...]
    preemptions: int
    migrations: int

    @property
    def jct(self) -> Optional[float]:
        """Seconds from arrival to finish; None while unfinished."""
        return None if self.finish is None else self.finish - self.arrival

    @property
    def queueing_delay(self) -> Optional[float]:
        """Seconds from arrival to first start; None if it never ran."""
        return None if self.first_start is None else self.first_start - self.arrival

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> JobRecord:
        return cls(
            id=d["id"],
            job_type=d["job_type"],
            gpus=d["gpus"],
            arrival=d["arrival"],
            first_start=d["first_start"],
            finish=d["finish"],
            gpu_seconds=tuple(d["gpu_seconds"]),
            preemptions=d["preemptions"],
            migrations=d["migrations"],
        )


@dataclass(frozen=True)
class PolicyResult:
    """One policy's run: its summary and every job's record.

    ``unfinished`` lists the jobs the policy left unfinished (it stalled) and ``unschedulable``
    those that could never run on the cluster; the command line fails on either, this keeps them.
    """

    policy: str
    summary: Summary
    jobs: list[JobRecord]
    gpu_types: list[str]
    unfinished: list[int]
    unschedulable: list[int]
    rounds: int

    def to_pandas(self) -> pandas.DataFrame:
        """Every job's record as a DataFrame, one row per job, with ``jct`` and
        ``queueing_delay`` and a ``gpu_seconds_TYPE`` column per GPU type (needs pandas).

        >>> df = results["fifo"].to_pandas()  # doctest: +SKIP
        >>> df["jct"].mean() / 3600  # doctest: +SKIP
        """
        pd = _pandas()
        rows = []
        for job in self.jobs:
            row: dict[str, Any] = {
                "id": job.id,
                "job_type": job.job_type,
                "gpus": job.gpus,
                "arrival": job.arrival,
                "first_start": job.first_start,
                "finish": job.finish,
                "jct": job.jct,
                "queueing_delay": job.queueing_delay,
                "preemptions": job.preemptions,
                "migrations": job.migrations,
            }
            for t, s in zip(self.gpu_types, job.gpu_seconds):
                row[f"gpu_seconds_{t}"] = s
            rows.append(row)
        return pd.DataFrame(rows)

    @classmethod
    def _from(cls, d: Mapping[str, Any]) -> PolicyResult:
        return cls(
            policy=d["policy"],
            summary=Summary._from(d["summary"]),
            jobs=[JobRecord._from(j) for j in d["jobs"]],
            gpu_types=list(d["gpu_types"]),
            unfinished=list(d["unfinished"]),
            unschedulable=list(d["unschedulable"]),
            rounds=d["rounds"],
        )


@dataclass(frozen=True)
class Results:
    """Every policy's run, in the order the policies were named; index it by policy spec.

    ``notes`` holds what the command line says on stderr: the setup a workload was made for, the
    trace replayed.

    >>> results = gangway.simulate(policies="fifo,las")  # doctest: +SKIP
    >>> results["las"].summary.avg_jct_h  # doctest: +SKIP
    >>> results.to_pandas()  # doctest: +SKIP
    """

    runs: list[PolicyResult]
    notes: list[str]

    def __getitem__(self, policy: str) -> PolicyResult:
        for run in self.runs:
            if run.policy == policy:
                return run
        raise KeyError(policy)

    def __iter__(self) -> Iterator[PolicyResult]:
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def summaries(self) -> list[Summary]:
        """Every run's summary, in order."""
        return [run.summary for run in self.runs]

    def to_pandas(self) -> pandas.DataFrame:
        """The summaries as a DataFrame, one row per policy (needs pandas)."""
        return _pandas().DataFrame([s.as_dict() for s in self.summaries()])

    def jobs_to_pandas(self) -> pandas.DataFrame:
        """Every run's job records in one DataFrame, with a ``policy`` column (needs pandas)."""
        pd = _pandas()
        frames = []
        for run in self.runs:
            df = run.to_pandas()
            df.insert(0, "policy", run.policy)
            frames.append(df)
        return pd.concat(frames, ignore_index=True)


class Policy(Protocol):
    """What a policy written in Python is: an object whose ``allocate`` is called once per round
    with a :class:`Round` (the time, the GPUs in service per type, every active job as a
    :class:`JobView`) and answers with :class:`Grant`\\ s in priority order.

    What the engine does with them is what it does with a built-in policy's: a running job whose
    grant names the GPU type and count it holds keeps its GPUs; a running job without a grant is
    preempted; new grants are placed in order, and one that does not fit leaves its job waiting.

    An optional attribute (or method) ``changes_with_time``, False, says that only arrivals and
    completions can change its answer, so that the rounds in between are skipped.
    """

    def allocate(self, round: Round) -> Sequence[Grant]: ...


def register_policy(
    name: str, factory: Callable[[], Policy], summary: Optional[str] = None
) -> None:
    """Registers a policy written in Python under ``name``: each run calls ``factory()`` (a class
    or any callable) for a fresh policy object. From then on ``name`` is a policy spec like the
    built-in ones, in :func:`simulate` beside them. A name already taken raises :class:`BadPolicy`.

    An exception raised by the policy stops its run: :func:`simulate` raises
    :class:`PolicyFailed`, whose message holds the Python traceback and whose ``__cause__`` is
    the exception.

    >>> class Fifo:
    ...     changes_with_time = False
    ...     def allocate(self, round):
    ...         free, grants = list(round.capacity), []
    ...         for job in round.jobs:              # running jobs keep their GPUs
    ...             if job.running_on is not None:
    ...                 free[job.running_on] -= job.running_gpus
    ...                 grants.append(Grant(job.id, job.running_on, job.running_gpus))
    ...         for job in round.jobs:              # then the queue, in arrival order
    ...             if job.running_on is None:
    ...                 fits = [t for t, f in enumerate(free) if f >= job.gpus and job.rates[t] > 0]
    ...                 if not fits:
    ...                     break                   # the head of the queue blocks
    ...                 free[fits[0]] -= job.gpus
    ...                 grants.append(Grant(job.id, fits[0], job.gpus))
    ...         return grants
    >>> gangway.register_policy("doc_fifo", Fifo, "FIFO, in Python")
    >>> r = gangway.simulate("synthetic:jobs=40,seed=1,rate=4", cluster="v100=4,k80=4",
    ...                      policies=["doc_fifo", "fifo"])
    >>> r["doc_fifo"].summary.avg_jct_h == r["fifo"].summary.avg_jct_h
    True
    """
    _register_policy(name, factory, summary)


def serve(
    *,
    policy: str,
    cluster: str,
    listen: str = "127.0.0.1:7878",
    journal: Union[str, "os.PathLike[str]"] = ".gangway/journal",
    round: float = 60.0,
    time_scale: float = 1.0,
) -> Daemon:
    """Starts the control plane in this process, as ``gangway serve --cluster CLUSTER`` does, on
    simulated workers, and returns it running: a policy registered from Python (or any built-in
    one) schedules its jobs, which :class:`Client` submits through its API at ``listen``.

    An exception in a Python policy fails that round only: running jobs keep their GPUs, the
    daemon goes on serving, the next round asks again, and the failure, with the traceback, is in
    ``Client.stats()["last_round_failure"]`` (and ``/metrics``). ``time_scale`` runs its time that
    many times faster than the wall clock.

    >>> with gangway.serve(policy="fifo", cluster="v100=4", listen="127.0.0.1:7979",
    ...                    journal="/tmp/gw-journal", time_scale=60) as daemon:  # doctest: +SKIP
    ...     client = gangway.Client(daemon.address, token_file=daemon.token_file)
    ...     job = client.submit(gpus=2, work=600)
    """
    return _serve(
        policy=policy,
        cluster=cluster,
        listen=listen,
        journal=os.fspath(journal),
        round=round,
        time_scale=time_scale,
    )


def builtin_policies() -> list[tuple[str, str]]:
    """The policies' names with their one-line summaries: the built-in ones, then those
    registered from Python.

    >>> "tiresias" in dict(gangway.builtin_policies())
    True
    """
    return _policies()


def _csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    columns: dict[str, None] = {}
    for row in rows:
        for key in row:
            columns.setdefault(str(key), None)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        # str(float) is the shortest text that reads back as the same float.
        writer.writerow({str(k): ("" if v is None else v) for k, v in row.items()})
    return out.getvalue()


def _trace_args(trace: Optional[Trace]) -> tuple[str, Optional[str], Optional[str]]:
    """(kind, value, source) for the native call."""
    if trace is None:
        return "bundled", None, None
    if isinstance(trace, (str, os.PathLike)):
        return "spec", os.fspath(trace), None
    if hasattr(trace, "to_csv") and hasattr(trace, "columns"):
        text = trace.to_csv(index=False, lineterminator="\n")
        return "text", text, "DataFrame"
    if isinstance(trace, Sequence) and all(isinstance(r, Mapping) for r in trace):
        if not trace:
            raise BadInput("trace: no rows")
        return "text", _csv_text(trace), "records"
    raise BadInput(
        "trace: give a path, `synthetic:...`, a list of dicts or a pandas DataFrame, "
        f"not {type(trace).__name__}"
    )


def _cluster_spec(cluster: Union[None, str, Mapping[str, Union[int, str]]]) -> Optional[str]:
    if cluster is None or isinstance(cluster, str):
        return cluster
    return ",".join(f"{gpu_type}={count}" for gpu_type, count in cluster.items())


def _window_spec(window: Union[None, str, range, tuple[int, int]]) -> Optional[str]:
    if window is None or isinstance(window, str):
        return window
    if isinstance(window, range):
        if window.step != 1:
            raise BadInput(f"window: {window} has a step; give START..END")
        return f"{window.start}..{window.stop}"
    start, end = window
    return f"{start}..{end}"


def _path(p: Union[None, str, "os.PathLike[str]"]) -> Optional[str]:
    return None if p is None else os.fspath(p)


def simulate(
    trace: Optional[Trace] = None,
    *,
    cluster: Union[None, str, Mapping[str, Union[int, str]]] = None,
    policies: Union[None, str, Sequence[str]] = None,
    rate: Optional[float] = None,
    round: Optional[float] = None,
    window: Union[None, str, range, tuple[int, int]] = None,
    profiles: Union[None, str, "os.PathLike[str]"] = None,
    throughputs: Union[None, str, "os.PathLike[str]"] = None,
    seed: int = 0,
    trace_format: Optional[str] = None,
    load_factor: float = 1.0,
    gpus_per_node: int = 1,
    cluster_file: Union[None, str, "os.PathLike[str]"] = None,
    topology: Union[None, str, "os.PathLike[str]"] = None,
    placement: str = "packing",
    preempt_cost: float = 0.0,
    restore_cost: float = 0.0,
    migrate_cost: float = 0.0,
    even_gangs: bool = False,
    gittins_distribution: Union[None, str, "os.PathLike[str]"] = None,
    schedule_on_arrival: bool = False,
    schedule_on_completion: bool = False,
    fairness: bool = True,
) -> Results:
    """Replays ``trace`` on ``cluster`` under each of ``policies`` and returns their results.

    The arguments are ``gangway simulate``'s options, with the same defaults and the same checks:

    - ``trace``: None for the bundled Gavel trace (6,000 jobs, replayed at 2 jobs/hour and measured
      over jobs 4000..5000 unless ``rate`` and ``window`` say otherwise); a path; a
      ``synthetic:jobs=N,seed=S[,rate=R][,multi=true]`` spec; a list of dicts or a pandas DataFrame
      whose keys or columns are one of the trace formats' headers (Gavel's, Philly's, Tiresias',
      Pollux's). Errors in rows name the source ``records`` or ``DataFrame`` and the line as in a
      CSV file (the header is line 1, so row ``i`` is line ``i + 2``; the exception's ``record``
      is ``i``).
    - ``cluster``: a spec (``"v100=8,k80=2x4"``) or a mapping (``{"v100": 8, "k80": "2x4"}``);
      default: the workload's own (Pollux's, Sia's), else Gavel's 36 V100 + 36 P100 + 36 K80.
    - ``policies``: specs with knobs (``"themis:f=0.5"``, ``"fifo+opt"``), as a list or one
      comma-separated string; default :data:`DEFAULT_POLICIES`.
    - ``rate`` (jobs/hour), ``round`` (seconds), ``window`` (``"A..B"``, ``range(A, B)`` or
      ``(A, B)``: job ids measured), ``profiles`` (Pollux's, Sia's or Synergy's),
      ``throughputs`` (a Gavel-format table), ``seed``, and the rest as the command line has them.

    The policies run side by side, one thread each, with the GIL released.

    >>> results = gangway.simulate("synthetic:jobs=30,seed=2,rate=6", cluster={"v100": 4},
    ...                            policies="fifo,las", round=60)
    >>> results["las"].summary.measured_jobs
    30
    >>> len(results["las"].jobs)
    30

    Raises :class:`BadInput`, :class:`BadPolicy` or :class:`SolverError` before anything runs.
    """
    kind, value, source = _trace_args(trace)
    if policies is None:
        specs = DEFAULT_POLICIES.split(",")
    elif isinstance(policies, str):
        specs = [p.strip() for p in policies.split(",")]
    else:
        specs = list(policies)
    try:
        answer = _simulate(
            trace_kind=kind,
            trace=value,
            trace_source=source,
            policies=specs,
            cluster=_cluster_spec(cluster),
            cluster_file=_path(cluster_file),
            topology=_path(topology),
            gpus_per_node=gpus_per_node,
            rate=rate,
            round=round,
            window=_window_spec(window),
            profiles=_path(profiles),
            throughputs=_path(throughputs),
            trace_format=trace_format,
            load_factor=load_factor,
            seed=seed,
            placement=placement,
            preempt_cost=preempt_cost,
            restore_cost=restore_cost,
            migrate_cost=migrate_cost,
            even_gangs=even_gangs,
            gittins_distribution=_path(gittins_distribution),
            schedule_on_arrival=schedule_on_arrival,
            schedule_on_completion=schedule_on_completion,
            fairness=fairness,
        )
    except BadInput as e:
        # Rows given in code: say which row, counted from 0, beside the CSV line.
        line = getattr(e, "line", None)
        if source is not None and getattr(e, "source", None) == source and line is not None:
            e.record = line - 2
        raise
    data = json.loads(answer)
    return Results(
        runs=[PolicyResult._from(run) for run in data["runs"]],
        notes=list(data["notes"]),
    )
