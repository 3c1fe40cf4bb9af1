"""A conversation simulator for routing benchmarks: users who talk to a chat client (issue 40).

Pure and seeded: no I/O, no clock. ``conversation_bench.py`` drives it through a real LiteLLM proxy.

What it models
--------------
* **Workloads** (``WORKLOADS``): named specs of deployments (prices, accuracy per task group, an
  optional mid-run degradation), the task-group mix and the users' habits.
* **Conversations as chat clients send them**: an optional system message, the whole history
  re-sent on every turn, no session id, no metadata. A user asks a question (a *task* of one
  group: general knowledge, math, computing); after a wrong answer most users say so in their next
  message (in their own language, in words of their own) or regenerate (the same prefix re-sent,
  the wrong answer dropped, as a chat client's "regenerate" button does); after a right one some
  thank, some ask an unrelated follow-up, some leave. A share of users never say anything.
* **The truth stays here.** Which group a question belongs to and whether an answer was right are
  known to the simulator only: the request carries the user's words and nothing else. The fake
  upstream asks ``TruthRegistry.judge`` (keyed by the request's messages) whether the deployment
  that serves the request answers right, by that deployment's accuracy on the task's group; the
  driver reads the verdict back from the registry. No router ever receives it: a benchmark must
  not feed the router what production cannot.
* **A judge, when the router asks one.** A router configured with a sampled judge
  (``quality.judge``) sends a share of its answers to a deployment for grading; the fake upstream
  answers such a call as an LLM judge would (``grader_reply``): by the answer's truth, which the
  registry keeps by the answer's text, agreeing with it ``GRADER_AGREEMENT`` of the time. That is
  what a production judge gives the router (a grade of the answer it reads), not the truth itself.

The user phrase bank is written for this benchmark, independently of ``policies/signals.yaml``:
a share of phrasings the lexicon may not know is the honest test of its recall.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

GROUPS = ("general", "math", "computing")


# -- workloads ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Degradation:
    """From ``from_share`` of the run on (a share of the conversations, by their index), the
    deployment's accuracy on ``groups`` (all when empty) becomes ``accuracy``."""

    accuracy: float
    from_share: float = 0.5
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeploymentSpec:
    """A simulated deployment: USD per 1M tokens, accuracy per task group, the tier an operator
    would declare for it (given to the routers that take declared priors: ours and LiteLLM's
    adaptive router; a quality tier 1-3 for the latter)."""

    id: str
    input_per_1m: float
    output_per_1m: float
    accuracy: Mapping[str, float]
    tier: str = "standard"
    quality_tier: int = 2
    degradation: Optional[Degradation] = None

    def accuracy_at(self, group: str, progress: float) -> float:
        """The chance of a right answer on ``group`` at ``progress`` (conversation index / count)."""
        d = self.degradation
        if d is not None and progress >= d.from_share and (not d.groups or group in d.groups):
            return d.accuracy
        return float(self.accuracy[group])

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_1m + completion_tokens * self.output_per_1m) / 1e6


