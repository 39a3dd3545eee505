import json, time, logging
from datetime import datetime, UTC
from kafka import KafkaProducer, KafkaConsumer
from etl.sources.kafka_broker import TansuBroker
from etl.sources import kafka as K
from etl.sources.base import SliceRequest
from pyspark.sql.types import StructType, StructField, LongType, StringType
with TansuBroker() as b:
    b.create_topics({"t": 1})
    p = KafkaProducer(bootstrap_servers=b.bootstrap_servers, linger_ms=20, batch_size=512*1024)
    for i in range(2000): p.send("t", json.dumps({"id": i}).encode(), partition=0)
    p.flush()
    schema = StructType([StructField("id", LongType())])
    src = K.KafkaSource("s", topics=["t"], bootstrap_servers=b.bootstrap_servers, schema=schema, max_records_per_task=400)
    t0=time.time(); bounds = src.cut(SliceRequest(epoch=1, first_epoch=1, barrier_ts=datetime.now(UTC), previous_bounds=None)); print("cut", time.time()-t0)
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema
    union = src._union_schema()
    plan = K._TaskPlan(source="s", consumer=src._consumer_config(), pieces=(K._Range("t",0,0,400),K._Range("t",0,400,800)), value_format="json", key_format="string", payload=schema, event_time_column=None, late_before_us=None, reject_late=False, arrow_schema=to_arrow_schema(union, timezone="UTC"), timeout_s=60)
    t0=time.time()
    c = KafkaConsumer(**plan.consumer); print("consumer", time.time()-t0)
    for piece in plan.pieces:
        t0=time.time(); n=sum(b.num_rows for b in plan._read_piece(c, piece)); print("piece", n, time.time()-t0)
