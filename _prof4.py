import json, time, logging
from datetime import datetime, UTC
from kafka import KafkaProducer
from etl.sources.kafka_broker import TansuBroker
from etl.sources import kafka as K
from etl.sources.base import SliceRequest
def order(i): return json.dumps({"id": i, "name": f"n{i}", "amount": "1.50"}).encode()
with TansuBroker() as b:
    p = KafkaProducer(bootstrap_servers=b.bootstrap_servers, linger_ms=20, batch_size=512*1024)
    for round in range(3):
        topic=f"t{round}"
        b.create_topics({topic: 3})
        src = K.KafkaSource("s", topics=[topic], bootstrap_servers=b.bootstrap_servers, schema="id long", include={"partition","offset"})
        fs=[p.send(topic, order(i), partition=i%3) for i in range(600)]; p.flush()
        t0=time.time(); first = src.cut(SliceRequest(epoch=1, first_epoch=1, barrier_ts=datetime.now(UTC), previous_bounds=None)); t1=time.time()
        fs=[p.send(topic, order(i), partition=i%3) for i in range(600,900)]; p.flush()
        t2=time.time(); second = src.cut(SliceRequest(epoch=2, first_epoch=2, barrier_ts=datetime.now(UTC), previous_bounds=first)); t3=time.time()
        third = src.cut(SliceRequest(epoch=3, first_epoch=3, barrier_ts=datetime.now(UTC), previous_bounds=second)); t4=time.time()
        print(f"cut1 {t1-t0:.2f} cut2 {t3-t2:.2f} cut3 {t4-t3:.2f}")