@dataclass(frozen=True)
class Users:
    """The users' habits. After a wrong answer: ``complain`` (say so), ``regenerate``, else silent
    (move on or leave). After a right one: ``thank_and_leave``, ``thank_and_ask`` (thanks and a new
    question in one message), ``ask`` (an unrelated follow-up), else leave. ``silent``: the share of
    users who never complain, regenerate nor thank. ``languages``: the share of users per language
    (their follow-ups in it; questions are in it where the bank has one, else in English)."""

    complain: float = 0.6
    regenerate: float = 0.25
    thank_and_leave: float = 0.2
    thank_and_ask: float = 0.15
    ask: float = 0.3
    silent: float = 0.0
    max_tasks: int = 3
    max_attempts: int = 3
    languages: Mapping[str, float] = field(default_factory=lambda: {
        "en": 0.4, "fr": 0.2, "es": 0.13, "de": 0.13, "it": 0.07, "pt": 0.07})


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    deployments: tuple[DeploymentSpec, ...]
    mix: Mapping[str, float]
    users: Users = Users()
    system_message: bool = True
    # The oracle picks the cheapest deployment whose accuracy on a task's group is within this of
    # the best one's (0: the best only, which is always-frontier on these workloads).
    oracle_tolerance: float = 0.05

    def deployment(self, did: str) -> DeploymentSpec:
        return next(d for d in self.deployments if d.id == did)

    @property
    def frontier(self) -> DeploymentSpec:
        """The most expensive deployment (the "frontier" of the hard/easy shares)."""
        return max(self.deployments, key=lambda d: (d.input_per_1m + d.output_per_1m, d.id))

    def oracle_choice(self, group: Optional[str], progress: float) -> str:
        """The deployment the oracle sends a turn of ``group`` to (None: a turn without a task,
        to the cheapest)."""
        by_price = sorted(self.deployments, key=lambda d: (d.input_per_1m + d.output_per_1m, d.id))
        if group is None:
            return by_price[0].id
        best = max(d.accuracy_at(group, progress) for d in self.deployments)
        return next(d.id for d in by_price if d.accuracy_at(group, progress) >= best - self.oracle_tolerance - 1e-12)

    def hard_groups(self, progress: float = 0.0) -> tuple[str, ...]:
        """Groups the oracle does not send to the cheapest deployment (at ``progress``)."""
        cheapest = self.oracle_choice(None, progress)
        return tuple(g for g in self.mix if self.oracle_choice(g, progress) != cheapest)


FRONTIER_PRICE = (10.0, 30.0)  # USD per 1M tokens, in / out


def _priced(did: str, divisor: float, accuracy: Mapping[str, float], **kw) -> DeploymentSpec:
    return DeploymentSpec(did, FRONTIER_PRICE[0] / divisor, FRONTIER_PRICE[1] / divisor, dict(accuracy), **kw)


def _frontier() -> DeploymentSpec:
    return _priced("frontier", 1.0, {g: 0.92 for g in GROUPS}, tier="ultra", quality_tier=3)


_CHEAP_ACCURACY = {"general": 0.90, "math": 0.30, "computing": 0.30}
_MIX = {"general": 0.5, "math": 0.25, "computing": 0.25}

WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("two_tier", "a frontier-priced deployment right 92 % of the time on everything; one at 1/33 of its "
             "price right 90 % on general knowledge, 30 % on math and computing",
             (_frontier(), _priced("cheap", 33.0, _CHEAP_ACCURACY, tier="free", quality_tier=1)), _MIX),
    Workload("three_tier", "frontier (92 % everywhere); mid at 1/6 of its price (90 % general, 85 % computing, "
             "60 % math); small at 1/33 (88 % general, 30 % math and computing)",
             (_frontier(),
              _priced("mid", 6.0, {"general": 0.90, "math": 0.60, "computing": 0.85}, tier="standard", quality_tier=2),
              _priced("small", 33.0, {"general": 0.88, "math": 0.30, "computing": 0.30}, tier="free", quality_tier=1)),
             _MIX),
    Workload("code_specialist", "frontier (92 % everywhere); a coder at 1/20 of its price good at code only "
             "(93 % computing, 45 % general, 35 % math)",
             (_frontier(), _priced("coder", 20.0, {"general": 0.45, "math": 0.35, "computing": 0.93}, tier="standard",
                                   quality_tier=2)), _MIX),
    Workload("degrading", "two_tier, but from the middle of the run the cheap deployment is right only 35 % of the "
             "time on general knowledge too",
             (_frontier(), _priced("cheap", 33.0, _CHEAP_ACCURACY, tier="free", quality_tier=1,
                                   degradation=Degradation(0.35, 0.5, ("general",)))), _MIX),
    Workload("silent_users", "two_tier, with half of the users never saying anything (no complaint, no regenerate, "
             "no thanks)",
             (_frontier(), _priced("cheap", 33.0, _CHEAP_ACCURACY, tier="free", quality_tier=1)), _MIX,
             users=Users(silent=0.5)),
)}


