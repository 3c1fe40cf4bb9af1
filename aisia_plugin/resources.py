"""Where the shipped policies and schema are, in a wheel and in a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    # A wheel carries the folders inside the package (pyproject force-include); a source
    # checkout or an editable install has them at the repository's top level.
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"aisia_plugin: the shipped '{name}' folder is missing from the installation")


def policies_dir() -> Path:
    return _data_dir("policies")


def schema_path() -> Path:
    return _data_dir("schemas") / "aisia-policy.schema.json"
