"""A newcomer's own voice: one speaker in LJSpeech layout, no splits, no base of their own.

`voxledger init` splits it, writes an adapter plan against the base the tiny backend ships, and
`voxledger pipeline run` takes it to a promoted adapter, packets and a dashboard. A second corpus
with the same plan file names runs in the same home beside it. The full-size run, whose speaker
similarity must show the adapter moved toward the voice, is the slow test at the end.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tests.flows.conftest import run
from voxledger.bench_sections.pipeline_rerun import smoke_plans as shrink
from voxledger.cli import MAX_LINE_CHARS, main
from voxledger.schemas.shipped import BaseImportReceipt
from voxledger.schemas.training import TrainingRunReceipt
from voxledger.stores.home import Home
from voxledger.tasks.backends.base import get_backend
from voxledger.tasks.corpus.demo import build_voice_corpus
from voxledger.tasks.shipped_base import read_bundle

STAGES = ("audit", "import_base", "train_adapter", "promote", "evaluate", "package", "export_packets")


def _init(corpus: Path, *args: str) -> dict:  # type: ignore[type-arg]
    result = CliRunner().invoke(main, ["init", str(corpus), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def voice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder, clips = build_voice_corpus(tmp_path_factory.mktemp("newcomer") / "jo-voice", size="small")
    assert clips == 45
    return folder


def test_the_tiny_backend_ships_a_verified_base() -> None:
    folder = get_backend("tiny").shipped_base()
    assert folder is not None
    result = CliRunner().invoke(main, ["base", "verify", "tiny", "--json"])
    assert result.exit_code == 0, result.output
    checked = json.loads(result.output)
    bundle = read_bundle(folder)
    assert checked["tree"] == bundle.tree_sha256 and len(checked["checked"]) == 3
    assert bundle.language == "en" and len(bundle.speakers) == 4 and bundle.reproduce


def test_init_on_one_unsplit_voice_adapts_the_shipped_base(voice: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = _init(voice)
    assert out["out"] == "plans-jo-voice"  # named after the corpus: several corpora sit side by side
    assert (out["train_split"], out["dev_split"], out["test_split"]) == ("train", "dev", "test")
    assert out["base_speakers"] == [] and out["shipped_base"] == read_bundle(get_backend("tiny").shipped_base()).name  # type: ignore[arg-type]
    assert any("names no splits" in n and "test 5, dev 5, train 35" in n for n in out["notes"]), out["notes"]
    plans = tmp_path / "plans-jo-voice"
    assert sorted(p.name for p in plans.iterdir()) == [
        "audit.yaml",
        "eval.yaml",
        "listening.yaml",
        "pipeline.yaml",
        "promote.yaml",
        "train-adapter.yaml",
    ]
    pipeline = yaml.safe_load((plans / "pipeline.yaml").read_text())
    assert pipeline["shipped_base"] == "tiny" and "base_training" not in pipeline
    adapter = yaml.safe_load((plans / "train-adapter.yaml").read_text())
    assert (adapter["mode"], adapter["new_speaker"], adapter["train_splits"], adapter["cv_splits"]) == ("lora", "jo", ["train"], ["dev"])
    ev = yaml.safe_load((plans / "eval.yaml").read_text())
    speakers = {c["name"]: c.get("speaker") for c in ev["candidates"]}
    assert speakers["adapter"] == "jo" and speakers["base"] == "spk-b1" and "recordings" in speakers


def test_init_refusals_name_the_fix(voice: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["init", str(voice), "--out", str(tmp_path / "p"), "--base", "train"])
    assert result.exit_code != 0 and "no other voices to train a base on; use --base shipped" in result.output
    assert not (tmp_path / "p").exists()
    # cuts of longer recordings: prompts and speaker references name whole files, so init points at `corpus prepare`
    cut = tmp_path / "cut"
    (cut / "wavs").mkdir(parents=True)
    wavs = sorted((voice / "wavs").glob("*.wav"))[:6]
    for w in wavs:
        shutil.copy(w, cut / "wavs" / w.name)
    rows = [
        {"id": w.stem, "audio": f"wavs/{w.name}", "text": "words", "speaker": "jo", "recording_id": w.stem, "split": "train"} for w in wavs
    ]
    rows[0] |= {"start_s": 0.1, "end_s": 0.9}
    (cut / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(main, ["init", str(cut), "--out", str(tmp_path / "p")])
    assert result.exit_code != 0 and "are cuts of longer recordings" in result.output and "voxledger corpus prepare" in result.output
    assert not (tmp_path / "p").exists()
    # an LJSpeech folder too small to split itself: the fix fits its layout (no manifest to edit yet), and works when followed
    few = tmp_path / "few"
    (few / "wavs").mkdir(parents=True)
    kept = (voice / "metadata.csv").read_text().splitlines()[:8]
    for row in kept:
        shutil.copy(voice / "wavs" / f"{row.split('|')[0]}.wav", few / "wavs")
    (few / "metadata.csv").write_text("\n".join(kept) + "\n")
    result = CliRunner().invoke(main, ["init", str(few), "--out", str(tmp_path / "p")])
    assert result.exit_code != 0 and "8 utterance(s) are too few for voxledger to hold out dev and test splits itself" in result.output
    assert "characters cut" not in result.output and max(map(len, result.output.splitlines())) <= MAX_LINE_CHARS, result.output
    command = result.output.split("`voxledger ", 1)[1].split("`", 1)[0].split()
    assert command[:3] == ["corpus", "import", "auto"] and "mark a few per speaker" not in result.output
    assert CliRunner().invoke(main, command).exit_code == 0  # pasted as printed
    rows = [json.loads(line) for line in (few / "manifest.jsonl").read_text().splitlines()]
    rows[0]["split"] = rows[1]["split"] = "dev"  # what the message says to do
    (few / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _init(few, "--out", str(tmp_path / "p"))  # init again: it reads the manifest


@pytest.mark.prefect
def test_a_newcomers_voice_reaches_a_promoted_adapter_beside_another_corpus(voice: Path, tmp_path: Path) -> None:
    plans = tmp_path / "plans-jo"
    _init(voice, "--out", str(plans))
    shrink(plans)
    home = tmp_path / "h"
    summary = run(home, voice, plans)
    assert [(s["stage"], s["status"]) for s in summary["stages"]] == [(s, "succeeded") for s in STAGES]
    h = Home(home)
    imported = h.receipts.read(summary["import_base"]["receipt_id"], BaseImportReceipt)
    adapter_run = h.receipts.read(summary["train_adapter"]["receipt_id"], TrainingRunReceipt)
    assert adapter_run.parameters.bound.base_sha256 == imported.subject("base").sha256
    assert any(p.is_file() for p in (tmp_path / "packets-pipeline.yaml").rglob("*.html"))
    dash = CliRunner().invoke(main, ["--home", str(home), "dashboard", "--output", str(tmp_path / "dash.html")])
    assert dash.exit_code == 0, dash.output
    assert "jo" in (tmp_path / "dash.html").read_text(encoding="utf-8")
    by_hand = CliRunner().invoke(
        main,
        ["--home", str(home), "packets", "export", "--plan", str(plans / "listening.yaml"), "--evaluation", summary["evaluate"]["receipt_id"][:12],
         str(tmp_path / "by-hand"), "--json"],
    )  # fmt: skip
    assert by_hand.exit_code == 0, by_hand.output
    assert json.loads(by_hand.output)["packets"] and any((tmp_path / "by-hand").rglob("index.html"))
    neither = CliRunner().invoke(main, ["--home", str(home), "packets", "export", str(tmp_path / "none")])
    assert neither.exit_code == 2 and "exactly one of --evaluation" in neither.output

    # a second corpus, the same plan file names (audit.yaml, ...), the same home: content-keyed plans never collide
    other = build_voice_corpus(tmp_path / "sam-voice", size="small")[0]
    (other / "metadata.csv").write_text((other / "metadata.csv").read_text().replace("|", "|Well, ", 1))
    plans2 = tmp_path / "plans-sam"
    _init(other, "--out", str(plans2))
    shrink(plans2, prompts=2)  # what is asserted here is that nothing collides, not what the adapter does
    second = run(home, other, plans2, packets="packets-sam")
    assert [(s["stage"], s["status"]) for s in second["stages"]] == [(s, "succeeded") for s in STAGES]
    assert second["import_base"]["cached"] and not second["train_adapter"]["cached"]
    assert second["audit"]["receipt_id"] != summary["audit"]["receipt_id"]


@pytest.mark.slow
@pytest.mark.prefect
def test_full_newcomer_run_moves_the_voice_toward_the_recordings(tmp_path: Path) -> None:
    """The README's quick start as written: 180 clips, init's plans unedited. About 10-20 min on 2 cores."""
    voice_dir, _ = build_voice_corpus(tmp_path / "jo-voice", size="full")
    plans = tmp_path / "plans"
    _init(voice_dir, "--out", str(plans))
    t0 = time.perf_counter()
    summary = run(tmp_path / "h", voice_dir, plans)
    walls = {s["stage"]: round(s["wall_s"]) for s in summary["stages"]}
    print(f"stage walls (s): {walls}; total {time.perf_counter() - t0:.0f} s")
    assert [(s["stage"], s["status"]) for s in summary["stages"]] == [(s, "succeeded") for s in STAGES]
    doc = Home(tmp_path / "h").receipts.read_document(summary["evaluate"]["receipt_id"])
    sims = {s["candidate"]: s["overall"]["speaker_sim"] for s in doc["result"]["summaries"]}
    print({k: v["mean"] for k, v in sims.items()})
    comparison = next(
        c for c in doc["result"]["comparisons"] if c["metric"] == "speaker_sim" and (c["candidate"], c["baseline"]) == ("adapter", "base")
    )
    print(comparison)
    assert sims["adapter"]["mean"] > sims["base"]["mean"]
    assert comparison["delta"]["low"] is not None and comparison["delta"]["low"] > 0, comparison  # the interval says so


KEPT = 25


def test_a_mismatched_transcript_fails_the_audit_init_writes(voice: Path, tmp_path: Path) -> None:
    """init's audit policy turns ASR agreement on: transcripts that belong to other clips fail the audit, the rest do not."""
    from voxledger.schemas.audit import AuditPolicy
    from voxledger.tasks.plans import load_plan
    from voxledger.tasks.stages.audit import audit_corpus_fn

    corpus = tmp_path / "swapped"
    shutil.copytree(voice, corpus)
    lines = [line.split("|") for line in (corpus / "metadata.csv").read_text().splitlines()][:KEPT]
    for gone in [w for w in (corpus / "wavs").iterdir() if w.stem not in {c[0] for c in lines}]:
        gone.unlink()  # ASR reads every clip: 25 of the 45 are enough for a chance CER of 24 others
    swapped = set()
    for a, b in ((0, 20), (10, 24), (5, 15)):  # clip a now claims clip b's sentence (b keeps its own)
        lines[a] = [lines[a][0], lines[b][1], lines[b][2]]
        swapped.add(lines[a][0])
    (corpus / "metadata.csv").write_text("".join("|".join(cols) + "\n" for cols in lines))
    _init(corpus, "--out", str(tmp_path / "plans"))
    policy = load_plan(tmp_path / "plans" / "audit.yaml", AuditPolicy)
    assert policy.asr_agreement.enabled and policy.asr_agreement.fail_chance_ratio == 0.9
    out = audit_corpus_fn(Home(tmp_path / "h"), corpus, policy, policy_name="audit.yaml")
    errors = [f for f in out.receipt.result.findings if f.severity == "error"]
    assert out.receipt.result.verdict == "fail"
    flagged = {f.utterance_ids[0] for f in errors}
    assert flagged and flagged <= swapped, errors  # no right transcript fails (measured: 0 of 180), most swaps do (83 %)
    assert all(f.code == "asr_disagreement" and "no better than another recording" in f.message for f in errors)


