"""The native half of gangway (Rust, PyO3); use the functions of :mod:`gangway`."""

from typing import Any, Callable, Optional, Union

DEFAULT_POLICIES: str

class GangwayError(Exception): ...

class BadInput(GangwayError):
    source: Optional[str]
    line: Optional[int]
    field: Optional[str]
    record: Optional[int]

class BadPolicy(GangwayError): ...
class SolverError(GangwayError): ...
class PolicyFailed(GangwayError): ...

class JobView:
    """An active job, as a policy written in Python sees it."""

    @property
    def id(self) -> int: ...
    @property
    def arrival(self) -> float: ...
    @property
    def gpus(self) -> int: ...
    @property
    def job_type(self) -> int: ...
    @property
    def weight(self) -> float: ...
    @property
    def rates(self) -> list[float]: ...
    @property
    def steps_done(self) -> float: ...
    @property
    def remaining_steps(self) -> float: ...
    @property
    def attained_gpu_seconds(self) -> float: ...
    @property
    def attained_seconds(self) -> float: ...
    @property
    def running_on(self) -> Optional[int]: ...
    @property
    def running_gpus(self) -> int: ...
    @property
    def queued_since(self) -> float: ...
    @property
    def preemptions(self) -> int: ...

class Round:
    """What a policy written in Python is shown every round."""

    @property
    def now(self) -> float: ...
    @property
    def round_length(self) -> float: ...
    @property
    def gpu_types(self) -> list[str]: ...
    @property
    def capacity(self) -> list[int]: ...
    @property
    def type_order(self) -> list[int]: ...
    @property
    def jobs_changed(self) -> bool: ...
    @property
    def jobs(self) -> list[JobView]: ...
    @property
    def paused(self) -> list[int]: ...

class Grant:
    """``job`` runs on ``gpus`` GPUs of ``gpu_type`` (an index into ``Round.gpu_types``, or a
    name) next round."""

    def __init__(self, job: int, gpu_type: Union[int, str], gpus: int) -> None: ...
    @property
    def job(self) -> int: ...
    @property
    def gpu_type(self) -> Union[int, str]: ...
    @property
    def gpus(self) -> int: ...

def policies() -> list[tuple[str, str]]: ...
def register_policy(name: str, factory: Callable[[], Any], summary: Optional[str] = None) -> None: ...

class Daemon:
    """A control plane running in this process (:func:`gangway.serve`)."""

    @property
    def address(self) -> str: ...
    @property
    def token_file(self) -> Optional[str]: ...
    def stop(self) -> None: ...
    def __enter__(self) -> "Daemon": ...
    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool: ...

def serve(
    *,
    policy: str,
    cluster: str,
    listen: str,
    journal: str,
    round: float = ...,
    time_scale: float = ...,
) -> Daemon: ...
def simulate(
    *,
    trace_kind: str,
    trace: Optional[str],
    trace_source: Optional[str],
    policies: list[str],
    cluster: Optional[str] = ...,
    cluster_file: Optional[str] = ...,
    topology: Optional[str] = ...,
    gpus_per_node: int = ...,
    rate: Optional[float] = ...,
    round: Optional[float] = ...,
    window: Optional[str] = ...,
    profiles: Optional[str] = ...,
    throughputs: Optional[str] = ...,
    trace_format: Optional[str] = ...,
    load_factor: float = ...,
    seed: int = ...,
    placement: Optional[str] = ...,
    preempt_cost: float = ...,
    restore_cost: float = ...,
    migrate_cost: float = ...,
    even_gangs: bool = ...,
    gittins_distribution: Optional[str] = ...,
    schedule_on_arrival: bool = ...,
    schedule_on_completion: bool = ...,
    fairness: bool = ...,
) -> str: ...
