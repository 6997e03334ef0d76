"""Benchmarks: `python -m llada.bench decode|kernels|forward` (each writes JSON)."""
