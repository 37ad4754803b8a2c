"""`voicefactory bench`: numbers for every performance and reliability claim (docs/benchmarks.md).

One module per measurement, each `async def run(ctx) -> Outcome` against the real stack:
overhead, capacity, cache (locality), restart (locality), batching, memory, faults. The
runner (`runner.py`) calls them in order, merges their flat figures into one JSON object,
renders their tables as Markdown and their series as PNG plots. Pure helpers that the
measurements share (percentiles, the Zipf sampler, routing policies) live in `stats.py`,
`workload.py` and `routing.py` and are unit-tested without servers.
"""

# The measurements `voicefactory bench` runs, in the order it runs them: each is the module
# bench.<name>. Here, not in runner.py, so that the CLI's --only choices and help come from
# the same list without importing the measurements (and their clients) to parse arguments.
NAMES = (
    "overhead", "capacity", "cache", "restart", "batching", "memory", "faults",
    "fuzz",  # generated records on every topic a worker or the aggregator reads (24)
    "consent",  # issue 21: the consent threshold's FAR/FRR (espeak-ng speakers)
    "decode",  # CosyVoice's LLM stepping several texts at once (no Kafka or S3)
    "flow",  # CosyVoice's flow matching on several rows at once (upstream's source)
    "lanes",
    "gateway",  # a caller's first byte through the HTTP gateway (issue 15's target)
    "route",  # fleet routing: one narrator, one brand voice, a kill -9 (issue 20)
    "peers",  # last: it starts eight processes of its own
)
