"""Policy errors: each one names the file, the line, the column and the field."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PolicyIssue:
    file: str
    line: int  # 1-based; 0 when unknown
    column: int  # 1-based; 0 when unknown
    path: str  # dotted path of the field, "" for the document itself
    message: str
    kind: str = "schema"  # yaml | schema | semantic | conflict | io | warning (a setting that does nothing)
    # | restart (a note of `aisia validate`: a setting the proxy reads at start only)

    def format(self) -> str:
        where = self.path or "<document>"
        level = "warning: " if self.kind == "warning" else ""
        return f"{self.file}:{self.line}:{self.column}: {where}: {level}{self.message}"

    def as_dict(self) -> dict:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "message": self.message,
            "kind": self.kind,
        }


@dataclass
class PolicyError(Exception):
    """Raised when a policy cannot be loaded; carries every issue found, not just the first."""

    issues: list[PolicyIssue] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(i.format() for i in self.issues) or "invalid policy"


def dotted(path) -> str:
    return ".".join(str(p) for p in path)
