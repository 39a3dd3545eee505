import time, sys
from datetime import datetime, UTC
import bench.kafka_ingest_bench as B
from etl.sources.kafka_broker import TansuBroker
from etl.sources.kafka import KafkaSource
from etl.sources.base import SliceRequest
from etl.spark import build_spark
import pyspark.sql.dataframe as D
N=200_000
with TansuBroker() as b:
    b.create_topics({"bench": 4, "warmup": 4})
    print("produce", B._produce(b.bootstrap_servers, "bench", N))
    print("plain", N / B._plain_consume(b.bootstrap_servers, "bench", N))
    spark = build_spark(conf={"spark.ui.enabled": "false"})
    B._produce(b.bootstrap_servers, "warmup", 4000); B._source_ingest(spark, b.bootstrap_servers, "warmup")
    for k in range(2):
        s, r, j = B._source_ingest(spark, b.bootstrap_servers, "bench"); print("source", N/s)
    orig = D.DataFrame.localCheckpoint
    D.DataFrame.localCheckpoint = lambda self, eager=True: self
    src = KafkaSource("x", topics=["bench"], bootstrap_servers=b.bootstrap_servers, schema=B.SCHEMA)
    for k in range(2):
        t0=time.perf_counter()
        d = src.read(spark, src.cut(SliceRequest(epoch=1, first_epoch=1, barrier_ts=datetime.now(UTC), previous_bounds=None)), epoch=1)
        d.rows.write.format("noop").mode("overwrite").save()
        print("rows only, no checkpoint", N/(time.perf_counter()-t0))
