"""Unit tests of the whole house: layering, doorways, purity, public API, the architecture map, docs lists."""
