"""The fault campaign: seeded scenarios, the driver that plays them, and the oracle.

A scenario (one seed) picks a pipeline (``files`` or ``kafka``, see
:mod:`tests.support.faults.pipelines`) and an injection:

- ``crash``: a child process runs epoch f and dies at a fault point; a fresh run recovers;
- ``double_crash``: the same, then a second child dies during the replay, then a third run;
- ``zombie``: a child pauses (SIGSTOP) at a fault point; its 1 s lease expires; a fresh
  runner takes over, recovers and drains (and, for a "late" zombie, runs the later epochs
  too); then the zombie is woken (SIGCONT) and must not change anything;
- ``job_failure``: a transform raises while a marker file exists, in ``run_continuous``
  that keeps opening epochs; then the marker goes and a plain rerun must catch up;
- ``zombie_race``: a child pauses at a fault point (often in epoch 1, before any table
  exists, and at any of its commits: side outputs too); its lease expires; a second child
  takes over and pauses at a fault point of the same job and epoch; then both are woken,
  the superseded one first or the new owner first, each running to its end while the other
  is still frozen. A superseded runner resuming at any point, including before the first
  commit to a table that does not exist yet, must neither lose nor duplicate a row.

Zombie scenarios run on PostgreSQL (a frozen process may hold a SQLite catalog's lock);
the others on SQLite or PostgreSQL, drawn from the seed. The warehouse is a local directory
or an ``s3://bucket/prefix`` on the test's S3 server (then the catalog is PostgreSQL, as for
any URL warehouse), drawn from the seed or forced by ``DELTA_BARRIER_FAULT_STORE``.

Epoch k's inputs are put in place, then epoch k is opened (an explicit barrier), so every
run sees the same slices as the reference run without faults. Fault points come from
:data:`etl.faults.FAULT_POINTS`: a point added there is exercised without changing this file.

The oracle (:meth:`Driver.check`): after recovery and a drain every table equals the
reference run row for row; every read-committed and repeatable-read read taken by a reader
thread during the scenario matched the reference's content of that table at the epoch the
read resolved to; no epoch is left PROCESSED or ROLLED_BACK; every sealed epoch's row count
in the catalog is the table's, whichever path sealed it; every run after a fault succeeded
without a manual step; and the inputs are all accounted for.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from catalog import CatalogUnavailableError, EpochState
from consistency import NoCommonEpochError
from etl import snapshot
from etl.delta import epoch_rows, read_arrow, table_version
from etl.errors import ExitCode
from etl.faults import FAULT_ENV, FAULT_EXIT_CODE, FAULT_POINTS
from tests.support.faults import pipelines as P
from tests.support.faults.process import wait_stopped

REPO = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("child.py")
INJECTIONS = ("crash", "double_crash", "zombie", "job_failure", "zombie_race")
ZOMBIE_INJECTIONS = ("zombie", "zombie_race")
CATALOGS = ("sqlite", "postgres")
STORES = ("local", "s3")
S3_SHARE = 0.25
"""How often a seed draws an S3 warehouse (unless DELTA_BARRIER_FAULT_STORE forces one)."""
STORE_ENV = "DELTA_BARRIER_FAULT_STORE"
CHILD_LEASE_TTL = 1.0
TAKEOVER_WAIT = CHILD_LEASE_TTL + 0.5
CHILD_TIMEOUT = 420
SEEDS_ENV = "DELTA_BARRIER_FAULT_SEEDS"
PLAYED: list[Outcome] = []
"""Every scenario played in this process (the session summary reads it)."""
REPORT_PATH: str | None = None
SOURCE_ONLY_POINTS = {"after_slice_recorded", "between_micro_batches", "after_processed"}
"""Points that only source jobs reach (other points, including new ones, go to any job):
slices, micro-batches, and PROCESSED recorded before the seal (a source job's gate or its
earlier micro-batches; a job without either is sealed right after its commit)."""


# -- scenarios ---------------------------------------------------------------------------


FINISHED = (ExitCode.OK, ExitCode.BLOCKED)
"""Exit codes of a child run that ended normally: done, or stopped at the block gate."""


@dataclass(frozen=True)
class Fault:
    action: str  # crash | pause | fail (a transform raising while its marker exists)
    point: str  # a fault point, or "transform" for fail
    job: str
    epoch: int
    nth: int = 1

    @property
    def spec(self) -> str:
        return f"{self.action}:{self.point}@{self.job}:{self.epoch}#{self.nth}"

    def key(self) -> tuple:
        return (self.action, self.point, self.job, self.epoch, self.nth)


@dataclass(frozen=True)
class Scenario:
    seed: int
    kind: str
    injection: str
    faults: tuple[Fault, ...]
    open_ahead: bool
    """Open every later epoch before the recovery run: the recovery then catches up a
    backlog (coalescing, BACKLOG_THRESHOLD) instead of one epoch at a time."""
    late_zombie: bool = False
    catalog: str = "sqlite"
    store: str = "local"
    """Where the warehouse is: ``local`` (a directory) or ``s3`` (a prefix on the S3 server)."""
    zombie_first: bool = True
    """zombie_race: wake the superseded runner before the new owner (else after it)."""

    @property
    def epoch(self) -> int:
        return self.faults[0].epoch

    @property
    def schedule(self) -> tuple:
        return tuple(f.key() for f in self.faults)

    def describe(self) -> str:
        extra = " open-ahead" if self.open_ahead else ""
        extra += " late-zombie" if self.late_zombie else ""
        if self.injection == "zombie_race":
            extra += " zombie-woken-first" if self.zombie_first else " owner-woken-first"
        faults = "; ".join(f.spec for f in self.faults)
        return (
            f"seed {self.seed}: {self.kind} {self.injection} [{faults}]{extra} "
            f"({self.catalog}, {self.store})"
        )


def _pick_fault(rng: random.Random, kind: str, action: str, epoch: int | None = None) -> Fault:
    point = rng.choice(FAULT_POINTS)
    jobs = [j for j in P.JOBS[kind] if point not in SOURCE_ONLY_POINTS or j in P.SOURCE_JOBS]
    job = rng.choice(jobs)
    if epoch is None:
        # The kafka block gate holds the last epoch of orders: downstream never reaches it
        # before the release run, so faults there would not fire.
        last = P.EPOCHS if (kind == "files" or job in P.SOURCE_JOBS) else P.EPOCHS - 1
        epoch = rng.randint(1, last)
    nth = 1
    if job in P.MICRO_BATCH_JOBS and point in ("before_commit", "after_commit"):
        nth = rng.choice((1, 1, 2, 3))
    return Fault(action, point, job, epoch, nth)


def generate(seed: int, store: str | None = None) -> Scenario:
    """The scenario of a seed. Pipeline and injection cycle with the seed (10 consecutive
    seeds cover every pair); point, job, epoch and count are drawn from the seed, and so is
    the store unless ``store`` forces it. An S3 warehouse has its catalog on PostgreSQL."""
    scenario = _generate(seed)
    if store is None:
        draw = random.Random(f"delta-barrier-faults-store-{seed}").random()
        store = "s3" if draw < S3_SHARE else "local"
    if store not in STORES:
        raise ValueError(f"store {store!r}: use one of {STORES}")
    if store == "s3":
        return replace(scenario, store=store, catalog="postgres")
    return scenario


def _generate(seed: int) -> Scenario:
    rng = random.Random(f"delta-barrier-faults-{seed}")
    kind = P.KINDS[seed % len(P.KINDS)]
    injection = INJECTIONS[(seed // len(P.KINDS)) % len(INJECTIONS)]
    open_ahead = rng.random() < 0.5
    # Its own generator: the draws below stay those of earlier campaigns' seeds.
    catalog = (
        "postgres"
        if injection in ZOMBIE_INJECTIONS
        else random.Random(f"delta-barrier-faults-catalog-{seed}").choice(CATALOGS)
    )
    if injection == "job_failure":
        job = rng.choice(P.JOBS[kind])
        fault = Fault("fail", "transform", job, rng.randint(1, P.EPOCHS - 1))
        return Scenario(seed, kind, injection, (fault,), open_ahead=False, catalog=catalog)
    if injection == "zombie":
        fault = _pick_fault(rng, kind, "pause")
        return Scenario(
            seed,
            kind,
            injection,
            (fault,),
            open_ahead=open_ahead,
            late_zombie=rng.random() < 0.5,
            catalog=catalog,
        )
    if injection == "zombie_race":
        # Half the time in epoch 1, where every table of the job is created by its first
        # commit; at any of the job's commits (a side output's create included).
        # Half the time just before one of its commits (the next one a create, in epoch 1).
        epoch = 1 if rng.random() < 0.5 else None
        zombie = _pick_fault(rng, kind, "pause", epoch)
        if rng.random() < 0.5:
            zombie = replace(zombie, point="before_commit")
        if zombie.point in ("before_commit", "after_commit"):
            zombie = replace(zombie, nth=rng.choice((1, 2, 3)))
        points = [p for p in FAULT_POINTS if p not in SOURCE_ONLY_POINTS]
        point = "before_commit" if rng.random() < 0.5 else rng.choice(points)
        owner = Fault("pause", point, zombie.job, zombie.epoch, rng.choice((1, 2)))
        return Scenario(
            seed,
            kind,
            injection,
            (zombie, owner),
            open_ahead=open_ahead,
            catalog=catalog,
            zombie_first=rng.random() < 0.5,
        )
    first = _pick_fault(rng, kind, "crash")
    faults = (first,)
    if injection == "double_crash":
        # The second crash hits the replay: the same job and epoch, any point it can reach
        # again (its slice is already recorded, so not after_slice_recorded).
        points = [
            p
            for p in FAULT_POINTS
            if p != "after_slice_recorded"
            and (p not in SOURCE_ONLY_POINTS or first.job in P.SOURCE_JOBS)
        ]
        point = rng.choice(points)
        nth = 1
        if first.job in P.MICRO_BATCH_JOBS and point in ("before_commit", "after_commit"):
            nth = rng.choice((1, 1, 2, 3))
        faults += (Fault("crash", point, first.job, first.epoch, nth),)
    return Scenario(seed, kind, injection, faults, open_ahead=open_ahead, catalog=catalog)


def stores_from_env() -> tuple[str | None, ...]:
    """``DELTA_BARRIER_FAULT_STORE``: ``local`` or ``s3`` forces every seed's warehouse,
    ``both`` plays each seed on both; unset (or ``seed``): the seed's own draw (None)."""
    text = os.environ.get(STORE_ENV, "").strip().lower()
    if text in ("", "seed"):
        return (None,)
    if text == "both":
        return STORES
    if text in STORES:
        return (text,)
    raise ValueError(f"{STORE_ENV}={text!r}: use local, s3, both or seed")