# -- the question bank ----------------------------------------------------------------------------
# Templates with slots; a question's text is unique within a run (``QuestionBank.draw``). Mostly
# English; some in the other languages (a user of that language gets them half the time).
_SLOTS = {
    "country": ["Portugal", "Kenya", "Vietnam", "Chile", "Norway", "Morocco", "Peru", "Canada", "Poland", "Egypt",
                "Thailand", "Argentina", "Ireland", "Ghana", "Finland", "Mexico", "Greece", "Nepal", "Austria", "Japan"],
    "figure": ["Marie Curie", "Leonardo da Vinci", "Nelson Mandela", "Ada Lovelace", "Napoleon", "Frida Kahlo",
               "Isaac Newton", "Simone de Beauvoir", "Galileo", "Cleopatra", "Mozart", "Gandhi", "Magellan"],
    "topic": ["the French Revolution", "the printing press", "the Silk Road", "the Industrial Revolution",
              "photosynthesis", "plate tectonics", "the Roman Republic", "the Renaissance", "the Cold War",
              "the water cycle", "the Ottoman Empire", "the invention of the telephone", "the Hanseatic League"],
    "food": ["paella", "ratatouille", "sourdough bread", "miso soup", "risotto", "guacamole", "a lemon tart",
             "goulash", "pad thai", "shakshuka", "crepes", "a chocolate mousse"],
    "animal": ["octopuses", "bees", "penguins", "elephants", "owls", "dolphins", "ants", "bats", "salmon", "wolves"],
    "n": [str(k) for k in range(3, 60)],
    "m": [str(k) for k in range(2, 25)],
    "lang": ["Python", "JavaScript", "Go", "Rust", "Java", "TypeScript", "C#", "Kotlin"],
    "thing": ["a list of integers", "a dictionary of word counts", "a CSV file", "a binary tree", "a linked list",
              "a JSON document", "a string of parentheses", "a matrix", "a log file", "an array of timestamps"],
    "task": ["removes duplicates while keeping order", "finds the longest increasing run", "groups items by key",
             "checks whether it is balanced", "computes a running median", "merges overlapping intervals",
             "returns the k most frequent elements", "validates it against a schema", "reverses it in place",
             "parses it and sums one column"],
}

