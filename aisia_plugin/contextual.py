"""The contextual reward model: per deployment, a diagonal Bayesian linear model of the reward of
a prompt from hashed prompt features, with the deployment's global statistics as its prior.
Pure: no I/O, no clock, no random source (the strategy draws from the engine's).

Features of a request (``request_vector``), one index space of 2**FEATURE_BITS slots:

* the words of the prompt's text (lower-cased, split at blanks and ASCII punctuation, the first
  MAX_WORDS words of its first MAX_BYTES bytes of UTF-8) and the bigrams of consecutive words,
  hashed by a polynomial hash of their bytes modulo 2**64 (stable across processes and versions:
  never Python's salted ``hash``);
* the request's own features: task type, has_code, length bucket, modality, domain, a bias, and
  the prompt's size and shape as log2 buckets: its words ("words<32": 16 to 31 of the words
  read) and its lines ("lines<8": 4 to 7 lines in its first MAX_BYTES bytes), since a prompt's
  length and structure say something of its difficulty the coarse length bucket (under 200
  tokens "short") does not.

Each of the three groups (words, bigrams, the rest) is scaled to a squared norm of 1/3, so a
prompt's vector has norm 1 whatever its length and the prior variance of a prediction's residual
is ``prior_variance``. A word repeated counts its occurrences (its weight is read once per
occurrence).

The model predicts reward = base + x . w. The base is the deployment's learned mean reward (the
bandit arm the pool shows, with forgetting and the per-domain blend), shrunk toward the prior
model's mean for the deployment (0.5 without one) by BASE_PSEUDO_COUNT observations' worth; its
variance is that of a mean of that many observations. The weights w are Gaussian, independent
per slot (the diagonal approximation): the mean and precision of each slot. An outcome of the
chosen deployment updates its slots by assumed-density filtering (the Kalman update of a linear
Gaussian observation, projected back to a diagonal): exact for one feature, the usual diagonal
approximation otherwise.

Forgetting is the bandit's (same gamma per tick of the store): the information gathered decays
toward the prior, precision P = P0 + (P - P0) * gamma**elapsed and the precision-weighted mean
h = P * m likewise toward 0; both are stored scaled by one factor per deployment, so decaying a
deployment is O(1). It is applied when the deployment next learns; a decision reads each slot's
mean and variance as of that update (materialised then, once per outcome), so it costs one gather
of its prompt's slots and one float32 product (``residual``; its float64 reading, two dot
products, is in tests/test_contextual.py). Between two updates of a deployment, its forgetting
shows through its base (the arm the bandit forgets). The words are found by ``_word_spans`` and
hashed by ``_word_hashes`` (the polynomial's terms summed per word, one numpy reduceat).

Sharing (the Redis store): what an outcome does to a column is a change of its natural parameters
(h, dp), so a replica's models, once ``track()`` is called, also keep what this process learned
since its last fold apart (``take_pending``: per column a ``ColumnDelta`` in the column's stored
units, with the scale and tick that give them meaning). The store adds the deltas into the shared
column (lua/contextual.lua: brought to the later tick by the same gamma, then summed) and
``adopt`` installs the shared column with what was learned meanwhile on top. When the folds
complete between outcomes, replicas learn exactly what one process learning the interleaved
sequence would (the same float operations); otherwise each replica's outcomes are assessed
against a shared model at most one fold period old. Pure too: the store does the I/O."""

from __future__ import annotations

import math
import threading
import zlib
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from .numbers import clamp01
from .quality import prior_quality

FEATURE_BITS = 14
DIM = 1 << FEATURE_BITS
MAX_BYTES = 8192
MAX_WORDS = 128  # words read per prompt (its first ones): bounds a decision's cost on long prompts
BASE_PSEUDO_COUNT = 2.0
MODEL_FORMAT = "aisia-contextual-model"
MODEL_VERSION = 1
# A decision reads a column as of its last update until its forgetting since then passes this
# factor (gamma**elapsed < STALE_BELOW: a tenth of what it learned forgotten, 1,520 requests at
# quality.half_life_requests' default of 10,000, the gamma the engine learns it with); it then
# brings the column to its tick first (refresh_stale).
STALE_BELOW = 0.9
# Below this scale a deployment's stored columns are rescaled to 1 (a long run of forgetting). The
# columns are float32, stored as true value / scale: at 1e-150 they overflowed (inf, then NaN) once
# the scale passed 1e-38, about 127 half-lives of learning; at 1e-20 a stored value stays below
# 1e20 times its true one (far inside float32), and a rescale (one column times its scale) comes
# every 66 half-lives.
_RESCALE_BELOW = 1e-20
_NO_SLOTS = np.zeros(0, dtype=np.int64)

# Bytes that separate words: ASCII blanks and punctuation (UTF-8 multi-byte letters never are).
_SEPARATORS = b" \t\n\r\f\v.,;:!?()[]{}<>\"'`*#=/\\|+~^&%$@"
# bytes.translate tables: 1 for a byte that belongs to a word, 0 for a separator; and a word's
# byte as itself, a separator as 0 (what the hash reads).
_WORD_BYTE = bytes(0 if c in _SEPARATORS else 1 for c in range(256))
_WORD_ONLY = bytes(0 if c in _SEPARATORS else c for c in range(256))

_P = 0x100000001B3  # the polynomial hash's base (odd: invertible modulo 2**64)
_MASK64 = (1 << 64) - 1
_GOLD = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio, odd


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """P**k and P**-k * _GOLD modulo 2**64, for k < n."""
    pw, inv = [1] * n, [int(_GOLD)] * n
    pinv = pow(_P, -1, 1 << 64)
    for k in range(1, n):
        pw[k] = (pw[k - 1] * _P) & _MASK64
        inv[k] = (inv[k - 1] * pinv) & _MASK64
    return np.array(pw, dtype=np.uint64), np.array(inv, dtype=np.uint64)