def scenarios_from_env(
    default: list[tuple[int, str | None]],
) -> list[tuple[int, str | None]]:
    """The (seed, store) pairs to play: ``default`` unless the environment names seeds or a
    store (then every seed, by default those of ``default``, on each store it names)."""
    stores = stores_from_env()
    if not os.environ.get(SEEDS_ENV, "").strip() and stores == (None,):
        return list(default)
    seeds = seeds_from_env(list(dict.fromkeys(seed for seed, _ in default)))
    return [(seed, store) for seed in seeds for store in stores]


def seeds_from_env(default: list[int]) -> list[int]:
    """``DELTA_BARRIER_FAULT_SEEDS``: a count N (seeds 0..N-1), ``a-b``, or ``a,b,c``
    (one seed: ``7,``)."""
    text = os.environ.get(SEEDS_ENV, "").strip()
    if not text:
        return list(default)
    if "," in text:
        return [int(s) for s in text.split(",") if s.strip()]
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return list(range(int(text)))


# -- reading tables ----------------------------------------------------------------------

Rows = list[tuple]


def _freeze(value):
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def normalize(table, *, with_epoch: bool) -> Rows:
    """An Arrow table as sorted rows of (column, value) pairs, without the columns that
    legitimately differ between runs (and without ``_epoch`` unless asked)."""
    drop = set(P.DROPPED_COLUMNS) | (set() if with_epoch else {"_epoch"})
    rows = [
        tuple(sorted((k, _freeze(v)) for k, v in row.items() if k not in drop))
        for row in table.to_pylist()
    ]
    return sorted(rows, key=repr)


