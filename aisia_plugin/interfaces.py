"""The declared extension contracts: what a strategy and a state store must provide.

The engine depends on these protocols only; the built-in strategies and stores are checked
against them in tests (tests/test_interfaces.py)."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Protocol, Sequence, runtime_checkable

from .bandit import ArmStats
from .breaker import BreakerState, CircuitBreaker
from .decision import Decision, Pool, RoutingContext
from .learning import LearningRules, OutcomeRecord
from .pacing import PaceState
from .quality import QualityRecord, QualityStats

class PoolState(NamedTuple):
    """``StateStore.read_pool``'s answer: everything one decision reads of the store. The lists
    are in the order of the ids asked for, None where nothing is stored (a default breaker, an
    unseen arm); `domain_arms` is all None without a domain; `last_known_good` is the alias's
    LKGP pin (None without an alias or a pin)."""

    tick: float
    breakers: list[Optional[BreakerState]]
    global_arms: list[Optional[ArmStats]]
    domain_arms: list[Optional[ArmStats]]
    last_known_good: Optional[str]


@runtime_checkable
class Strategy(Protocol):
    """Chooses one candidate of a pool. Registered through the ``register_strategies`` hook."""

    name: str
    description: str

    def select(self, pool: Pool, context: RoutingContext) -> Decision: ...


@runtime_checkable
class StateStore(Protocol):
    """Learned state: bandit arms (global and per domain), quality evidence (quality.py), breakers,
    LKGP pins, the tick and the aliases' spend-pacing records.

    Synchronous by design: the engine runs these on the request path and must never wait on I/O.
    A shared store (Redis) answers them from its local mirror and synchronises that mirror with
    the server outside the decision (see aisia_plugin/state/redis.py)."""

    def read_pool(self, deployment_ids: Sequence[str], domain: Optional[str] = None,
                  alias: Optional[str] = None) -> PoolState:
        """Everything one decision reads, in one call."""

    def record_outcome(self, rec: OutcomeRecord, rules: LearningRules) -> float:
        """Apply one outcome atomically (``learning.apply_outcome``); returns the tick after it."""

    def record_quality(self, rec: QualityRecord, rules: LearningRules) -> None:
        """Apply one piece of quality evidence atomically (``quality.apply_evidence``, at the
        current tick): the quality records only, never an arm, a breaker or the tick."""

    def quality_of(self, deployment_id: str, domain: Optional[str] = None) -> Optional[QualityStats]:
        """The deployment's quality evidence (in `domain`; None: over every domain)."""

    def reserve_probe(self, deployment_id: str, now: float, breaker: CircuitBreaker) -> bool:
        """Take a half-open probe slot for a deployment about to be served, atomically; False when
        the breaker no longer admits it (OPEN, or every probe slot taken meanwhile)."""

    def breaker(self, deployment_id: str) -> BreakerState: ...

    def arm(self, deployment_id: str, domain: Optional[str] = None) -> Optional[ArmStats]: ...

    def last_known_good(self, alias: str) -> Optional[str]: ...

    def pace(self, alias: str) -> Optional[PaceState]:
        """The alias's spend-pacing record (``pacing.py``; None before its first paced call)."""

    def reset(self, deployment_id: str) -> None:
        """Forget a deployment's arms (every domain) and breaker: an operator knows it is fixed."""

    def dump(self) -> dict[str, Any]:
        """Everything learned, as plain JSON data (``MemoryState.load`` reads it back)."""

    async def count_up(self, name: str, ttl_s: float) -> Optional[int]:
        """One more of the counter `name`, shared by every process of the store and living `ttl_s`
        from its first count; the count now. None when a shared store cannot be reached. (A
        signed-out session's mark, session.py; a key's refused feedback, admin.py.)"""

    async def counted(self, name: str) -> Optional[int]:
        """The counter `name` now: 0 when never counted or expired; None when a shared store
        cannot be reached."""

    async def add_to_list(self, name: str, item: dict, ttl_s: float, keep: int, owner: str = "") -> Optional[bool]:
        """Append `item` (plain JSON data) to the list `name`, shared by every process of the
        store: the list lives `ttl_s` from its last append and keeps its `keep` newest items (a
        conversation's answered turns, litellm/conversations.py). `owner` (the writer's key
        hash): a store that bounds how many lists it holds drops the largest owner's first, never
        another owner's for one owner's flood. True when kept; None when a shared store cannot be
        reached."""

    async def list_of(self, name: str) -> Optional[list]:
        """The list `name`, oldest first: empty when never written or expired; None when a shared
        store cannot be reached."""
