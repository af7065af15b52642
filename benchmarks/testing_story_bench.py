"""CPU of the guide's story on `runfacts.testing` (bar: < 1 s of CPU; docs/testing.md).

    python benchmarks/testing_story_bench.py [--rounds 5]

The story is docs/guide.md sections 2-5 (a refund proposed, approved, paid and the run
completed; a refund rejected and the run failed) against a `TestStack` serving a plain-Python
refund tool (tests/testing_support.py), through the same client API as production. Printed:
the machine's load average before and after, the process CPU (`time.process_time`) of the
imports, of the first story in the process (stack construction included: the processors' readers
compile once per process) and of the following rounds (median and range), and whether the bar
(< 1 s of CPU for the story, the first one included) holds. Nothing is asserted here: it is a
measurement (CPU, not wall time, so other work on the machine moves it little).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
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
    rest = rounds[1:]
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after ({os.cpu_count()} cores)")
    print(f"imports: {imported - started:.3f} s CPU")
    print(f"first story (stack included): {rounds[0]:.3f} s CPU")
    print(f"next {args.rounds} stories: median {statistics.median(rest):.3f} s, "
          f"range {min(rest):.3f}-{max(rest):.3f} s CPU")
    print(f"bar < 1 s of CPU: {'met' if max(rounds) < 1.0 else 'NOT met'} (worst story {max(rounds):.3f} s)")


if __name__ == "__main__":
    main()