_POW, _INV_GOLD = _powers(MAX_BYTES + 1)
_SHIFT = np.uint64(64 - FEATURE_BITS)
_BIGRAM = np.uint64(0xC2B2AE3D27D4EB4F)


def _word_spans(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the first MAX_WORDS words of the lower-cased UTF-8 text."""
    flags = np.frombuffer(b"\0" + raw.translate(_WORD_BYTE) + b"\0", np.int8)
    # Runs of word bytes alternate with runs of separators: the changes are start, end, start...
    edges = (flags[1:] != flags[:-1]).nonzero()[0][:2 * MAX_WORDS]
    return edges[0::2], edges[1::2]


def _word_hashes(raw: bytes, starts: np.ndarray, end: int, out: np.ndarray) -> np.ndarray:
    """Each word's 64-bit hash into `out` (`starts`: the words' starts in `raw`, `end`: the last
    one's end): the polynomial of its bytes modulo 2**64 (stable across processes and versions),
    times an odd constant (Fibonacci hashing: a slot is read from the top bits, which the
    multiplication makes depend on every bit). Each byte times P to the power of its place, summed
    from a word's start to the next one's (the separators between them read as 0), times P to the
    minus its start."""
    terms = np.frombuffer(raw[:end].translate(_WORD_ONLY), np.uint8) * _POW[:end]  # wraps modulo 2**64, as intended
    return np.multiply(np.add.reduceat(terms, starts), _INV_GOLD.take(starts), out=out)


def _text_of(features) -> str:
    """The text the vector reads: what a conversation's request asks (its last ``turn_chars``
    characters: ``conversation.question_text``, as the engine marks it), else the whole text."""
    text = getattr(features, "text", "") or ""
    n = getattr(features, "turn_chars", 0) or 0
    return text[-n:] if 0 < n < len(text) else text


def _raw(text: str) -> bytes:
    raw = text[:MAX_BYTES].lower().encode("utf-8", "replace")
    return raw[:MAX_BYTES]


_NAMED: dict[str, int] = {}


def named_slot(name: str) -> int:
    """The slot of a named feature ("task=coding", "bias"...): crc32 of its name (stable)."""
    s = _NAMED.get(name)
    if s is None:
        if len(_NAMED) > 4096:  # the names are few (task types, buckets, domains); never unbounded
            _NAMED.clear()
        s = _NAMED[name] = zlib.crc32(b"aisia-feature:" + name.encode("utf-8", "replace")) & (DIM - 1)
    return s


MAX_LINES = 64  # the lines bucket's last one: "lines>=64"


def log2_bucket(name: str, n: int, cap: int) -> str:
    """`n` in a power-of-two bucket: 0 "<1", 1 "<2", 2-3 "<4", 4-7 "<8"...; from `cap` on ">=cap"."""
    return f"{name}>={cap}" if n >= cap else f"{name}<{1 << n.bit_length()}"


def named_features(features, domain: Optional[str], task_type: Optional[str], words: int = 0,
                   lines: int = 1) -> list[str]:
    """The request's own features as names (the vector's third group); `words` is the number of
    words read (at most MAX_WORDS), `lines` the number of lines of the bytes read."""
    names = ["bias", f"task={task_type or getattr(features, 'task_type', 'default')}",
             f"length={getattr(features, 'length_bucket', 'short')}", f"modality={getattr(features, 'modality', 'text')}",
             f"domain={domain or 'none'}", log2_bucket("words", words, MAX_WORDS), log2_bucket("lines", lines, MAX_LINES)]
    if getattr(features, "has_code", False):
        names.append("has_code")
    return names


def _w32(val: np.ndarray) -> np.ndarray:
    """(2, len(val)) float32: the values and their squares."""
    return np.array((val, val * val), dtype=np.float32)


@dataclass(slots=True)  # (treated as immutable, not frozen: built per request; as bandit.ArmStats)
class RequestVector:
    """A request's sparse feature vector: slot indices (repeats allowed) and their values."""

    idx: np.ndarray  # int64
    val: np.ndarray  # float64
    # (2, len(idx)) float32: the values and their squares, the weights a prediction reads (made
    # here once, so that predicting is one float32 product).
    w32: Optional[np.ndarray] = None

    def __post_init__(self):
        if self.w32 is None:
            self.w32 = _w32(self.val)

    @property
    def sq(self) -> np.ndarray:
        return self.val * self.val


def request_vector(features, domain: Optional[str] = None, task_type: Optional[str] = None) -> RequestVector:
    """The vector of one request (see the module docstring), numpy over the prompt's bytes, in as
    few numpy calls as it takes (each costs thousands of instructions, whatever its length). (A
    windowed, cached twin saved about 115k instructions over the prefix sums this reading
    replaced, 0.3 % of an alias request, under the 1 % a fast path must save: docs/benchmarks.md,
    "Fast paths".)"""
    raw = _raw(_text_of(features))
    starts, ends = _word_spans(raw)
    nw = len(starts)
    names = named_features(features, domain, task_type, nw, raw.count(b"\n") + 1)
    nd = len(names)
    dense = [named_slot(n) for n in names]
    if not nw:
        return RequestVector(np.array(dense, dtype=np.int64), np.full(nd, 1.0 / math.sqrt(nd)))
    nb = nw - 1
    idx = np.empty(nw + nb + nd, dtype=np.uint64)  # words, bigrams, named: filled in place
    hw = _word_hashes(raw, starts, int(ends[-1]), idx[:nw])
    bg = idx[nw:nw + nb]
    np.multiply(hw[:-1], _BIGRAM, out=bg)  # an ordered pair: "a b" and "b a" differ
    bg += hw[1:]
    bg *= _GOLD
    idx[:nw + nb] >>= _SHIFT
    idx = idx.view(np.int64)  # slots < 2**FEATURE_BITS: the same values as signed
    idx[nw + nb:] = dense
    # The three groups' values: each group's squared norm is 1/3 (an empty bigram group gives
    # nothing, a one-word prompt).
    values = (1.0 / math.sqrt(3.0 * nw), 1.0 / math.sqrt(3.0 * nb) if nb else 0.0, 1.0 / math.sqrt(3.0 * nd))
    return RequestVector(idx, np.array(values).repeat((nw, nb, nd)))