_QUESTIONS: dict[str, dict[str, list[str]]] = {
    "general": {
        "en": ["What is the capital of {country}, and roughly how many people live there?",
               "Who was {figure} and why are they remembered?",
               "Give me a short summary of {topic}.",
               "What are the main causes of {topic}?",
               "How do I make {food} at home?",
               "Why do {animal} behave the way they do in winter?",
               "Which languages are spoken in {country}?",
               "Tell me three interesting facts about {animal}.",
               "What should I see on a first trip to {country}?",
               "When did {figure} live, and what was going on in the world then?",
               "Explain {topic} to a twelve-year-old.",
               "What wine or drink goes well with {food}?"],
        "fr": ["Quelle est la capitale du pays suivant : {country} ?", "Qui était {figure} ?",
               "Que faut-il visiter lors d'un premier voyage dans ce pays : {country} ?",
               "Quelles langues parle-t-on dans ce pays : {country} ?"],
        "es": ["¿Cuál es la capital de {country}?", "¿Quién fue {figure}?",
               "¿Qué idiomas se hablan en {country}?", "¿Qué debo visitar en un primer viaje a {country}?"],
        "de": ["Was ist die Hauptstadt von {country}?", "Wer war {figure}?",
               "Welche Sprachen spricht man in {country}?", "Was sollte ich bei einer ersten Reise nach {country} sehen?"],
        "it": ["Qual è la capitale di {country}?", "Chi era {figure}?"],
        "pt": ["Qual é a capital de {country}?", "Quem foi {figure}?"],
    },
    "math": {
        "en": ["A train leaves at 9:40 and travels {n} km at {m} km/h. When does it arrive?",
               "Solve for x: {m}x + {n} = {n}{m}.",
               "What is the derivative of x^{m} * ln(x)?",
               "Compute the integral of {m}x^2 + {n} from 0 to 3.",
               "If I roll {m} dice, what is the probability that the sum is exactly {n}?",
               "How many ways can I choose {m} people from a group of {n}?",
               "Find all real roots of x^2 - {n}x + {m}.",
               "A loan of {n}000 euros at {m} % yearly interest, compounded monthly: what do I owe after 3 years?",
               "Prove that the sum of the first {n} odd numbers is a perfect square.",
               "What is the remainder of {n}^{m} divided by 7?",
               "The sides of a triangle are {m}, {n} and {n}. What is its area?",
               "What is the expected number of coin flips to see {m} heads in a row?"],
        "fr": ["Résous l'équation {m}x + {n} = {n}{m}.", "Calcule la dérivée de x^{m} * ln(x).",
               "Combien de façons de choisir {m} personnes parmi {n} ?"],
        "es": ["Resuelve la ecuación {m}x + {n} = {n}{m}.", "¿Cuál es la derivada de x^{m} * ln(x)?"],
        "de": ["Löse die Gleichung {m}x + {n} = {n}{m}.", "Berechne das Integral von {m}x^2 + {n} von 0 bis 3."],
        "it": ["Risolvi l'equazione {m}x + {n} = {n}{m}."],
        "pt": ["Resolva a equação {m}x + {n} = {n}{m}."],
    },
    "computing": {
        "en": ["Write a {lang} function that takes {thing} and {task}.",
               "My {lang} code that reads {thing} crashes with an index error after {n} items. Why?",
               "What is the time complexity of an algorithm that {task} for {thing}, and can it be done faster?",
               "Write a SQL query that returns the {m} customers with the highest total order value per month.",
               "How do I write a unit test in {lang} for a function that {task}?",
               "Explain the difference between a mutex and a semaphore, with a {lang} example.",
               "Implement an LRU cache with capacity {n} in {lang}.",
               "Refactor this {lang} loop over {thing} so it {task} without nested loops.",
               "Write a regular expression that matches dates like 2024-{m}-{n} and rejects invalid months.",
               "Why does my {lang} program that {task} use so much memory with {n} thousand items?"],
        "fr": ["Écris une fonction {lang} qui supprime les doublons d'une liste de {n} éléments en gardant l'ordre.",
               "Mon programme {lang} plante après {n} éléments avec une erreur d'index, pourquoi ?"],
        "es": ["Escribe una función en {lang} que invierta una lista de {n} elementos sin usar memoria extra."],
        "de": ["Schreib eine {lang}-Funktion, die die {m} häufigsten Wörter einer Datei zurückgibt."],
        "it": ["Scrivi una funzione {lang} che unisce {m} liste ordinate in una sola."],
        "pt": ["Escreva uma função em {lang} que conta as vogais de um texto de {n} linhas."],
    },
}


@dataclass(frozen=True)
class Task:
    """A question of one group (the truth: never sent)."""

    qid: str
    group: str
    text: str


class QuestionBank:
    """Questions unique within ``seen``: a question already there is drawn again (bounded), then
    marked with a natural suffix that keeps it unique. A run's first questions are unique across
    the run (drawn in conversation order: the same in every arm), so that no two conversations
    send the same messages; later ones within their conversation."""

    _SUFFIXES = ("", " Thanks in advance.", " Please be brief.", " I need it for tomorrow.", " Short answer please.",
                 " Keep it simple.", " Take your time.")

    def __init__(self):
        self.first_questions: set[str] = set()

    def draw(self, rng: random.Random, group: str, language: str, qid: str, seen: set[str]) -> Task:
        by_lang = _QUESTIONS[group]
        lang = language if language in by_lang and rng.random() < 0.5 else "en"
        for attempt in range(40):
            template = rng.choice(by_lang[lang])
            text = template.format(**{k: rng.choice(v) for k, v in _SLOTS.items()})
            if attempt >= 20:
                text += rng.choice(self._SUFFIXES) + (f" ({attempt})" if attempt >= 30 else "")
            if text not in seen:
                seen.add(text)
                return Task(qid, group, text)
        raise RuntimeError("question bank exhausted")  # cannot happen with the suffix counter


