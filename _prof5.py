import json, time
from datetime import datetime, UTC
from kafka import KafkaProducer
from etl.sources.kafka_broker import TansuBroker
from etl.sources import kafka as K
from etl.sources.base import SliceRequest
from etl.spark import build_spark
spark = build_spark(conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
def order(i): return json.dumps({"id": i, "name": f"n{i}", "amount": "1.50"}).encode()
with TansuBroker() as b:
    p = KafkaProducer(bootstrap_servers=b.bootstrap_servers, linger_ms=20, batch_size=512*1024)
    for round in range(4):
        topic=f"t{round}"
        b.create_topics({topic: 3})
        src = K.KafkaSource("s", topics=[topic], bootstrap_servers=b.bootstrap_servers, schema="id long not null, name string, amount decimal(10,2)", include={"partition","offset"})
        fs=[p.send(topic, order(i), partition=i%3) for i in range(600)]; p.flush()
        first = src.cut(SliceRequest(epoch=1, first_epoch=1, barrier_ts=datetime.now(UTC), previous_bounds=None))
        T=[time.time()]
        a = src.read(spark, first, epoch=1).rows; T.append(time.time())
        ra = sorted(a.select("_kafka_partition","_kafka_offset","id").collect()); T.append(time.time())
        bb = src.read(spark, first, epoch=1).rows; T.append(time.time())
        rb = sorted(bb.select("_kafka_partition","_kafka_offset","id").collect()); T.append(time.time())
        ids = sorted(r["id"] for r in a.select("id").collect()); T.append(time.time())
        print(" ".join(f"{T[i+1]-T[i]:.2f}" for i in range(len(T)-1)), len(ra), ra==rb)
