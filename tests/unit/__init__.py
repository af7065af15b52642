"""Unit tests, broker-free, in rooms mirroring the package: tests/unit/<room>/test_<what>.py.

tests/README.md says which room a new test goes to; scripts/unit_rooms.py holds the rule and
tests/unit/house/test_rooms.py holds the tree to it.
"""
