"""Generated documents stay in step with the code that generates them; the README and the
architecture page keep their shape."""

from __future__ import annotations

import re
from pathlib import Path

from voxledger import docgen
from voxledger.tasks.corpus import demo_plans

ROOT = Path(__file__).resolve().parents[1]


def test_cli_reference_is_current() -> None:
    assert docgen.OUT.read_text() == docgen.render(), "docs/cli.md is stale: run python -m voxledger.docgen --write"


def test_settings_reference_is_current() -> None:
    text = docgen.render_settings()
    assert docgen.SETTINGS_OUT.read_text() == text, "docs/settings.md is stale: run python -m voxledger.docgen --write"
    assert text.count("| `VOXLEDGER_") == 33  # one row per field of voxledger.settings


def test_every_command_has_an_example() -> None:
    missing = [" ".join(p) for p, c in docgen._walk(docgen.cli_main, ["voxledger"]) if not (c.help and "Example:" in c.help)
               and not hasattr(c, "commands")]  # fmt: skip
    assert not missing, f"commands without an example in their docstring: {missing}"


def test_demo_plans_match_their_generator() -> None:
    texts = demo_plans.render()
    assert len(texts) == 4  # eval and promote, English and Mandarin
    for name, text in texts.items():
        assert (docgen.OUT.parent.parent / "plans" / name).read_text() == text, (
            f"plans/{name} is stale: python -m voxledger.tasks.corpus.demo_plans --write"
        )


def test_pipeline_stages_page_is_current() -> None:
    from voxledger.flows.stages import stage_names

    text = docgen.render_stages()
    assert docgen.STAGES_OUT.read_text() == text, "docs/pipeline-stages.md is stale: run python -m voxledger.docgen --write"
    assert len(stage_names()) == 8 and all(f"| `{name}` |" in text for name in stage_names())


def _fenced_commands(lines: list[str]) -> list[str]:
    """Non-empty lines inside fenced shell blocks, in order (as ../shared/tools/fresh-clone-check.sh reads them)."""
    inside, found = False, []
    for line in lines:
        if re.fullmatch(r"```(sh|bash|console|shell)?", line):
            inside = not inside
        elif inside and line.strip():
            found.append(line.removeprefix("$ "))
    return found


def test_readme_opens_with_the_two_commands_and_names_no_commits() -> None:
    readme = (ROOT / "README.md").read_text().splitlines()
    assert _fenced_commands(readme)[:2] == ["make demo", "make test"], "README's first two shell commands must be make demo, make test"
    assert _fenced_commands(readme[:60])[:2] == ["make demo", "make test"], "both commands belong in README's first 60 lines"
    hashes = [word for line in readme for word in re.findall(r"\b[0-9a-f]{7,12}\b", line)]
    assert not hashes, f"README names commits {hashes}: measured figures belong in docs/timings.md"
    long_lines = [n for n, line in enumerate(readme, 1) if len(line) > 300]
    assert not long_lines, f"README lines over 300 characters: {long_lines}"


def test_architecture_fits_one_page() -> None:
    lines = len((ROOT / "docs" / "ARCHITECTURE.md").read_text().splitlines())
    assert lines < 150, f"docs/ARCHITECTURE.md has {lines} lines; keep it to one page (under 150)"
