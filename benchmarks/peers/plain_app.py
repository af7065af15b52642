"""The benchmark reduction as a hand-written confluent-kafka loop, no engine (two rows).

Batch consume, the shared decode + reduce, one produce per input and, every 100 ms (runfacts'
commit interval), a Kafka transaction with the input offsets (exactly-once) or a flush and an
offset commit (at-least-once). The state lives in
  --state rocksdb  one rocksdict, read and written per record: the "plain confluent-kafka
                   transactional loop with rocksdict" the engine issue started from;
  --state memory   a dict that is never written anywhere: the floor, what any engine on
                   confluent-kafka and CPython pays before it keeps state at all.
Both do LESS than an engine row: no changelog, no store/offset atomicity, no restore, no dead
letters, no rebalance handling (a crash loses or doubles state). They are reference points
for CPU per event, not competitors.
"""

from __future__ import annotations

import argparse
import signal
import time
from collections import deque
from itertools import groupby
from typing import Any

from bench_common import Progress, decode, reduce
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from rocksdict import Options, Rdict

COMMIT_INTERVAL_S = 0.1
_error, _partition = Message.error, Message.partition


class Loop:
    """consume -> decode + reduce + produce per record -> commit every COMMIT_INTERVAL_S."""

    def __init__(self, args: argparse.Namespace, state: Any) -> None:
        self.args, self.state = args, state
        self.eos = args.guarantee == "exactly_once"
        self.consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed" if self.eos else "read_uncommitted"})
        conf = {"bootstrap.servers": args.bootstrap, "linger.ms": 20, "enable.idempotence": True}
        self.producer = Producer({**conf, "transactional.id": args.group} if self.eos else conf)
        if self.eos:
            self.producer.init_transactions()
        self.consumer.subscribe([args.input])
        self.positions: dict[int, int] = {}
        self.stopping = False

    def run(self, progress: Progress) -> None:
        output, produce, get, state = self.args.output, self.producer.produce, self.state.get, self.state
        in_txn, last = False, time.monotonic()
        while not self.stopping:
            msgs = self.consumer.consume(1000, 0.01)
            if msgs and self.eos and not in_txn:
                self.producer.begin_transaction()
                in_txn = True
            if any(map(_error, msgs)):  # rare: consumer error events among the messages
                msgs = [m for m in msgs if m.error() is None]
            for msg in msgs:
                key, raw = msg.key(), msg.value()
                state[key], out = reduce(get(key), raw, decode(raw))
                produce(output, out, key)
                progress.tick()
            for partition, run in groupby(msgs, _partition):  # the batch's last offset per partition
                self.positions[partition] = deque(run, maxlen=1)[0].offset()
            if self.positions and time.monotonic() - last >= COMMIT_INTERVAL_S:
                self.commit()
                in_txn, last = False, time.monotonic()
        self.consumer.close()

    def commit(self) -> None:
        offsets = [TopicPartition(self.args.input, p, o + 1) for p, o in self.positions.items()]
        if self.eos:
            self.producer.send_offsets_to_transaction(offsets, self.consumer.consumer_group_metadata())
            self.producer.commit_transaction()
        else:
            self.producer.flush()
            self.consumer.commit(offsets=offsets, asynchronous=False)
        self.positions.clear()


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "guarantee", "state_dir", "progress"):
        parser.add_argument(f"--{name.replace('_', '-')}", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--state", choices=("rocksdb", "memory"), required=True)
    args = parser.parse_args()
    state: Any = Rdict(args.state_dir, Options(raw_mode=True)) if args.state == "rocksdb" else {}
    loop = Loop(args, state)
    signal.signal(signal.SIGTERM, lambda *_: setattr(loop, "stopping", True))
    loop.run(Progress(args.progress, args.expect))
    if args.state == "rocksdb":
        state.close()


if __name__ == "__main__":
    main()