def rows_at(location: str, version: int | None, *, with_epoch: bool) -> Rows:
    if version is None:
        return []
    return normalize(read_arrow(location, version=version), with_epoch=with_epoch)


def diff(actual: Rows, expected: Rows, limit: int = 3) -> str:
    a, e = Counter(actual), Counter(expected)
    extra = sorted((a - e).elements(), key=repr)
    missing = sorted((e - a).elements(), key=repr)
    return (
        f"{len(actual)} rows vs {len(expected)} expected; "
        f"unexpected {len(extra)}: {[dict(r) for r in extra[:limit]]}; "
        f"missing {len(missing)}: {[dict(r) for r in missing[:limit]]}"
    )


@dataclass
class Reference:
    """A run without faults: every table's content at each epoch it sealed, and at the end."""

    kind: str
    by_epoch: dict[str, dict[int, Rows]]
    final: dict[str, Rows]
    seconds: float


def table_contents(catalog, tables: list[str]) -> dict[str, dict[int, Rows]]:
    out: dict[str, dict[int, Rows]] = {}
    for table in tables:
        location = catalog.get_table(table).location
        out[table] = {
            s.epoch: rows_at(location, s.delta_version, with_epoch=False)
            for s in catalog.table_epochs(table)
            if s.state is EpochState.WRITTEN
        }
    return out


