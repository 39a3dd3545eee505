import json, time
from datetime import datetime, UTC
from kafka import KafkaProducer
from etl.sources.kafka_broker import TansuBroker
from etl.sources import kafka as K
from etl.sources.base import SliceRequest
from etl.spark import build_spark
t0=time.time()
spark = build_spark(conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
print("spark", time.time()-t0)
with TansuBroker() as b:
    b.create_topics({"t": 3})
    p = KafkaProducer(bootstrap_servers=b.bootstrap_servers, linger_ms=20, batch_size=512*1024)
    for i in range(600): p.send("t", json.dumps({"id": i}).encode(), partition=i%3)
    p.flush()
    src = K.KafkaSource("s", topics=["t"], bootstrap_servers=b.bootstrap_servers, schema="id long", max_records_per_task=400)
    for k in range(4):
        t0=time.time(); bounds = src.cut(SliceRequest(epoch=1, first_epoch=1, barrier_ts=datetime.now(UTC), previous_bounds=None)); t1=time.time()
        d = src.read(spark, bounds, epoch=1); t2=time.time()
        n = d.rows.count(); t3=time.time()
        r = d.rejects.count(); t4=time.time()
        ids = d.rows.select("id").collect(); t5=time.time()
        print(f"cut {t1-t0:.2f} read {t2-t1:.2f} count {t3-t2:.2f} rejects {t4-t3:.2f} collect {t5-t4:.2f}", n, r)
