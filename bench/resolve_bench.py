"""Snapshot resolution cost against a long epoch history, on SQLite and PostgreSQL.

For each backend, a fresh catalog gets 100 tables x H epochs, all WRITTEN, for
H = 1,000 and H = 100,000 (10 million epoch states). Table k lags ``k % 3`` epochs, and
every seventh table folded its epochs N-3..N-2 into N-1 (backlog coalescing), so the
repeatable-read resolution has to search: the newest common WRITTEN epoch is N-4, two
latest-WRITTEN lookups away. The rows go straight into the catalog's tables (executemany
on SQLite, COPY on PostgreSQL); resolution then goes through the public API,
``consistency.resolve_snapshot``.

Prints the median over RUNS resolutions per level, and the 100k/1k ratio per backend
(targets: ratio below 2, median below 10 ms). Results are also written to
``bench/results/resolve.json``.

Run: ``python -m bench resolve`` (all benchmarks: ``python -m bench``); options with
``python -m bench.resolve_bench --help``. PostgreSQL comes from
``DELTA_BARRIER_BENCH_POSTGRES`` (default: the local test server); it is skipped with a
message when unreachable.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from catalog import SqlCatalog, load_catalog
from consistency import Level, resolve_snapshot

TABLES = 100
HISTORIES = (1_000, 100_000)
RUNS = 50
WARMUP = 5
TARGET_RATIO = 2.0
TARGET_MS = 10.0
POSTGRES_URL = os.environ.get(
    "DELTA_BARRIER_BENCH_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
RESULTS = Path(__file__).parent / "results" / "resolve.json"
BASE_TS = datetime(2030, 1, 1, tzinfo=UTC)
LEVELS = (Level.READ_COMMITTED, Level.REPEATABLE_READ)


@dataclass(frozen=True)
class Measurement:
    backend: str
    epochs: int
    level: str
    median_ms: float
    p90_ms: float
    populate_s: float
    load_average: float
    """1-minute load average when measured: other work on the machine inflates timings."""


def table_names() -> list[str]:
    return [f"table_{k:03d}" for k in range(TABLES)]


def lag(k: int) -> int:
    return k % 3


def coalesces(k: int) -> bool:
    """Every seventh table whose latest epoch is N-1 or N folded N-3..N-2 into N-1."""
    return k % 7 == 0 and lag(k) <= 1


def folded(k: int, epochs: int) -> range:
    """The epochs table k recorded COALESCED into ``epochs - 1``."""
    return range(epochs - 3, epochs - 1) if coalesces(k) else range(0)


def epoch_states(k: int, epochs: int) -> Iterator[tuple[int, str, int | None]]:
    """(epoch, state, coalesced_into) of table k, oldest first."""
    into = epochs - 1
    for epoch in range(1, epochs - lag(k) + 1):
        if epoch in folded(k, epochs):
            yield epoch, "COALESCED", into
        else:
            yield epoch, "WRITTEN", None


def expected_repeatable_read_epoch(epochs: int) -> int:
    return epochs - 4


# SQLAlchemy's SQLite DATETIME storage format (naive UTC, see catalog.schema.UtcDateTime).
_SQLITE_TS = "%Y-%m-%d %H:%M:%S.%f"

_SQLITE_SERIES = (
    "WITH RECURSIVE series(e) AS (SELECT 1 UNION ALL SELECT e + 1 FROM series WHERE e < :last) "
)


def populate_sqlite(catalog: SqlCatalog, epochs: int) -> None:
    """Rows generated inside SQLite (a recursive series), so the load runs at B-tree speed."""
    now = datetime.now(UTC).strftime(_SQLITE_TS)
    base = BASE_TS.strftime("%Y-%m-%d %H:%M:%S")
    raw = catalog._engine.raw_connection()
    try:
        cursor = raw.cursor()
        # Bulk load only: no foreign-key probes per row (the rows are valid by
        # construction) and a page cache large enough for the two B-trees being filled.
        cursor.execute("PRAGMA foreign_keys = OFF")
        cursor.execute("PRAGMA cache_size = -1000000")
        cursor.execute("BEGIN IMMEDIATE")
        cursor.execute(
            _SQLITE_SERIES + "INSERT INTO epochs (id, barrier_ts, created_at)"
            " SELECT e, datetime(:base, '+' || e || ' seconds') || '.000000', :now FROM series",
            {"last": epochs, "base": base, "now": now},
        )
        cursor.executemany(
            "INSERT INTO tables (name, location, kind, partition_by, first_epoch, created_at)"
            " VALUES (?, ?, 'root', '[]', 1, ?)",
            [(name, f"/bench/{name}", now) for name in table_names()],
        )
        for k, name in enumerate(table_names()):
            fold = folded(k, epochs)
            cursor.execute(
                _SQLITE_SERIES
                + "INSERT INTO table_epochs (table_name, epoch, state, delta_version, job,"
                " attempt, coalesced_into, updated_at)"
                " SELECT :name, e,"
                " CASE WHEN e >= :fold_from AND e < :fold_to THEN 'COALESCED' ELSE 'WRITTEN' END,"
                " CASE WHEN e >= :fold_from AND e < :fold_to THEN NULL ELSE e END,"
                " 'bench', 1,"
                " CASE WHEN e >= :fold_from AND e < :fold_to THEN :into END,"
                " :now FROM series",
                {
                    "last": epochs - lag(k),
                    "name": name,
                    "fold_from": fold.start,
                    "fold_to": fold.stop,
                    "into": epochs - 1,
                    "now": now,
                },
            )
        cursor.execute("COMMIT")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()
    finally:
        raw.close()


def populate_postgres(catalog: SqlCatalog, epochs: int) -> None:
    now = datetime.now(UTC).isoformat()
    raw = catalog._engine.raw_connection()
    connection = raw.driver_connection
    assert connection is not None
    try:
        with connection.cursor() as cursor:
            # Foreign-key triggers off for the bulk load only (the rows are valid by
            # construction); indexes are maintained as usual.
            cursor.execute("SET session_replication_role = replica")
            with cursor.copy("COPY epochs (id, barrier_ts, created_at) FROM STDIN") as copy:
                copy.write(
                    "".join(
                        f"{e}\t{(BASE_TS + timedelta(seconds=e)).isoformat()}\t{now}\n"
                        for e in range(1, epochs + 1)
                    )
                )
            with cursor.copy(
                "COPY tables (name, location, kind, partition_by, first_epoch, created_at)"
                " FROM STDIN"
            ) as copy:
                for name in table_names():
                    copy.write_row((name, f"/bench/{name}", "root", "[]", 1, now))
            with cursor.copy(
                "COPY table_epochs (table_name, epoch, state, delta_version, job, attempt,"
                " coalesced_into, updated_at) FROM STDIN"
            ) as copy:
                for k, name in enumerate(table_names()):
                    buffer = io.StringIO()
                    for epoch, state, into in epoch_states(k, epochs):
                        version = "\\N" if into is not None else epoch
                        coalesced_into = "\\N" if into is None else into
                        buffer.write(
                            f"{name}\t{epoch}\t{state}\t{version}\tbench\t1"
                            f"\t{coalesced_into}\t{now}\n"
                        )
                    copy.write(buffer.getvalue())
            cursor.execute("SET session_replication_role = DEFAULT")
        raw.commit()
        # What autovacuum would have done by the time such a history exists: statistics
        # for the planner and a visibility map for index-only scans.
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE epochs")
            cursor.execute("VACUUM ANALYZE tables")
            cursor.execute("VACUUM ANALYZE table_epochs")
        connection.autocommit = False
    finally:
        raw.close()


@contextmanager
def sqlite_catalog() -> Iterator[SqlCatalog]:
    directory = tempfile.mkdtemp(prefix="resolve_bench_")
    catalog = load_catalog(f"sqlite:///{directory}/catalog.sqlite")
    try:
        assert isinstance(catalog, SqlCatalog)
        yield catalog
    finally:
        catalog.close()
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def postgres_catalog() -> Iterator[SqlCatalog]:
    schema = f"bench_resolve_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    catalog = load_catalog(f"{POSTGRES_URL}?options=-csearch_path%3D{schema}")
    try:
        assert isinstance(catalog, SqlCatalog)
        yield catalog
    finally:
        catalog.close()
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def postgres_problem() -> str | None:
    try:
        engine = sa.create_engine(POSTGRES_URL, connect_args={"connect_timeout": 5})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
    except sa.exc.SQLAlchemyError as exc:
        return type(exc).__name__
    return None


def populated(
    backend: str,
    open_catalog: Callable[[], AbstractContextManager[SqlCatalog]],
    populate: Callable[[SqlCatalog, int], None],
    epochs: int,
    stack: ExitStack,
) -> tuple[SqlCatalog, float]:
    catalog = stack.enter_context(open_catalog())
    start = time.perf_counter()
    populate(catalog, epochs)
    seconds = time.perf_counter() - start
    print(
        f"{backend}: {TABLES} tables x {epochs:,} epochs populated in {seconds:.1f} s", flush=True
    )
    names = table_names()
    committed = resolve_snapshot(history=catalog, tables=names, level=Level.READ_COMMITTED)
    assert committed.epochs["table_000"] == epochs
    assert committed.epochs["table_002"] == epochs - 2
    repeatable = resolve_snapshot(history=catalog, tables=names, level=Level.REPEATABLE_READ)
    assert repeatable.epoch == expected_repeatable_read_epoch(epochs), repeatable.epoch
    return catalog, seconds


def measure(
    backend: str,
    open_catalog: Callable[[], AbstractContextManager[SqlCatalog]],
    populate: Callable[[SqlCatalog, int], None],
    histories: Sequence[int],
    runs: int,
) -> list[Measurement]:
    """Median resolution time per history length and level.

    The histories are timed in alternation, run after run, so that whatever else the
    machine is doing weighs on the short and the long history alike.
    """
    names = table_names()
    measurements = []
    with ExitStack() as stack:
        catalogs = {
            epochs: populated(backend, open_catalog, populate, epochs, stack)
            for epochs in histories
        }
        for level in LEVELS:
            timings: dict[int, list[float]] = {epochs: [] for epochs in histories}
            for run in range(-WARMUP, runs):
                for epochs, (catalog, _) in catalogs.items():
                    start = time.perf_counter()
                    resolve_snapshot(history=catalog, tables=names, level=level)
                    if run >= 0:
                        timings[epochs].append((time.perf_counter() - start) * 1000)
            load = os.getloadavg()[0]
            for epochs, measured in timings.items():
                measured.sort()
                median = statistics.median(measured)
                p90 = measured[int(len(measured) * 0.9) - 1]
                populate_s = round(catalogs[epochs][1], 1)
                measurements.append(
                    Measurement(backend, epochs, str(level), median, p90, populate_s, load)
                )
                print(
                    f"  {epochs:>9,} epochs, {level}: median {median:.2f} ms, p90 {p90:.2f} ms"
                    f" (load average {load:.1f} on {os.cpu_count()} CPUs)",
                    flush=True,
                )
    return measurements


def report(measurements: list[Measurement], histories: Sequence[int], runs: int) -> None:
    small, large = min(histories), max(histories)
    by_key = {(m.backend, m.epochs, m.level): m for m in measurements}
    print()
    print(f"{'backend':<11}{'level':<18}{small:>10,}{large:>12,}  ratio  target")
    missed = []
    for backend in dict.fromkeys(m.backend for m in measurements):
        for level in LEVELS:
            low = by_key.get((backend, small, str(level)))
            high = by_key.get((backend, large, str(level)))
            if low is None or high is None:
                continue
            ratio = high.median_ms / low.median_ms
            met = ratio < TARGET_RATIO and high.median_ms < TARGET_MS
            if not met:
                missed.append(f"{backend} {level}")
            print(
                f"{backend:<11}{level!s:<18}{low.median_ms:>8.2f}ms{high.median_ms:>10.2f}ms"
                f"  {ratio:5.2f}  {'met' if met else 'MISSED'}"
            )
    print(f"(median ms over {runs} runs; target: ratio < {TARGET_RATIO}, median < {TARGET_MS} ms)")
    print("targets: " + (f"MISSED for {', '.join(missed)}" if missed else "all met"))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.resolve_bench", description=__doc__)
    parser.add_argument(
        "--epochs",
        type=lambda text: tuple(int(part) for part in text.split(",")),
        default=HISTORIES,
        help="comma-separated history lengths (default: 1000,100000)",
    )
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args([] if argv is None else list(argv))

    backends = {
        "sqlite": (sqlite_catalog, populate_sqlite),
        "postgresql": (postgres_catalog, populate_postgres),
    }
    measurements: list[Measurement] = []
    for backend in args.backends.split(","):
        if backend == "postgresql" and (problem := postgres_problem()):
            print(f"postgresql: skipped, server unreachable ({problem})")
            continue
        open_catalog, populate = backends[backend]
        measurements += measure(backend, open_catalog, populate, args.epochs, args.runs)
    report(measurements, args.epochs, args.runs)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps([asdict(m) for m in measurements], indent=2))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
