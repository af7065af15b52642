"""`python -m runfacts.cli ...`: the same command tree as the `runfacts` console script."""

from runfacts.cli import main

main()
