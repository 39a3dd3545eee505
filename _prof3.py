import json, time
from kafka import KafkaProducer, KafkaConsumer, TopicPartition
from etl.sources.kafka_broker import TansuBroker
with TansuBroker() as b:
    b.create_topics({"t": 1})
    p = KafkaProducer(bootstrap_servers=b.bootstrap_servers, linger_ms=20, batch_size=512*1024)
    for i in range(2000): p.send("t", json.dumps({"id": i}).encode(), partition=0)
    p.flush()
    for opts in [{}, {"api_version": (2, 8)}, {"fetch_max_wait_ms": 10}]:
        t0=time.time()
        c = KafkaConsumer(bootstrap_servers=b.bootstrap_servers, group_id=None, enable_auto_commit=False, auto_offset_reset="none", **opts)
        tp=TopicPartition("t",0); c.assign([tp]); c.seek(tp, 0)
        t1=time.time()
        for k in range(5):
            r=c.poll(timeout_ms=100); 
            print(opts, k, f"{time.time()-t1:.3f}", sum(len(v) for v in r.values()), c.position(tp), f"{time.time()-t1:.3f}")
        c.close()
