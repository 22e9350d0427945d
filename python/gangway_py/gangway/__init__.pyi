"""Type stubs of gangway's Python package (the docstrings are in gangway/__init__.py)."""

import os
from typing import Any, Callable, Iterator, Mapping, Optional, Protocol, Sequence, Union

import pandas  # type: ignore[import-untyped,import-not-found,unused-ignore]

from gangway._native import BadInput as BadInput
from gangway._native import BadPolicy as BadPolicy
from gangway._native import Daemon as Daemon
from gangway._native import GangwayError as GangwayError
from gangway._native import Grant as Grant
from gangway._native import JobView as JobView
from gangway._native import PolicyFailed as PolicyFailed
from gangway._native import Round as Round
from gangway._native import SolverError as SolverError

from gangway.client import Client as Client
from gangway.client import DaemonError as DaemonError
from gangway.client import Refused as Refused
from gangway.client import Unreachable as Unreachable

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

DEFAULT_POLICIES: str

Trace = Union[str, os.PathLike[str], Sequence[Mapping[str, Any]], pandas.DataFrame]

class Summary:
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
    def as_dict(self) -> dict[str, Any]: ...

class JobRecord:
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
    def jct(self) -> Optional[float]: ...
    @property
    def queueing_delay(self) -> Optional[float]: ...

class PolicyResult:
    policy: str
    summary: Summary
    jobs: list[JobRecord]
    gpu_types: list[str]
    unfinished: list[int]
    unschedulable: list[int]
    rounds: int
    def to_pandas(self) -> pandas.DataFrame: ...

class Results:
    runs: list[PolicyResult]
    notes: list[str]
    def __getitem__(self, policy: str) -> PolicyResult: ...
    def __iter__(self) -> Iterator[PolicyResult]: ...
    def __len__(self) -> int: ...
    def summaries(self) -> list[Summary]: ...
    def to_pandas(self) -> pandas.DataFrame: ...
    def jobs_to_pandas(self) -> pandas.DataFrame: ...

class Policy(Protocol):
    def allocate(self, round: Round) -> Sequence[Grant]: ...

def register_policy(
    name: str, factory: Callable[[], Policy], summary: Optional[str] = None
) -> None: ...
def builtin_policies() -> list[tuple[str, str]]: ...
def serve(
    *,
    policy: str,
    cluster: str,
    listen: str = "127.0.0.1:7878",
    journal: Union[str, os.PathLike[str]] = ".gangway/journal",
    round: float = 60.0,
    time_scale: float = 1.0,
) -> Daemon: ...
def simulate(
    trace: Optional[Trace] = None,
    *,
    cluster: Union[None, str, Mapping[str, Union[int, str]]] = None,
    policies: Union[None, str, Sequence[str]] = None,
    rate: Optional[float] = None,
    round: Optional[float] = None,
    window: Union[None, str, range, tuple[int, int]] = None,
    profiles: Union[None, str, os.PathLike[str]] = None,
    throughputs: Union[None, str, os.PathLike[str]] = None,
    seed: int = 0,
    trace_format: Optional[str] = None,
    load_factor: float = 1.0,
    gpus_per_node: int = 1,
    cluster_file: Union[None, str, os.PathLike[str]] = None,
    topology: Union[None, str, os.PathLike[str]] = None,
    placement: str = "packing",
    preempt_cost: float = 0.0,
    restore_cost: float = 0.0,
    migrate_cost: float = 0.0,
    even_gangs: bool = False,
    gittins_distribution: Union[None, str, os.PathLike[str]] = None,
    schedule_on_arrival: bool = False,
    schedule_on_completion: bool = False,
    fairness: bool = True,
) -> Results: ...
