"""Generate the demos' evaluation plans and promotion gates from their corpora's sentence splits.

The committed files ``plans/eval-demo.yaml`` and ``plans/promote-demo.yaml`` (English) and
``plans/eval-demo-zh.yaml`` and ``plans/promote-demo-zh.yaml`` (Mandarin) are this module's
output (a test fails when they drift); regenerate with
``python -m voxledger.tasks.corpus.demo_plans --write``. Test sentences are split in two disjoint
halves: the promotion gate never sees the prompts of the final evaluation. The candidates run
on the default backend (``DEFAULT_BACKEND``), the one the demo trains. The Mandarin plans measure
with the packaged multilingual Whisper told ``zh``, CER after the ``zh`` normaliser, and name the
``seed-tts-eval`` profile, so their receipts list how they differ from that protocol.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from voxledger.schemas.evaluation import StatisticsSettings
from voxledger.schemas.promotion import new_failure_floor
from voxledger.tasks.backends.base import DEFAULT_BACKEND
from voxledger.tasks.corpus import demo_zh
from voxledger.tasks.corpus.demo import VOICES, DemoVoice, assign_sentences, utterance_id
from voxledger.tasks.corpus.sentences import harvard_sentences
from voxledger.tasks.evaluation.catastrophic import CATASTROPHIC_RATE, failure_margin

EVAL_PROMPTS = 20
GATE_PROMPTS = 36
FAILURE_INCREASE = 0.6
"""A demo gate prompt is failed by the side whose error rate on it exceeds the other's by this much
(``failure_rule: increase``). The tiny demo model's per-prompt WER is high and noisy: on the gate of
a demo run its paired WER differences between two healthy checkpoints reached 0.50 (72 pairs), and
37% of the incumbent's prompts sat at WER >= 0.5, so the level rule (WER >= 0.5) counted 7 of 36
prompts as "newly failed" by noise alone; a catastrophic prompt (+0.8, issue 56's scenario) and a
silent output against any prompt the incumbent says at WER <= 0.4 both still count."""
GATE_STATISTICS = {"failure_rule": "increase", "failure_threshold": FAILURE_INCREASE}
"""`voxledger plan power plans/promote-demo.yaml --pilot <evaluation>` on the demo run's evaluation
(adapter - base WER +0.015, prompt sd 0.237) recommends 36 for 80% power per 3-challenger round at
the WER margin (48% at 20; docs/statistics.md); 10 had proved too few (a 2-point WER gap over 60
sentences read as 13-19 points on 10)."""
SEEDS = (0,)
BEST_K = 2
ZH_EVAL_PROMPTS = 10
ZH_GATE_PROMPTS = 10
"""The Mandarin corpus has 20 test sentences: half for the gate, half for the final evaluation."""
ZH_METRICS: dict[str, Any] = {
    "asr": {"model_name": "whisper-base-ct2", "language": "zh", "no_repeat_ngram_size": 3},
    "text": [{"normaliser": "zh"}, {"normaliser": "zh_digits"}, {"normaliser": "seedtts_zh"}],
    "content_gate": {"unit": "by_language", "text_metric": {"normaliser": "zh"}},
}


def _target(voices: tuple[DemoVoice, ...] = VOICES) -> str:
    return next(v.speaker for v in voices if v.role == "target")


def _base_voice(voices: tuple[DemoVoice, ...] = VOICES) -> str:
    return next(v.speaker for v in voices if v.role == "base")


def _prompts(indices: list[int], target: str, sentences: tuple[str, ...] | None = None, prefix: str = "h") -> list[dict[str, Any]]:
    sentences = sentences or harvard_sentences()
    out = []
    for i in indices:
        text = sentences[i]
        # a Chinese sentence has no spaces: 14 characters read about as long as 7 English words
        category = "short" if (len(text.split()) <= 7 if prefix == "h" else len(text) <= 14) else "long"
        out.append({"id": f"{prefix}{i:04d}", "category": category, "text": text, "recording": f"wavs/{utterance_id(target, i)}.wav"})
    return out


def _references(prompts: list[dict[str, Any]], refs: list[int], target: str) -> dict[str, str]:
    """A frozen round-robin assignment of target_dev recordings to (prompt, seed)."""
    return {
        f"{p['id']}:{s}": f"wavs/{utterance_id(target, refs[(k * len(SEEDS) + j) % len(refs)])}.wav"
        for k, p in enumerate(prompts)
        for j, s in enumerate(SEEDS)
    }


def plans() -> dict[str, dict[str, Any]]:
    """File name -> plan document for the full-size demo corpus."""
    splits, _ = assign_sentences("full")
    target, base_voice = _target(), _base_voice()
    test, refs = splits["test"], splits["target_dev"]
    eval_prompts = _prompts(test[:EVAL_PROMPTS], target)
    gate_prompts = _prompts(test[EVAL_PROMPTS : EVAL_PROMPTS + GATE_PROMPTS], target)
    evaluation = {
        "kind": "evaluation_plan",
        "name": "eval-demo",
        "seeds": list(SEEDS),
        "baseline": "base",
        "candidates": [
            {"name": "base", "backend": DEFAULT_BACKEND, "runtime": "base", "artifact": "input:base", "speaker": base_voice},
            {
                "name": "adapter",
                "backend": DEFAULT_BACKEND,
                "runtime": "adapter",
                "artifact": "input:adapter",
                "base": "input:base",
                "speaker": target,
            },
            {
                "name": "merged",
                "backend": DEFAULT_BACKEND,
                "runtime": "merged",
                "artifact": "input:adapter",
                "base": "input:base",
                "speaker": target,
            },
            {"name": "recordings", "backend": "recordings", "runtime": "recordings"},
        ],
        "prompts": eval_prompts,
        "speaker_references": _references(eval_prompts, refs, target),
    }
    promotion = {
        "kind": "promotion_policy",
        "name": "promote-demo",
        "alias": "champion",
        "candidate_alias": "candidate",
        "best_k": BEST_K,
        "include_last": True,
        "baseline_speaker": base_voice,
        "gate_plan": {
            "name": "gate-demo",
            "prompts": gate_prompts,
            "seeds": list(SEEDS),
            "speaker_references": _references(gate_prompts, refs, target),
            "metrics": {"mos": None},
            "statistics": GATE_STATISTICS,
        },
        "rules": [
            {
                "metric": "content_gate_pass",
                "statistic": "challenger_mean",
                "op": ">=",
                "threshold": 0.5,
                "why": "at least half of the gate prompts must say the text and nothing else",
            },
            *catastrophe_rules("wer:whisper_en", "WER", GATE_PROMPTS),
            {
                "metric": "speaker_sim",
                "statistic": "delta_low",
                "op": ">=",
                "threshold": 0.05,
                "why": "the lower end of the interval (at the round's confidence) shows the voice moved toward the target by at least 0.05",
            },
            {
                "metric": "invalid_rate",
                "statistic": "challenger_mean",
                "op": "<=",
                "threshold": 0.1,
                "why": (
                    "at most 1 generation in 10 may fail outright (no audio); a failed generation also counts as 100% WER and a "
                    "content-gate failure on its prompt in every other rule"
                ),
            },
        ],
    }
    return {"eval-demo.yaml": evaluation, "promote-demo.yaml": promotion, **mandarin_plans(evaluation, promotion)}


def catastrophe_rules(metric: str, unit: str, prompts: int, why_margin: str = "a loose margin for a tiny model") -> list[dict[str, Any]]:
    """The content rules of a demo gate: the newly failed share (Clopper-Pearson) and the error rate
    on the prompts neither side failed, at the smallest failure margin the gate's size can pass.

    They replace ``delta_high``, whose t interval a few catastrophic prompts make optimistic whenever
    the sample misses them (issue 56: 16.7% false passes per challenger at 36 prompts)."""
    challengers = BEST_K + 1  # the demo policies judge the best-k epochs and the last
    confidence = StatisticsSettings().confidence
    margin, floor = failure_margin(prompts, confidence, challengers), new_failure_floor(prompts, confidence, challengers)
    blind = (1 - CATASTROPHIC_RATE) ** prompts
    return [
        {
            "metric": metric,
            "statistic": "new_failure_rate_high",
            "op": "<=",
            "threshold": margin,
            "why": (
                f"catastrophic prompts: the upper end (Clopper-Pearson, at the round's confidence) of the share of the {prompts} "
                f"prompts the challenger fails ({unit} at least {FAILURE_INCREASE:g} above the incumbent's on the prompt) stays below "
                f"{100 * margin:.0f}% ({prompts} "
                f"prompts cannot pass a margin under {100 * floor:.1f}%); a challenger failing {100 * CATASTROPHIC_RATE:g}% of prompts shows none in "
                f"{100 * blind:.0f}% of gate evaluations, so this gate bounds catastrophic failures at {100 * margin:.0f}%, not "
                f"{100 * CATASTROPHIC_RATE:g}% (voxledger plan check says how many prompts would)"
            ),
        },
        {
            "metric": metric,
            "statistic": "kept_delta_high",
            "op": "<=",
            "threshold": 0.15,
            "why": (
                f"non-inferiority on the prompts neither side failed (no {unit} difference of {FAILURE_INCREASE:g} or more): the upper end of the interval (t, at the round's confidence) "
                f"of the {unit} increase stays below 15 points; {why_margin} (voxledger plan power)"
            ),
        },
    ]


def mandarin_plans(evaluation: dict[str, Any], promotion: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The English plans' shape on the Mandarin corpus, measured in Mandarin."""
    voices = demo_zh.VOICES
    splits, _ = demo_zh.assign_mandarin_sentences("full")
    target, base_voice = _target(voices), _base_voice(voices)
    sentences = demo_zh.mandarin_sentences()
    test, refs = splits["test"], splits["target_dev"]
    eval_prompts = _prompts(test[:ZH_EVAL_PROMPTS], target, sentences, "z")
    gate_prompts = _prompts(test[ZH_EVAL_PROMPTS : ZH_EVAL_PROMPTS + ZH_GATE_PROMPTS], target, sentences, "z")
    speakers = {"spk-b1": base_voice, "spk-t1": target}
    zh_eval = {
        **evaluation,
        "name": "eval-demo-zh",
        "candidates": [{**c, "speaker": speakers[c["speaker"]]} if "speaker" in c else c for c in evaluation["candidates"]],
        "prompts": eval_prompts,
        "speaker_references": _references(eval_prompts, refs, target),
        "metrics": ZH_METRICS,
        "profile": "seed-tts-eval",
    }
    rules = [
        promotion["rules"][0],
        *catastrophe_rules(
            "cer:zh", "CER", ZH_GATE_PROMPTS, "Whisper base hears espeak's Mandarin poorly, so CER is compared with the incumbent's"
        ),
        promotion["rules"][3],
    ]
    zh_promotion = {
        **promotion,
        "name": "promote-demo-zh",
        "baseline_speaker": base_voice,
        "gate_plan": {
            "name": "gate-demo-zh",
            "prompts": gate_prompts,
            "seeds": list(SEEDS),
            "speaker_references": _references(gate_prompts, refs, target),
            "metrics": {**ZH_METRICS, "mos": None},
            "statistics": GATE_STATISTICS,
        },
        "rules": rules,
    }
    return {"eval-demo-zh.yaml": zh_eval, "promote-demo-zh.yaml": zh_promotion}


HEADERS = {
    "eval-demo.yaml": (
        "# voxledger eval run plans/eval-demo.yaml --corpus ./demo/corpus --bind base=SHA --bind adapter=SHA\n"
        "# Generated by `python -m voxledger.tasks.corpus.demo_plans --write`; edit the generator, not this file.\n"
    ),
    "promote-demo.yaml": (
        "# voxledger promote TRAINING_RUN --policy plans/promote-demo.yaml --corpus ./demo/corpus\n"
        "# Generated by `python -m voxledger.tasks.corpus.demo_plans --write`; edit the generator, not this file.\n"
    ),
    "eval-demo-zh.yaml": (
        "# voxledger eval run plans/eval-demo-zh.yaml --corpus ./demo/corpus-zh --bind base=SHA --bind adapter=SHA\n"
        "# Generated by `python -m voxledger.tasks.corpus.demo_plans --write`; edit the generator, not this file.\n"
    ),
    "promote-demo-zh.yaml": (
        "# voxledger promote TRAINING_RUN --policy plans/promote-demo-zh.yaml --corpus ./demo/corpus-zh\n"
        "# Generated by `python -m voxledger.tasks.corpus.demo_plans --write`; edit the generator, not this file.\n"
    ),
}


def render() -> dict[str, str]:
    """File name -> YAML text (header comment + document)."""
    return {name: HEADERS[name] + yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True) for name, doc in plans().items()}


def main(argv: list[str]) -> int:
    out = Path(__file__).resolve().parents[2] / "plans"
    texts = render()
    if "--write" in argv:
        for name, text in texts.items():
            (out / name).write_text(text)
        return 0
    stale = [n for n, t in texts.items() if not (out / n).is_file() or (out / n).read_text() != t]
    print("stale: " + ", ".join(stale) if stale else "ok")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