# -- the users' phrase bank -----------------------------------------------------------------------
# Written for this benchmark. Kinds: complaint (the answer was wrong), thanks (and leave), thanks
# with a new question ("{q}"), give_up (after the last wrong attempt), next (an unrelated new
# question, "{q}").
PHRASES: dict[str, dict[str, list[str]]] = {
    "complaint": {
        "en": ["That's not right.", "No, that answer is wrong.", "Hmm, I don't think that's correct.",
               "This is incorrect, can you check again?", "That doesn't work, I tried it.",
               "Nope. Wrong result.", "You made a mistake there.", "That can't be right, try again please.",
               "Are you sure? That looks wrong to me.", "Not what I asked, and the answer is off anyway.",
               "Your code throws an error when I run it.", "The numbers don't add up.",
               "wrong", "that's incorrect lol", "Still wrong.", "I checked and this is false."],
        "fr": ["Non, c'est faux.", "Ce n'est pas la bonne réponse.", "Ça ne marche pas.", "Tu t'es trompé.",
               "Je crois que c'est incorrect, vérifie.", "Pas du tout, c'est une erreur.", "Faux, recommence.",
               "Le résultat n'est pas bon.", "Ton code plante chez moi."],
        "es": ["No, eso está mal.", "Esa respuesta es incorrecta.", "No funciona.", "Te equivocaste.",
               "Creo que no es correcto, revísalo.", "El resultado no cuadra.", "Sigue estando mal."],
        "de": ["Nein, das ist falsch.", "Das stimmt nicht.", "Das funktioniert nicht.", "Du hast dich verrechnet.",
               "Die Antwort ist leider falsch.", "Das ist nicht korrekt, bitte nochmal prüfen.", "Immer noch falsch."],
        "it": ["No, è sbagliato.", "Non funziona.", "La risposta non è corretta.", "Hai sbagliato il calcolo."],
        "pt": ["Não, isso está errado.", "Não funciona.", "A resposta está incorreta.", "Você errou a conta."],
    },
    "thanks": {
        "en": ["Thanks, that works!", "Perfect, thank you.", "Great, exactly what I needed.", "thx!",
               "That did it, much appreciated.", "Awesome, thanks a lot.", "Got it, thanks."],
        "fr": ["Merci, ça marche !", "Parfait, merci beaucoup.", "Super, c'est exactement ça.", "Top, merci."],
        "es": ["¡Gracias, funciona!", "Perfecto, muchas gracias.", "Genial, justo lo que necesitaba."],
        "de": ["Danke, das funktioniert!", "Perfekt, vielen Dank.", "Super, genau das habe ich gebraucht."],
        "it": ["Grazie, funziona!", "Perfetto, grazie mille."],
        "pt": ["Obrigado, funcionou!", "Perfeito, muito obrigado."],
    },
    "thanks_ask": {
        "en": ["Thanks! Another question: {q}", "Great, that helps. Next one: {q}", "Perfect. Now, {q}"],
        "fr": ["Merci ! Autre question : {q}", "Parfait. Ensuite : {q}"],
        "es": ["¡Gracias! Otra pregunta: {q}", "Perfecto. Ahora: {q}"],
        "de": ["Danke! Noch eine Frage: {q}", "Super. Als Nächstes: {q}"],
        "it": ["Grazie! Un'altra domanda: {q}"],
        "pt": ["Obrigado! Outra pergunta: {q}"],
    },
    "give_up": {
        "en": ["Forget it, I'll look elsewhere.", "Never mind.", "This isn't going anywhere, bye."],
        "fr": ["Laisse tomber.", "Tant pis, je chercherai ailleurs."],
        "es": ["Olvídalo.", "Da igual, lo busco en otro sitio."],
        "de": ["Vergiss es.", "Egal, ich suche woanders."],
        "it": ["Lascia perdere."],
        "pt": ["Deixa pra lá."],
    },
    "next": {
        "en": ["{q}", "Unrelated, but {q}", "Also: {q}", "Different topic. {q}"],
        "fr": ["{q}", "Autre chose : {q}"],
        "es": ["{q}", "Otra cosa: {q}"],
        "de": ["{q}", "Etwas anderes: {q}"],
        "it": ["{q}", "Altra cosa: {q}"],
        "pt": ["{q}", "Outra coisa: {q}"],
    },
}

