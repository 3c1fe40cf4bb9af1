"""The held-out diagnosis' other models of a trace (replay.training.model_variants and its
solvers), each checked against a dense closed form or on a hand-made set whose answer is known."""

import numpy as np
import pytest

from aisia_plugin.contextual import RequestVector
from aisia_plugin.replay import training
from aisia_plugin.replay.training import (Holdout, TrainingRow, conjugate_gradient, designs, exact_labels, fit_exact, hashed_slots,
                                          logistic, model_variants, online_logistic, reduced_rank, ridge, shared_ridge)


class Settings:  # the contextual settings' defaults (schemas/aisia-policy.schema.json)
    prior_variance = 0.05
    noise_variance = 0.1


def row(words, rewards, slots=None):
    """A request of these words (one slot each, by default their position in VOCAB, plus a
    bias), its vector's values scaled to norm 1 as the contextual model's are."""
    labels = list(words) + ["bias"]
    idx = [VOCAB.index(w) for w in words] + [len(VOCAB)] if slots is None else slots
    return TrainingRow(RequestVector(np.array(idx, dtype=np.int64), np.full(len(idx), 1.0 / np.sqrt(len(idx)))),
                       rewards, "none", None, None, labels)


VOCAB = ["math", "proof", "chat", "hello", "poem", "integral", "story", "sum"]


def dense(X):
    m = np.zeros((X.n, X.d))
    np.add.at(m, (X.row, X.col), X.val)
    return m


def test_designs_share_columns_sum_repeats_and_drop_what_was_never_fitted():
    train = [row(["math", "math", "proof"], {}), row(["math", "chat"], {})]
    test = [row(["math", "poem"], {})]
    X, T = designs(train, test, exact_labels)
    assert X.d == 4  # math, proof, bias, chat
    v = 1.0 / np.sqrt(4.0)
    assert dense(X)[0].tolist() == [2 * v, v, v, 0.0]  # a repeated word counts its occurrences
    assert dense(T)[0].tolist() == pytest.approx([1 / np.sqrt(3), 0.0, 1 / np.sqrt(3), 0.0])  # "poem": no column
    X2, _ = designs(train, test, exact_labels, min_rows=2)
    assert X2.d == 2  # math and bias: in both rows fitted on
    # two words hashed to one slot share it; by label they do not
    collide = [row(["math", "poem"], {}, slots=[7, 7, 9])]
    assert designs(collide, [], hashed_slots)[0].d == 2 and designs(collide, [], exact_labels)[0].d == 3


