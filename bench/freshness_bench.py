"""Freshness: how long after its barrier an epoch becomes readable at repeatable-read across
a ten-table chain, run continuously with 1 s epochs under a light steady input.

The chain (linear, so the last table depends on every other one):

    events (FileSource or KafkaSource, append) -> events_clean (append) -> customer_latest (merge)
    -> customer_tiers (overwrite) -> tier_counts (overwrite) -> tier_log (append)
    -> category_latest (merge) -> category_rank (overwrite) -> top_categories (append)
    -> tier_summary (merge)

A feeder in a separate process drops small JSON files at a steady rate (written under a
dot-name, then renamed), or, with ``DB_BENCH_SOURCE=kafka``, produces the same JSON records
to a topic of a local tansu broker (one producer flush per tick). ``Runner.run_continuous`` runs in a
thread. A probe measures from outside the run: a separate process with a catalog of its
own resolves a repeatable-read snapshot of all the tables through the public reader
(``etl.snapshot(...).epoch``) every ``DB_BENCH_PROBE_INTERVAL`` seconds, and the bench
records when each epoch first became visible. After the warm-up, epochs whose barrier falls in the measured window count.

Reported:

- freshness = (first time the repeatable-read cut reached the epoch) - (its barrier_ts):
  p50 / p95 / max. An epoch that was coalesced is never visible itself; its rows are once
  a later epoch is, so it counts at that time (the figure over exactly-visible epochs only
  is printed too), and its p50 in the window's first and second halves (a chain that
  cannot keep up shows a lag that grows; coalescing must keep it bounded);
- the share of epochs coalesced, per table (catalog ``COALESCED`` states);
- where an epoch's time goes, per job, from the catalog's own timestamps (the epoch's
  barrier and creation, each table's PROCESSED and WRITTEN transitions) and the runner's
  ``on_batch`` callback: waiting for upstream, waiting for the job's previous batch,
  waiting for a slot of the runner (when start times can be observed), running up to the
  Delta commit (read inputs + transform + write files + commit = PROCESSED), and sealing
  (PROCESSED -> WRITTEN); plus the engine's own stage timings when ``BatchResult`` has a
  ``timings`` mapping (stage -> seconds);
- how long stopping took (the runner finishes every issued epoch first), the CPU seconds
  of the run's process and its JVM per batch in the window, and the load.

Environment (defaults in brackets): DB_BENCH_SOURCE [file] ``file`` or ``kafka`` (the
root's source), DB_BENCH_SECONDS [120] measured window,
DB_BENCH_WARMUP [90], DB_BENCH_EPOCH_INTERVAL [1.0], DB_BENCH_ROWS_PER_SECOND [1000],
DB_BENCH_FILES_PER_SECOND [5] files (or producer flushes) per second, DB_BENCH_JOBS [10]
tables in the chain (2..10),
DB_BENCH_PARALLEL [runner default] ``max_parallel_jobs``, DB_BENCH_BACKLOG [runner
default: a continuous run's] ``backlog_threshold`` (0: none), DB_BENCH_PROBE_INTERVAL [0.1],
DB_BENCH_SHUFFLE_PARTITIONS [engine default], DB_BENCH_MAINTENANCE [0: off] seconds between
rounds of in-run maintenance (what ``etl run --continuous --maintenance-interval`` runs:
compaction of small files, expiry). The active files of every table at the end are printed:
a commit and a read of a table cost more the more files it has.

Run: ``python -m bench freshness``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench._common import (
    LoadSampler,
    ProcessCpu,
    env_float,
    env_int,
    load_average,
    median,
    percentile,
)

SOURCE_SCHEMA = "id BIGINT, customer INT, category STRING, amount DOUBLE"
ROOT_TABLE = "events"

# (output table, mode, keys, SQL over the previous table of the chain)
CHAIN: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "events_clean",
        "append",
        (),
        "SELECT id, customer, category, amount, amount * 1.2 AS gross "
        "FROM events WHERE amount >= 0",
    ),
    (
        "customer_latest",
        "merge",
        ("customer",),
        "SELECT customer, max(category) AS category, count(*) AS orders, sum(gross) AS gross "
        "FROM events_clean GROUP BY customer",
    ),
    (
        "customer_tiers",
        "overwrite",
        (),
        "SELECT customer, category, gross, CASE WHEN gross > 300 THEN 'gold' "
        "WHEN gross > 100 THEN 'silver' ELSE 'bronze' END AS tier FROM customer_latest",
    ),
    (
        "tier_counts",
        "overwrite",
        (),
        "SELECT category, tier, count(*) AS customers, sum(gross) AS gross "
        "FROM customer_tiers GROUP BY category, tier",
    ),
    ("tier_log", "append", (), "SELECT category, tier, customers, gross FROM tier_counts"),
    (
        "category_latest",
        "merge",
        ("category", "tier"),
        "SELECT category, tier, max(customers) AS customers, max(gross) AS gross "
        "FROM tier_log GROUP BY category, tier",
    ),
    (
        "category_rank",
        "overwrite",
        (),
        "SELECT category, tier, customers, gross, "
        "rank() OVER (PARTITION BY tier ORDER BY gross DESC) AS rnk FROM category_latest",
    ),
    (
        "top_categories",
        "append",
        (),
        "SELECT category, tier, customers FROM category_rank WHERE rnk <= 3",
    ),
    (
        "tier_summary",
        "merge",
        ("tier",),
        "SELECT tier, count(*) AS categories, sum(customers) AS customers "
        "FROM top_categories GROUP BY tier",
    ),
)


KAFKA_TOPIC = "events"
KAFKA_PARTITIONS = 2


def build_pipeline(source, tables: int):
    """The chain's first ``tables`` tables fed by ``source``; returns (pipeline, table names
    in chain order)."""
    from etl import Pipeline

    pipeline = Pipeline("freshness")
    pipeline.ingest("ingest_events", source=source, output=ROOT_TABLE)
    names = [ROOT_TABLE]
    for output, mode, keys, query in CHAIN[: tables - 1]:
        pipeline.sql(
            f"job_{output}", output=output, query=query, inputs=[names[-1]], mode=mode, keys=keys
        )
        names.append(output)
    return pipeline, names


@dataclass(frozen=True)
class FeedTarget:
    """Where a feeder's rows go: JSON files dropped into ``path`` (written under a dot-name,
    then renamed: in-flight files are not taken), or records produced to ``topic`` of the
    broker at ``bootstrap`` over its ``partitions`` in turn."""

    kind: str
    path: str | None = None
    bootstrap: str | None = None
    topic: str = KAFKA_TOPIC
    partitions: int = KAFKA_PARTITIONS

    @property
    def unit(self) -> str:
        return "files" if self.kind == "file" else "producer flushes"


def _feed(target: FeedTarget, rate, ticks_per_second: float, counts, stop) -> None:
    """The feeder process: ``rate.value`` rows/s in ``ticks_per_second`` ticks (one file, or
    one producer flush, a tick); ``counts`` holds ticks, rows and late ticks so far."""
    rows = random.Random(14)
    producer = None
    if target.kind == "kafka":
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 5})
    period = 1.0 / ticks_per_second
    ticks = sent = late = 0
    next_at = time.monotonic()
    while not stop.is_set():
        size = max(1, round(rate.value / ticks_per_second))
        lines = []
        for i in range(size):
            customer = rows.randrange(1000)
            record = {
                "id": sent + i,
                "customer": customer,
                "category": f"c{customer % 16}",
                "amount": round(rows.uniform(-5.0, 100.0), 2),
            }
            lines.append(json.dumps(record))
        if producer is not None:
            for i, line in enumerate(lines):
                _produce(producer, target.topic, line.encode(), i % target.partitions)
            if unsent := producer.flush(60):
                raise RuntimeError(f"the broker did not take {unsent} records within 60 s")
        else:
            incoming = Path(target.path or ".")
            hidden = incoming / f".drop-{ticks:08d}.json"
            hidden.write_text("\n".join(lines) + "\n")
            os.replace(hidden, incoming / f"drop-{ticks:08d}.json")
        ticks, sent = ticks + 1, sent + size
        next_at += period
        delay = next_at - time.monotonic()
        if delay < 0:
            late += 1
            next_at = time.monotonic()  # behind: the rows fed say so
        with counts.get_lock():
            counts[0], counts[1], counts[2] = ticks, sent, late
            counts[3] = round(time.process_time() * 1000)
        if delay > 0 and stop.wait(delay):
            break


def _produce(producer, topic: str, value: bytes, partition: int) -> None:
    """Queue one record, serving delivery reports while the producer's queue is full."""
    while True:
        try:
            producer.produce(topic, value, partition=partition)
            return
        except BufferError:
            producer.poll(0.01)


