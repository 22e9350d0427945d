"""A client of a running ``gangway serve``: its HTTP API as typed methods.

The daemon is ``HOST:PORT`` (TCP) or ``unix:PATH`` (a Unix socket), as for the ``gangway`` command;
without one, ``$GANGWAY_DAEMON``, else ``127.0.0.1:7878``. Over TCP every request carries the
daemon's bearer token, read afresh for each request (a restarted daemon writes a new one) from, in
order: the ``token`` given, ``$GANGWAY_TOKEN``, the ``token_file`` given, ``$GANGWAY_TOKEN_FILE``, or
``.gangway/journal/api-token`` in this directory or the nearest parent that has one. A Unix socket
needs no token.

>>> from gangway.client import Client
>>> daemon = Client("127.0.0.1:7878")              # doctest: +SKIP
>>> job = daemon.submit(gpus=2, work=3600, tenant="alice")   # doctest: +SKIP
>>> daemon.job(job).phase                           # doctest: +SKIP
'running'

A request the daemon refuses raises :class:`Refused` with its status and the daemon's message, which
names the field at fault (``gpus: ...``); a daemon that cannot be reached raises :class:`Unreachable`.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from gangway._native import GangwayError

__all__ = [
    "Client",
    "DaemonError",
    "Event",
    "Job",
    "Node",
    "Refused",
    "Unreachable",
]

DEFAULT_DAEMON = "127.0.0.1:7878"
DEFAULT_TOKEN_FILE = ".gangway/journal/api-token"


class DaemonError(GangwayError):
    """Something went wrong talking to the daemon (a :class:`gangway.GangwayError`)."""


class Unreachable(DaemonError):
    """The daemon could not be reached (not running, wrong address, connection lost)."""


class Refused(DaemonError):
    """The daemon answered with an error: ``status`` and its ``message`` (which names the field)."""

    def __init__(self, status: int, message: str, path: str) -> None:
        super().__init__(f"the daemon refused {path} ({status}): {message}")
        self.status = status
        self.message = message
        self.path = path


@dataclass(frozen=True)
class Job:
    """A job as the daemon shows it (``GET /jobs/ID``); ``raw`` holds every field it sent."""

    id: int
    phase: str
    tenant: str
    job_type: str
    gpus: int
    placement: List[int]
    progress: float
    submitted: float
    started: Optional[float]
    finished: Optional[float]
    waiting: Optional[str]
    raw: Dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "Job":
        return cls(
            id=int(raw["id"]),
            phase=str(raw["phase"]),
            tenant=str(raw["tenant"]),
            job_type=str(raw["job_type"]),
            gpus=int(raw["gpus"]),
            placement=[int(g) for g in raw.get("placement", [])],
            progress=float(raw.get("progress", 0.0)),
            submitted=float(raw["submitted"]),
            started=raw.get("started"),
            finished=raw.get("finished"),
            waiting=raw.get("waiting"),
            raw=dict(raw),
        )


@dataclass(frozen=True)
class Node:
    """A server (``GET /nodes``): its GPUs, those out of service and why, the jobs on it, and the GPUs
    whose health is no longer checked (their probe failed) and why."""

    name: str
    gpu_type: str
    gpus: List[int]
    free: int
    out_of_service: Dict[int, str]
    jobs: List[int]
    unwatched: Dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> "Node":
        return cls(
            name=str(raw["name"]),
            gpu_type=str(raw["gpu_type"]),
            gpus=[int(g) for g in raw["gpus"]],
            free=int(raw["free"]),
            out_of_service={int(g): str(why) for g, why in raw.get("out_of_service", [])},
            jobs=[int(j) for j in raw.get("jobs", [])],
            unwatched={int(g): str(why) for g, why in raw.get("unwatched", [])},
        )


@dataclass(frozen=True)
class Event:
    """A job's move (``GET /events``): from one phase to another, at control-plane second ``at``."""

    job: int
    from_phase: str
    to_phase: str
    at: float


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


_NEXT = re.compile(r'<([^>]+)>;\s*rel="next"')