def test_conjugate_gradient_ridge_and_shared_ridge_solve_their_dense_systems():
    rng = np.random.default_rng(0)
    rows = [row(list(rng.choice(VOCAB, 3)), {}) for _ in range(30)]
    X, _ = designs(rows, [], exact_labels)
    A = dense(X)
    y = rng.normal(size=(30, 3))
    M = A.T @ A + np.eye(X.d)
    assert conjugate_gradient(lambda v: M @ v, y[:5, :1].repeat(X.d // 5 + 1, 0)[:X.d]) == pytest.approx(
        np.linalg.solve(M, y[:5, :1].repeat(X.d // 5 + 1, 0)[:X.d]), abs=1e-8)
    pv, nv = 0.05, 0.1
    assert ridge(X, y, pv, nv) == pytest.approx(np.linalg.solve(A.T @ A / nv + np.eye(X.d) / pv, A.T @ y / nv), abs=1e-8)
    # shared + per-deployment: the stacked design [A A 0 0; A 0 A 0; A 0 0 A] on the stacked rewards
    k = y.shape[1]
    S = np.block([[A] + [A if j == i else np.zeros_like(A) for j in range(k)] for i in range(k)])
    t = np.linalg.solve(S.T @ S / nv + np.eye(S.shape[1]) / (pv / 2), S.T @ y.T.reshape(-1) / nv).reshape(k + 1, X.d).T
    assert shared_ridge(X, y, pv, nv) == pytest.approx(t[:, :1] + t[:, 1:], abs=1e-8)


def test_logistic_stops_where_its_posterior_is_flat_and_rank_reduction_keeps_what_it_should():
    rng = np.random.default_rng(1)
    rows = [row(list(rng.choice(VOCAB, 2)), {}) for _ in range(40)]
    X, _ = designs(rows, [], exact_labels)
    y = (rng.random((40, 2)) < 0.6).astype(float)
    off, pv = np.array([0.4, -0.2]), np.array([1.0, 3.0])
    w = logistic(X, y, off, pv)
    p = 1.0 / (1.0 + np.exp(-(off + dense(X) @ w)))
    assert dense(X).T @ (p - y) + w / pv == pytest.approx(np.zeros_like(w), abs=1e-7)  # the MAP's gradient is 0
    full = ridge(X, y, 0.05, 0.1)
    assert reduced_rank(X, full, rank=2) == pytest.approx(full)
    assert np.linalg.matrix_rank(reduced_rank(X, full, rank=1), tol=1e-10) == 1


def test_online_logistic_after_one_outcome_is_the_posterior_mode_and_learns_in_order():
    # one outcome: the Laplace step's mean is the exact mode of the posterior (logistic's MAP)
    one = [row(["math", "proof"], {})]
    X, _ = designs(one, [], exact_labels)
    y, off, pv = np.array([[1.0, 0.0, 0.3]]), np.array([0.5, 0.5, -1.0]), np.array([2.0, 2.0, 0.5])
    assert online_logistic(X, y, off, pv) == pytest.approx(logistic(X, y, off, pv), abs=1e-9)
    # outcomes seen in order: each moves the mean of the slots it reads toward its outcome
    rows = [row(["math"], {}), row(["math"], {}), row(["chat"], {})]
    X, _ = designs(rows, [], exact_labels)
    w = online_logistic(X, np.array([[1.0], [1.0], [0.0]]), np.array([0.0]), np.array([1.0]))
    assert w[0, 0] > 0 > w[2, 0]  # the columns: math, bias, chat
def test_every_model_learns_a_word_that_says_which_deployment_wins():
    # "math" prompts: the strong (dear) deployment is right and the weak one wrong; the others:
    # both right. On prompts it was not fitted on (other words around the same signal), every
    # predictor must expect more of the strong one over the weak one on each math prompt than on
    # any other (so some cost weight sends exactly the math prompts to the strong one).
    rng = np.random.default_rng(2)

    def req(math):
        words = list(rng.choice([w for w in VOCAB if w != "math"], 3)) + (["math"] if math else [])
        return row(words, {"weak": 0.0 if math else 1.0, "strong": 1.0}), math

    made = [req(i % 2 == 0) for i in range(80)]
    h = Holdout([r for r, _ in made[:60]], [r for r, _ in made[60:]], [], ["weak", "strong"],
                {"weak": 0.1, "strong": 5.0}, 1.0)
    preds = model_variants(h, Settings())
    assert len(preds) == 9
    for label, p in preds.items():
        gap = [q["strong"] - q["weak"] for q in p]
        math = [g for g, (_, m) in zip(gap, made[60:]) if m]
        other = [g for g, (_, m) in zip(gap, made[60:]) if not m]
        assert math and other and min(math) > max(other), label


def test_fit_exact_writes_the_ridge_solution_in_the_online_model_and_its_file_format():
    from aisia_plugin.contextual import ContextualModels

    rng = np.random.default_rng(3)
    rows = [row(list(rng.choice(VOCAB, 3)), {"a": float(rng.random() < 0.7), "b": float(rng.random() < 0.4)})
            for _ in range(50)]
    rows.append(row(["poem"], {"a": 1.0}))  # "b" has no outcome here: fitted on the rows that have one
    m = fit_exact(rows, Settings())
    assert ContextualModels.load(m.dump()).dump() == m.dump()
    base = training.fit(rows, Settings()).dump()["deployments"]
    for dep in ("a", "b"):
        have = rows if dep == "a" else rows[:-1]
        Xd, _ = designs(have, [], hashed_slots)
        y = np.array([[r.rewards[dep] - base[dep]["base_mean"]] for r in have])
        want = Xd.dot(ridge(Xd, y, 0.05, 0.1))[:, 0] + base[dep]["base_mean"]
        got = [m.predict([dep], r.vector, [0.0], [0.0], 0.0, 1.0, 0.05)[0][0] for r in have]
        assert got == pytest.approx(want, abs=1e-5), dep  # float32 slots