class Feeder:
    """Feeds ``target`` at a steady rate from **a separate process**, so that producing the
    input does not compete with the run for its interpreter (kafka-python's producer, a
    thread of the run's process, took half of its Python samples at 20,000 rows/s), and
    with a producer in C, so that it takes little of the machine's CPU from the run
    (kafka-python's: 0.7 of a core at 20,000 rows/s). ``rate.value`` (rows/s) may be
    changed while it runs."""

    def __init__(self, target: FeedTarget, *, rows_per_second: float, ticks_per_second: float):
        context = multiprocessing.get_context("spawn")
        self.unit = target.unit
        self.rate = context.Value("d", float(rows_per_second))
        self.stop_event = context.Event()
        self._counts = context.Array("q", 4)
        self._process = context.Process(
            target=_feed,
            args=(target, self.rate, ticks_per_second, self._counts, self.stop_event),
            name="feeder",
            daemon=True,
        )

    def start(self) -> None:
        self._process.start()

    def join(self, timeout: float = 30.0) -> None:
        self._process.join(timeout)

    @property
    def ticks(self) -> int:
        return self._counts[0]

    @property
    def rows(self) -> int:
        return self._counts[1]

    @property
    def late(self) -> int:
        return self._counts[2]

    @property
    def cpu_seconds(self) -> float:
        """CPU the feeder process has used so far (it shares the machine with the run)."""
        return self._counts[3] / 1000


