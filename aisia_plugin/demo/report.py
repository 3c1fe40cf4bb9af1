"""What `aisia demo` says it learned from its conversing users (docs/demo.md): per alias, the share
of its frontier (most expensive) candidate on hard and on easy prompts, early and late in the run;
and the conversation signals the proxy read, by kind and language, from its ``/aisia/metrics``.

Plain functions over the run's turns (conversing.Turn) and what the proxy answers; HTTP only."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from typing import Callable, Iterable, Mapping, Optional

from .conversing import COMPLAINT, REGENERATE, THANKS_AND_QUESTION, THANKS_ONLY, Turn
from .scenario import TRAFFIC_MIX, DemoError, _http, _render

SIGNALS_METRIC = "aisia_conversation_signals_total"
# An attempt's outcome learned as not its deployment's fault (metrics.Metrics.outcome's result).
OUTCOMES_METRIC = "aisia_outcomes_total"
UNCOUNTED_RESULT = "client_error"
# How long the demo waits for the proxy's conversation steps (run after each answer) to settle.
SETTLE_LIMIT_S = 15.0
SETTLE_EVERY_S = 0.5


def blended_price(upstream: Mapping) -> float:
    """A provider's price per 1M tokens as the router blends it (3:1 input:output)."""
    return 0.75 * float(upstream["input_cost_per_1m"]) + 0.25 * float(upstream["output_cost_per_1m"])


def candidates_by_alias(explained: Iterable[Mapping]) -> dict[str, set]:
    """{alias: the deployment ids its decisions weighed}, from ``GET /aisia/explain``'s decisions."""
    out: dict[str, set] = defaultdict(set)
    for d in explained:
        alias = d.get("alias")
        if alias:
            out[alias].update(c.get("id") for c in d.get("candidates") or () if c.get("id"))
    return dict(out)


def explained_decisions(proxy, limit: int = 1000) -> list:
    status, _, body = _http("GET", f"{proxy.url}/aisia/explain?limit={limit}", proxy.master_key, timeout=10)
    if status != 200:
        raise DemoError(f"GET /aisia/explain answered {status}")
    return json.loads(body).get("decisions") or []


def frontier_of(alias: str, candidates: Mapping[str, set], turns: list[Turn], prices: Mapping[str, float]) -> Optional[str]:
    """The alias's most expensive candidate (those its decisions weighed; else those that served it)."""
    ids = set(candidates.get(alias) or ()) or {t.outcome.served_by for t in turns
                                                if t.outcome.alias == alias and t.outcome.ok}
    ids = [i for i in ids if i in prices]
    return max(ids, key=lambda i: (prices[i], i)) if ids else None


def _share(turns: list[Turn], frontier: str) -> str:
    if not turns:
        return "-"
    k = sum(1 for t in turns if t.outcome.served_by == frontier)
    return f"{k}/{len(turns)} {k / len(turns):.0%}"


def frontier_shares(turns: list[Turn], candidates: Mapping[str, set], prices: Mapping[str, float]) -> list[dict]:
    """Per alias: its frontier and the answered requests it served, on hard and easy prompts, in
    the first and the last third of the run's requests (by the order they were sent)."""
    if not turns:
        return []
    first, last = min(t.sequence for t in turns), max(t.sequence for t in turns)
    span = last - first + 1
    early_end, late_start = first + span / 3.0, first + 2.0 * span / 3.0
    order = [a for a, _, _ in TRAFFIC_MIX]
    aliases = sorted({t.outcome.alias for t in turns}, key=lambda a: (order.index(a) if a in order else len(order), a))
    rows = []
    for alias in aliases:
        mine = [t for t in turns if t.outcome.alias == alias and t.outcome.ok and t.hard is not None]
        frontier = frontier_of(alias, candidates, turns, prices)
        row = {"alias": alias, "frontier": frontier}
        for hard in (True, False):
            for when, keep in (("early", lambda s: s < early_end), ("late", lambda s: s >= late_start)):
                row[f"{'hard' if hard else 'easy'} {when}"] = [t for t in mine if t.hard is hard and keep(t.sequence)]
        rows.append(row)
    return rows


def frontier_table(rows: list[dict]) -> str:
    cols = ("hard early", "hard late", "easy early", "easy late")
    out = [["alias", "frontier", *cols]]
    for r in rows:
        out.append([r["alias"], r["frontier"] or "-", *(_share(r[c], r["frontier"]) if r["frontier"] else "-"
                                                        for c in cols)])
    return _render(out, right={2, 3, 4, 5})


