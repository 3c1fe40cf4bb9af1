"""The offline replay (`aisia replay`): recorded outcomes through the real routing pipeline.

    trace.py       the JSON Lines trace format and its checks
    candidates.py  the candidates file (provider, prices, tier, specialities, latency models)
    runner.py      materialising a scenario; the router, fixed, uniform random and oracle runs
    report.py      text tables, JSON, compare, sweep, the plot, the progress bar
    scenarios.py   seeded synthetic scenarios (aisia replay --scenario)
    training.py    the contextual model fitted from a trace, and measured on a held-out part

(LiteLLM's own routing strategies as baselines, which patch LiteLLM's modules at run time, live
with the benchmarks: benchmarks/litellm_baselines.py, outside the wheel the proxy imports.)"""

from .candidates import CandidatesError, CandidateSpec, LatencyModel, load_candidates
from .runner import ReplayError, Scenario, build_scenario, override_alias, replay, sweep
from .trace import Trace, TraceError, load_trace

__all__ = ["CandidatesError", "CandidateSpec", "LatencyModel", "load_candidates", "ReplayError", "Scenario",
           "build_scenario", "override_alias", "replay", "sweep", "Trace", "TraceError", "load_trace"]