SYSTEM_MESSAGES = ("You are a helpful assistant.", "You are a helpful, concise assistant. Answer accurately.",
                   "You are ChatBot, a friendly assistant. Today's date is 2026-12-05.")


def phrase(rng: random.Random, kind: str, language: str, question: str = "") -> str:
    bank = PHRASES[kind]
    return rng.choice(bank.get(language) or bank["en"]).replace("{q}", question)


# -- conversations --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Turn:
    """One request of a conversation: the messages the client sends (all the router sees) and
    what only the simulator knows: the task it asks to answer (None: no task, e.g. a thanks), the
    attempt at that task (1: first), and why the user sent it."""

    conversation: int
    number: int
    messages: tuple[Mapping[str, str], ...]
    task: Optional[Task]
    attempt: int
    kind: str  # ask, complaint, regenerate, thanks, thanks_ask, give_up, next

    def request_messages(self) -> list[dict]:
        return [dict(m) for m in self.messages]


class Conversation:
    """One user's conversation, a state machine: ``next_turn()`` gives the request to send (None:
    the user left), ``answered(text, correct)`` tells it how the answer went."""

    def __init__(self, index: int, workload: Workload, bank: QuestionBank, seed: int, total: int):
        self.index, self.workload, self.bank, self.total = index, workload, bank, total
        self.rng = random.Random(f"conversation:{seed}:{workload.name}:{index}")
        users = workload.users
        langs = list(users.languages)
        self.language = self.rng.choices(langs, weights=[users.languages[k] for k in langs])[0]
        self.silent = self.rng.random() < users.silent
        self.history: list[dict] = []
        if workload.system_message:
            self.history.append({"role": "system", "content": self.rng.choice(SYSTEM_MESSAGES)})
        self.tasks = 0
        self.turns = 0
        self._asked: set[str] = set()
        self._pending: Optional[Turn] = None
        self._next: Optional[tuple[str, Optional[Task], int, Optional[str]]] = None  # kind, task, attempt, user text
        first = self._new_task()
        self._next = ("ask", first, 1, first.text)

    @property
    def progress(self) -> float:
        return self.index / max(1, self.total)

    def _new_task(self) -> Task:
        groups = list(self.workload.mix)
        group = self.rng.choices(groups, weights=[self.workload.mix[g] for g in groups])[0]
        self.tasks += 1
        seen = self.bank.first_questions if self.tasks == 1 else self._asked
        task = self.bank.draw(self.rng, group, self.language, f"c{self.index}-t{self.tasks}", seen)
        self._asked.add(task.text)
        return task

    def next_turn(self) -> Optional[Turn]:
        if self._pending is not None:
            raise RuntimeError("answered() was not called for the previous turn")
        if self._next is None:
            return None
        kind, task, attempt, text = self._next
        self._next = None
        if kind != "regenerate":
            self.history.append({"role": "user", "content": text})
        self.turns += 1
        self._pending = Turn(self.index, self.turns, tuple(dict(m) for m in self.history), task, attempt, kind)
        return self._pending

    def answered(self, text: str, correct: Optional[bool]) -> None:
        """The answer to the pending turn; ``correct`` None for a turn without a task or a failed
        request (then the user leaves)."""
        turn, self._pending = self._pending, None
        if turn is None:
            raise RuntimeError("no pending turn")
        self.history.append({"role": "assistant", "content": text})
        if turn.task is None or correct is None:
            return  # a thanks, a give-up, or an error: the conversation ends
        users, rng = self.workload.users, self.rng
        more_tasks = self.tasks < users.max_tasks
        if not correct:
            r = rng.random()
            if not self.silent and turn.attempt < users.max_attempts:
                if r < users.complain:
                    self._next = ("complaint", turn.task, turn.attempt + 1, phrase(rng, "complaint", self.language))
                    return
                if r < users.complain + users.regenerate:
                    self.history.pop()  # the regenerate button: the wrong answer is dropped, the prefix re-sent
                    self._next = ("regenerate", turn.task, turn.attempt + 1, None)
                    return
            elif not self.silent and turn.attempt >= users.max_attempts and r < 0.5:
                self._next = ("give_up", None, 1, phrase(rng, "give_up", self.language))
                return
            if more_tasks and rng.random() < 0.5:
                task = self._new_task()
                self._next = ("next", task, 1, phrase(rng, "next", self.language, task.text))
            return
        r = rng.random()
        if self.silent:
            if more_tasks and r < 0.4:
                task = self._new_task()
                self._next = ("next", task, 1, phrase(rng, "next", self.language, task.text))
            return
        if r < users.thank_and_leave:
            self._next = ("thanks", None, 1, phrase(rng, "thanks", self.language))
        elif r < users.thank_and_leave + users.thank_and_ask and more_tasks:
            task = self._new_task()
            self._next = ("thanks_ask", task, 1, phrase(rng, "thanks_ask", self.language, task.text))
        elif r < users.thank_and_leave + users.thank_and_ask + users.ask and more_tasks:
            task = self._new_task()
            self._next = ("next", task, 1, phrase(rng, "next", self.language, task.text))


