"""Issue 28: the driver JVM answers each Python thread at once.

Py4J's JVM side sends an answer longer than its 8 KiB buffer in two writes; with Nagle's
algorithm on the second waits for the first one's ACK, which Linux delays by up to 40 ms.
``answer_without_delay`` turns Nagle off on both ends of the calling thread's connection,
and every thread that runs batches calls it: a thread that did not still has it on (the
negative), so the test sees the setting, not a timing.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable

import pytest

from catalog import load_catalog
from etl import FileSource, Pipeline, Runner
from etl.spark import answer_without_delay
from tests.support.chains import SCHEMA

pytestmark = pytest.mark.spark


def _no_delay(spark) -> tuple[bool, bool]:
    """TCP_NODELAY of the JVM's end and of this end of the calling thread's connection."""
    from py4j.java_gateway import JavaObject
    from py4j.protocol import GATEWAY_SERVER_OBJECT_ID

    client = spark.sparkContext._gateway._gateway_client
    server = JavaObject(GATEWAY_SERVER_OBJECT_ID, client)
    jvm_end = server.getCallbackClient().getPerThreadConnection().getSocket()
    python_end = client.get_thread_connection().socket
    return (
        bool(jvm_end.getTcpNoDelay()),
        bool(python_end.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)),
    )


def _in_new_thread(spark, before: Callable[[], None]) -> tuple[bool, bool, str]:
    """(the JVM end's TCP_NODELAY, this end's, a long answer) of a new thread's connection."""
    found: list = []

    def run() -> None:
        before()
        answer = spark.sparkContext._jvm.org.apache.commons.lang3.StringUtils.repeat("x", 20_000)
        found.append((*_no_delay(spark), answer))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    (result,) = found
    return result


def test_a_thread_that_asks_gets_its_answers_without_delay_and_whole(spark):
    jvm_end, python_end, answer = _in_new_thread(spark, lambda: answer_without_delay(spark))
    assert (jvm_end, python_end) == (True, True)
    assert answer == "x" * 20_000


def test_a_thread_that_does_not_ask_keeps_nagle_on_its_connection(spark):
    jvm_end, python_end, _ = _in_new_thread(spark, lambda: None)
    assert (jvm_end, python_end) == (False, False)


def test_asking_again_on_the_same_connection_costs_no_call_to_the_jvm(spark, monkeypatch):
    answer_without_delay(spark)
    import py4j.java_gateway

    def no_call(*args, **kwargs):
        raise AssertionError("the JVM was asked again")

    monkeypatch.setattr(py4j.java_gateway, "JavaObject", no_call)
    answer_without_delay(spark)


def test_every_batch_runs_on_a_connection_without_delay(spark, tmp_path):
    """A run's batches (two at a time, on the runner's threads) each find their thread's
    connection set up: a Python transform looks at its own."""
    incoming = tmp_path / "in"
    incoming.mkdir()
    pipeline = Pipeline("answers")
    source = FileSource("drops", path=incoming, format="json", schema=SCHEMA)
    pipeline.ingest("ingest", source=source, output="events")
    seen: list[tuple[str, tuple[bool, bool]]] = []
    for branch in ("a", "b", "c"):

        @pipeline.job(f"look_{branch}", output=f"seen_{branch}", inputs=["events"])
        def look(ctx, branch=branch):
            seen.append((threading.current_thread().name, _no_delay(spark)))
            return ctx.inputs["events"].select("id", "customer", "amount")

    catalog = load_catalog(None, warehouse=tmp_path / "wh")
    runner = Runner(
        pipeline, catalog=catalog, warehouse=str(tmp_path / "wh"), spark=spark, max_parallel_jobs=2
    )
    runner.register()
    for epoch in range(2):
        row = {"id": epoch, "customer": 1, "amount": 1.5}
        (incoming / f"{epoch}.json").write_text(json.dumps(row) + "\n")
        assert runner.run_once().ok
    catalog.close()
    assert len(seen) == 6
    assert {thread for thread, _ in seen} != {threading.main_thread().name}
    assert {setting for _, setting in seen} == {(True, True)}, seen
