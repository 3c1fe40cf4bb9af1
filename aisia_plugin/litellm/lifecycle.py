"""A client request's life through the plugin, as named states and the transitions between them.

Plain data, no LiteLLM: the hooks (callback.py) read LiteLLM's event, call one transition here and
act on what it returns (learn an outcome, register an answer for feedback, forget the request).
Each transition checks that it is legal from the current state (``IllegalTransition`` otherwise);
the repeats LiteLLM legitimately causes (an attempt reported by a per-attempt hook and again by a
logging event) are answered as "nothing to do", not as errors.

**An attempt** (one pass of LiteLLM's filter for a call)::

    DECIDED --send--> SENT --fail--> PENDING --settle/learn--> LEARNED
                        |              '--fail (the same failure next)--> CALLERS
                        |--fail (the caller's, or after the answer began)--> CALLERS / LEARNED
                        '--learn (a success)--> LEARNED

``DECIDED``: the filter handed LiteLLM its ranking; LiteLLM's later checks may still drop the
choice (its per-attempt hook then reports another ranked deployment, or none). ``SENT``: LiteLLM
sent it to a deployment. ``PENDING``: it failed, and whose failure it is waits for the next
attempt: the same failure on another deployment makes both the caller's. ``LEARNED``: its outcome
was learned (a success, or the deployment's failure). ``CALLERS``: it failed by the request's own
fault; nothing is learned against the deployment.

**A call** (one client request for one alias; an alias-to-alias fallback opens a branch, a call
of its own under the same request id, kept in the first call's ``branches``)::

    ROUTING --answer--> ANSWERED --finish--> CLOSED
       '----finish--> FINISHED --answer----> CLOSED

``ROUTING``: attempts are decided and sent. ``ANSWERED``: the response headers went out (a stream
may still be running; the success event is logged in the background). ``FINISHED``: the final
outcome was learned (a success, or a stream broken after its answer began) before the headers
(or without them: a Router used alone has no header hook). ``CLOSED``: both; nothing more is
expected and the request is forgotten. A request that ends in an error is forgotten in whatever
phase it is (the failure hook, ``Runtime.close_call``).

**Whose failure it is** is decided in one place: ``Call.fail``, which asks ``blame.judge`` for
the verdict (the rule, docs/failures.md) and applies it (the states).

**Served answers and conversation attribution.** ``Call.serve`` is the one transition that
records which deployment answered a call, and with which decision (the prompt's domain and task
type; until learned, the contextual strategy's features in ``Decision.context``), as a
``ServedAnswer``: what feedback is attributed to (``Runtime.note_served`` keeps it in the store,
keyed by the request id). Conversation signals (issue 40: the next user turn judges the previous
assistant turn; a regenerate blames the answer it replaces) belong on the same record, keyed by the
conversation instead: a later request of the conversation, when its call is opened
(``Runtime.open_call``, from the pre-call hook), would look up the previous turn's ServedAnswer and
attribute its signal to that answer's deployment and features, whichever deployment serves the
new turn. Built as its own record (litellm/conversations.py): the answer is stored as a
``conversation.Turn`` under the conversation's key when the call is answered (``Call.conversation``
names who asks and in which conversation; ``Call.turn_noted`` stores it once), and the next
request's signals are recorded against that turn's deployment, alias and domain. The contextual
features are not kept on it (they are released once the answer is learned,
``Decision.context = None``): a signal teaches the deployment's quality, not its per-prompt model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple, Optional

from .. import blame
from ..breaker import FailureKind
from ..decision import Decision
from ..outcome import Outcome
from .events import describe_failure


class IllegalTransition(RuntimeError):
    """A transition asked of a state it cannot leave that way: a bug in the hooks, never the
    client's doing."""


class AttemptState(Enum):
    DECIDED = "decided"
    SENT = "sent"
    PENDING = "pending"
    LEARNED = "learned"
    CALLERS = "caller's"


class Phase(Enum):
    ROUTING = "routing"
    ANSWERED = "answered"
    FINISHED = "finished"
    CLOSED = "closed"


# The states as module constants, as the code reads them: an Enum member read through its class
# costs about 150 ns in Python 3.11 (the metaclass's lookup), a module global about 20 ns, and the
# hooks read them a few dozen times per request.
DECIDED, SENT, PENDING, LEARNED, CALLERS = AttemptState
ROUTING, ANSWERED, FINISHED, CLOSED = Phase
_SETTLED = (LEARNED, CALLERS)


