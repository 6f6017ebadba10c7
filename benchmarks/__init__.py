"""Scale benchmarks: generated inventories, the offline preview's cost, and a bring-up time model.

`python -m benchmarks.run` (`make bench`) writes docs/benchmarks.md.
"""