def source_and_feeder(
    kind: str, root: Path, stack: ExitStack, *, rows_per_second: int, ticks_per_second: float
):
    """The root job's source and the feeder that fills it (a local broker for Kafka)."""
    from etl import FileSource

    if kind == "file":
        incoming = root / "incoming"
        incoming.mkdir()
        source = FileSource("drops", path=incoming, format="json", schema=SOURCE_SCHEMA)
        target = FeedTarget("file", path=str(incoming))
    elif kind == "kafka":
        from etl import KafkaSource
        from tests.support.tansu import TansuBroker

        broker = stack.enter_context(TansuBroker())
        broker.create_topics({KAFKA_TOPIC: KAFKA_PARTITIONS})
        source = KafkaSource(
            "drops",
            topics=[KAFKA_TOPIC],
            bootstrap_servers=broker.bootstrap_servers,
            schema=SOURCE_SCHEMA,
        )
        target = FeedTarget("kafka", bootstrap=broker.bootstrap_servers)
    else:
        raise SystemExit(f"DB_BENCH_SOURCE={kind!r}: say 'file' or 'kafka'")
    feeder = Feeder(target, rows_per_second=rows_per_second, ticks_per_second=ticks_per_second)
    return source, feeder


class ContinuousRun(threading.Thread):
    """``runner.run_continuous`` in a thread; :meth:`finish` stops it, waits for it to
    finish the epochs it issued, and returns its result (raising if it failed)."""

    def __init__(self, runner, *, interval: float):
        super().__init__(name="runner", daemon=True)
        self.runner = runner
        self.interval = interval
        self.stop_event = threading.Event()
        self._outcome: dict[str, object] = {}
        self.finished_at: float | None = None

    def run(self) -> None:
        try:
            self._outcome["result"] = self.runner.run_continuous(
                epoch_interval=self.interval, stop=self.stop_event
            )
        except BaseException as exc:  # noqa: BLE001 - raised by finish()
            self._outcome["error"] = exc

    def finish(self):
        self.stop_event.set()
        self.join()
        self.finished_at = time.time()
        if "error" in self._outcome:
            raise RuntimeError("the runner failed") from self._outcome["error"]  # type: ignore[misc]
        result = self._outcome["result"]
        failures = getattr(result, "failures", ())
        if failures:
            raise RuntimeError(f"jobs failed: {failures}")
        return result


