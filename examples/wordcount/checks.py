"""The consistency checks of the word-count chain, computed in Spark on one snapshot."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import functions as F

from etl import SnapshotReader


@dataclass(frozen=True)
class Violations:
    """Rows that disagree: word counts vs words, count-of-counts vs word counts."""

    word_counts: int
    cnt_counts: int

    @property
    def total(self) -> int:
        return self.word_counts + self.cnt_counts


def violations(reader: SnapshotReader) -> Violations:
    words = reader.table("words")
    word_counts = reader.table("word_counts").select("word", "cnt")
    cnt_counts = reader.table("cnt_counts").select("cnt", "words")
    expected_counts = words.groupBy("word").agg(F.count(F.lit(1)).alias("expected"))
    bad_counts = expected_counts.join(word_counts, "word", "full_outer").where(
        ~F.col("expected").eqNullSafe(F.col("cnt"))
    )
    expected_cnt = word_counts.groupBy("cnt").agg(F.count(F.lit(1)).alias("expected"))
    bad_cnt = expected_cnt.join(cnt_counts, "cnt", "full_outer").where(
        ~F.col("expected").eqNullSafe(F.col("words"))
    )
    return Violations(word_counts=bad_counts.count(), cnt_counts=bad_cnt.count())
