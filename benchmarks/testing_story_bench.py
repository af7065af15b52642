"""CPU of the guide's story on `runfacts.testing` (bar: < 1 s of CPU; docs/testing.md).

    python benchmarks/testing_story_bench.py [--rounds 5]

The story is docs/guide.md sections 2-5 (a refund proposed, approved, paid and the run
completed; a refund rejected and the run failed) against a `TestStack` serving a plain-Python
refund tool (tests/testing_support.py), through the same client API as production. Printed:
the process CPU (`time.process_time`) of the imports, of the first story in the process
(stack construction included: the processors' readers compile once per process) and of the
following rounds (median, max). Nothing is asserted here: it is a measurement.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "integration")]
    started = time.process_time()
    from test_testing_agrees import guide_story  # noqa: PLC0415 - the story as the agreement test runs it
    from testing_support import Shop  # noqa: PLC0415

    from runfacts.testing import TestStack  # noqa: PLC0415
    imported = time.process_time()
    rounds = []
    for _ in range(args.rounds + 1):
        begin = time.process_time()
        shop = Shop()
        with TestStack(shop.registry) as stack:
            runs = guide_story(stack.client())
            assert [stack.states()[r].status for r in runs] == ["completed", "failed"] and len(shop.ledger) == 1
        rounds.append(time.process_time() - begin)
    print(f"imports: {imported - started:.3f} s CPU")
    print(f"first story (stack included): {rounds[0]:.3f} s CPU")
    print(f"next {args.rounds} stories: median {statistics.median(rounds[1:]):.3f} s, max {max(rounds[1:]):.3f} s CPU")


if __name__ == "__main__":
    main()