def finish(feeder: Feeder, driver: ContinuousRun, probe: Probe):
    """Stop feeding, let the run finish its issued epochs, give the probe time to see the
    last cut, stop it; the run's result."""
    feeder.stop_event.set()
    try:
        return driver.finish()
    finally:
        time.sleep(max(0.5, 3 * probe.interval))
        probe.stop_event.set()
        probe.join()
        feeder.join()


def _poll_snapshots(
    warehouse: str,
    catalog_url: str | None,
    tables: list[str],
    interval: float,
    stop_event,
    sender,
) -> None:
    """The probe process: resolve a repeatable-read snapshot of ``tables`` through the
    public reader every ``interval`` seconds with a catalog of its own, and send each
    outcome as (epoch or None, wall-clock time, seconds the resolution took, error or
    None) until ``stop_event`` is set."""
    from catalog import load_catalog
    from etl import snapshot

    catalog = load_catalog(catalog_url, warehouse=warehouse)
    try:
        while not stop_event.is_set():
            started = time.perf_counter()
            error = None
            try:
                epoch = snapshot(catalog, tables, "repeatable-read").epoch
            except Exception as exc:  # noqa: BLE001 - e.g. before the first seal
                error = f"{type(exc).__name__}: {exc}"
                epoch = None
            sender.send((epoch, time.time(), time.perf_counter() - started, error))
            stop_event.wait(interval)
    finally:
        catalog.close()
        sender.close()


class Probe:
    """Resolves repeatable-read snapshots of ``tables`` from outside the run: a separate
    process polls the public ``etl.snapshot(...).epoch`` with a catalog of its own (it
    shares neither the run's interpreter lock nor its catalog connections), and a thread
    of this process records when each epoch first became visible (wall-clock seconds), as
    the outcomes arrive: the records can be read while the probe runs."""

    def __init__(
        self,
        warehouse: Path | str,
        tables: list[str],
        *,
        interval: float,
        catalog_url: str | None = None,
    ):
        context = multiprocessing.get_context("spawn")
        self.tables = tables
        self.interval = interval
        self.stop_event = context.Event()
        self.exact: dict[int, float] = {}
        """epoch -> when the cut was first exactly at it."""
        self.reached: dict[int, float] = {}
        """epoch -> when the cut was first at it or past it (its rows are visible)."""
        self.resolutions: list[float] = []
        self.errors: list[str] = []
        self._receiver, self._sender = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_poll_snapshots,
            args=(
                str(warehouse),
                catalog_url,
                list(tables),
                interval,
                self.stop_event,
                self._sender,
            ),
            name="probe",
            daemon=True,
        )
        self._listener = threading.Thread(target=self._listen, name="probe-listener", daemon=True)

    def start(self) -> None:
        self._process.start()
        self._sender.close()  # the child holds the only sending end: its exit ends _listen
        self._listener.start()

    def join(self) -> None:
        self._process.join()
        self._listener.join()

    def _listen(self) -> None:
        newest = 0
        while True:
            try:
                epoch, seen_at, seconds, error = self._receiver.recv()
            except EOFError:
                return
            self.resolutions.append(seconds)
            if error is not None:
                self.errors.append(error)
            if epoch is not None and epoch > newest:
                self.exact.setdefault(epoch, seen_at)
                for e in range(newest + 1, epoch + 1):
                    self.reached.setdefault(e, seen_at)
                newest = epoch