def final_contents(catalog, tables: list[str], *, with_epoch: bool = True) -> dict[str, Rows]:
    reader = snapshot(catalog, tables, "read-committed")
    return {t: normalize(reader.arrow(t), with_epoch=with_epoch) for t in tables}


# -- the reader thread -------------------------------------------------------------------


class ReaderThread(threading.Thread):
    """Polls read-committed and repeatable-read snapshots (delta-rs, no Spark) during the
    scenario and checks each table it read against the reference at the epoch it resolved."""

    def __init__(self, config: P.Config, reference: Reference, interval: float = 0.4):
        super().__init__(daemon=True, name="fault-reader")
        self.config = config
        self.reference = reference
        self.interval = interval
        self.stop = threading.Event()
        self.reads = Counter()
        self.violations: list[str] = []

    def run(self) -> None:
        catalog = self.config.open_catalog()
        tables = P.TABLES[self.config.kind]
        try:
            while not self.stop.wait(self.interval):
                for level in ("read-committed", "repeatable-read"):
                    self._read(catalog, tables, level)
        finally:
            catalog.close()

    def _read(self, catalog, tables, level) -> None:
        try:
            reader = snapshot(catalog, tables, level)
        except NoCommonEpochError:
            return
        except Exception as exc:  # noqa: BLE001 - reported as a violation
            self._violation(f"{level}: resolving a snapshot raised {type(exc).__name__}: {exc}")
            return
        for table in tables:
            epoch = (
                reader.epoch if level == "repeatable-read" else reader.snapshot.epochs.get(table)
            )
            if reader.versions.get(table) is None:
                # Sealed with no commit yet (or never sealed): empty. A table without a
                # first commit has no schema to read it with, so it is not read.
                if epoch is not None and self.reference.by_epoch[table].get(epoch):
                    self._violation(
                        f"{level}: {table} at epoch {epoch} has no version, the reference "
                        f"has {len(self.reference.by_epoch[table][epoch])} rows"
                    )
                self.reads[level] += 1
                continue
            try:
                rows = normalize(reader.arrow(table), with_epoch=False)
            except Exception as exc:  # noqa: BLE001 - reported as a violation
                self._violation(
                    f"{level}: reading {table} at version {reader.versions.get(table)} raised "
                    f"{type(exc).__name__}: {exc}"
                )
                continue
            self.reads[level] += 1
            if epoch is None:
                expected: Rows = []
            elif epoch not in self.reference.by_epoch[table]:
                self._violation(
                    f"{level}: {table} read at epoch {epoch} (version "
                    f"{reader.versions.get(table)}), an epoch the reference never sealed"
                )
                continue
            else:
                expected = self.reference.by_epoch[table][epoch]
            if rows != expected:
                self._violation(
                    f"{level}: {table} at epoch {epoch} (version {reader.versions.get(table)}) "
                    f"differs from the reference: {diff(rows, expected)}"
                )

    def _violation(self, text: str) -> None:
        if text not in self.violations and len(self.violations) < 20:
            self.violations.append(text)


# -- the driver --------------------------------------------------------------------------


@dataclass
class Outcome:
    scenario: Scenario
    fired: list[bool] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    reads: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def fired_schedule(self) -> tuple:
        return tuple(f.key() for f, ok in zip(self.scenario.faults, self.fired, strict=False) if ok)

    def report(self) -> str:
        lines = [
            f"{self.scenario.describe()}  ({self.seconds:.0f} s, fired {self.fired}, "
            f"reads {self.reads})"
        ]
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  FAIL: {f}" for f in self.failures]
        lines.append(
            f"  reproduce: {SEEDS_ENV}={self.scenario.seed}, {STORE_ENV}={self.scenario.store} "
            ".venv/bin/python -m pytest tests/faults/test_campaign.py -m faults"
        )
        return "\n".join(lines)


