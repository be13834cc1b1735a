"""The metric names a PromQL expression queries, for checking a Grafana dashboard
against what a running pulsys exports (test_grafana_dashboard.py).

A small tokenizer and one pass over the tokens, not a full PromQL parser: it knows the
grammar's places where a bare identifier is not a metric name (a function or aggregation
before its parenthesis, the label lists after by/without/on/ignoring/group_left/right,
label names inside a selector's braces, keywords) and takes every other identifier as a
metric name. What it cannot check it refuses with PromQLError rather than guess: a
selector that picks names with `__name__`, a Grafana variable where a name would be, an
unknown function, unbalanced brackets, an unterminated string, a character it does not
know (PromQL's `#` comments included). Grafana's variables are allowed where they stand for a value: inside strings
(`{instance=~"$instance"}`) and as a range (`[$__rate_interval]`).

Reference: https://prometheus.io/docs/prometheus/latest/querying/basics/ and
.../functions/ (the function list below), .../operators/ (aggregations and keywords).
"""

import re

FUNCTIONS = frozenset((
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "avg_over_time",
    "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time", "day_of_month",
    "day_of_week", "day_of_year", "days_in_month", "deg", "delta", "deriv", "exp", "floor",
    "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
    "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase", "irate",
    "label_join", "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time",
    "max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear", "present_over_time",
    "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn", "sin", "sinh", "sort",
    "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time",
    "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
))
AGGREGATIONS = frozenset(("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                          "bottomk", "topk", "quantile", "limitk", "limit_ratio"))
GROUPING = frozenset(("by", "without", "on", "ignoring", "group_left", "group_right"))
KEYWORDS = frozenset(("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"))
# functions whose argument is a counter's (or a histogram series') increase over a range
COUNTER_FUNCTIONS = frozenset(("rate", "irate", "increase", "resets"))

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\[\]]*\])
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+(?![\w:]))
  | (?P<number>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<variable>\$\{?\w+\}?|\[\[\w+\]\])
  | (?P<op>==|!=|<=|>=|=~|!~|[-+*/%^<>=,(){}@])
""", re.X)
_DURATION = r"(?:\d+(?:ms|[smhdwy]))+|\$\{?\w+\}?"
_RANGE = re.compile(r"\[\s*(?:%s)\s*(?::\s*(?:%s)?\s*)?\]" % (_DURATION, _DURATION))


class PromQLError(ValueError):
    """The expression cannot be checked: the message says why and where."""


def tokens(expr):
    out, at = [], 0
    while at < len(expr):
        m = _TOKEN.match(expr, at)
        if m is None:
            what = "an unterminated string" if expr[at] in "\"'`" else "%r" % expr[at]
            raise PromQLError("%s at %d of %r" % (what, at, expr))
        if m.lastgroup != "space":
            out.append((m.lastgroup, m.group()))
        at = m.end()
    return out


def _balanced(toks, expr):
    stack = []
    pairs = {")": "(", "}": "{"}
    for kind, text in toks:
        if kind == "op" and text in "({":
            stack.append(text)
        elif kind == "op" and text in ")}":
            if not stack or stack.pop() != pairs[text]:
                raise PromQLError("unbalanced %r in %r" % (text, expr))
        elif kind == "range" and not _RANGE.fullmatch(text):
            raise PromQLError("range %s is not a duration or a Grafana variable in %r" % (text, expr))
    if stack:
        raise PromQLError("unclosed %r in %r" % (stack[-1], expr))


def metric_names(expr):
    """{name: in_counter_function} for every metric the expression selects: True when the
    selector is inside rate(), irate(), increase() or resets(). Raises PromQLError."""
    toks = tokens(expr)
    _balanced(toks, expr)
    names = {}
    calls = []                  # per open "(": the function it belongs to, or None
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else (None, None)
        if kind == "variable":
            raise PromQLError("Grafana variable %s where a metric name or value would be, in %r" % (text, expr))
        if kind == "op" and text == "{":             # label matchers: name op "value", ...
            j = i + 1
            while toks[j] != ("op", "}"):
                label = toks[j][1]
                if label == "__name__":
                    raise PromQLError("a selector that picks metric names by __name__ cannot be checked: %r" % expr)
                if toks[j][0] != "ident" or toks[j + 1][1] not in ("=", "!=", "=~", "!~") or \
                        toks[j + 2][0] != "string":
                    raise PromQLError("bad label matcher near %r in %r" % (label, expr))
                j += 3
                if toks[j] == ("op", ","):
                    j += 1
            i = j + 1
            continue
        if kind == "op" and text == "(":
            calls.append(None)
        elif kind == "op" and text == ")":
            calls.pop()
        elif kind == "ident":
            low = text.lower()
            if low in GROUPING:                       # by (label, ...): skip the list
                if nxt != ("op", "("):
                    raise PromQLError("%s without a label list in %r" % (text, expr))
                i = next(k for k in range(i + 1, len(toks)) if toks[k] == ("op", ")")) + 1
                continue
            if nxt == ("op", "("):
                if text not in FUNCTIONS and text not in AGGREGATIONS:
                    raise PromQLError("unknown function %s in %r" % (text, expr))
                calls.append(text)
                i += 2
                continue
            if text in AGGREGATIONS and nxt[1] in ("by", "without"):
                calls_next = text                     # sum by (le) (...): the call comes after the list
                close = next(k for k in range(i + 2, len(toks)) if toks[k] == ("op", ")"))
                if toks[close + 1:close + 2] != [("op", "(")]:
                    raise PromQLError("%s %s (...) without its argument in %r" % (text, nxt[1], expr))
                calls.append(calls_next)
                i = close + 2
                continue
            if low not in KEYWORDS:
                counted = any(c in COUNTER_FUNCTIONS for c in calls)
                names[text] = names.get(text, False) or counted
        i += 1
    if not names:
        raise PromQLError("no metric selected in %r" % expr)
    return names


def label_values_metric(query):
    """The metric of a Grafana variable's `label_values(metric, label)` query, or None
    for `label_values(label)`. Raises PromQLError for another query."""
    m = re.fullmatch(r"\s*label_values\(\s*(?:(.+?)\s*,\s*)?(\w+)\s*\)\s*", query)
    if m is None:
        raise PromQLError("not a label_values() query: %r" % query)
    return metric_names(m.group(1)) if m.group(1) else None
