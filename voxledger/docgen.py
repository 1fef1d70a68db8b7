"""Generate ``docs/cli.md`` from the click command tree and ``docs/settings.md`` from the settings
model (a test fails when either file is stale).

Run ``python -m voxledger.docgen --write`` after changing a command, a setting or a stage.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from voxledger.cli import main as cli_main
from voxledger.settings import GROUPS, VoxledgerSettings, default_text, expected, setting_fields

OUT = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
SETTINGS_OUT = OUT.parent / "settings.md"
STAGES_OUT = OUT.parent / "pipeline-stages.md"


def _walk(cmd: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd, info_name=" ".join(path))
        for name in sorted(cmd.list_commands(ctx)):  # list/get: the top group loads its modules lazily
            sub = cmd.get_command(ctx, name)
            if sub is not None:
                out += _walk(sub, [*path, name])
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


def render_settings() -> str:
    """Markdown for every ``VOXLEDGER_*`` variable: one table per group, from ``voxledger.settings``."""
    intro = (
        f"{_prose(VoxledgerSettings.__doc__)} An empty variable counts as unset; a bad value stops the command "
        "with one line naming the variable, its value and what it accepts."
    )
    lines = [
        "# voxledger settings",
        "",
        "Generated from `voxledger.settings` by `python -m voxledger.docgen --write`; do not edit by hand.",
        "",
        intro,
    ]
    group = None
    for f in setting_fields():
        if f.group != group:
            group = f.group
            title, doc = (f"`VOXLEDGER_{group.upper()}_*`", GROUPS[group].__doc__) if group else ("General", None)
            lines += ["", f"## {title}", ""] + ([_prose(doc), ""] if doc else [])
            lines += ["| Variable | Accepts | Default | Meaning |", "| --- | --- | --- | --- |"]
        cells = [f"`{f.env}`", expected(f.info), default_text(f.info), f.info.description or ""]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def render_stages() -> str:
    """Markdown for the stage table (``voxledger.schemas.stages.STAGE_ROWS``): the pipeline's stages in run order, then the others."""
    from voxledger.flows.stages import describe, stage_table
    from voxledger.schemas.stages import STAGE_ROWS

    lines = [
        "# Pipeline stages",
        "",
        "Generated from the stage table (`voxledger/schemas/stages.py`) by `python -m voxledger.docgen --write`; do not edit by hand.",
        "`voxledger pipeline stages [PLAN]` prints the same table, and with a plan, whether and on which work pool each stage runs.",
        "",
        "| stage | flow (entrypoint) | receipt-writing task | receipt | plan field (kind) | stops the run when |",
        "|---|---|---|---|---|---|",
    ]
    for row in describe():
        plan = f"`{row['plan_field']}` ({row['plan_kind']})" if row["plan_field"] else "-"
        verdict = _prose(row["verdict"]) if row["verdict"] else "-"
        cells = [f"`{row['stage']}`", f"`{row['flow']}` (`{row['entrypoint']}`)", f"`{row['task']}`", f"`{row['receipt']}`", plan, verdict]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "What each stage is given besides its home and its plan (each stage's `inputs` in the table):", ""]
    for spec in stage_table():
        given = _prose(spec.inputs.__doc__).removeprefix("Inputs: ") or f"see `{spec.inputs.__module__}`"
        lines.append(f"- `{spec.name}`: {given}")
    lines += [
        "",
        "Each stage's command, and how `voxledger reproduce` compares a re-run of its receipt with the original:",
        "",
        "| stage | command | stage module | reproduced by |",
        "|---|---|---|---|",
    ]
    for r in STAGE_ROWS:
        compare = importlib.import_module(r.module).compare
        compared = f"not re-run: {_prose(r.not_rerun)}" if r.not_rerun else _prose(compare.__doc__).split(". ")[0].rstrip(".")
        runs = "" if r.pipeline else " (not a pipeline stage)"
        lines.append(f"| `{r.name}`{runs} | `voxledger {r.cli}` | `{r.module}` | {compared} |")
    return "\n".join(lines) + "\n"


def _prose(doc: str | None) -> str:
    """A docstring as one Markdown paragraph (reST's double backticks become single ones)."""
    return " ".join((doc or "").split()).replace("``", "`")


def main(argv: list[str]) -> int:
    pages = {OUT: render(), SETTINGS_OUT: render_settings(), STAGES_OUT: render_stages()}
    if "--write" in argv:
        for path, text in pages.items():
            path.write_text(text)
        return 0
    stale = [p.name for p, text in pages.items() if not p.is_file() or p.read_text() != text]
    print(f"docs/{', docs/'.join(stale)} stale: run python -m voxledger.docgen --write" if stale else "ok")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
