"""The native half of gangway (Rust, PyO3); use the functions of :mod:`gangway`."""

from typing import Optional

DEFAULT_POLICIES: str

class GangwayError(Exception): ...

class BadInput(GangwayError):
    source: Optional[str]
    line: Optional[int]
    field: Optional[str]
    record: Optional[int]

class BadPolicy(GangwayError): ...
class SolverError(GangwayError): ...

def policies() -> list[tuple[str, str]]: ...
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