def child_env(fault_spec: str | None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    env.pop(FAULT_ENV, None)
    if fault_spec:
        env[FAULT_ENV] = fault_spec
    return env


class Driver:
    """Plays one scenario (or the reference, with ``scenario=None``) in ``root``."""

    def __init__(
        self,
        spark,
        root: Path,
        kind: str,
        *,
        broker=None,
        producer=None,
        catalog_url=None,
        warehouse_url=None,
    ):
        self.spark = spark
        topic = None
        if kind == "kafka":
            topic = f"faults_{uuid.uuid4().hex[:10]}"
            broker.create_topics({topic: P.KAFKA_PARTITIONS})
        self.config = P.Config(
            kind=kind,
            root=str(root),
            bootstrap=broker.bootstrap_servers if broker else None,
            topic=topic,
            catalog_url=catalog_url,
            warehouse_url=warehouse_url,
        )
        self.catalog = self.config.open_catalog()
        self.inputs = P.Inputs(self.config, producer)
        self.runner = P.make_runner(self.config, spark, catalog=self.catalog)
        self.opened = 0
        self.log: list[str] = []

    # -- steps ---------------------------------------------------------------------------

    def open(self, through: int) -> None:
        while self.opened < through:
            self.opened += 1
            P.open_epoch(self.runner, self.inputs, self.opened)

    def run(self, what: str, *, strict: bool = True, expect_ok: bool = True):
        """One in-process run: recover, then every pending batch (fresh runner: new owner)."""
        runner = P.make_runner(self.config, self.spark, catalog=self.catalog, strict=strict)
        with runner:
            result = runner.recover().merged(runner.run_pending())
        self.log.append(
            f"{what}: {len(result.batches)} batches, recovered "
            f"{[(s.table, s.action.value, s.epochs) for s in result.recovered]}, "
            f"failures {[f.error[:300] for f in result.failures]}"
        )
        if expect_ok and not result.ok:
            raise ScenarioError(
                f"{what} failed (a human would be needed): "
                + "; ".join(f"{f.job}@{f.epoch}: {f.error[:600]}" for f in result.failures)
            )
        return result

    def child(self, fault_spec: str | None) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(CHILD), self.config.to_json()],
            env=child_env(fault_spec),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def crash_child(self, fault: Fault) -> bool:
        """Run a child that should crash at ``fault``; True if it did (False: not reached)."""
        proc = self.child(fault.spec)
        _, err = proc.communicate(timeout=CHILD_TIMEOUT)
        if proc.returncode == FAULT_EXIT_CODE:
            self.log.append(f"child crashed at {fault.spec}")
            return True
        if proc.returncode in FINISHED:
            self.log.append(f"child never reached {fault.spec} (exit {proc.returncode})")
            return False
        raise ScenarioError(f"child run with {fault.spec} exited {proc.returncode}: {err[-1500:]}")

    def fingerprint(self) -> dict:
        """What a zombie must not change: each table's latest Delta version, and the
        catalog's states, history and validations of its epochs."""
        out = {}
        for table in P.TABLES[self.config.kind]:
            location = self.catalog.get_table(table).location
            out[table] = (
                table_version(location),
                [
                    (s.epoch, s.state.value, s.delta_version)
                    for s in self.catalog.table_epochs(table)
                ],
                len(self.catalog.state_history(table)),
                [(v.epoch, v.success) for v in self.catalog.validations(table)],
            )
        return out

    def finish(self) -> None:
        """Drain with the strict gate, release the kafka block with the relaxed one, and
        check that nothing is left to do (no manual step was needed)."""
        self.open(P.EPOCHS)
        self.run("drain")
        if self.config.kind == "kafka":
            self.run("release (relaxed gate)", strict=False)
        again = self.run("second drain", strict=False)
        if again.batches or again.recovered:
            raise ScenarioError(f"a second drain still had work: {self.log[-1]}")

    # -- the scenario --------------------------------------------------------------------

    def reference(self) -> Reference:
        start = time.monotonic()
        for epoch in range(1, P.EPOCHS + 1):
            self.open(epoch)
            self.run(f"reference epoch {epoch}")
        self.finish()
        tables = P.TABLES[self.config.kind]
        return Reference(
            self.config.kind,
            table_contents(self.catalog, tables),
            final_contents(self.catalog, tables),
            time.monotonic() - start,
        )

    def play(self, scenario: Scenario, outcome: Outcome) -> None:
        f = scenario.epoch
        for epoch in range(1, f):
            self.open(epoch)
            self.run(f"epoch {epoch}")
        if scenario.injection == "job_failure":
            self._job_failure(scenario, outcome)
        elif scenario.injection == "zombie":
            self.open(f)
            self._zombie(scenario, outcome)
        elif scenario.injection == "zombie_race":
            self.open(f)
            self._zombie_race(scenario, outcome)
        else:
            self.open(f)
            outcome.fired.append(self.crash_child(scenario.faults[0]))
            if scenario.open_ahead:
                self.open(P.EPOCHS)
            for second in scenario.faults[1:]:
                time.sleep(TAKEOVER_WAIT)
                outcome.fired.append(self.crash_child(second))
            time.sleep(TAKEOVER_WAIT)
            self.run("recovery run")
        for epoch in range(self.opened + 1, P.EPOCHS + 1):
            self.open(epoch)
            self.run(f"epoch {epoch}")
        self.finish()

    def _zombie(self, scenario: Scenario, outcome: Outcome) -> None:
        fault = scenario.faults[0]
        proc = self.child(fault.spec)
        try:
            stopped = wait_stopped(proc.pid, timeout=CHILD_TIMEOUT, poll=proc.poll)
            outcome.fired.append(stopped)
            if not stopped:
                _, err = proc.communicate(timeout=CHILD_TIMEOUT)
                self.log.append(f"zombie never reached {fault.spec} (exit {proc.returncode})")
                if proc.returncode not in FINISHED:
                    raise ScenarioError(f"child exited {proc.returncode}: {err[-1500:]}")
                return
            self.log.append(f"child paused at {fault.spec}")
            time.sleep(TAKEOVER_WAIT)  # its lease expires
            if scenario.open_ahead:
                self.open(P.EPOCHS)
            try:
                self.run("takeover run")
            except CatalogUnavailableError as exc:
                raise ScenarioError(
                    f"the takeover failed while the old runner was paused at {fault.spec}: "
                    f"the stopped process holds the catalog ({exc})"
                ) from exc
            if scenario.late_zombie:
                for epoch in range(self.opened + 1, P.EPOCHS + 1):
                    self.open(epoch)
                    self.run(f"epoch {epoch} (new owner)")
            before = self.fingerprint()
            os.kill(proc.pid, signal.SIGCONT)
            _, err = proc.communicate(timeout=CHILD_TIMEOUT)
            self.log.append(f"zombie woke and exited {proc.returncode}: {err.strip()[-300:]}")
            after = self.fingerprint()
            changed = {t: (before[t], after[t]) for t in before if before[t] != after[t]}
            if changed:
                outcome.failures.append(
                    "the zombie changed tables after it was superseded: "
                    + "; ".join(
                        f"{t}: latest version {b[0]} -> {a[0]}, states {b[1]} -> {a[1]}, "
                        f"history {b[2]} -> {a[2]}, validations {b[3]} -> {a[3]}"
                        for t, (b, a) in changed.items()
                    )
                )
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=30)

    def _zombie_race(self, scenario: Scenario, outcome: Outcome) -> None:
        zombie_fault, owner_fault = scenario.faults
        zombie = self.child(zombie_fault.spec)
        owner: subprocess.Popen | None = None
        try:
            stopped = wait_stopped(zombie.pid, timeout=CHILD_TIMEOUT, poll=zombie.poll)
            outcome.fired.append(stopped)
            if not stopped:
                _, err = zombie.communicate(timeout=CHILD_TIMEOUT)
                self.log.append(
                    f"zombie never reached {zombie_fault.spec} (exit {zombie.returncode})"
                )
                if zombie.returncode not in FINISHED:
                    raise ScenarioError(f"child exited {zombie.returncode}: {err[-1500:]}")
                return
            self.log.append(f"child paused at {zombie_fault.spec}")
            time.sleep(TAKEOVER_WAIT)  # its lease expires
            if scenario.open_ahead:
                self.open(P.EPOCHS)
            owner = self.child(owner_fault.spec)
            paused = wait_stopped(owner.pid, timeout=CHILD_TIMEOUT, poll=owner.poll)
            outcome.fired.append(paused)
            self.log.append(
                f"new owner paused at {owner_fault.spec}"
                if paused
                else f"new owner never reached {owner_fault.spec}"
            )
            order = [("zombie", zombie), ("new owner", owner)]
            if not scenario.zombie_first or not paused:
                order.reverse()
            for name, proc in order:
                os.kill(proc.pid, signal.SIGCONT)
                _, err = proc.communicate(timeout=CHILD_TIMEOUT)
                self.log.append(f"{name} woke and exited {proc.returncode}: {err.strip()[-300:]}")
                if "Traceback" in err:
                    outcome.failures.append(f"the {name} printed a traceback: {err[-1500:]}")
                if name == "new owner" and proc.returncode not in FINISHED:
                    outcome.failures.append(
                        f"the new owner failed (exit {proc.returncode}) where it should have "
                        f"recovered by itself: {err.strip()[-600:]}"
                    )
        finally:
            for proc in (zombie, owner):
                if proc is not None and proc.poll() is None:
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.kill()
                    proc.wait(timeout=30)

    def _job_failure(self, scenario: Scenario, outcome: Outcome) -> None:
        fault = scenario.faults[0]
        marker = self.config.markers / fault.job
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        runner = P.make_runner(self.config, self.spark, catalog=self.catalog)
        driver = self

        def open_next(barrier_ts=None):
            driver.opened += 1
            driver.inputs.place(driver.opened)
            epoch = driver.catalog.open_epoch(barrier_ts, pipeline=runner.catalog_pipeline)
            time.sleep(0.02)
            return epoch

        runner.open_epoch = open_next  # type: ignore[method-assign]
        result = runner.run_continuous(
            epoch_interval=0.5, stop=threading.Event(), max_epochs=P.EPOCHS - self.opened
        )
        failed = [x for x in result.failures if x.job == fault.job]
        outcome.fired.append(bool(failed))
        self.log.append(
            f"continuous run with {fault.job} failing: opened "
            f"{[e.id for e in result.epochs_opened]}, failures "
            f"{[(x.job, x.epoch) for x in result.failures]}"
        )
        others = [x for x in result.failures if x.job != fault.job]
        if others:
            outcome.failures.append(
                "other jobs failed in the continuous run: "
                + "; ".join(f"{x.job}@{x.epoch}: {x.error[:400]}" for x in others)
            )
        marker.unlink()
        self.run("rerun after the failure")

    # -- the oracle ----------------------------------------------------------------------

    def check(self, reference: Reference, outcome: Outcome) -> None:
        tables = P.TABLES[self.config.kind]
        states = {t: self.catalog.table_epochs(t) for t in tables}
        latest = self.catalog.latest_epoch()
        issued = latest.id if latest else 0
        for table in tables:
            coalesced = any(s.state is EpochState.COALESCED for s in states[table])
            # A backlog batch a..b labels its rows _epoch = b, where the reference (one epoch
            # per batch) has a..b: compare without _epoch where the table has coalesced epochs.
            actual = final_contents(self.catalog, [table], with_epoch=not coalesced)[table]
            expected = reference.final[table]
            if coalesced:
                expected = sorted(
                    (tuple(kv for kv in row if kv[0] != "_epoch") for row in expected), key=repr
                )
            if actual != expected:
                outcome.failures.append(
                    f"final {table} differs from the reference"
                    f"{' (without _epoch)' if coalesced else ''}: {diff(actual, expected)}"
                )
            bad = [
                (s.epoch, s.state.value)
                for s in states[table]
                if s.state in (EpochState.PROCESSED, EpochState.ROLLED_BACK)
            ]
            if bad:
                outcome.failures.append(f"{table} left epochs unsealed: {bad}")
            done = {
                s.epoch
                for s in states[table]
                if s.state in (EpochState.WRITTEN, EpochState.COALESCED)
            }
            first = self.catalog.get_table(table).first_epoch
            missing = [e for e in range(first, issued + 1) if e not in done]
            if missing:
                outcome.failures.append(f"{table} never sealed epochs {missing}")
            location = self.catalog.get_table(table).location
            untrue = [
                (s.epoch, s.rows, counted)
                for s in states[table]
                if s.state is EpochState.WRITTEN
                and s.delta_version is not None
                and s.rows
                != (counted := epoch_rows(location, version=s.delta_version, epoch=s.epoch))
            ]
            if untrue:
                outcome.failures.append(
                    f"{table}: sealed epochs whose recorded rows are not the table's "
                    f"(epoch, recorded, in the table): {untrue}"
                )
        if self.catalog.get_commit(issued) is None:
            outcome.failures.append(f"no COMMIT manifest for the last epoch {issued}")