class Refused(Exception):
    """The plugin answers the request itself (a strict budget, no candidate left, failover
    exhausted, the caller's own failure): the failure hook turns it into an HTTP error with this
    status and message."""

    def __init__(self, status_code: int, message: str, kind: str, alias: str, tried=()):
        super().__init__(message)
        self.status_code = status_code
        # Not ``message``: the Router appends its fallback explanation ("no fallback model group
        # was found ...") to the ``message`` of any exception that has one
        # (router.py, async_function_with_fallbacks); the client is to read the plugin's alone.
        self.text = message
        self.kind = kind
        self.alias = alias
        self.tried = list(tried)


@dataclass(slots=True)
class Attempt:
    """One pass of the filter for a call: the decision, the candidates handed to LiteLLM best
    first, and what LiteLLM then sent (its later checks may drop the choice: tags, limits,
    context window), reported by the per-attempt hooks."""

    decision: Decision
    ranked: tuple  # the deployment ids handed to LiteLLM, in the order it must try them
    explained: dict  # the explain log's entry
    deployment_id: Optional[str] = None  # the deployment LiteLLM sent the request to
    started: Optional[float] = None  # time.monotonic() when it was sent
    state: AttemptState = DECIDED
    # A stream's: how long its client held it back, added up as it is read (streams.Hold; None:
    # not a stream, or not timed).
    client_hold: Optional[object] = None

    @property
    def recorded(self) -> bool:
        """Its outcome was learned, or judged the caller's."""
        return self.state in _SETTLED

    def _move(self, to: AttemptState, *legal: AttemptState) -> None:
        if self.state not in legal:
            raise IllegalTransition(f"attempt {self.state.value} -> {to.value}")
        self.state = to

    def send(self, deployment_id: str, now: Optional[float]) -> None:
        """DECIDED -> SENT: LiteLLM sent it to `deployment_id` (at `now`; None when no
        per-attempt hook ran, a Router used alone, and an event names the deployment)."""
        self._move(SENT, DECIDED)
        self.deployment_id = deployment_id
        if now is not None:
            self.started = now
            self.explained["served_by"] = deployment_id


class PendingFailure(NamedTuple):
    """A failed attempt whose learning waits for the next attempt's outcome: the same failure,
    or a failure on another provider, makes both the caller's (nothing learned; blame.judge)."""

    attempt: Attempt
    outcome: Any
    verdict: blame.Verdict


class Failure(NamedTuple):
    """A failed attempt of a call, as the client's error and the next decision read it."""

    deployment_id: str
    kind: Any  # FailureKind, or None
    description: str  # "500 InternalServerError"
    judged: blame.AttemptFailure  # the failure as the rule read it (the next failures are judged against it)
    verdict: Optional[blame.Verdict] = None  # whose it was when it failed (a later failure may acquit it)


class CallerFault(NamedTuple):
    """The request's own fault (blame.judge: a timeout it set, a failure on two providers, ...),
    answered with this status and message."""

    status: int
    message: str


class ServedAnswer(NamedTuple):
    """What answered a call: the deployment and the decision that chose it (its domain, task type
    and, until learned, the contextual features). What feedback, and later conversation signals,
    are attributed to (the module's docstring)."""

    deployment_id: Optional[str]
    decision: Decision


class Settled(NamedTuple):
    """An attempt whose outcome a transition settled, to be learned (``Call.learn``): LEARNED when
    it counts against its deployment (a success, the deployment's failure), CALLERS when its
    failure does not (blame.Verdict.counts: the store still sees its kind, so that a rate limit
    backs the deployment off and the caller's failure frees the probe slot it held)."""

    call: "Call"
    attempt: Attempt
    outcome: Outcome
    verdict: Optional[blame.Verdict]  # None: a success


