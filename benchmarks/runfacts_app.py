"""The benchmark reduction on the runfacts engine (run by engine_bench.py in the project venv)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import Progress, decode, reduce  # noqa: E402

from runfacts.processors.engine.api import Application, Source  # noqa: E402
from runfacts.processors.engine.runner import Engine  # noqa: E402
from runfacts.processors.engine.settings import EngineSettings  # noqa: E402


def build(args: argparse.Namespace) -> Application:
    progress = Progress(args.progress, args.expect)
    output = args.output

    def process(record, ctx) -> None:
        raw, event = record.value
        runs = ctx.store("runs")
        state, out = reduce(runs.get(record.key), raw, event)
        runs.put(record.key, state)
        ctx.emit(output, record.key, out)
        progress.tick()

    source = Source(args.input, value_deserializer=lambda raw: (raw, decode(raw)))
    return Application(name=args.group, sources=(source,), process=process, stores=("runs",))


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "input", "output", "group", "guarantee", "state_dir", "progress"):
        parser.add_argument(f"--{name.replace('_', '-')}", required=True)
    parser.add_argument("--expect", type=int, required=True)
    args = parser.parse_args()
    settings = EngineSettings(bootstrap_servers=args.bootstrap, state_dir=Path(args.state_dir),
                              guarantee=args.guarantee, instance_id=args.group)
    Engine(build(args), settings).run()


if __name__ == "__main__":
    main()