class ScenarioError(AssertionError):
    """A run that should have succeeded did not, or a child died the wrong way."""


def invariant_failures(catalog, kind: str) -> list[str]:
    """What the inputs say the final tables must hold, independent of any run."""
    tables = P.TABLES[kind]
    reader = snapshot(catalog, tables, "read-committed")
    got = {t: reader.arrow(t).to_pylist() for t in tables}
    want = P.expected_invariants(kind)
    failures = []
    if kind == "files":
        ids = sorted(r["id"] for r in got["events"])
        if ids != want["events"]:
            failures.append(f"events ids {diff_ids(ids, want['events'])}")
        qids = sorted(r["id"] for r in got["events_quarantine"])
        if qids != want["events_quarantine"]:
            failures.append(f"events_quarantine ids {diff_ids(qids, want['events_quarantine'])}")
        totals = sorted((r["key"], r["total"], r["n"]) for r in got["totals"])
        if totals != want["totals"]:
            failures.append(f"totals {totals} != {want['totals']} (sums of the good input rows)")
    else:
        seen = Counter(
            (r["_kafka_partition"], r["_kafka_offset"]) for r in got["orders"]
        ) + Counter((r["partition"], r["offset"]) for r in got["orders_rejects"])
        dups = [k for k, n in seen.items() if n > 1]
        if dups or sum(seen.values()) != want["records"]:
            failures.append(
                f"orders + orders_rejects hold {sum(seen.values())} records "
                f"({len(dups)} duplicated, e.g. {dups[:3]}); {want['records']} were produced"
            )
        sums: dict[str, float] = {}
        for r in got["orders"]:
            sums[r["customer"]] = sums.get(r["customer"], 0.0) + r["amount"]
        totals = {r["customer"]: r["total"] for r in got["customer_totals"]}
        if totals != sums:
            failures.append(f"customer_totals {totals} != sums of orders {sums}")
    return failures


