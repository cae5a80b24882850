"""Prometheus metrics of one app (a private registry), the object-store wrapper that counts store errors, and the
last-run summaries that ``imagesvc ingest``/``index`` leave in the data dir for serving processes to report."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from imagesvc.errors import ImagesvcError, InvalidRequest, RateLimited
from imagesvc.storage import ObjectExists, ObjectNotFound, ObjectStore, StoreUnavailable

__all__ = [
    "JOB_FIELDS",
    "MeteredStore",
    "Metrics",
    "read_run_summary",
    "store_error_kind",
    "summary_path",
    "write_run_summary",
]

T = TypeVar("T")

# The numeric fields of each job's summary that become gauges (IngestSummary and IndexSummary field names).
JOB_FIELDS: dict[str, tuple[str, ...]] = {
    "ingest": ("books", "books_skipped", "pages", "pages_rendered", "illustrations", "objects_written", "refused"),
    "index": ("vectors", "embedded", "kept", "dropped", "failed"),
}
# Seconds; spans a cached /books answer (~1 ms) to a cold full-tier read from a slow store.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def summary_path(data_dir: Path, job: str) -> Path:
    """Where the last run of ``job`` (``ingest`` or ``index``) leaves its summary."""
    if job not in JOB_FIELDS:
        raise ValueError(f"unknown job {job!r}; valid: {', '.join(JOB_FIELDS)}")
    return Path(data_dir) / f"last-{job}.json"


def write_run_summary(data_dir: Path, job: str, summary: Mapping[str, Any]) -> Path:
    """Write ``summary`` plus ``finished_at`` (Unix seconds) atomically: a scrape never reads half a file."""
    path = summary_path(data_dir, job)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**summary, "finished_at": time.time()}, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_run_summary(data_dir: Path, job: str) -> dict[str, Any] | None:
    """The last summary of ``job``, or None when there is none (or it cannot be read)."""
    try:
        value = json.loads(summary_path(data_dir, job).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class RunSummaryCollector(Collector):
    """Gauges read from the summary files at scrape time: ``imagesvc_<job>_last_run_<field>``, ``..._seconds`` and
    ``..._finished_timestamp_seconds``. Nothing is exported for a job that never ran here."""

    def __init__(self, data_dir: Path | None) -> None:
        self.data_dir = data_dir

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.data_dir is None:
            return
        for job, fields in JOB_FIELDS.items():
            summary = read_run_summary(self.data_dir, job)
            if summary is None:
                continue
            for name in fields:
                value = summary.get(name)
                if isinstance(value, list):
                    value = len(value)  # ``refused`` is the list of refusals
                if isinstance(value, int | float):
                    yield GaugeMetricFamily(
                        f"imagesvc_{job}_last_run_{name}", f"{name} in the last `imagesvc {job}` run.", value=value
                    )
            for name, key, help_text in (
                ("seconds", "seconds", "Duration of the last run."),
                ("finished_timestamp_seconds", "finished_at", "Unix time the last run finished."),
            ):
                if isinstance(summary.get(key), int | float):
                    yield GaugeMetricFamily(f"imagesvc_{job}_last_run_{name}", help_text, value=summary[key])


class HotObjectsCollector(Collector):
    """Hits, misses and held bytes of the in-memory object cache (``storage.hot.HotObjects``), read at scrape time."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        c = self.cache
        yield CounterMetricFamily("imagesvc_hot_objects_hits", "Public-tier reads served from memory.", value=c.hits)
        yield CounterMetricFamily("imagesvc_hot_objects_misses", "Public-tier reads from the store.", value=c.misses)
        yield GaugeMetricFamily("imagesvc_hot_objects_bytes", "Bytes of public tiers held in memory.", value=c.bytes)