# -- the truth: decided for the fake upstream, kept for the driver ---------------------------------
def request_key(messages: Sequence[Mapping]) -> str:
    """A request's identity from its messages alone (what the upstream receives): the roles and
    contents, in order."""
    canon = [[m.get("role"), m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))]
             for m in messages]
    return hashlib.sha256(json.dumps(canon, ensure_ascii=False).encode()).hexdigest()


def uniform(key: str) -> float:
    """A draw in [0, 1) fixed by `key` (sha256: the same in every process and version)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0 ** 64


def luck(seed: int, qid: str, attempt: int) -> float:
    """The uniform draw of an answer attempt, shared by every deployment (common random numbers:
    a question hard for one is hard for all): right iff luck < the deployment's accuracy."""
    return uniform(f"luck:{seed}:{qid}:{attempt}")


@dataclass
class Verdict:
    deployment: str
    correct: Optional[bool]


class TruthRegistry:
    """The simulator's side of a run: the driver ``expect``s each turn before sending it; the fake
    upstream that receives it asks ``judge`` (by the messages it got) whether its answer is right;
    the driver ``take``s the verdict after the response. Thread-safe (the upstreams serve in
    threads)."""

    def __init__(self, workload: Workload, seed: int, total: int):
        self.workload, self.seed, self.total = workload, seed, total
        self._lock = threading.Lock()
        self._expected: dict[str, Turn] = {}
        self._verdicts: dict[str, Verdict] = {}
        self._answers: dict[str, tuple[Optional[int], Optional[bool]]] = {}
        self.grades: list[tuple[Optional[int], float]] = []  # the judge's calls: (conversation, USD)
        self.unknown_requests = 0

    def expect(self, turn: Turn) -> str:
        key = request_key(turn.messages)
        with self._lock:
            self._expected[key] = turn
            self._verdicts.pop(key, None)
        return key

    def right(self, deployment: str, turn: Turn) -> Optional[bool]:
        if turn.task is None:
            return None
        acc = self.workload.deployment(deployment).accuracy_at(turn.task.group, turn.conversation / max(1, self.total))
        return luck(self.seed, turn.task.qid, turn.attempt) < acc

    def judge(self, deployment: str, messages: Sequence[Mapping]) -> tuple[Optional[Turn], Optional[bool]]:
        """Called by the upstream ``deployment`` for the messages it received: (the turn, whether
        this answer is right); (None, None) for a request the simulator did not send."""
        key = request_key(messages)
        with self._lock:
            turn = self._expected.get(key)
            if turn is None:
                self.unknown_requests += 1
                return None, None
            verdict = self._verdicts[key] = Verdict(deployment, self.right(deployment, turn))
        return turn, verdict.correct

    def take(self, key: str) -> Optional[Verdict]:
        with self._lock:
            self._expected.pop(key, None)
            return self._verdicts.pop(key, None)

    def answered(self, text: str, turn: Optional[Turn], correct: Optional[bool]) -> None:
        """The upstream sent `text` for `turn`: kept by its words, for a judge that reads it later."""
        with self._lock:
            self._answers[_words(text)] = (turn.conversation if turn is not None else None, correct)

    def answer_of(self, text: str) -> tuple[Optional[int], Optional[bool]]:
        """(the conversation, whether it was right) of an answer the upstreams sent; (None, None)
        for a text they did not send."""
        with self._lock:
            return self._answers.get(_words(text), (None, None))

    def graded(self, conversation: Optional[int], usd: float) -> None:
        """One judge call was answered, for an answer of `conversation`, at `usd`."""
        with self._lock:
            self.grades.append((conversation, usd))


