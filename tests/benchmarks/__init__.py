"""Tests of the benchmarks' own arithmetic: goals and the scaling chart (no benchmark runs)."""
