"""The gate between a continuous run's batches and maintenance's commits."""

from __future__ import annotations

import threading
import time

from etl.retention.gate import BatchGate


def _back_to_back(gate: BatchGate, job: str, stop: threading.Event, log: list[str]) -> None:
    """A job whose batches follow each other with no pause between them."""
    while not stop.is_set():
        with gate.batch(job):
            log.append("start")
            time.sleep(0.01)
            log.append("end")


def test_maintenance_gets_its_commit_in_between_batches_run_back_to_back():
    gate, stop, log = BatchGate(), threading.Event(), []
    worker = threading.Thread(target=_back_to_back, args=(gate, "ingest", stop, log))
    worker.start()
    try:
        time.sleep(0.05)
        for _ in range(5):
            with gate.idle("ingest", wait=2.0) as free:
                assert free  # the batch in flight ended and the next waits
                log.append("commit")
                time.sleep(0.02)  # no batch starts meanwhile
                log.append("committed")
    finally:
        stop.set()
        worker.join()
    assert log.count("commit") == 5
    # every maintenance commit lies between two batches, none inside one
    depth = 0
    for event in log:
        depth += {"start": 1, "end": -1}.get(event, 0)
        if event in ("commit", "committed"):
            assert depth == 0, log
    assert log.count("start") > 5  # the job went on between the commits


def test_idle_gives_up_on_a_batch_that_keeps_running_and_lets_the_job_go_on():
    gate = BatchGate()
    started, release = threading.Event(), threading.Event()

    def long_batch() -> None:
        with gate.batch("ingest"):
            started.set()
            release.wait(5)

    worker = threading.Thread(target=long_batch)
    worker.start()
    started.wait(5)
    with gate.idle("ingest", wait=0.1) as free:
        assert not free
    release.set()
    worker.join()
    with gate.batch("ingest"):  # nothing is left waiting: the next batch starts
        pass
    with gate.idle("other", wait=0) as free:  # another job's batches are not in the way
        assert free