class Metrics:
    """Every metric of one app, in a registry of its own so that several apps in one process never collide.

    Under ``imagesvc serve --workers N`` (``PROMETHEUS_MULTIPROC_DIR`` set by the master before any worker starts),
    the counters, histogram and in-flight gauge are prometheus-client's multiprocess values, kept in files there, and
    ``render`` adds up every worker's; the hot-object cache figures stay the answering worker's own.
    """

    def __init__(self, data_dir: Path | None = None) -> None:
        self.registry = CollectorRegistry()
        self.multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        r = self.registry
        self.requests = Counter(
            "imagesvc_http_requests", "HTTP requests by route template, method and status.",
            ["route", "method", "status"], registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "imagesvc_http_request_duration_seconds",
            "Time from routing until the response, its body included, was sent.",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "imagesvc_http_requests_in_flight", "Requests being handled now.", registry=r, multiprocess_mode="livesum"
        )
        self.budget_rejections = Counter(
            "imagesvc_budget_rejections", "Requests refused because a budget pool was empty.", ["pool", "caller_class"],
            registry=r,
        )  # fmt: skip
        self.request_limit_rejections = Counter(
            "imagesvc_request_limit_rejections", "Requests refused by the per-window request limit.", ["caller_class"],
            registry=r,
        )  # fmt: skip
        self.store_errors = Counter(
            "imagesvc_store_errors", "Object-store calls that failed, by backend, operation and kind.",
            ["backend", "operation", "kind"], registry=r,
        )  # fmt: skip
        self._run_summaries = RunSummaryCollector(data_dir)
        r.register(self._run_summaries)
        self._hot_objects: HotObjectsCollector | None = None

    def watch_hot_objects(self, cache: Any) -> None:
        """Export the counters of this app's in-memory object cache."""
        self._hot_objects = HotObjectsCollector(cache)
        self.registry.register(self._hot_objects)

    def count_rejection(self, error: RateLimited, caller_class: str) -> None:
        """Count one 429: the request limit when its pool is ``requests``, else a budget pool."""
        pool = str(error.details.get("pool", "unknown"))
        if pool == "requests":
            self.request_limit_rejections.labels(caller_class).inc()
        else:
            self.budget_rejections.labels(pool, caller_class).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of this registry, or of every worker's metrics added up."""
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, self.multiprocess_dir)
        registry.register(self._run_summaries)
        if self._hot_objects is not None:
            registry.register(self._hot_objects)
        return generate_latest(registry)


def store_error_kind(exc: BaseException) -> str:
    """A short, bounded label for a failed store call (never the message, which names keys)."""
    if isinstance(exc, ObjectNotFound):
        return "not_found"
    if isinstance(exc, ObjectExists):
        return "exists"
    if isinstance(exc, StoreUnavailable):
        return "unavailable"
    if isinstance(exc, InvalidRequest):
        return "invalid"
    if isinstance(exc, ImagesvcError):
        return exc.code
    return "unexpected"


class MeteredStore:
    """An ``ObjectStore`` that forwards every call to ``inner`` and counts the ones that raise.

    Wrapping the store (rather than counting in the HTTP layer) counts failures from every door: REST, MCP and the
    health check. It offers the ``ObjectStore`` protocol and nothing more (a ``storage.Wrapper``); backend-only
    features (``path_for``, ``ensure_bucket``) are reached with ``storage.local_files`` or on the backend itself.
    """

    def __init__(self, inner: ObjectStore, errors: Counter) -> None:
        self.inner = inner
        self._errors = errors

    @property
    def name(self) -> str:
        return self.inner.name

    async def _count(self, operation: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except Exception as exc:
            self._errors.labels(self.inner.name, operation, store_error_kind(exc)).inc()
            raise

    async def put(self, key: str, data: bytes, **options: Any) -> Any:
        return await self._count("put", self.inner.put(key, data, **options))

    async def get(self, key: str, **options: Any) -> Any:
        return await self._count("get", self.inner.get(key, **options))

    async def head(self, key: str) -> Any:
        return await self._count("head", self.inner.head(key))

    async def delete(self, key: str) -> None:
        await self._count("delete", self.inner.delete(key))

    async def ping(self) -> None:
        await self._count("ping", self.inner.ping())

    async def list(self, prefix: str = "") -> AsyncIterator[Any]:
        try:
            async for info in self.inner.list(prefix):
                yield info
        except Exception as exc:
            self._errors.labels(self.inner.name, "list", store_error_kind(exc)).inc()
            raise

    async def close(self) -> None:
        await self.inner.close()