def feature_labels(features, domain: Optional[str] = None, task_type: Optional[str] = None) -> list[str]:
    """The label of each entry of ``request_vector``'s vector, in the same order (for explain:
    words, "a b" bigrams, then the named features). Off the request path."""
    raw = _raw(_text_of(features))
    starts, ends = _word_spans(raw)
    words = [raw[s:e].decode("utf-8", "replace") for s, e in zip(starts.tolist(), ends.tolist())]
    return (words + [f"{a} {b}" for a, b in zip(words, words[1:])]
            + named_features(features, domain, task_type, len(words), raw.count(b"\n") + 1))


# -- a deployment's prior, known without traffic ---------------------------------------------------
def cold_prior(deployments: Sequence, fits: Sequence[Optional[float]], settings, prior) -> list[float]:
    """The prior mean reward of each of a pool's `deployments` (its ``decision.Deployment``) the
    model has not met, from what is known without traffic (`settings`: the alias's
    ``contextual.cold_start``): its model family's score in the task-fitness table (`fits`:
    ``TaskFitnessTable.family_fitness`` for this request's task, None where the table does not
    know the family) when ``from_task_fitness`` is on, else its declared prior quality (`prior`:
    the policy's ``quality.prior``, ``quality.prior_quality``: its tier's value, ``untiered``
    without one); plus ``price_slope`` per doubling of its price over the pool's median price;
    within [0, 1]."""
    slope = settings.price_slope
    median = 0.0
    if slope:
        prices = sorted(max(float(d.cost_per_1m), 0.0) for d in deployments)
        n = len(prices)
        median = (prices[(n - 1) // 2] + prices[n // 2]) / 2.0 if n else 0.0
    out = []
    for d, fit in zip(deployments, fits):
        if settings.from_task_fitness and fit is not None:
            m = float(fit)
        else:
            m = prior_quality(d, None, prior)
        if slope and median > 0.0 and d.cost_per_1m > 0.0:
            m += slope * math.log2(d.cost_per_1m / median)
        out.append(clamp01(m))
    return out


# -- the model --------------------------------------------------------------------------------------
@dataclass(slots=True)
class LearnContext:
    """What a decision hands the learner for the chosen deployment: the request's vector, the
    base the prediction started from, and the alias's model settings."""

    vector: RequestVector
    base: float
    prior_variance: float
    noise_variance: float
    # The domain its quality evidence is recorded under (the decision's ``quality_domain``).
    domain: Optional[str] = None


@dataclass(slots=True)
class ColumnDelta:
    """What this process learned about one deployment since its last fold: ``values[j]`` (h, dp)
    added at slot ``slots[j]``, in the stored units of the column as it was at ``scale`` and
    ``tick`` (the true change is value * scale), and the ``count`` of outcomes."""

    dep: str
    tick: float
    scale: float
    count: float
    slots: np.ndarray  # int64, ascending
    values: np.ndarray  # (len(slots), 2) float64


@dataclass(slots=True)
class SharedColumn:
    """One deployment's column as a shared store holds it: every slot's stored (h, dp) as float64
    (true value = stored * scale), its scale and tick, the outcomes counted, the prior precision
    and the prior model's mean and weight."""

    p0: float
    scale: float
    tick: float
    count: float
    prior_mean: float
    prior_count: float
    values: np.ndarray  # (DIM, 2) float64


class ContextualModels:
    """Every deployment's model, as columns of one (DIM x 2 x deployments) array, so that a
    decision reads its prompt's slots for every deployment in one gather.

    Per deployment: ``h`` (precision-weighted means) and ``dp`` (precision above the prior), both
    stored divided by the deployment's ``scale``; its prior precision ``p0``; the tick of its last
    update; its undiscounted observation count; the prior model's mean reward and its weight."""

    _VECTORS = ("p0", "scale", "tick", "count", "prior_mean", "prior_count")

    def __init__(self):
        # Outcomes may be recorded from several threads: a column's update (and a new column)
        # happens under this lock; a decision reads without it (it may see an update half-done).
        self._lock = threading.RLock()
        self.ids: dict[str, int] = {}
        # float32: the precision is far beyond a reward's. Stored a column after another (read as
        # ``hd``, slot x (h, dp) x column): bringing a column's means and variances up to date
        # after an outcome reads its 128 KB, where a row-major array spread them over every row
        # (1 MB of cache lines read, evicting the next decision's working set).
        self._hdc = np.zeros((0, DIM, 2), dtype=np.float32)
        # What a decision reads: each slot's mean and variance, as of its column's last update.
        self.mv = np.zeros((DIM, 2, 0), dtype=np.float32)
        self._stale_ticks: dict[float, float] = {}  # gamma -> the elapsed ticks of STALE_BELOW
        # At most the oldest column's tick (a column's tick only grows; a new column's is 0 and
        # lowers it): when even it is within STALE_BELOW of a decision's tick, no column is stale
        # and ``refresh_stale`` returns at once.
        self._oldest = -math.inf
        self._mv2 = (None, None)  # (mv, mv as (DIM, 2 x columns)): the rows a decision gathers
        # Per column, the slots that may hold something (a bool per slot), or None (not known):
        # a slot that never learned reads (0, 1/p0) at any scale, so bringing a column's means and
        # variances up to date after an outcome or a refresh rewrites only these.
        self._live: list[Optional[np.ndarray]] = []
        self._columns: dict[tuple, list[int]] = {}  # ``columns`` by the ids asked for
        for name in self._VECTORS:
            setattr(self, name, np.zeros(0))
        # Sharing (``track``): per column, what was learned here since the last fold (stored
        # units, float64; None: nothing), the outcomes since, and the deployments a prior model
        # re-seeded since the store last looked. None while not tracking.
        self._pending: Optional[list[Optional[np.ndarray]]] = None
        self._pending_count: list[float] = []
        self.reseeded: set[str] = set()
        self.gamma = 1.0  # the gamma of the last outcome learned (what a shared store folds with)

    @property
    def hd(self) -> np.ndarray:
        """(DIM, 2, columns): each slot's stored (h, dp) per column (a view: assignable)."""
        return self._hdc.transpose(1, 2, 0)

    @property
    def h(self) -> np.ndarray:
        return self.hd[:, 0, :]

    @property
    def dp(self) -> np.ndarray:
        return self.hd[:, 1, :]

    def __len__(self) -> int:
        return len(self.ids)

    # -- columns ------------------------------------------------------------------------------------
    def column(self, dep: str, prior_variance: float) -> int:
        """The column of `dep`, created (at the prior) when new. The array holds exactly one column
        per deployment (a decision computes over all of them): a new deployment copies it once."""
        k = self.ids.get(dep)
        if k is not None:
            return k
        with self._lock:
            return self._new_column(dep, prior_variance)

    def _new_column(self, dep: str, prior_variance: float) -> int:
        k = self.ids.get(dep)
        if k is not None:  # another thread made it meanwhile
            return k
        k = len(self.ids)
        self._hdc = np.concatenate((self._hdc, np.zeros((1, DIM, 2), dtype=np.float32)))
        self.mv = np.concatenate((self.mv, np.zeros((DIM, 2, 1), dtype=np.float32)), axis=2)
        for name, v in zip(self._VECTORS, (1.0 / prior_variance, 1.0, 0.0, 0.0, 0.5, BASE_PSEUDO_COUNT)):
            setattr(self, name, np.append(getattr(self, name), v))
        if self._pending is not None:
            self._pending.append(None)
            self._pending_count.append(0.0)
        self.ids[dep] = k
        self._oldest = -math.inf
        self._live.append(None)
        self.materialise(k)
        return k

    def start(self, dep: str, prior_variance: float, mean: float, count: float) -> int:
        """The column of `dep`; a new one starts from the prior mean reward `mean` weighing `count`
        observations (``cold_prior``), an existing one is left as it is."""
        k = self.ids.get(dep)
        if k is not None:
            return k
        with self._lock:
            k = self._new_column(dep, prior_variance)
            if self.count[k] == 0.0:
                self.prior_mean[k], self.prior_count[k] = clamp01(mean), max(0.0, count)
            return k

    def materialise(self, k: int, touched: Optional[np.ndarray] = None) -> None:
        """Column k's slot means and variances from its natural parameters (after a change).
        `touched`: the slots an outcome changed (an empty array: none, the scale alone), when
        every other slot is as it was at the last call: then only the slots that ever held
        something are rewritten (the same values: a slot that never learned reads (0, 1/p0) at
        any scale), as long as they are under a quarter of the column. Without it, every slot."""
        live = self._live[k] if touched is not None else None
        if live is None:
            self._materialise_slots(k, slice(None))
            if touched is not None:  # from now on, known
                hk = self.hd[:, :, k]
                self._live[k] = (hk[:, 0] != 0.0) | (hk[:, 1] != 0.0)
            else:
                self._live[k] = None
            return
        live[touched] = True
        slots = np.flatnonzero(live)
        self._materialise_slots(k, slots if len(slots) < DIM // 4 else slice(None))

    def _materialise_slots(self, k: int, slots) -> None:
        s = float(self.scale[k])
        hk = self.hd[slots, :, k]
        prec = hk[:, 1] * s
        prec += self.p0[k]
        self.mv[slots, 1, k] = 1.0 / prec
        self.mv[slots, 0, k] = hk[:, 0] * s / prec

    def columns(self, ids: Sequence[str], prior_variance: float) -> list[int]:
        """The columns of `ids` (created when new), kept by the ids (a deployment's column never
        changes): the same list again for the same pool (read it, do not change it)."""
        key = tuple(ids)
        cols = self._columns.get(key)
        if cols is None:
            get = self.ids.get
            cols = [get(i) for i in ids]
            if None in cols:
                cols = [self.column(i, prior_variance) if c is None else c for i, c in zip(ids, cols)]
            if len(self._columns) >= 256:
                self._columns.clear()
            self._columns[key] = cols
        return cols

    # -- predicting ---------------------------------------------------------------------------------
    def priors(self, cols: Sequence[int]) -> tuple[list[float], list[float]]:
        """Each column's prior model mean and its weight (pseudo-observations), as lists."""
        return self.prior_means(cols), self.prior_count.take(cols).tolist()

    def prior_means(self, cols: Sequence[int]) -> list[float]:
        """Each column's prior model mean, as a list."""
        return self.prior_mean.take(cols).tolist()

    def base(self, cols: Sequence[int], pulls: Sequence[float], rewards: Sequence[float]) -> tuple[list[float], list[float]]:
        """Each column's base mean and its variance, from the arms' (pulls, total reward) with the
        prior model's mean as pseudo-observations (a loop: the pool is small)."""
        pm, pc = self.priors(cols)
        means, variances = [], []
        for p, k, n, r in zip(pm, pc, pulls, rewards):
            m = clamp01((r + p * k) / (n + k))
            means.append(m)
            variances.append(m * (1.0 - m) / (n + k + 1.0))
        return means, variances

    def residual(self, cols: Sequence[int], x: RequestVector) -> tuple[np.ndarray, np.ndarray]:
        """The residual's predictive mean and variance per column of `cols`, for the vector `x`, as
        one float32 product: the gathered rows hold every column's means then its variances,
        (values; squares) times them gives both sums at once (and two cross terms left unread).
        The slots are read as of each column's last update: forgetting applies to a deployment's
        weights when it next learns (``learn``), and between its updates through its base (the
        arm, forgotten by the bandit). It saves 36-43k instructions (0.1 % of an alias request,
        docs/benchmarks.md, "Fast paths") over its float64 reading (tests/test_contextual.py),
        which rounds the scores differently from their 7th digit: kept until they change anyway."""
        mean, var = self.residual_lists(cols, x)
        return np.array(mean, dtype=np.float32), np.array(var, dtype=np.float32)

    def residual_lists(self, cols: Sequence[int], x: RequestVector) -> tuple[list[float], list[float]]:
        """``residual``'s values as lists (what ``predict`` reads): one gather, one product, one
        conversion."""
        mv, mv2 = self._mv2
        if mv is not self.mv:
            mv = self.mv
            mv2 = mv.reshape(DIM, 2 * mv.shape[2])
            self._mv2 = (mv, mv2)
        n = mv.shape[2]
        means, variances = (x.w32 @ mv2.take(x.idx, axis=0)).tolist()  # (2, 2n)
        if len(cols) == n and cols == self._order(n):  # every column, in order
            return means[:n], variances[n:]
        return [means[c] for c in cols], [variances[n + c] for c in cols]

    _ORDERS: dict[int, list[int]] = {}

    @classmethod
    def _order(cls, n: int) -> list[int]:
        got = cls._ORDERS.get(n)
        if got is None:
            got = cls._ORDERS[n] = list(range(n))
        return got

    def residual_exact(self, cols: Sequence[int], x: RequestVector, tick: float,
                       gamma: float) -> tuple[np.ndarray, np.ndarray]:
        """The residual's predictive mean and variance per column of `cols` with each column's
        forgetting brought exactly to `tick` (what ``_bring_to`` would do if it learned now), from
        its natural parameters: per column, the precision P = p0 + dp * scale * gamma**elapsed and
        the mean h * scale * gamma**elapsed / P of the prompt's slots, then the two sums (a loop
        over the columns, float64). What ``predict`` reads within STALE_BELOW (``refresh_stale``);
        off the request path."""
        means, variances = [], []
        for c in cols:
            elapsed = tick - float(self.tick[c])
            s = float(self.scale[c]) * (gamma ** elapsed if gamma < 1.0 and elapsed > 0.0 else 1.0)
            prec = float(self.p0[c]) + self.hd[x.idx, 1, c].astype(np.float64) * s
            means.append(float(x.val @ (self.hd[x.idx, 0, c].astype(np.float64) * s / prec)))
            variances.append(float(x.sq @ (1.0 / prec)))
        return np.array(means), np.array(variances)

    def refresh_stale(self, cols: Sequence[int], tick: float, gamma: float) -> None:
        """Bring to `tick` every column of `cols` whose forgetting since it was last brought up to
        date exceeds STALE_BELOW (its decay factor gamma**elapsed under it): a deployment not
        chosen for a while forgets at decision time too (its weights back toward the prior, its
        uncertainty growing back), as its arm does, read within that bound (the other decisions
        read the column materialised at its last update or refresh)."""
        if gamma >= 1.0 or not cols:
            return
        limit = self._stale_ticks.get(gamma)
        if limit is None:
            if len(self._stale_ticks) > 64:
                self._stale_ticks.clear()
            limit = self._stale_ticks[gamma] = math.log(STALE_BELOW) / math.log(gamma)
        if self._oldest >= tick - limit:  # no column is stale
            return
        ticks = self.tick
        stale = np.flatnonzero(ticks.take(cols) < tick - limit)
        if len(stale):
            with self._lock:
                for j in stale.tolist():
                    k = cols[j]
                    if self.tick[k] < tick - limit:  # not refreshed meanwhile
                        self._bring_to(k, tick, gamma)
                        self.materialise(k, _NO_SLOTS)
        if len(ticks) == len(self.ids):  # (not while another thread appends a column)
            self._oldest = float(ticks.min()) if len(ticks) else math.inf

    def predict(self, ids: Sequence[str], x: RequestVector, pulls, rewards, tick: float, gamma: float,
                prior_variance: float) -> tuple[list[float], list[float], list[float]]:
        """(predicted reward, its variance, the base) per deployment of `ids`, each column's
        forgetting brought to `tick` within STALE_BELOW (``refresh_stale``)."""
        cols = self.columns(ids, prior_variance)
        base, base_var = self.base(cols, pulls, rewards)
        self.refresh_stale(cols, tick, gamma)
        mean, var = self.residual_lists(cols, x)
        return [b + m for b, m in zip(base, mean)], [b + v for b, v in zip(base_var, var)], base

    def predict_residual(self, ids: Sequence[str], x: RequestVector, tick: float, gamma: float,
                         prior_variance: float) -> tuple[list[float], list[float]]:
        """(what the prompt's features add to the base, its variance) per deployment of `ids`
        (``predict`` without the base: the caller brings its own, docs/quality.md#the-choice)."""
        cols = self.columns(ids, prior_variance)
        self.refresh_stale(cols, tick, gamma)
        return self.residual_lists(cols, x)

    def contributions(self, dep: str, x: RequestVector) -> np.ndarray:
        """Each vector entry's share of the residual prediction for `dep` (x_i * w_i)."""
        k = self.ids.get(dep)
        if k is None:
            return np.zeros(len(x.idx))
        return x.val * self.mv[x.idx, 0, k]

    # -- learning -----------------------------------------------------------------------------------
    def _bring_to(self, k: int, tick: float, gamma: float) -> float:
        if gamma < 1.0 and tick > self.tick[k]:
            self.scale[k] *= gamma ** (tick - self.tick[k])
        if tick > self.tick[k]:
            self.tick[k] = tick
        s = self.scale[k]
        if s < _RESCALE_BELOW:
            exact = self.hd[:, :, k] * s  # float64
            self.hd[:, :, k] = exact
            if self._pending is not None:
                # Pending changes in the column's new units, plus the float32 rounding of the
                # rescale itself: a shared copy rescales in float64 (lua/contextual.lua) and
                # then holds exactly what this column holds.
                pend = self._pending[k]
                if pend is None:
                    pend = self._pending[k] = np.zeros((DIM, 2))
                else:
                    pend *= s
                pend += self.hd[:, :, k] - exact
            self.scale[k] = s = 1.0  # (a slot holding nothing holds nothing after: still not live)
        return float(s)

    def learn(self, dep: str, ctx: LearnContext, reward: float, tick: float, gamma: float,
              weight: float = 1.0, bound=None) -> float:
        """One observed reward of `dep` for the request `ctx` was made from, counted as `weight`
        observations (in (0, 1]: its noise variance divided by it). `bound`: the
        ``key_share.PromptBound`` of the key the reward came from (None: no key), its part of
        the prompt weights kept and, with a limit, held to it (``_within_pull``). Returns the
        weight it counted with (0.0: none)."""
        if not (math.isfinite(reward) and math.isfinite(weight) and weight > 0.0):
            return 0.0
        with self._lock:
            self.gamma = gamma
            return self._learn(dep, ctx, reward, tick, gamma, min(weight, 1.0), bound)

    def _learn(self, dep: str, ctx: LearnContext, reward: float, tick: float, gamma: float,
               weight: float = 1.0, bound=None) -> float:
        k = self.column(dep, ctx.prior_variance)
        s = self._bring_to(k, tick, gamma)
        idx, inv = np.unique(ctx.vector.idx, return_inverse=True)
        x = np.bincount(inv, weights=ctx.vector.val)
        p0 = self.p0[k]
        tracking = self._pending is not None
        if tracking:
            before = self.hd[idx, :, k].astype(np.float64)
        prec = p0 + self.dp[idx, k] * s
        mean = self.h[idx, k] * s / prec
        var = 1.0 / prec
        pred = ctx.base + float(x @ mean)
        spread = float((x * x) @ var)
        total = ctx.noise_variance / weight + spread
        r = clamp01(reward) - pred
        counted = weight
        if bound is not None:
            within = self._within_pull(k, s, bound, tick, gamma, idx, x, mean, var, r, total)
            if within is None:
                return 0.0
            if within > total:  # cut short
                total, counted = within, ctx.noise_variance / (within - spread)
        h_before, prec_before = prec * mean, prec  # (the key's part adds what this piece changes)
        mean = mean + var * x * (r / total)
        var = var - var * var * x * x / total
        prec = 1.0 / var
        self.dp[idx, k] = (prec - p0) / s
        self.h[idx, k] = prec * mean / s
        self.count[k] += 1.0
        if bound is not None:
            bound.pull.add(idx, prec * mean - h_before, prec - prec_before)
        if tracking:  # what this outcome changed, as stored (differences of float32: exact in float64)
            pend = self._pending[k]
            if pend is None:
                pend = self._pending[k] = np.zeros((DIM, 2))
            pend[idx] += self.hd[idx, :, k] - before
            self._pending_count[k] += 1.0
        self.materialise(k, idx)
        return counted

    def _within_pull(self, k: int, s: float, bound, tick: float, gamma: float, idx: np.ndarray, x: np.ndarray,
                     mean: np.ndarray, var: np.ndarray, r: float, total: float) -> Optional[float]:
        """The update's ``total`` (noise variance over weight plus the prompt's spread) that keeps
        the key's pull on the prompt weights within its bound, at most the piece's own weight;
        None when nothing may count (key_share.py: per slot, its mean less its mean without the
        key's pieces, ``(h - H) / (P - Q)``, makes the pull ``D``; a prompt of norm 1 moves by at
        most ``|D|``).

        The update's changes of h and P are the key's (added to H and Q), so a slot's mean
        without the key does not change, and with t = 1 / total its mean becomes m + var x r t:
        the slot's part of D is a + t b with a its pull now and b = var x r, linear in t. The
        largest t in (0, 1 / total] with ``|D(t)| <= max(limit, |D(0)|)`` is a quadratic's root."""
        held_slots, held_h, held_q = bound.pull.at(tick, gamma)
        if bound.limit is None:
            return total  # alone with the deployment: kept, not bounded
        p0 = float(self.p0[k])
        a = np.zeros(len(idx))
        d0 = 0.0
        if len(held_slots):
            hk = self.hd[held_slots, :, k].astype(np.float64) * s
            prec = hk[:, 1] + p0
            pulls = hk[:, 0] / prec - (hk[:, 0] - held_h) / np.maximum(prec - held_q, p0)
            d0 = float(pulls @ pulls)
            pos = np.searchsorted(idx, held_slots)
            pos[pos >= len(idx)] = 0
            here = idx[pos] == held_slots  # the held slots this prompt has
            a[pos[here]] = pulls[here]
        b = var * x * r
        qa, qb, qc = float(b @ b), 2.0 * float(a @ b), d0 - max(bound.limit * bound.limit, d0)
        if qa <= 0.0:
            return total
        root = (-qb + math.sqrt(max(qb * qb - 4.0 * qa * qc, 0.0))) / (2.0 * qa)
        if root <= 0.0:
            return None
        return max(total, 1.0 / root)

    # -- another model's rows -----------------------------------------------------------------------
    def seed(self, prior: "ContextualModels") -> None:
        """Start every deployment this model has not learned yet from `prior` (a trained file)."""
        for dep, j in prior.ids.items():
            if dep in self.ids and self.count[self.ids[dep]] > 0:
                continue
            k = self.column(dep, 1.0 / prior.p0[j])
            self.p0[k] = prior.p0[j]
            self.hd[:, :, k] = prior.hd[:, :, j] * prior.scale[j]
            self.scale[k] = 1.0
            self.prior_mean[k] = prior.prior_mean[j]
            self.prior_count[k] = prior.prior_count[j]
            self.materialise(k)
            if self._pending is not None:
                self.reseeded.add(dep)

    # -- sharing through a store ----------------------------------------------------------------
    def track(self) -> None:
        """Keep what is learned from now on apart too, until ``take_pending`` (a shared store)."""
        with self._lock:
            if self._pending is None:
                self._pending = [None] * len(self.ids)
                self._pending_count = [0.0] * len(self.ids)

    def take_pending(self) -> list[ColumnDelta]:
        """What was learned since the last call, per deployment that learned (then forgotten
        here: the caller owns it until the store has it)."""
        out: list[ColumnDelta] = []
        if self._pending is None:
            return out
        with self._lock:
            for dep, k in self.ids.items():
                pend, n = self._pending[k], self._pending_count[k]
                if pend is None and not n:
                    continue
                if pend is None:
                    slots, values = np.zeros(0, dtype=np.int64), np.zeros((0, 2))
                else:
                    slots = np.flatnonzero((pend[:, 0] != 0.0) | (pend[:, 1] != 0.0))
                    values = pend[slots]
                out.append(ColumnDelta(dep, float(self.tick[k]), float(self.scale[k]), n, slots, values))
                self._pending[k], self._pending_count[k] = None, 0.0
        return out

    def shared_view(self, dep: str, in_flight: Sequence[ColumnDelta], gamma: float) -> SharedColumn:
        """The column of `dep` without what this process has not folded yet (its pending changes
        and the deltas `in_flight`): what this process last knew of the shared column, at the
        column's current scale and tick (to re-create a shared column that was lost)."""
        with self._lock:
            k = self.ids[dep]
            s, t = float(self.scale[k]), float(self.tick[k])
            v = self.hd[:, :, k].astype(np.float64)
            n = float(self.count[k])
            if self._pending is not None:
                if self._pending[k] is not None:
                    v -= self._pending[k]
                n -= self._pending_count[k]
            for d in in_flight:
                if d.dep == dep:
                    v[d.slots] -= d.values * (d.scale * _decay(gamma, t - d.tick) / s)
                    n -= d.count
            return SharedColumn(float(self.p0[k]), s, t, max(0.0, n), float(self.prior_mean[k]),
                                float(self.prior_count[k]), v)

    def adopt(self, dep: str, col: SharedColumn, gamma: float) -> None:
        """Install the shared column `col` for `dep`, with what this process learned since its
        last fold (still pending) on top: the column is brought to the later of the two ticks
        (as ``_bring_to`` would), the pending changes re-expressed in its units."""
        with self._lock:
            k = self.column(dep, 1.0 / col.p0)
            s_here, t_here = float(self.scale[k]), float(self.tick[k])
            scale, tick = col.scale, col.tick
            if gamma < 1.0 and t_here > tick:
                scale *= gamma ** (t_here - tick)
            tick = max(tick, t_here)
            v = col.values
            pend = self._pending[k] if self._pending is not None else None
            n = col.count
            if pend is not None:
                pend *= s_here * _decay(gamma, tick - t_here) / scale
                v = v + pend
            if self._pending is not None:
                n += self._pending_count[k]
            self.hd[:, :, k] = v
            self.scale[k], self.tick[k], self.count[k] = scale, tick, n
            self.p0[k], self.prior_mean[k], self.prior_count[k] = col.p0, col.prior_mean, col.prior_count
            self.materialise(k)

    def copy(self) -> "ContextualModels":
        m = ContextualModels()
        m.ids = dict(self.ids)
        m._hdc = self._hdc.copy()
        m.mv = self.mv.copy()
        m._live = [None] * len(self.ids)
        for name in self._VECTORS:
            setattr(m, name, getattr(self, name).copy())
        return m

    # -- the file format (data, never executed) ---------------------------------------------------
    def dump(self) -> dict:
        """Plain JSON data: per deployment its settings and only the slots it has learned."""
        deps = {}
        for dep, k in self.ids.items():
            s = self.scale[k]
            nz = np.flatnonzero((self.dp[:, k] != 0.0) | (self.h[:, k] != 0.0))
            deps[dep] = {
                "prior_variance": float(1.0 / self.p0[k]), "count": float(self.count[k]), "tick": float(self.tick[k]),
                "base_mean": float(self.prior_mean[k]), "base_count": float(self.prior_count[k]),
                "slots": [[int(i), float(self.h[i, k] * s), float(self.dp[i, k] * s)] for i in nz.tolist()],
            }
        return {"format": MODEL_FORMAT, "version": MODEL_VERSION, "feature_bits": FEATURE_BITS, "deployments": deps}

    @classmethod
    def load(cls, data) -> "ContextualModels":
        """The model a ``dump()`` describes; a ModelFileError lists every problem with its place
        (a JSON path such as ``deployments.gpt-4.slots[3]``)."""
        problems = check_model(data)
        if problems:
            raise ModelFileError(problems)
        m = cls()
        for dep, d in data["deployments"].items():
            k = m.column(dep, float(d["prior_variance"]))
            m.count[k] = float(d.get("count", 0.0))
            m.tick[k] = float(d.get("tick", 0.0))
            m.prior_mean[k] = float(d.get("base_mean", 0.5))
            m.prior_count[k] = float(d.get("base_count", BASE_PSEUDO_COUNT))
            for i, h, dp in d.get("slots", []):
                m.h[int(i), k] = float(h)
                m.dp[int(i), k] = float(dp)
            m.materialise(k)
        return m


def _decay(gamma: float, elapsed: float) -> float:
    return gamma ** elapsed if gamma < 1.0 and elapsed > 0.0 else 1.0


class ModelFileError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_model(data) -> list[str]:
    """Every problem of a model file's data, each as ``path: message`` (empty: valid)."""
    out: list[str] = []
    if not isinstance(data, dict):
        return ["(top): a model file is a JSON object"]
    if data.get("format") != MODEL_FORMAT:
        out.append(f"format: must be {MODEL_FORMAT!r}, got {data.get('format')!r}")
    if data.get("version") != MODEL_VERSION:
        out.append(f"version: this aisia reads version {MODEL_VERSION}, got {data.get('version')!r}")
    if data.get("feature_bits") != FEATURE_BITS:
        out.append(f"feature_bits: must be {FEATURE_BITS} (the feature hashing of this aisia), got {data.get('feature_bits')!r}")
    known = {"format", "version", "feature_bits", "deployments", "trained"}
    for key in sorted(set(data) - known):
        out.append(f"{key}: unknown field; known: {', '.join(sorted(known))}")
    deps = data.get("deployments")
    if not isinstance(deps, dict):
        return out + ["deployments: must be an object {deployment id: model}"]
    fields = {"prior_variance", "count", "tick", "base_mean", "base_count", "slots"}
    for dep, d in deps.items():
        where = f"deployments.{dep}"
        if not isinstance(d, dict):
            out.append(f"{where}: must be an object")
            continue
        for key in sorted(set(d) - fields):
            out.append(f"{where}.{key}: unknown field; known: {', '.join(sorted(fields))}")
        pv = d.get("prior_variance")
        if not _num(pv) or not 0 < pv <= 100:
            out.append(f"{where}.prior_variance: must be a number in (0, 100], got {pv!r}")
        for key, lo, hi in (("count", 0, 1e15), ("tick", 0, 1e15), ("base_mean", 0, 1), ("base_count", 0, 1e6)):
            v = d.get(key)
            if v is not None and (not _num(v) or not lo <= v <= hi):
                out.append(f"{where}.{key}: must be a number from {lo:g} to {hi:g}, got {v!r}")
        slots = d.get("slots", [])
        if not isinstance(slots, list):
            out.append(f"{where}.slots: must be a list of [slot, h, dp]")
            continue
        bad = 0
        for j, s in enumerate(slots):
            ok = (isinstance(s, list) and len(s) == 3 and isinstance(s[0], int) and not isinstance(s[0], bool)
                  and 0 <= s[0] < DIM and _num(s[1]) and _num(s[2]) and s[2] >= 0)
            if not ok:
                bad += 1
                if bad <= 5:
                    out.append(f"{where}.slots[{j}]: must be [slot 0..{DIM - 1}, h (a number), dp (a number >= 0)], got {s!r}")
        if bad > 5:
            out.append(f"{where}.slots: ... and {bad - 5} more bad slot(s)")
    return out


def fit_full_information(rows: Iterable[tuple[RequestVector, Mapping[str, float]]], *, prior_variance: float,
                         noise_variance: float, passes: int = 1) -> ContextualModels:
    """A model fitted offline where every candidate's reward of each request is known: first
    each deployment's mean reward (its base), then every (request, deployment) residual learned
    in order, `passes` times. No forgetting (a log has no "now")."""
    rows = list(rows)
    sums: dict[str, list[float]] = {}
    for _, rewards in rows:
        for dep, r in rewards.items():
            acc = sums.setdefault(dep, [0.0, 0.0])
            acc[0] += clamp01(r)
            acc[1] += 1.0
    m = ContextualModels()
    for dep, (total, n) in sums.items():
        k = m.column(dep, prior_variance)
        m.prior_mean[k] = (total + 0.5 * BASE_PSEUDO_COUNT) / (n + BASE_PSEUDO_COUNT)
        m.prior_count[k] = min(n, 50.0)
    for _ in range(max(1, passes)):
        for x, rewards in rows:
            for dep, r in rewards.items():
                base = float(m.prior_mean[m.ids[dep]])
                m.learn(dep, LearnContext(x, base, prior_variance, noise_variance), r, 0.0, 1.0)
    return m
