"""Generated documents stay in step with the code that generates them."""

from __future__ import annotations

from voxledger import docgen
from voxledger.tasks.corpus import demo_plans


def test_cli_reference_is_current() -> None:
    assert docgen.OUT.read_text() == docgen.render(), "docs/cli.md is stale: run python -m voxledger.docgen --write"


def test_settings_reference_is_current() -> None:
    text = docgen.render_settings()
    assert docgen.SETTINGS_OUT.read_text() == text, "docs/settings.md is stale: run python -m voxledger.docgen --write"
    assert text.count("| `VOXLEDGER_") == 26  # one row per field of voxledger.settings


def test_every_command_has_an_example() -> None:
    missing = [" ".join(p) for p, c in docgen._walk(docgen.cli_main, ["voxledger"]) if not (c.help and "Example:" in c.help)
               and not hasattr(c, "commands")]  # fmt: skip
    assert not missing, f"commands without an example in their docstring: {missing}"


def test_demo_plans_match_their_generator() -> None:
    texts = demo_plans.render()
    assert len(texts) == 2
    for name, text in texts.items():
        assert (docgen.OUT.parent.parent / "plans" / name).read_text() == text, (
            f"plans/{name} is stale: python -m voxledger.tasks.corpus.demo_plans --write"
        )


def test_pipeline_stages_page_is_current() -> None:
    from voxledger.flows.stages import stage_names

    text = docgen.render_stages()
    assert docgen.STAGES_OUT.read_text() == text, "docs/pipeline-stages.md is stale: run python -m voxledger.docgen --write"
    assert len(stage_names()) == 8 and all(f"| `{name}` |" in text for name in stage_names())
