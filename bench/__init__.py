"""Benchmarks: run as scripts with the repository on PYTHONPATH (see docs/benchmarks.md)."""
