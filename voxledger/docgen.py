"""Generate ``docs/cli.md`` from the click command tree (a test fails when the file is stale).

Run ``python -m voxledger.docgen --write`` after changing a command.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from voxledger.cli import main as cli_main

OUT = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def _walk(cmd: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            out += _walk(cmd.commands[name], [*path, name])
    return out


def render() -> str:
    """Markdown for every command: usage, help text and options."""
    lines = ["# voxledger command line", "", "Generated from the CLI by `python -m voxledger.docgen --write`; do not edit by hand.", ""]
    for path, cmd in _walk(cli_main, ["voxledger"]):
        ctx = click.Context(cmd, info_name=" ".join(path))
        lines += [f"## `{' '.join(path)}`", "", "```", cmd.get_usage(ctx), "```", ""]
        if cmd.help:
            lines += [cmd.help.strip(), ""]
        opts = [p for p in cmd.get_params(ctx) if isinstance(p, click.Option) and p.name != "help"]
        for p in opts:
            record = p.get_help_record(ctx)
            if record:
                lines.append(f"- `{record[0]}`: {record[1]}")
        if opts:
            lines.append("")
    # defaults that are paths inside the checkout are shown relative to it (the docs must not
    # depend on where the repository was cloned)
    return "\n".join(lines).replace(str(OUT.parent.parent) + "/", "")


def main(argv: list[str]) -> int:
    text = render()
    if "--write" in argv:
        OUT.write_text(text)
        return 0
    stale = not OUT.is_file() or OUT.read_text() != text
    print("docs/cli.md is stale: run python -m voxledger.docgen --write" if stale else "ok")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
