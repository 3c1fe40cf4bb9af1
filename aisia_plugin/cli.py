"""The `aisia` command line. Each sub-command lives in aisia_plugin/commands/<name>.py."""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS = {
    "validate": ("aisia_plugin.commands.validate", "check policy files (YAML, schema, semantics); the CI gate for policy edits"),
    "schema": ("aisia_plugin.commands.schema", "print the policy JSON Schema"),
    "docs": ("aisia_plugin.commands.docs", "regenerate the policy reference from the schema"),
    "explain": ("aisia_plugin.commands.explain", "show how a prompt would be routed and why"),
    "replay": ("aisia_plugin.commands.replay", "replay recorded outcomes through a policy and report quality, cost, latency"),
    "stats": ("aisia_plugin.commands.stats", "show what the router learned (per deployment and domain), or reset a deployment"),
    "train": ("aisia_plugin.commands.train", "fit the contextual strategy's model offline from a trace (for contextual.prior_model)"),
    "demo": ("aisia_plugin.commands.demo", "start a LiteLLM proxy with the plugin in front of simulated providers (no API keys)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aisia", description="AISIA router for the LiteLLM proxy")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue  # sub-command not built yet
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, as `validate` promises
        return int(exc.code or 0)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