def diff_ids(actual: list, expected: list) -> str:
    a, e = Counter(actual), Counter(expected)
    return f"unexpected {sorted((a - e).elements())[:5]}, missing {sorted((e - a).elements())[:5]}"


def play(
    spark,
    root: Path,
    scenario: Scenario,
    reference: Reference,
    *,
    broker=None,
    producer=None,
    catalog_url: str | None = None,
    warehouse_url: str | None = None,
) -> Outcome:
    """Play one scenario end to end and judge it; never raises for a finding."""
    outcome = Outcome(scenario)
    start = time.monotonic()
    driver = Driver(
        spark,
        root,
        scenario.kind,
        broker=broker,
        producer=producer,
        catalog_url=catalog_url,
        warehouse_url=warehouse_url,
    )
    reader = ReaderThread(driver.config, reference)
    reader.start()
    try:
        driver.play(scenario, outcome)
    except ScenarioError as exc:
        outcome.failures.append(str(exc))
    except Exception as exc:  # noqa: BLE001 - any crash of the driver is a finding
        outcome.failures.append(
            f"driver raised {type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
        )
    finally:
        reader.stop.set()
        reader.join(timeout=60)
    outcome.failures.extend(reader.violations)
    outcome.reads = dict(reader.reads)
    try:
        driver.check(reference, outcome)
    except Exception as exc:  # noqa: BLE001 - reported
        outcome.failures.append(
            f"the oracle could not read the tables: {type(exc).__name__}: {exc}"
        )
    outcome.notes.extend(driver.log)
    outcome.seconds = time.monotonic() - start
    return outcome


