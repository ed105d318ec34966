"""Benchmarks of switchyard, one module per scenario on one shared harness; run `python -m benchmarks --help`."""
