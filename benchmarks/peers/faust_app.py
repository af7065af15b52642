"""The benchmark reduction on faust-streaming 0.15.3 (run in its own virtualenv)."""

from __future__ import annotations

import argparse
import sys

import faust
from bench_common import Progress, decode, reduce


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "guarantee", "state_dir", "progress"):
        parser.add_argument(f"--{name.replace('_', '-')}", required=True)
    parser.add_argument("--expect", type=int, required=True)
    args = parser.parse_args()
    progress = Progress(args.progress, args.expect)
    app = faust.App(
        args.group, broker=f"kafka://{args.bootstrap}", store="rocksdb://",
        datadir=args.state_dir, web_enabled=False, topic_partitions=6,
        topic_replication_factor=1, processing_guarantee=args.guarantee,
        consumer_auto_offset_reset="earliest",
    )
    source = app.topic(args.input, key_serializer="raw", value_serializer="raw")
    sink = app.topic(args.output, key_serializer="raw", value_serializer="raw")
    runs = app.Table("runs", default=None, partitions=6, key_type=bytes, value_type=bytes,
                     options={"driver": "rocksdict"})
    runs.key_serializer = runs.value_serializer = "raw"  # bytes in, bytes out, as for the others

    @app.agent(source)
    async def process(stream):
        async for key, raw in stream.items():
            event = decode(raw)
            state, out = reduce(runs.get(key), raw, event)
            runs[key] = state
            await sink.send(key=key, value=out)
            progress.tick()

    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn"]
    app.main()


if __name__ == "__main__":
    main()
