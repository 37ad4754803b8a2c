"""Metric names a PromQL expression reads, and Grafana's template syntax turned into PromQL.

Data flow: `metric_names(expr)` blanks out what cannot hold a metric name (string literals,
`{...}` label matchers, `[...]` ranges, numbers and durations), then walks the identifiers
left: one followed by `(` is a function or aggregation, a keyword is skipped together with
the label list in parentheses after `by`/`without`/`on`/`ignoring`/`group_*`, one followed
by `by`/`without` is an aggregation (`sum by (le) (...)`), and whatever remains is a metric
selector. Syntax is not judged here: promtool parses every expression
(deploy.checks.runner); this only has to find names in expressions that parse.
"""

from __future__ import annotations

import re

__all__ = ["grafana_to_promql", "metric_names", "template_query_metrics"]

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_TOKEN = re.compile(r"(?P<num>\d[\w.]*)|(?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)|(?P<other>\S)")
_LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = _LABEL_LIST_KEYWORDS | {"and", "or", "unless", "bool", "offset", "atan2", "inf",
                                    "nan", "start", "end", "@"}

# Grafana's built-in interval variables; any of them is a duration to PromQL.
_GRAFANA_INTERVALS = re.compile(r"\$\{?__(?:rate_interval|interval|range)(?:_ms|_s)?\}?")
_GRAFANA_VAR = re.compile(r"\$\{[A-Za-z0-9_]+(?::[A-Za-z]+)?\}|\$[A-Za-z_][A-Za-z0-9_]*")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?P<query>.+?)\s*(?:,\s*[A-Za-z_]\w*\s*)?\)\s*$")
_OTHER_TEMPLATE_FUNCS = re.compile(r"^\s*(?:metrics|query_result)\((?P<query>.+)\)\s*$")


def grafana_to_promql(expr: str) -> str:
    """Replace Grafana variables so the text is plain PromQL that promtool can parse.

    Interval variables become `5m`; other variables only appear inside label matchers'
    quoted values in our dashboards, where any text is valid.
    """
    return _GRAFANA_VAR.sub("grafana_var", _GRAFANA_INTERVALS.sub("5m", expr))


def metric_names(expr: str) -> set[str]:
    text = _STRING.sub('""', grafana_to_promql(expr))
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)  # brackets never nest in PromQL, subqueries included
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(text)]
    names: set[str] = set()
    i = 0
    while i < len(tokens):
        kind, value = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "ident" and value in _LABEL_LIST_KEYWORDS and following == "(":
            i = _skip_group(tokens, i + 1)
            continue
        # `sum by (x) (...)`: an aggregation whose grouping comes before its argument.
        if kind == "ident" and value not in _KEYWORDS and following not in (
                "(", "by", "without"):
            names.add(value)
        i += 1
    return names


def template_query_metrics(query: str) -> set[str]:
    """Metric names read by a Grafana Prometheus template variable's query."""
    match = _LABEL_VALUES.match(query) or _OTHER_TEMPLATE_FUNCS.match(query)
    if match is None:
        return metric_names(query)
    inner = match.group("query")
    # label_values(label) alone reads no metric.
    if re.fullmatch(r"[A-Za-z_]\w*", inner) and _LABEL_VALUES.match(query):
        return set()
    return metric_names(inner)


def _skip_group(tokens: list[tuple[str | None, str]], start: int) -> int:
    """Index just past the parenthesized group that opens at `start`."""
    depth = 0
    for j in range(start, len(tokens)):
        if tokens[j][1] == "(":
            depth += 1
        elif tokens[j][1] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(tokens)
