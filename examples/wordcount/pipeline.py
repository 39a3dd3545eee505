"""FLIP-276's word-count chain.

Table1 ``words`` (one word per line of the text files dropped into ``input_dir``)
-> ETL1 (merge on ``word``) -> Table2 ``word_counts`` (word, cnt)
-> ETL2 (overwrite)         -> Table3 ``cnt_counts`` (cnt, words).

Run it:  etl run examples/wordcount/pipeline.py --once --param input_dir=./incoming
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from etl import EpochContext, FileSource, Pipeline, param


def build(input_dir: str, *, files_per_micro_batch: int | None = None) -> Pipeline:
    pipeline = Pipeline("wordcount")
    pipeline.ingest(
        "ingest_words",
        source=FileSource(
            "word_files",
            path=input_dir,
            format="text",
            column="word",
            files_per_micro_batch=files_per_micro_batch,
        ),
        output="words",
        transform=_clean_words,
    )

    @pipeline.job("etl1", output="word_counts", inputs=["words"], mode="merge", keys=["word"])
    def count_words(ctx: EpochContext) -> DataFrame:
        new = ctx["words"].groupBy("word").agg(F.count(F.lit(1)).alias("n"))
        if ctx.previous is None:
            return new.select("word", F.col("n").alias("cnt"))
        return new.join(ctx.previous, "word", "left").select(
            "word", (F.coalesce(F.col("cnt"), F.lit(0)) + F.col("n")).alias("cnt")
        )

    pipeline.sql(
        "etl2",
        output="cnt_counts",
        query="SELECT cnt, count(*) AS words FROM word_counts GROUP BY cnt",
        inputs=["word_counts"],
        mode="overwrite",
    )
    return pipeline


def _clean_words(ctx: EpochContext) -> DataFrame:
    words = ctx["word_files"].select(F.trim(F.col("word")).alias("word"))
    return words.where(F.col("word") != "")


pipeline = build(param("input_dir", "./incoming"))
