"""Issue 28: the JVM calls' plain arguments skip Py4J's input converters; the others
(lists, dicts, dates) are still converted as PySpark expects."""

from __future__ import annotations

import datetime

import pytest

pytestmark = pytest.mark.spark


def test_plain_arguments_are_sent_as_they_are_and_the_rest_still_converted(spark):
    from py4j import protocol

    from etl.spark import pass_scalars_through

    pass_scalars_through()  # a second time registers nothing more
    first = protocol.INPUT_CONVERTER[0]
    assert sum(type(c) is type(first) for c in protocol.INPUT_CONVERTER) == 1
    for value in ("text", 7, 2.5, True, None):
        assert first.can_convert(value) and first.convert(value, None) is value
    for value in ([1], {"a": 1}, datetime.date(2024, 1, 1), b"x", type("S", (str,), {})("s")):
        assert not first.can_convert(value), value
    jvm = spark.sparkContext._jvm
    assert jvm.java.lang.String.valueOf(True) == "true"
    assert jvm.java.lang.Integer.toString(41) == "41"
    assert jvm.java.util.Collections.max([3, 9, 4]) == 9  # a list, still a java.util.List
    assert jvm.java.util.HashMap({"k": "v"}).get("k") == "v"  # a dict, still a Map
    df = spark.createDataFrame([(datetime.date(2024, 1, 2), "a")], "d date, s string")
    assert df.where(df.d == datetime.date(2024, 1, 2)).count() == 1  # a date, converted