def _words(text: str) -> str:
    return " ".join(text.split())


# -- a judge's grades ------------------------------------------------------------------------------
# The simulated judge's verdict matches the truth on this share of the answers it grades: an
# assumption of this benchmark (a capable LLM judge on short factual answers), stated with its results.
GRADER_AGREEMENT = 0.9
GRADES = {True: 9, False: 2, None: 8}  # out of 10: judged right, judged wrong, no task (a thanks' reply)
# How the plugin's judge quotes the answer it grades (aisia_plugin/judging.py, judge_messages).
_QUOTED_ANSWER = re.compile(r"<<answer-([0-9a-f]+)>>\n(.*)\n<</answer-\1>>", re.DOTALL)


def quoted_answer(messages: Sequence[Mapping]) -> Optional[str]:
    """The answer a judge's prompt quotes; None when `messages` are no judge's prompt."""
    last = messages[-1] if messages else None
    content = last.get("content") if isinstance(last, Mapping) else None
    found = _QUOTED_ANSWER.search(content) if isinstance(content, str) else None
    return found.group(2) if found else None


def grader_reply(registry: TruthRegistry, answer: str, seed: int) -> tuple[str, Optional[int]]:
    """(the judge's reply, the answer's conversation) for a judge's call grading `answer`: the
    answer's truth read as a judge would, right or wrong as it was with probability
    ``GRADER_AGREEMENT`` (drawn per answer, seeded), in the ``{"score": N}`` the plugin asks for."""
    conversation, correct = registry.answer_of(answer)
    verdict = correct
    if correct is not None:
        agrees = uniform(f"grader:{seed}:{_words(answer)}") < GRADER_AGREEMENT
        verdict = correct if agrees else not correct
    return json.dumps({"score": GRADES[verdict]}), conversation


_ANSWER_WORDS = ("the", "result", "is", "because", "so", "we", "get", "first", "then", "note", "that", "here",
                 "step", "value", "which", "gives", "this", "case", "answer", "follows", "from", "above", "and")


def answer_text(deployment: str, turn: Optional[Turn], seed: int) -> str:
    """The fake upstream's reply: the same kind of text whether right or wrong (a router reads
    nothing of the truth in it), different on each attempt (a regenerate is not a repeat)."""
    rng = random.Random(f"answer:{seed}:{deployment}:{turn.task.qid if turn and turn.task else None}:"
                        f"{turn.attempt if turn else 0}:{turn.number if turn else 0}")
    if turn is not None and turn.task is None:
        return rng.choice(("You're welcome!", "Glad I could help.", "Sorry about that. Good luck!", "Of course."))
    words = rng.randint(40, 120)
    return "Here is my answer. " + " ".join(rng.choice(_ANSWER_WORDS) for _ in range(words)) + "."
