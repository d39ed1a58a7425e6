"""The `bench` floor: measuring: the scenario bench, local against remote compared, and the benchmarks run as
`python -m app.bench NAME` (they print ratios measured side by side in one run)."""