def summary(outcomes: list[Outcome]) -> str:
    schedules = {o.scenario.schedule for o in outcomes}
    fired = {o.fired_schedule for o in outcomes if o.fired_schedule}
    points = Counter(
        f[1] for o in outcomes for f, ok in zip(o.scenario.schedule, o.fired, strict=False) if ok
    )
    failed = [o for o in outcomes if o.failures]
    reads = Counter()
    for o in outcomes:
        reads.update(o.reads)
    return (
        f"fault campaign: {len(outcomes)} scenarios, {len(schedules)} distinct fault schedules "
        f"({len(fired)} whose faults fired), points fired {dict(points)}, "
        f"{sum(reads.values())} reads checked {dict(reads)}, "
        f"{len(failed)} scenarios failed (seeds {[o.scenario.seed for o in failed]}), "
        f"{sum(o.seconds for o in outcomes):.0f} s"
    )


def to_json(outcomes: list[Outcome]) -> str:
    return json.dumps(
        [
            {
                "seed": o.scenario.seed,
                "scenario": o.scenario.describe(),
                "schedule": o.scenario.schedule,
                "fired": o.fired,
                "failures": o.failures,
                "notes": o.notes,
                "reads": o.reads,
                "seconds": round(o.seconds, 1),
            }
            for o in outcomes
        ],
        indent=1,
    )
