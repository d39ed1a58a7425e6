"""Benchmarks, run as `python -m app.bench NAME`. They print ratios measured side by side in one run."""