@pytest.mark.prefect
def test_every_next_hint_of_the_step_by_step_walk_works_when_pasted(voice: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/own-corpus.md section 4, one voice: each command is the `next:` line the one before printed,
    pasted as printed (a failed gate's hints too), from the folder the user works in."""
    import shlex

    monkeypatch.chdir(tmp_path)
    shutil.copytree(voice, tmp_path / "jo-voice")
    home = tmp_path / "h"

    def vx(command: str, code: int = 0) -> str:
        args = shlex.split(command)
        assert args[0] == "voxledger", command
        res = CliRunner().invoke(main, ["--home", str(home), *args[1:]])
        assert res.exit_code == code, f"{command}\n{res.output}"
        assert "Traceback" not in res.output and "CORPUS" not in res.output and "EVAL_PLAN" not in res.output, res.output
        return res.output

    def hints(output: str) -> list[str]:
        return [line.split("next: ", 1)[1].split("   (", 1)[0] for line in output.splitlines() if "next: " in line]

    (whole,) = hints(vx("voxledger init jo-voice"))
    assert whole == "voxledger pipeline run plans-jo-voice/pipeline.yaml --corpus jo-voice --packets ./packets"  # section 0's command
    shrink(tmp_path / "plans-jo-voice")
    base_import, train = hints(vx("voxledger audit jo-voice --policy plans-jo-voice/audit.yaml"))  # section 4's first command
    assert base_import == "voxledger base import tiny"
    vx(base_import)
    (promote,) = hints(vx(train))
    assert "--policy plans-jo-voice/promote.yaml" in promote
    # a stricter policy of the user's own (and its evaluation plan) in another folder: the gate fails, its hints still run
    strict = tmp_path / "strict"
    strict.mkdir()
    shutil.copy(tmp_path / "plans-jo-voice" / "eval.yaml", strict / "eval.yaml")
    policy = yaml.safe_load((tmp_path / "plans-jo-voice" / "promote.yaml").read_text())
    policy["rules"][0]["threshold"] = 1.01  # no challenger can pass it
    (strict / "promote.yaml").write_text(yaml.safe_dump(policy))
    failed = hints(vx(promote.replace("plans-jo-voice/promote.yaml", "strict/promote.yaml"), code=1))
    assert [h.split()[1:3] for h in failed] == [
        ["receipt", "show"],
        ["eval", "run"],
    ] and "eval run strict/eval.yaml --corpus jo-voice" in failed[1]
    for command in failed:
        vx(command)
    passed = vx(promote)  # the policy the training run's hint named: the smoke plans' lenient gate promotes
    assert "\npromoted " in passed and "promoted None" not in passed, passed
