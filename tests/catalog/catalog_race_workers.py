"""Worker functions the race tests run in separate processes (spawned, so importable)."""

from __future__ import annotations

import time

from catalog import (
    DeltaBarrierError,
    JobSpec,
    LeaseHeldError,
    SealRequest,
    TableSpec,
    load_catalog,
)


def open_epochs(results, url, start, count):
    catalog = load_catalog(url)
    start.wait()
    issued = [catalog.open_epoch() for _ in range(count)]
    results.put([(e.id, e.barrier_ts) for e in issued])
    catalog.close()


def register_job(results, url, start, job, output, inputs):
    catalog = load_catalog(url)
    start.wait()
    try:
        catalog.register_job(JobSpec(job, output, inputs=tuple(inputs)))
    except DeltaBarrierError as error:
        results.put((job, type(error).__name__, vars(error)))
    else:
        results.put((job, "registered", {}))
    finally:
        catalog.close()


def register_pipeline(results, url, start, pipeline, table):
    """Register pipeline ``pipeline``: job ``ingest`` of source ``files`` writing ``table``."""
    catalog = load_catalog(url)
    start.wait()
    try:
        catalog.register_pipeline(
            pipeline,
            [TableSpec(table, f"/w/{table}", kind="root")],
            [JobSpec("ingest", table, source="files")],
        )
    except DeltaBarrierError as error:
        results.put((pipeline, type(error).__name__, vars(error)))
    else:
        results.put((pipeline, "registered", {}))
    finally:
        catalog.close()


def _wait(event, what: str) -> None:
    """Wait for the other instance's step; a timeout is a failure that says which step."""
    if not event.wait(timeout=300):
        raise TimeoutError(f"timed out waiting for {what}")


def zombie(results, url, lease_ttl, a_ready, b_took_over, a_done):
    """Instance A: takes the lease, records an epoch, stalls past its lease, then seals."""
    catalog = load_catalog(url)
    lease = catalog.acquire_lease("ingest", "instance-a", ttl_seconds=lease_ttl)
    epoch = catalog.latest_epoch().id
    catalog.record_processed(
        "raw", epoch, delta_version=1, job="ingest", attempt=1, generation=lease.generation
    )
    a_ready.set()
    _wait(b_took_over, "B to take the lease over")
    try:
        catalog.seal("ingest", lease.generation, [SealRequest("raw", epoch, 1)])
    except DeltaBarrierError as error:
        results.put(("a", type(error).__name__, vars(error)))
    else:
        results.put(("a", "sealed", {}))
    finally:
        a_done.set()
        catalog.close()


def successor(results, url, a_ready, b_took_over, a_done):
    """Instance B: takes over the lease once A's expired, then replays and seals."""
    catalog = load_catalog(url)
    _wait(a_ready, "A to take the lease")
    while True:
        try:
            lease = catalog.acquire_lease("ingest", "instance-b", ttl_seconds=30)
            break
        except LeaseHeldError:
            time.sleep(0.05)
    b_took_over.set()
    _wait(a_done, "A to try its seal")
    epoch = catalog.latest_epoch().id
    catalog.record_processed(
        "raw", epoch, delta_version=2, job="ingest", attempt=2, generation=lease.generation
    )
    catalog.seal("ingest", lease.generation, [SealRequest("raw", epoch, 2, attempt=2)])
    results.put(("b", "sealed", {"generation": lease.generation}))
    catalog.close()


RACE_RULE = "race: keep nothing"


def pin_epochs(results, url, start, seed, rounds, max_epoch):
    """Pin random epochs; keep every other pin, release the rest at once."""
    import random

    from catalog import EpochExpiredError

    rng = random.Random(seed)
    catalog = load_catalog(url)
    start.wait()
    outcomes = []
    for i in range(rounds):
        epoch = rng.randint(1, max_epoch)
        try:
            pin = catalog.create_pin(
                pipeline=None,
                epoch=epoch,
                versions={"t": epoch},
                holder=f"w{seed}",
                ttl_seconds=600,
            )
        except EpochExpiredError as error:
            outcomes.append(("refused", epoch, error.rule))
            continue
        if i % 2:
            catalog.release_pin(pin)
            outcomes.append(("released", epoch, pin.id))
        else:
            outcomes.append(("kept", epoch, pin.id))
    results.put(("pinner", outcomes))
    catalog.close()


def expire_all(results, url, start, max_epoch, seed):
    """Expire every epoch in random small groups, as a retention sweep would."""
    import random

    rng = random.Random(seed)
    order = list(range(1, max_epoch + 1))
    rng.shuffle(order)
    catalog = load_catalog(url)
    start.wait()
    expired = []
    for i in range(0, len(order), 2):
        expired.extend(catalog.expire_epochs(order[i : i + 2], rule=RACE_RULE))
        time.sleep(0.01)  # let the pinners in between sweeps
    # A second sweep: epochs whose pins were released since may go now.
    expired.extend(catalog.expire_epochs(order, rule=RACE_RULE))
    results.put(("expirer", expired))
    catalog.close()
