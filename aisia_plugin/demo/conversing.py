"""The demo's simulated users, who converse as people do with a chat client (docs/demo.md): each
asks a question in English or French, reads the answer, and says what they think of it. After a
wrong answer most say so ("That's wrong.", "C'est faux.") and ask again, some regenerate (the
client sends the same history again without the wrong answer), the others leave; after a right
one some thank, some thank and ask another question, the others leave.

Their requests are what a chat client sends: a system message, the whole history on every turn,
no session id, no metadata. Nothing tells the proxy whether an answer was right: the plugin
learns it from what the users say next (its conversation signals, docs/signals.md), unless the
demo is asked to post grades to ``/aisia/feedback`` too (``--feedback``).

Whether an answer is right is the simulated provider's truth: its reply carries a quality in
[0, 1] (upstream.py, its strength in the prompt's domain), and the user finds the answer right
with that probability. Only the user reads it; the router never does.

The user model (``plan``, ``next_turn``) is pure and seeded; ``send_conversations`` runs
conversations over HTTP, several at once, within a budget of requests."""

from __future__ import annotations

import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional

from .scenario import TRAFFIC_MIX, Outcome, ask

# The domains on which the demo's cheap providers often answer wrong (the "hard" prompts of the
# frontier shares), the others being the "easy" ones (upstream.DEMO_UPSTREAMS's strengths).
HARD_DOMAINS = frozenset({"coding", "math"})

# Questions per domain and language; {n} makes each conversation's first message its own (a
# conversation is known by its caller and first messages, as a chat client sends no session id).
QUESTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "coding": {
        "en": ("Write a Python function that merges {n} sorted lists and add unit tests",
               "Debug this JavaScript: console.log(arr.length) prints undefined inside my function number {n}",
               "Implement a REST API endpoint in Go that returns the {n} latest orders as JSON",
               "Refactor this SQL query with {n} subqueries to use a join instead of a subquery"),
        "fr": ("Écris une fonction Python qui trie une liste de {n} tuples par leur second élément",
               "Écris une fonction Python qui fusionne {n} listes triées et ajoute des tests unitaires",
               "Implémente en Go un endpoint d'API REST qui renvoie les {n} dernières commandes en JSON"),
    },
    "math": {
        "en": ("What is the derivative of x^{n} * sin(x)? Compute it and simplify the expression",
               "Compute the integral of x^{n} between 0 and 3 and simplify the result"),
        "fr": ("Calcule l'intégrale de x^{n} entre 0 et 3",),
    },
    "translation": {
        "en": ("Translate into French: the meeting is moved to Thursday at {n} o'clock",),
        "fr": ("Traduis en anglais : le train part à {n} heures",),
    },
    "general": {
        "en": ("Summarize the causes of the French Revolution in {n} sentences",
               "Give me {n} ideas for a team lunch on Friday",
               "Draft a polite email declining a meeting invitation for the {n}th"),
        "fr": ("Résume les causes de la Révolution française en {n} phrases",
               "Donne-moi {n} idées pour un déjeuner d'équipe vendredi"),
    },
}

SYSTEM_MESSAGES = ("You are a helpful assistant.", "You are a helpful, concise assistant. Answer accurately.")

# What the users say, by language: a complaint opens the message and the question is asked again
# after it; thanks alone, or thanks and a new question.
COMPLAINTS = {"en": ("That's wrong.", "No, that's not right.", "It doesn't work.", "Your answer is wrong."),
              "fr": ("C'est faux.", "Non, ce n'est pas correct.", "Ça ne marche pas.", "Ta réponse est fausse.")}
ASK_AGAIN = {"en": "Try again: {q}", "fr": "Recommence : {q}"}
THANKS = {"en": ("Thanks, that works!", "Perfect, thank you.", "Great, that's exactly what I needed."),
          "fr": ("Merci, ça marche !", "Parfait, merci.", "Super, c'est exactement ce qu'il me fallait.")}
THANK_AND_ASK = {"en": "Thanks! Another one: {q}", "fr": "Merci ! Autre question : {q}"}

# What a user turn is (the demo's own count of what its users said, beside what the proxy read).
QUESTION, COMPLAINT, REGENERATE, THANKS_ONLY, THANKS_AND_QUESTION = (
    "question", "complaint", "regenerate", "thanks", "thanks and question")


@dataclass(frozen=True)
class Habits:
    """What users do. After a wrong answer: ``complain`` (say so and ask again), ``regenerate``,
    else leave. After a right one: ``thank_and_ask``, ``thank`` (and leave), else leave. A
    conversation holds at most ``max_questions`` questions and ``max_attempts`` tries of one."""

    complain: float = 0.65
    regenerate: float = 0.25
    thank_and_ask: float = 0.35
    thank: float = 0.35
    max_questions: int = 3
    max_attempts: int = 3
    french: float = 0.4  # the share of users who write in French


@dataclass(frozen=True)
class Question:
    domain: str
    text: str

    @property
    def hard(self) -> bool:
        return self.domain in HARD_DOMAINS


@dataclass
class Conversation:
    """One user's conversation with an alias: what they will ask, in which language, and the
    history their chat client sends."""

    alias: str
    language: str
    questions: list  # of Question, the next first
    rng: random.Random
    habits: Habits
    messages: list = field(default_factory=list)
    current: Optional[Question] = None
    attempts: int = 0
    asked: int = 0


