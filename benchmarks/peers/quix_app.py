"""The benchmark reduction on Quix Streams 3.28.1 (run in its own virtualenv)."""

from __future__ import annotations

import argparse

from bench_common import Progress, decode, reduce
from quixstreams import Application
from quixstreams.models.serializers import Deserializer
from quixstreams.state.rocksdb import RocksDBOptions


class AvroEnvelope(Deserializer):
    def __call__(self, value: bytes, ctx) -> tuple[bytes, dict]:
        return value, decode(value)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "guarantee", "state_dir", "progress"):
        parser.add_argument(f"--{name.replace('_', '-')}", required=True)
    parser.add_argument("--expect", type=int, required=True)
    args = parser.parse_args()
    progress = Progress(args.progress, args.expect)
    app = Application(
        broker_address=args.bootstrap, consumer_group=args.group,
        auto_offset_reset="earliest", state_dir=args.state_dir,
        processing_guarantee="exactly-once" if args.guarantee == "exactly_once"
        else "at-least-once",
        rocksdb_options=RocksDBOptions(dumps=lambda v: v, loads=lambda b: b),
    )
    source = app.topic(args.input, key_deserializer="bytes", value_deserializer=AvroEnvelope())
    sink = app.topic(args.output, key_serializer="bytes", value_serializer="bytes")

    def apply(value, state):
        raw, event = value
        new_state, out = reduce(state.get(b"run"), raw, event)
        state.set(b"run", new_state)
        progress.tick()
        return out

    app.dataframe(source).apply(apply, stateful=True).to_topic(sink)
    app.run()


if __name__ == "__main__":
    main()