@dataclass(slots=True)
class Call:
    """One client request for an alias, across its attempts (the module's docstring: its phases).
    ``request_id`` is the plugin's own id for the client request (LiteLLM's call id comes from the
    client and is not unique); a fallback from one alias to another gets its own Call (a fresh
    attempt budget) under the same request id, kept in the first call's ``branches``."""

    alias: str
    request_id: str
    session: Optional[str]
    created: float
    attempts: list = field(default_factory=list)  # one Attempt per pass of the filter
    failures: list = field(default_factory=list)  # Failure records, in order
    pending: Optional[PendingFailure] = None
    caller_fault: Optional[CallerFault] = None
    branches: dict = field(default_factory=dict)  # alias -> Call, for alias-to-alias fallbacks
    latest: Optional["Call"] = None  # the branch that was decided last; None: this call (see decided)
    served: Optional[ServedAnswer] = None  # registered for feedback (serve)
    key: Optional[str] = None  # the hash of the API key that made it (caller_key): who may give feedback
    pace: Optional[Any] = None  # pacing.TeamPace: whose spend it paces (team_budget.team_pace_of)
    conversation: Optional[tuple] = None  # (conversation.Caller, session id): its conversation (conversations.py)
    turn_noted: bool = False  # its answer was stored as a turn of that conversation
    tenant: Optional[Any] = None  # tenancy.Tenant: who made it (LiteLLM's auth)
    limits: Optional[Any] = None  # tenancy.RequestLimits: what the request asked within its key's layer
    layer: Optional[Any] = None  # policy.layers.LayerRef: the layer that decides it (None: the operator's)
    local_first: Optional[Any] = None  # local_first.Side: which side of local-first it routes (escalation.py)
    phase: Phase = ROUTING

    # -- where the request stands ---------------------------------------------------------------
    @property
    def team(self) -> Optional[str]:
        """The team whose pacing record its costs move (None: the alias's own)."""
        return self.pace.team if self.pace is not None else None

    @property
    def answered(self) -> bool:
        """The response headers were produced."""
        return self.phase is ANSWERED or self.phase is CLOSED

    @property
    def finished(self) -> bool:
        """The final outcome was learned."""
        return self.phase is FINISHED or self.phase is CLOSED

    def decided(self, call: "Call") -> None:
        """`call` (this one or one of its branches) was decided last. This call itself is kept
        as None, not as a reference to itself: that would make every alias request a reference
        cycle, its whole record (attempts, decisions, explain entries) freed only by the cyclic
        collector's full collections, whose cost grows with what they find."""
        self.latest = call if call is not self else None

    @property
    def current(self) -> "Call":
        """The call (this one or a branch) that was decided last."""
        return self.latest or self

    @property
    def tried(self) -> list:
        """The deployments LiteLLM sent this call to, in order."""
        return [a.deployment_id for a in self.attempts if a.deployment_id is not None]

    def refused_choices(self) -> list:
        """The choices of the attempts LiteLLM never sent (its checks after the filter refused
        them), where the filter hands it the choice alone."""
        return [a.decision.deployment_id for a in self.attempts if a.state is DECIDED]

    def unsent(self) -> Optional[Attempt]:
        """The attempt the filter decided last, if LiteLLM has not reported sending it yet."""
        if self.attempts and self.attempts[-1].state is DECIDED:
            return self.attempts[-1]
        return None

    def sent_attempt(self, deployment_id: Optional[str]) -> Optional[Attempt]:
        """The latest attempt sent to this deployment whose outcome is not yet settled; else the
        latest unsent one that offered it, now sent (no per-attempt hook ran: a Router used
        alone)."""
        for a in reversed(self.attempts):
            if a.deployment_id == deployment_id and a.state not in _SETTLED:
                return a
        for a in reversed(self.attempts):
            if a.state is DECIDED and deployment_id in a.ranked:
                a.send(deployment_id, None)
                return a
        return None

    def spent(self, max_attempts: Optional[int]) -> bool:
        """Whether the call will see no further attempt: its failover budget (`max_attempts`
        retries; None: the alias is gone) is spent, or every candidate its last decision ranked
        has been tried."""
        tried = self.tried
        if max_attempts is not None and len(tried) > max_attempts:
            return True
        return bool(self.attempts) and set(self.attempts[-1].ranked) <= set(tried)

    def refusal(self, max_attempts: int) -> Optional[Refused]:
        """Why the filter must not decide another attempt: the caller's fault shown by two
        deployments, or the failover budget spent; None when it may."""
        if self.caller_fault is not None:
            return self._callers()
        if len(self.tried) > max_attempts:
            return self.exhausted()
        return None

    def final_error(self, refused_by_litellm: bool) -> Optional[Refused]:
        """The client's error once the request failed (the failure hook): the caller's fault shown
        by two deployments; None where the client is to see the error as LiteLLM gave it (no
        attempt failed, LiteLLM's own refusal or limit, `refused_by_litellm`, or the caller's own
        error, a bad request or a prompt too long); else every allowed candidate failed."""
        if self.caller_fault is not None:
            return self._callers()
        if not self.failures or refused_by_litellm or self.failures[-1].kind is FailureKind.CLIENT:
            return None
        return self.exhausted()

    def _callers(self) -> Refused:
        status, message = self.caller_fault
        return Refused(status, message, "invalid_request_error", self.alias, self.tried)

    def exhausted(self) -> Refused:
        """The client's error once every allowed candidate failed."""
        tried = ", ".join(f"{f.deployment_id} ({f.description})" for f in self.failures) or ", ".join(self.tried)
        status = 429 if self.failures and all(f.kind is FailureKind.RATE_LIMIT for f in self.failures) else 502
        return Refused(status, f"alias {self.alias!r}: every allowed candidate failed; tried {tried}",
                       "aisia_all_candidates_failed", self.alias, self.tried)

    # -- transitions ----------------------------------------------------------------------------
    def decide(self, decision: Decision, ranked: tuple, explained: dict) -> Attempt:
        """A new attempt, DECIDED: the filter hands LiteLLM `ranked` (best first). Legal until the
        call is CLOSED: LiteLLM may fall back after the answer began (a stream failing midway)."""
        if self.phase is CLOSED:
            raise IllegalTransition("call closed: no attempt may be decided")
        attempt = Attempt(decision, ranked, explained)
        self.attempts.append(attempt)
        return attempt

    def send(self, deployment_id: Optional[str], now: float) -> Optional[Attempt]:
        """LiteLLM sent the last decided attempt to `deployment_id` (one of the ranked: its own
        checks may have dropped the choice): that attempt, now SENT; None when no decided attempt
        offered it."""
        attempt = self.unsent()
        if attempt is None or deployment_id not in attempt.ranked:
            return None
        attempt.send(deployment_id, now)
        return attempt

    def fail(self, attempt: Attempt, outcome: Outcome, failure: blame.AttemptFailure, rules,
             facts: blame.RequestFacts = blame.NO_FACTS) -> list:
        """An attempt failed: the one place its failure is judged (``blame.judge``, with the
        request's earlier failures and what the request says of itself, `facts`) and the verdict
        applied. Returns the attempts it settled (``Settled``): this one at once when its failure
        does not count against its deployment, or when the answer had begun (a stream broken
        midway); an earlier pending failure this one acquits (the same failure, or one on another
        provider: the request's); else the failure left pending before it, which this one shows
        was its deployment's, while this one waits (PENDING) for the next outcome. A verdict that
        ends the request (``Verdict.callers``) is kept as the caller's fault: the filter's next
        pass, or the failure hook, answers the client with it."""
        if attempt.state is not SENT:
            raise IllegalTransition(f"attempt {attempt.state.value}: cannot fail")
        verdict = blame.judge(rules, failure, facts, [f.judged for f in self.failures], self.alias)
        self.failures.append(Failure(attempt.deployment_id, verdict.kind, describe_failure(outcome), failure, verdict))
        if verdict.callers:
            self.caller_fault = CallerFault(verdict.client_status, verdict.client_message)
        if self.answered:
            return [Settled(self, attempt, outcome, verdict)]
        settled = []
        pending = self.pending
        if pending is not None and pending.attempt.deployment_id in verdict.acquits:
            self.pending = None
            settled.append(Settled(self, pending.attempt, pending.outcome, verdict))
        if not verdict.counts:
            settled.append(Settled(self, attempt, outcome, verdict))
            return settled
        settled += self.settle()
        attempt._move(PENDING, SENT)
        self.pending = PendingFailure(attempt, outcome, verdict)
        return settled

    def settle(self) -> list:
        """The pending failure, if any, was its deployment's (what came after it showed it): to be
        learned (``Settled``)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return []
        return [Settled(self, pending.attempt, pending.outcome, pending.verdict)]

    def settle_request(self) -> list:
        """An attempt of the request was answered: every failure pending before it, in this call
        (the first) and in any alias it fell back to, was that deployment's."""
        if not self.branches:  # (most requests: no alias-to-alias fallback)
            return self.settle() if self.pending is not None else []
        return [s for c in (self, *self.branches.values()) for s in c.settle()]

    def learn(self, attempt: Attempt, outcome: Outcome, counts: bool = True) -> Optional[tuple]:
        """SENT or PENDING -> LEARNED, once (a per-attempt hook and an event may both report it:
        None the second time). A success serves the call (``serve``) and, like a failure after
        the answer began (a broken stream), finishes it. Returns (the ServedAnswer to register or
        None, whether the request is now CLOSED)."""
        if attempt.state in _SETTLED:
            return None
        attempt._move(LEARNED if counts else CALLERS, SENT, PENDING)
        served = self.serve(outcome.deployment_id, attempt.decision) if outcome.success else None
        closed = self.finish() if outcome.success or self.answered else False
        return served, closed

    def serve(self, deployment_id: Optional[str], decision: Decision) -> Optional[ServedAnswer]:
        """The call was answered by `deployment_id` (else the decision's choice): its
        ServedAnswer, to register for feedback; None when already served."""
        if self.served is not None:
            return None
        self.served = ServedAnswer(deployment_id or decision.deployment_id, decision)
        return self.served

    def answer(self) -> bool:
        """The response headers went out: ROUTING -> ANSWERED, FINISHED -> CLOSED. Whether the
        request is CLOSED."""
        return self._half_done(ANSWERED, FINISHED)

    def finish(self) -> bool:
        """The final outcome was learned: ROUTING -> FINISHED, ANSWERED -> CLOSED. Whether the
        request is CLOSED."""
        return self._half_done(FINISHED, ANSWERED)

    def _half_done(self, this: Phase, other: Phase) -> bool:
        if self.phase is ROUTING:
            self.phase = this
        elif self.phase is other:
            self.phase = CLOSED
        return self.phase is CLOSED