def parse_signal_metrics(text: str) -> Counter:
    """{(kind, language): count} of ``aisia_conversation_signals_total`` in Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Counter = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == SIGNALS_METRIC and s.value:
                out[(s.labels.get("kind", ""), s.labels.get("language", ""))] += int(s.value)
    return out


def parse_uncounted_failures(text: str) -> Counter:
    """{deployment: failed attempts} the proxy learned as not the deployment's fault
    (``aisia_outcomes_total`` with result ``client_error``) in Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    out: Counter = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == OUTCOMES_METRIC and s.labels.get("result") == UNCOUNTED_RESULT and s.value:
                out[s.labels.get("deployment", "")] += int(s.value)
    return out


def _metrics_text(proxy) -> str:
    status, _, body = _http("GET", proxy.url + "/aisia/metrics", proxy.master_key, timeout=15)
    if status != 200:
        raise DemoError(f"GET /aisia/metrics answered {status}")
    return body.decode("utf-8", errors="replace")


def signal_counts(proxy) -> Counter:
    """What the proxy counted (``GET /aisia/metrics``)."""
    return parse_signal_metrics(_metrics_text(proxy))


def uncounted_failures(proxy) -> Counter:
    """Failed attempts the proxy did not count against their deployment (``GET /aisia/metrics``)."""
    return parse_uncounted_failures(_metrics_text(proxy))


def uncounted_line(uncounted: Mapping[str, int]) -> str:
    """Why a provider received more attempts than the plugin learned calls of it; "" when none."""
    shown = ", ".join(f"{name} {n}" for name, n in sorted(uncounted.items()) if n)
    if not shown:
        return ""
    return (f"Failed attempts not counted against their deployment (the request's own failure: it failed on two "
            f"providers, or the same way twice; docs/failures.md): {shown}.")


def settled_signal_counts(proxy, expected: int, clock: Callable[[], float] = time.monotonic,
                          sleep: Callable[[float], None] = time.sleep) -> Counter:
    """The proxy's signal counts once its conversation steps are done: when they reach `expected`
    or stop moving between two reads, within SETTLE_LIMIT_S."""
    deadline = clock() + SETTLE_LIMIT_S
    seen = signal_counts(proxy)
    while clock() < deadline and sum(seen.values()) < expected:
        sleep(SETTLE_EVERY_S)
        now = signal_counts(proxy)
        if now == seen:
            break
        seen = now
    return seen


def _by_language(counts: Mapping[tuple, int], kind: str) -> str:
    langs = sorted(((lang, n) for (k, lang), n in counts.items() if k == kind and lang not in ("", "none")),
                   key=lambda x: (-x[1], x[0]))
    return f" ({', '.join(f'{lang} {n}' for lang, n in langs)})" if langs else ""


def signals_line(counts: Mapping[tuple, int]) -> str:
    """``correction 12 (en 7, fr 5), regenerate 4, ...`` by count, most first."""
    kinds: Counter = Counter()
    for (kind, _), n in counts.items():
        kinds[kind] += n
    return ", ".join(f"{kind} {n}{_by_language(counts, kind)}" for kind, n in
                     sorted(kinds.items(), key=lambda x: (-x[1], x[0]))) or "none"


def users_line(turns: list[Turn]) -> str:
    """What the simulated users said after an answer (the demo's own count)."""
    said = Counter(t.said for t in turns)
    thanks = said[THANKS_ONLY] + said[THANKS_AND_QUESTION]
    # The languages are those of the written replies (complaints and thanks; a regenerate has no words).
    langs = Counter(t.language for t in turns if t.said in (COMPLAINT, THANKS_ONLY, THANKS_AND_QUESTION))
    by_lang = " and ".join(f"{n} in {'French' if lang == 'fr' else 'English'}" for lang, n in sorted(langs.items()))
    written = said[COMPLAINT] + thanks
    return (f"{said[COMPLAINT]} complaints, {said[REGENERATE]} regenerates and {thanks} thank-yous"
            + (f"; of these {written} written replies, {by_lang}" if by_lang else ""))


def learned_how(counts: Mapping[tuple, int], turns: list[Turn], feedback: bool) -> str:
    """The demo's plain statement of what taught the router."""
    total = sum(counts.values())
    signals = f"{total} conversation signals the proxy read in the users' messages: {signals_line(counts)}"
    if feedback:
        graded = sum(1 for t in turns if t.outcome.ok and t.outcome.quality is not None
                     and t.outcome.headers.get("x-aisia-request-id"))
        return (f"It learned from {graded} grades posted to /aisia/feedback (--feedback, which no chat client "
                f"sends) and from {signals}.")
    return (f"It learned without feedback: no grade was posted to /aisia/feedback; what it knows of answer quality "
            f"comes from the deployments' declared tiers and from {signals}. The users said: {users_line(turns)}.")
