"""The full run-state reduction on the runfacts engine: the real run decider (project venv);
--view also publishes the user view in the same transaction, as the production worker does."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_common import Progress  # noqa: E402
from decider_load import CTX, SOURCE_KEYS  # noqa: E402

from runfacts.processors.decider.app import DeciderShell  # noqa: E402
from runfacts.processors.engine.runner import Engine  # noqa: E402
from runfacts.processors.engine.settings import EngineSettings  # noqa: E402
from runfacts.projections.user_view import publisher  # noqa: E402
from runfacts.topics import TopicNames  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "prefix", "guarantee", "state_dir", "progress"):
        parser.add_argument(f"--{name.replace('_', '-')}", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--view", action="store_true", help="publish the user view, as the worker does")
    parser.add_argument("--signed", action="store_true", help="verify every command's source signature")
    args = parser.parse_args()
    progress = Progress(args.progress, args.expect)
    names = TopicNames(args.prefix)
    views = (publisher(names.user_view),) if args.view else ()
    app = DeciderShell(names, CTX, views=views, sources=SOURCE_KEYS if args.signed else None).application()
    inner = app.process

    def process(record, ctx) -> None:
        inner(record, ctx)
        progress.tick()

    settings = EngineSettings(bootstrap_servers=args.bootstrap, state_dir=Path(args.state_dir),
                              guarantee=args.guarantee, instance_id=args.prefix)
    Engine(dataclasses.replace(app, process=process), settings).run()


if __name__ == "__main__":
    main()