def plan(index: int, seed: int, habits: Habits = Habits()) -> Conversation:
    """The `index`-th conversation of a run: its alias (TRAFFIC_MIX's weights), language, system
    message and questions; the same for the same (index, seed)."""
    rng = random.Random(f"demo-conversation:{seed}:{index}")
    entries = [(alias, domains) for alias, domains, weight in TRAFFIC_MIX for _ in range(weight)]
    alias, domains = rng.choice(entries)
    language = "fr" if rng.random() < habits.french else "en"
    # A number of its own in every question: no two conversations of a run (nor of its two
    # phases, seeded apart) open alike, up to a thousand per phase.
    number = (seed % 1000) * 1000 + index + 2
    questions, used = [], set()
    for _ in range(habits.max_questions):
        # A different question each time (one asked again reads as a rephrase, a complaint).
        left = [(d, t) for d in dict.fromkeys(domains) for t in QUESTIONS[d].get(language) or QUESTIONS[d]["en"]
                if t not in used]
        if not left:
            break
        domain = rng.choice(sorted({d for d, _ in left}))
        template = rng.choice([t for d, t in left if d == domain])
        used.add(template)
        questions.append(Question(domain, template.format(n=number)))
    return Conversation(alias, language, questions, rng, habits,
                        messages=[{"role": "system", "content": rng.choice(SYSTEM_MESSAGES)}])


def first_turn(c: Conversation) -> tuple[str, list]:
    """The conversation's first request: (what the user said, the messages)."""
    c.current = c.questions.pop(0)
    c.asked, c.attempts = 1, 1
    c.messages.append({"role": "user", "content": c.current.text})
    return QUESTION, list(c.messages)


def next_turn(c: Conversation, answer: str, right: bool) -> Optional[tuple[str, list]]:
    """What the user does after `answer` (right or not, as they found it): (what they said, the
    next request's messages), or None when they leave. A regenerate re-sends the history without
    the answer, as a chat client's button does; the other turns append the answer and a message."""
    h, rng = c.habits, c.rng
    if not right:
        if c.attempts >= h.max_attempts:
            return None
        draw = rng.random()
        if draw < h.regenerate:
            c.attempts += 1
            return REGENERATE, list(c.messages)
        if draw >= h.regenerate + h.complain:
            return None
        c.attempts += 1
        said = f"{rng.choice(COMPLAINTS[c.language])} {ASK_AGAIN[c.language].format(q=c.current.text)}"
        kind = COMPLAINT
    else:
        draw = rng.random()
        if draw < h.thank_and_ask and c.questions:
            c.current = c.questions.pop(0)
            c.attempts = 1
            c.asked += 1
            said = THANK_AND_ASK[c.language].format(q=c.current.text)
            kind = THANKS_AND_QUESTION
        elif draw < h.thank_and_ask + h.thank:
            said, kind = rng.choice(THANKS[c.language]), THANKS_ONLY
            c.current = None  # the user leaves after this message; its answer is not judged
        else:
            return None
    c.messages.append({"role": "assistant", "content": answer})
    c.messages.append({"role": "user", "content": said})
    return kind, list(c.messages)


@dataclass
class Turn:
    """One request of a conversation and its outcome."""

    sequence: int  # the order in which the run sent it
    said: str  # QUESTION, COMPLAINT, REGENERATE, THANKS_ONLY or THANKS_AND_QUESTION
    language: str
    hard: Optional[bool]  # None: a closing thank-you (no question in play)
    outcome: Outcome
    right: Optional[bool] = None


class Budget:
    """A run's requests, shared by its conversations: each request takes one."""

    def __init__(self, n: int, first: int = 0):
        self._lock = threading.Lock()
        self.left = n
        self.next = first

    def take(self) -> Optional[int]:
        """The request's sequence number, or None when the budget is spent."""
        with self._lock:
            if self.left <= 0:
                return None
            self.left -= 1
            self.next += 1
            return self.next - 1


def converse(proxy, c: Conversation, budget: Budget, feedback: bool = False) -> list[Turn]:
    """One conversation through the proxy, until the user leaves or the budget is spent."""
    turns: list[Turn] = []
    step: Optional[tuple[str, list]] = first_turn(c)
    while step is not None:
        sequence = budget.take()
        if sequence is None:
            break
        said, messages = step
        question = c.current
        domain = question.domain if question is not None else ""
        out = ask(proxy, c.alias, messages[-1]["content"], domain, feedback, messages=messages)
        turn = Turn(sequence, said, c.language, question.hard if question is not None else None, out)
        turns.append(turn)
        if not out.ok or out.quality is None or question is None:
            break
        text = out.answer if out.answer is not None else ""
        turn.right = c.rng.random() < out.quality
        step = next_turn(c, text, turn.right)
    return turns


def send_conversations(proxy, n: int, seed: int = 0, concurrency: int = 4, feedback: bool = False,
                       first: int = 0, on_done: Optional[Callable[[int], None]] = None,
                       habits: Habits = Habits()) -> list[Turn]:
    """`n` requests made by conversing users (several conversations at once), numbered from
    `first`; the turns in the order they were sent."""
    budget = Budget(n, first)
    lock = threading.Lock()
    counter = {"conversations": 0, "done": 0}

    def worker() -> list[Turn]:
        mine = []
        while budget.left > 0:
            with lock:
                index = counter["conversations"]
                counter["conversations"] += 1
            turns = converse(proxy, plan(index, seed, habits), budget, feedback)
            mine.extend(turns)
            if on_done and turns:
                with lock:
                    counter["done"] += len(turns)
                    done = counter["done"]
                on_done(done)
        return mine

    workers = max(1, concurrency)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = [pool.submit(worker) for _ in range(workers)]
        turns = [t for p in parts for t in p.result()]
    return sorted(turns, key=lambda t: t.sequence)


def said_counts(turns: list[Turn]) -> Counter:
    """What the users said after an answer: {(kind, language): count} (first questions left out)."""
    return Counter((t.said, t.language) for t in turns if t.said != QUESTION)