def visible_after_barrier(catalog, probe: Probe, window: tuple[float, float]) -> list[float]:
    """Seconds from each epoch's barrier to the first repeatable-read cut at or past it,
    for the epochs whose barrier falls in ``window`` and that became visible."""
    seconds = []
    for epoch, reached in sorted(probe.reached.items()):
        barrier = catalog.get_epoch(epoch).barrier_ts.timestamp()
        if window[0] <= barrier < window[1]:
            seconds.append(reached - barrier)
    return seconds


def lag_is_bounded(early_p50: float, late_p50: float) -> bool:
    """Whether a run keeps up: freshness in a window's second half no worse than in its
    first, give or take noise (a run that falls behind grows it every epoch)."""
    return late_p50 <= 1.5 * early_p50 + 1.0


def freshness_line(name: str, values: list[float]) -> str:
    if not values:
        return f"  {name:<22}: no epoch became visible"
    return (
        f"  {name:<22}: p50 {median(values):5.2f} s  p95 {percentile(values, 95):5.2f} s  "
        f"max {max(values):5.2f} s  ({len(values)} epochs)"
    )


@dataclass
class BatchRecord:
    job: str
    first_epoch: int
    epoch: int
    ended: float
    started: float | None
    timings: Mapping[str, float] | None


class BatchLog:
    """The runner's ``on_batch`` callback, plus batch start times when observable."""

    def __init__(self) -> None:
        self.records: list[BatchRecord] = []
        self._starts: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()
        self.start_times = False

    def on_batch(self, result) -> None:
        now = time.time()
        timings = getattr(result, "timings", None)
        if not isinstance(timings, Mapping):
            timings = None
        with self._lock:
            started = self._starts.pop((result.job, result.epoch), None)
            self.records.append(
                BatchRecord(
                    job=result.job,
                    first_epoch=result.first_epoch,
                    epoch=result.epoch,
                    ended=now,
                    started=started,
                    timings=dict(timings) if timings is not None else None,
                )
            )

    def observe_starts(self, runner) -> None:
        """Record when each batch starts by wrapping the runner's engine ``run_batch``, if
        the runner has one (no public hook exists yet); harmless when it does not."""
        engine = getattr(runner, "engine", None)
        run_batch = getattr(engine, "run_batch", None)
        if not callable(run_batch):
            return

        def timed(job, batch, *args, **kwargs):
            with self._lock:
                self._starts[(getattr(job, "name", str(job)), batch.last)] = time.time()
            return run_batch(job, batch, *args, **kwargs)

        engine.run_batch = timed
        self.start_times = True


def _ts(value: datetime) -> float:
    return value.timestamp()


def _stats(values: list[float]) -> str:
    if not values:
        return "no values"
    return (
        f"p50 {percentile(values, 50):6.2f} s  p95 {percentile(values, 95):6.2f} s  "
        f"max {max(values):6.2f} s  (n={len(values)})"
    )


