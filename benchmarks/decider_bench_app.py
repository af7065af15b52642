"""The full run-state reduction on the runfacts engine: the real run decider (project venv)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import Progress  # noqa: E402
from decider_load import CTX  # noqa: E402

from runfacts.processors.decider_app import DeciderShell  # noqa: E402
from runfacts.processors.engine import Engine  # noqa: E402
from runfacts.processors.settings import EngineSettings  # noqa: E402
from runfacts.topics import TopicNames  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "prefix", "guarantee", "state_dir", "progress"):
        parser.add_argument(f"--{name.replace('_', '-')}", required=True)
    parser.add_argument("--expect", type=int, required=True)
    args = parser.parse_args()
    progress = Progress(args.progress, args.expect)
    app = DeciderShell(TopicNames(args.prefix), CTX).application()
    inner = app.process

    def process(record, ctx) -> None:
        inner(record, ctx)
        progress.tick()

    settings = EngineSettings(bootstrap_servers=args.bootstrap, state_dir=Path(args.state_dir),
                              guarantee=args.guarantee, instance_id=args.prefix)
    Engine(dataclasses.replace(app, process=process), settings).run()


if __name__ == "__main__":
    main()
