"""Benchmarks are code: each prints figures measured against a baseline in the same run."""
