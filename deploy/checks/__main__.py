"""`python -m deploy.checks [CHECK ...]` runs the checks; `sync-rules` regenerates the
PrometheusRule from deploy/prometheus/alerts.yml, `sync-strimzi` the prod overlay's
KafkaTopics and KafkaUsers from topics/specs.py and topics/acls.py. Exit 0 when every check
passes, 1 if any fails, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from deploy.checks import rules, runner, strimzi


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.checks",
                                     description="Validate deploy/ statically.")
    parser.add_argument("checks", nargs="*", metavar="CHECK",
                        help=f"sync-rules, sync-strimzi, or some of: "
                             f"{', '.join(runner.CHECKS)} (default all)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="checkout to check")
    args = parser.parse_args(argv)
    layout = runner.Layout(root=args.root.resolve())
    if args.checks == ["sync-rules"]:
        changed = rules.sync(layout.rules_file, layout.prometheus_rule)
        print(f"{layout.prometheus_rule}: {'rewritten' if changed else 'up to date'}")
        return 0
    if args.checks == ["sync-strimzi"]:
        changed = strimzi.sync(layout.strimzi)
        print(f"{layout.strimzi}: {'rewritten' if changed else 'up to date'}")
        return 0
    unknown = sorted(set(args.checks) - runner.CHECKS.keys())
    if unknown:
        parser.error(f"unknown check(s): {', '.join(unknown)}")
    failed = 0
    for outcome in _timed(layout, args.checks or None):
        if not outcome.ok:
            failed += 1
    print(f"{len(runner.CHECKS) if not args.checks else len(args.checks)} checks, "
          f"{failed} failed")
    return 1 if failed else 0


def _timed(layout: runner.Layout, only: list[str] | None) -> list[runner.Outcome]:
    outcomes = []
    for name in runner.CHECKS:
        if only and name not in only:
            continue
        started = time.monotonic()
        [outcome] = runner.run_all(layout, [name])
        took = time.monotonic() - started
        print(f"{'ok  ' if outcome.ok else 'FAIL'} {name:12} {took:5.1f} s", flush=True)
        for problem in outcome.problems:
            print("     " + problem.replace("\n", "\n     "), file=sys.stderr, flush=True)
        outcomes.append(outcome)
    return outcomes


if __name__ == "__main__":
    sys.exit(main())