def _report(
    *,
    catalog,
    pipeline,
    tables: list[str],
    probe: Probe,
    batches: BatchLog,
    window: tuple[float, float],
) -> None:
    from catalog import EpochState

    epochs = [e for e in catalog.epochs() if window[0] <= _ts(e.barrier_ts) <= window[1]]
    if not epochs:
        print("no epoch issued in the measured window")
        return
    barrier = {e.id: _ts(e.barrier_ts) for e in catalog.epochs()}
    created = {e.id: _ts(e.created_at) for e in catalog.epochs()}
    ids = [e.id for e in epochs]
    first, last = ids[0], ids[-1]
    print(f"measured epochs {first}..{last} ({len(ids)} epochs)")

    # -- freshness at repeatable-read ---------------------------------------------------
    reached = [probe.reached[e] - barrier[e] for e in ids if e in probe.reached]
    exact = [probe.exact[e] - barrier[e] for e in ids if e in probe.exact]
    unseen = [e for e in ids if e not in probe.reached]
    print(f"freshness of the last table ({tables[-1]}) at repeatable-read across {len(tables)}:")
    print(f"  rows visible  : {_stats(reached)}")
    print(f"  epoch visible : {_stats(exact)}  (epochs readable as themselves)")
    if unseen:
        print(f"  never visible before the probe stopped: {len(unseen)} epochs")
    # Overloaded, epochs coalesce; the lag must still stop growing.
    early, late = (
        [probe.reached[e] - barrier[e] for e in half if e in probe.reached]
        for half in (ids[: len(ids) // 2], ids[len(ids) // 2 :])
    )
    if early and late:
        early_p50, late_p50 = percentile(early, 50), percentile(late, 50)
        trend = "bounded" if lag_is_bounded(early_p50, late_p50) else "GROWING: it falls behind"
        print(
            f"  lag trend     : p50 {early_p50:.2f} s in the window's first half, "
            f"{late_p50:.2f} s in its second ({trend})"
        )
    if probe.resolutions:
        print(
            f"  probe (a separate process): {len(probe.resolutions)} snapshots, median resolve "
            f"{median(probe.resolutions) * 1000:.1f} ms, errors {len(probe.errors)}"
            + (f" (first: {probe.errors[0][:120]})" if probe.errors else "")
        )

    # -- coalescing ---------------------------------------------------------------------
    print("epochs coalesced (share of measured epochs):")
    coalesced_share = {}
    for table in tables:
        states = catalog.table_epochs(table, after=first - 1, up_to=last)
        coalesced = sum(1 for s in states if s.state is EpochState.COALESCED)
        coalesced_share[table] = coalesced / len(ids)
    print("  " + "  ".join(f"{t} {share:4.0%}" for t, share in coalesced_share.items()))

    # -- per-job stage breakdown from the catalog ----------------------------------------
    processed: dict[tuple[str, int], float] = {}
    written: dict[tuple[str, int], float] = {}
    for table in tables:
        for entry in catalog.state_history(table, epoch=None):
            if entry.updated_at is None or not (first - 20 <= entry.epoch <= last + 20):
                continue
            key = (table, entry.epoch)
            if entry.state is EpochState.PROCESSED:
                processed[key] = max(processed.get(key, 0.0), _ts(entry.updated_at))
            elif entry.state is EpochState.WRITTEN:
                written.setdefault(key, _ts(entry.updated_at))
    jobs = pipeline.ordered_jobs()
    by_job: dict[str, list[BatchRecord]] = defaultdict(list)
    for record in sorted(batches.records, key=lambda r: r.epoch):
        by_job[record.job].append(record)
    columns = ("upstream", "own prev", "slot", "to commit", "seal", "batch", "epochs/batch")
    print(
        "where an epoch's time goes, per job (median seconds over measured batches):\n"
        "  upstream  = inputs WRITTEN - barrier (root: epoch created - barrier)\n"
        "  own prev  = the job still busy with its previous batch after its inputs were ready\n"
        "  slot      = batch start - max(inputs ready, previous batch done): runner scheduling"
        " and the pool of max_parallel_jobs"
        + ("" if batches.start_times else " (start times not observable: folded into 'to commit')")
        + "\n"
        "  to commit = start -> PROCESSED: read inputs, transform, write files, Delta commit\n"
        "  seal      = PROCESSED -> WRITTEN: catalog records, schema, seal transaction (0 for a\n"
        "              job without a quality gate: its seal records its last commit)"
    )
    print(f"  {'job':24} " + " ".join(f"{c:>9}" for c in columns))
    totals: dict[str, list[float]] = defaultdict(list)
    for job in jobs:
        table = job.output
        inputs = [i.table for i in job.inputs]
        rows: dict[str, list[float]] = defaultdict(list)
        previous_done: float | None = None
        for record in by_job.get(job.name, []):
            done = written.get((table, record.epoch))
            if done is None:
                continue
            measured = first <= record.epoch <= last
            if inputs:
                ready_times = [written.get((t, record.epoch)) for t in inputs]
                if any(t is None for t in ready_times):
                    previous_done = done
                    continue
                ready = max(t for t in ready_times if t is not None)
            else:
                ready = created.get(record.epoch, barrier[record.epoch])
            eligible = max(ready, previous_done or ready)
            start = record.started if record.started is not None else eligible
            committed = processed.get((table, record.epoch), done)
            if measured:
                rows["upstream"].append(ready - barrier[record.epoch])
                rows["own prev"].append(eligible - ready)
                rows["slot"].append(max(0.0, start - eligible))
                rows["to commit"].append(committed - start)
                rows["seal"].append(done - committed)
                rows["batch"].append(done - start)
                rows["epochs/batch"].append(record.epoch - record.first_epoch + 1)
                if record.timings:
                    for stage, seconds in record.timings.items():
                        totals[f"{job.name}\0{stage}"].append(float(seconds))
            previous_done = done
        print(
            f"  {job.name:24} "
            + " ".join(f"{median(rows[c]):9.2f}" if rows[c] else f"{'-':>9}" for c in columns)
        )
    last_job = jobs[-1]
    spans = [
        written[(last_job.output, e)] - barrier[e] for e in ids if (last_job.output, e) in written
    ]
    probe_lag = [
        probe.exact[e] - written[(last_job.output, e)]
        for e in ids
        if e in probe.exact and (last_job.output, e) in written
    ]
    print(f"  barrier -> last table WRITTEN: {_stats(spans)}")
    print(f"  last table WRITTEN -> probe saw the cut: median {median(probe_lag):.2f} s")

    # -- engine-reported stage timings (BatchResult.timings), when present ----------------
    if totals:
        stages = sorted({key.split("\0")[1] for key in totals})
        print("engine-reported stage timings (BatchResult.timings; median seconds per batch):")
        print(f"  {'job':24} " + " ".join(f"{s[:12]:>12}" for s in stages))
        for job in jobs:
            cells = []
            for stage in stages:
                values = totals.get(f"{job.name}\0{stage}")
                cells.append(f"{median(values):12.3f}" if values else f"{'-':>12}")
            print(f"  {job.name:24} " + " ".join(cells))
        means = {
            stage: statistics.fmean(
                [v for key, vs in totals.items() if key.endswith("\0" + stage) for v in vs]
            )
            for stage in stages
        }
        total = sum(means.values()) or 1.0
        print(
            "  share of batch time: "
            + ", ".join(
                f"{s} {m / total:.0%}" for s, m in sorted(means.items(), key=lambda x: -x[1])
            )
        )
    else:
        print("engine-reported stage timings: none (BatchResult has no 'timings' mapping yet)")


def main() -> None:
    from deltalake import DeltaTable

    from catalog import load_catalog
    from etl import Runner, build_spark
    from etl.retention.in_run import MaintenanceLoop
    from etl.scheduling import backlog_threshold_for

    seconds = env_float("DB_BENCH_SECONDS", 120.0)
    # The JVM keeps compiling Spark's code for its first minutes (JFR: the JIT busy 0.5-0.9
    # of a core over the first two): a continuous run's steady state starts after that.
    warmup = env_float("DB_BENCH_WARMUP", 90.0)
    interval = env_float("DB_BENCH_EPOCH_INTERVAL", 1.0)
    rows_per_second = env_int("DB_BENCH_ROWS_PER_SECOND", 1000)
    files_per_second = env_float("DB_BENCH_FILES_PER_SECOND", 5.0)
    source_kind = os.environ.get("DB_BENCH_SOURCE", "file").strip().lower()
    tables = max(2, min(len(CHAIN) + 1, env_int("DB_BENCH_JOBS", len(CHAIN) + 1)))
    probe_interval = env_float("DB_BENCH_PROBE_INTERVAL", 0.1)
    runner_options: dict[str, object] = {}
    if os.environ.get("DB_BENCH_PARALLEL"):
        runner_options["max_parallel_jobs"] = env_int("DB_BENCH_PARALLEL", 0) or None
    if os.environ.get("DB_BENCH_BACKLOG"):
        backlog = env_int("DB_BENCH_BACKLOG", 10)
        runner_options["backlog_threshold"] = backlog or None
    maintenance = env_float("DB_BENCH_MAINTENANCE", 0.0)
    conf = {"spark.ui.enabled": "false"}
    if os.environ.get("DB_BENCH_SHUFFLE_PARTITIONS"):
        conf["spark.sql.shuffle.partitions"] = os.environ["DB_BENCH_SHUFFLE_PARTITIONS"]

    spark = build_spark(app_name="bench-freshness", conf=conf)
    for key, value in conf.items():
        if key.startswith("spark.sql."):
            spark.conf.set(key, value)  # also when the session already existed
    print(
        f"{tables} tables fed by {source_kind}, {interval:g} s epochs, {rows_per_second} "
        f"rows/s in {files_per_second:g} ticks/s, warm-up {warmup:g} s, measured {seconds:g} s, "
        f"runner options {runner_options or 'default'}, maintenance "
        f"{f'every {maintenance:g} s' if maintenance else 'off'}; {load_average()}"
    )
    with tempfile.TemporaryDirectory(prefix="freshness-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        source, feeder = source_and_feeder(
            source_kind,
            root,
            stack,
            rows_per_second=rows_per_second,
            ticks_per_second=files_per_second,
        )
        warehouse = root / "warehouse"
        pipeline, names = build_pipeline(source, tables)
        catalog = load_catalog(None, warehouse=warehouse)
        batches = BatchLog()
        runner = Runner(
            pipeline,
            catalog=catalog,
            warehouse=str(warehouse),
            spark=spark,
            on_batch=batches.on_batch,
            **runner_options,  # type: ignore[arg-type]
        )
        runner.register()
        print(
            f"runner: {runner.max_parallel_jobs} batches at once, backlog threshold "
            f"{backlog_threshold_for(runner.backlog_threshold, continuous=True)}"
        )
        batches.observe_starts(runner)
        probe = Probe(warehouse, names, interval=probe_interval)
        driver = ContinuousRun(runner, interval=interval)
        # Maintenance rounds run as long as the run does (not through the report).
        upkeep = (
            MaintenanceLoop(
                catalog,
                pipeline=runner.catalog_pipeline,
                interval=maintenance,
                leases=runner.leases,
                gate=runner.gate,
            )
            if maintenance
            else nullcontext()
        )
        with upkeep, LoadSampler() as load:
            feeder.start()
            driver.start()
            probe.start()
            time.sleep(warmup)
            cpu = ProcessCpu(spark)
            window_start = time.time()
            cpu_start = (cpu.python(), cpu.jvm(), len(batches.records))
            time.sleep(seconds)
            window_end = time.time()
            cpu_end = (cpu.python(), cpu.jvm(), len(batches.records))
            finish(feeder, driver, probe)
            drained = (driver.finished_at or window_end) - window_end
        print(
            f"fed {feeder.rows} rows in {feeder.ticks} {feeder.unit} ({feeder.late} late "
            f"ticks, {feeder.cpu_seconds:.1f} CPU-s in the feeder's process); "
            f"{len(batches.records)} batches; stopping took {drained:.1f} s "
            "(the runner finishes the issued epochs)"
        )
        _report(
            catalog=catalog,
            pipeline=pipeline,
            tables=names,
            probe=probe,
            batches=batches,
            window=(window_start, window_end),
        )
        ran = max(1, cpu_end[2] - cpu_start[2])
        python_cpu, jvm_cpu = cpu_end[0] - cpu_start[0], cpu_end[1] - cpu_start[1]
        print(
            f"CPU in the window (less moved by the load than wall time): driver Python "
            f"{python_cpu:.1f} s, JVM {jvm_cpu:.1f} s over {ran} batches: "
            f"{python_cpu / ran * 1000:.0f} + {jvm_cpu / ran * 1000:.0f} ms per batch"
        )
        print(load.summary() + f"; now {load_average()}")
        files = {name: len(DeltaTable(str(warehouse / name)).file_uris()) for name in names}
        print("active files at the end: " + ", ".join(f"{t} {n}" for t, n in files.items()))
        catalog.close()


if __name__ == "__main__":
    main()