class Client:
    """The API of one daemon. Each method is one request (``jobs`` follows the pages)."""

    def __init__(
        self,
        address: Optional[str] = None,
        *,
        token: Optional[str] = None,
        token_file: Union[str, "os.PathLike[str]", None] = None,
        timeout: float = 30.0,
    ) -> None:
        self.address = address or os.environ.get("GANGWAY_DAEMON") or DEFAULT_DAEMON
        if self.address.startswith("unix:"):
            self._unix: Optional[str] = self.address[len("unix:") :]
            if not self._unix:
                raise ValueError("`unix:` needs a socket path")
            self._host, self._port = "localhost", 0
        else:
            self._unix = None
            host, sep, port = self.address.rpartition(":")
            if not sep or not port.isdigit() or not host:
                raise ValueError(f"`{self.address}` is not HOST:PORT or unix:PATH")
            self._host, self._port = host.strip("[]"), int(port)
        self._token = token
        self._token_file = Path(token_file) if token_file is not None else None
        self.timeout = timeout

    # The token, afresh for each request.
    def _authorization(self) -> Optional[str]:
        if self._unix is not None:
            return None
        text = self._token or os.environ.get("GANGWAY_TOKEN")
        if text is None:
            path = self._token_file or _env_path("GANGWAY_TOKEN_FILE") or _default_token_file()
            if path is None:
                return None
            try:
                text = path.read_text()
            except OSError as e:
                raise DaemonError(f"reading the API token from {path}: {e}") from e
        text = text.strip()
        if len(text) != 64 or any(c not in "0123456789abcdefABCDEF" for c in text):
            raise DaemonError("the API token is not a token (64 hex digits)")
        return f"Bearer {text}"

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self._unix is not None:
            return _UnixConnection(self._unix, timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _request(
        self,
        method: str,
        path: str,
        body: Optional[Any] = None,
        headers: Optional[Dict[str, str]] = None,
    ) -> Tuple[Any, http.client.HTTPResponse]:
        sent = dict(headers or {})
        authorization = self._authorization()
        if authorization:
            sent["Authorization"] = authorization
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        connection = self._connection(self.timeout)
        try:
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as e:
            raise Unreachable(
                f"cannot reach the daemon at {self.address} ({e}); is `gangway serve` running?"
            ) from e
        finally:
            connection.close()
        try:
            answer = json.loads(raw) if raw else None
        except ValueError as e:
            raise DaemonError(f"{path}: the answer ({response.status}) is not JSON: {e}") from e
        if response.status >= 400:
            message = answer.get("error", "no message") if isinstance(answer, dict) else str(answer)
            raise Refused(response.status, message, f"{method} {path}")
        return answer, response

    def submit(
        self,
        gpus: Union[int, Tuple[int, int]],
        work: float,
        *,
        job_type: Optional[str] = None,
        tenant: Optional[str] = None,
        idempotency_key: Optional[str] = None,
        **fields: Any,
    ) -> int:
        """Submits a job and returns its id.

        ``gpus`` is a count, or ``(min, max)`` for an elastic job; ``work`` is seconds of running
        time at that many GPUs. Other fields are the API's (``weight``, ``tp``, ``pp``, ``batch``,
        ``run``, ...). A retry with the same ``idempotency_key`` (one is made when none is given)
        returns the same job.
        """
        request: Dict[str, Any] = dict(fields)
        if isinstance(gpus, tuple):
            request["min_gpus"], request["gpus"] = gpus
        else:
            request["gpus"] = gpus
        request["work"] = work
        if job_type is not None:
            request["job_type"] = job_type
        if tenant is not None:
            request["tenant"] = tenant
        key = idempotency_key or uuid.uuid4().hex
        try:
            answer, _ = self._request("POST", "/jobs", request, {"Idempotency-Key": key})
        except Unreachable:
            # The key makes the second try safe: it cannot make a second job.
            answer, _ = self._request("POST", "/jobs", request, {"Idempotency-Key": key})
        return int(answer["id"])

    def jobs(
        self,
        phases: Optional[Iterable[str]] = None,
        *,
        after: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> List[Job]:
        """Every job (or those in ``phases``), in id order, following the daemon's pages."""
        query = []
        if phases is not None:
            query.append("phase=" + ",".join(phases))
        if after is not None:
            query.append(f"after={after}")
        query.append(f"limit={limit or 10000}")
        path: Optional[str] = "/jobs?" + "&".join(query)
        out: List[Job] = []
        while path is not None:
            answer, response = self._request("GET", path)
            out.extend(Job.from_json(j) for j in answer)
            if limit is not None and len(out) >= limit:
                return out[:limit]
            found = _NEXT.search(response.getheader("Link") or "")
            path = found.group(1) if found else None
        return out

    def job(self, id: int) -> Job:
        """One job."""
        answer, _ = self._request("GET", f"/jobs/{int(id)}")
        return Job.from_json(answer)

    def cancel(self, id: int) -> None:
        """Cancels a job (its workers checkpoint first)."""
        self._request("DELETE", f"/jobs/{int(id)}")

    def cordon(self, gpus: Sequence[int]) -> None:
        """Takes GPUs out of service: their jobs checkpoint and move."""
        self._request("POST", "/gpus/cordon", {"gpus": [int(g) for g in gpus]})

    def uncordon(self, gpus: Sequence[int]) -> None:
        """Puts cordoned GPUs back in service."""
        self._request("POST", "/gpus/uncordon", {"gpus": [int(g) for g in gpus]})

    def nodes(self) -> List[Node]:
        """The servers, their GPUs and what runs on them."""
        answer, _ = self._request("GET", "/nodes")
        return [Node.from_json(n) for n in answer]

    def queue(self) -> List[int]:
        """The waiting jobs' ids in the order they are to be served (the policy's, or arrival)."""
        answer, _ = self._request("GET", "/queue")
        return [int(j) for j in answer["jobs"]]

    def stats(self) -> Dict[str, Any]:
        """The control plane's counters and gauges."""
        answer, _ = self._request("GET", "/stats")
        return dict(answer)

    def events(self, timeout: Optional[float] = None) -> Iterator[Event]:
        """Jobs' moves as they happen, for as long as the iterator is read (``timeout``: seconds
        without a byte before it raises :class:`Unreachable`; ``None``: wait for ever)."""
        headers = {"Accept": "text/event-stream"}
        authorization = self._authorization()
        if authorization:
            headers["Authorization"] = authorization
        connection = self._connection(timeout)
        try:
            connection.request("GET", "/events", headers=headers)
            response = connection.getresponse()
            if response.status >= 400:
                answer = json.loads(response.read() or b"{}")
                raise Refused(response.status, answer.get("error", ""), "GET /events")
            for line in response:
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                if not text.startswith("data:"):
                    continue
                data = json.loads(text[len("data:") :])
                yield Event(int(data["job"]), str(data["from"]), str(data["to"]), float(data["at"]))
        except (OSError, http.client.HTTPException) as e:
            raise Unreachable(f"the event stream of {self.address} ended: {e}") from e
        finally:
            connection.close()


def _env_path(name: str) -> Optional[Path]:
    value = os.environ.get(name)
    return Path(value) if value else None


def _default_token_file() -> Optional[Path]:
    here = Path.cwd()
    for directory in (here, *here.parents):
        candidate = directory / DEFAULT_TOKEN_FILE
        if candidate.is_file():
            return candidate
    return None
