"""`voicefactory bench`: numbers for every performance and reliability claim (docs/benchmarks.md).

One module per measurement, each `async def run(ctx) -> Outcome` against the real stack:
overhead, capacity, cache (locality), restart (locality), batching, memory, faults. The
runner (`runner.py`) calls them in order, merges their flat figures into one JSON object,
renders their tables as Markdown and their series as PNG plots. Pure helpers that the
measurements share (percentiles, the Zipf sampler, routing policies) live in `stats.py`,
`workload.py` and `routing.py` and are unit-tested without servers.
"""
