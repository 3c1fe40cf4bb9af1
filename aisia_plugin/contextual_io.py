"""Contextual model files (`aisia train`'s output, `contextual.prior_model`'s input) and which
models an engine reads. The files are JSON data (contextual.check_model validates them), never
executed.

A prior model file is read when the policy loads (policy/loader.py refuses one that cannot be
read, at its field) and when an engine is built: a path relative to the working directory of
the process. A file that cannot be read or is no model is a ModelFileError naming the file and
every problem's place."""

from __future__ import annotations

import json
import os
from typing import Optional

from .contextual import ContextualModels, ModelFileError


def load_model_file(path) -> ContextualModels:
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ModelFileError([f"{path}: cannot read the model file: {exc.strerror or exc}"]) from None
    except (ValueError, RecursionError) as exc:
        raise ModelFileError([f"{path}: not JSON: {exc}"]) from None
    try:
        return ContextualModels.load(data)
    except ModelFileError as exc:
        raise ModelFileError([f"{path}: {p}" for p in exc.problems]) from None


def save_model_file(models: ContextualModels, path, *, trained: Optional[dict] = None) -> None:
    """Write the model atomically (a temporary file renamed over `path`)."""
    path = os.fspath(path)
    data = models.dump()
    if trained:
        data["trained"] = trained
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, separators=(",", ":"))
    os.replace(tmp, path)


def prior_paths(policy) -> list[str]:
    """The aliases' prior model files, in alias order, each once."""
    seen: dict[str, None] = {}
    for ap in policy.aliases.values():
        c = getattr(ap, "contextual", None)
        if c is not None and c.prior_model:
            seen.setdefault(c.prior_model, None)
    return list(seen)


def contextual_models_for(store, policy) -> ContextualModels:
    """The models an engine over `store` decides with: the store's own (``store.contextual``,
    kept in its snapshot) when it has them, else new ones for this engine; every deployment not
    learned yet starts from the first prior model file that knows it."""
    models = getattr(store, "contextual", None)
    if not isinstance(models, ContextualModels):
        models = ContextualModels()
    for path in prior_paths(policy):
        models.seed(load_model_file(path))
    return models
