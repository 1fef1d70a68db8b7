"""Editable plans for a user's corpus: audit, base and adapter training, promotion, evaluation,
listening, and the pipeline that runs them, written from the corpus's own splits, speakers and
language (read with `load_corpus`).

Roles: the train split, the dev split (training's held-out loss and the promotion gate's
prompts) and the optional test split (the final evaluation's prompts; the dev split stands in
when there is none) are found by name (``train`` / ``dev``, ``valid``, ``val``, ``cv`` /
``test``, ``eval``) or given; LJSpeech and VCTK corpora, which name none, are split by the
importer (`importers.common.assign_splits`). The adapter's base is either trained here on every
speaker but the target (two or more speakers), or the base the backend ships
(`Backend.shipped_base`): the default for a one-speaker corpus, so a newcomer's own voice goes
straight to an adapter; a backend that adapts its own configured model (cosyvoice3, whose
``needs_stored_base`` is False) always does that. A corpus that lacks what a plan needs is refused with one line naming the
value and the fix; nothing is written then.

Longer than 500 lines on purpose: every plan it writes reads the same corpus facts (splits,
speakers, language, backend recipe) and must agree with the others (the pipeline names each file),
so they are written side by side.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

import soundfile as sf
import yaml

from voxledger.schemas.errors import BackendCapabilityError, CorpusError, UnsafePathError
from voxledger.schemas.evaluation import OWN_BASE, StatisticsSettings
from voxledger.schemas.manifest import Utterance
from voxledger.schemas.metrics import content_unit
from voxledger.schemas.promotion import model_line
from voxledger.schemas.shipped import ShippedBase
from voxledger.schemas.training import BackendName
from voxledger.tasks.backends.base import DEFAULT_BACKEND, PlanRecipe, get_backend
from voxledger.tasks.corpus.audio import DECODE_ERRORS
from voxledger.tasks.corpus.manifests import load_corpus
from voxledger.tasks.corpus.paths import resolve_audio_path
from voxledger.tasks.corpus.records import LoadedCorpus
from voxledger.tasks.evaluation.catastrophic import failure_margin
from voxledger.tasks.shipped_base import read_bundle

ROLE_WORDS: dict[str, tuple[str, ...]] = {"train": ("train",), "dev": ("dev", "valid", "validation", "val", "cv"), "test": ("test", "eval")}
PAIRED_GATE_MIN_PROMPTS = 5  # cluster_t needs 5 prompts (schemas/evaluation.py MIN_PROMPTS)
MAX_PROMPTS = 20
BaseChoice = Literal["auto", "shipped", "train"]
PLAN_FILES = (
    "audit.yaml",
    "train-base.yaml",
    "train-adapter.yaml",
    "promote.yaml",
    "eval.yaml",
    "listening.yaml",
    "pipeline.yaml",
    "sweep.yaml",
)


@dataclass(frozen=True)
class CorpusRoles:
    """Which split and speaker plays which part."""

    train: str
    dev: str
    test: str | None
    target: str
    base_speakers: tuple[str, ...]  # empty: a one-speaker corpus (no base to train here)
    language: str
    sample_rate_hz: int
    channels: int
    shipped: ShippedBase | None = None  # the adapter's base is the backend's shipped base
    own_base: bool = False  # the adapter's base is the backend's own configured model (evaluation plans: base: own)

    @property
    def adapts(self) -> bool:
        """Whether an adapter (and so promotion and a pipeline) is planned."""
        return bool(self.base_speakers) or self.shipped is not None or self.own_base

    def base_voice(self) -> str:
        """The base voice the adapter is compared with (the first voice of the base; an own base speaks zero-shot
        from the target's prompt)."""
        if self.own_base:
            return self.target
        if self.shipped is not None:
            return self.shipped.speakers[0]
        return self.base_speakers[0] if self.base_speakers else self.target


@dataclass(frozen=True)
class InitResult:
    """What `init_plans` wrote and what it decided on the user's behalf."""

    roles: CorpusRoles
    written: tuple[Path, ...]
    notes: tuple[str, ...]


AUTO_SPLIT_MIN = 20  # `assign_splits` holds out dev and test (5 or more each) only from this many utterances


def _dev_split_fix(loaded: LoadedCorpus) -> str:
    """How to give this corpus a dev split, in terms of its own files, as short lines (a command on a
    line of its own, so no line is long enough to be cut): a manifest with a ``split`` field is
    edited; a layout without one (LJSpeech's metadata.csv) is split by the importer when it is
    large enough, else written out as a manifest the user can edit."""
    n = len(loaded.utterances.utterances)
    files = [p.name for p in loaded.manifest_files]
    other = "or name an existing split with --dev-split"
    if any(name.endswith(".jsonl") for name in files):
        return f'set "split": "dev" on a few lines per speaker (5 or more) of {loaded.manifest_files[0]}, {other}'
    lines = []
    if n < AUTO_SPLIT_MIN:
        lines.append(f"{n} utterance(s) are too few for voxledger to hold out dev and test splits itself (it does from {AUTO_SPLIT_MIN}).")
    lines += [
        f"{'Record more, or w' if n < AUTO_SPLIT_MIN else 'W'}rite {', '.join(files)} as a manifest you can edit (init reads it instead):",
        f"  `voxledger corpus import auto {loaded.root} --out {loaded.root / 'manifest.jsonl'}`",
        f'then set "split": "dev" on a few of its lines per speaker and run init again, {other}',
    ]
    return "\n".join(lines)


def _pick_split(splits: list[str], role: str, given: str | None, corpus: Path) -> str | None:
    if given is not None:
        if given not in splits:
            raise CorpusError(f"{corpus}: no split {given!r} for --{role}-split (splits: {', '.join(splits)}); name one of them")
        return given
    found = [s for s in splits if set(re.split(r"[^a-z0-9]+", s.lower())) & set(ROLE_WORDS[role])]
    if len(found) > 1:
        raise CorpusError(f"{corpus}: splits {found} could each be the {role} split; choose one with --{role}-split")
    return found[0] if found else None


def corpus_roles(
    loaded: LoadedCorpus,
    *,
    train_split: str | None = None,
    dev_split: str | None = None,
    test_split: str | None = None,
    target: str | None = None,
) -> CorpusRoles:
    """Decide splits, target speaker, language and audio format from the corpus manifest.

    Raises:
        CorpusError: a needed split or speaker is missing or ambiguous, or languages are mixed.
    """
    corpus, utts = loaded.root, loaded.utterances.utterances
    splits = sorted({u.split for u in utts})
    train = _pick_split(splits, "train", train_split, corpus)
    if train is None:
        raise CorpusError(
            f"{corpus}: no train split (splits: {', '.join(splits)}); name one with --train-split or set 'split' to 'train' in the manifest"
        )
    dev = _pick_split(splits, "dev", dev_split, corpus)
    if dev is None or dev == train:
        raise CorpusError(
            f"{corpus}: no dev split (splits: {', '.join(splits)}); training needs held-out utterances:\n{_dev_split_fix(loaded)}"
        )
    test = _pick_split(splits, "test", test_split, corpus)
    speakers = Counter(u.speaker for u in utts if u.split == train)
    if target is None:
        target = min(speakers, key=lambda s: (-speakers[s], s))
    elif target not in speakers:
        raise CorpusError(
            f"{corpus}: speaker {target!r} has no utterances in split {train!r} (speakers there: {', '.join(sorted(speakers))}); pick one with --target"
        )
    for split in (dev, test):
        if split and not any(u.split == split and u.speaker == target for u in utts):
            raise CorpusError(
                f"{corpus}: target speaker {target!r} has no utterances in split {split!r}; add some, or pick another --target"
            )
    languages = sorted({u.language for u in utts})
    if len(languages) != 1:
        raise CorpusError(f"{corpus}: utterances mix languages {languages}; one model speaks one language: split the corpus by language")
    rate, channels = _audio_format(loaded)
    return CorpusRoles(train, dev, test, target, tuple(sorted(set(speakers) - {target})), languages[0], rate, channels)


def _audio_format(loaded: LoadedCorpus) -> tuple[int, int]:
    """Most common (sample rate, channels) of the corpus's audio files, read from their headers."""
    utts = loaded.utterances.utterances
    seen: Counter[tuple[int, int]] = Counter()
    for u in utts:
        try:
            info = sf.info(str(resolve_audio_path(loaded.root, u.audio, loaded.audio_roots)))
        except (*DECODE_ERRORS, UnsafePathError):  # an unreadable file is the audit's finding, not init's
            info = None
        if info is not None:
            seen[(info.samplerate, info.channels)] += 1
    if not seen:
        raise CorpusError(f"{loaded.root}: none of its {len(utts)} audio files could be read; check the manifest's audio paths")
    return seen.most_common(1)[0][0]


def _prompts(utts: list[Utterance], prefix: str) -> list[dict[str, Any]]:
    return [
        {"id": f"{prefix}{i:03d}", "category": "short" if _length(u) <= 7 else "long", "text": u.text, "recording": u.audio}
        for i, u in enumerate(utts[:MAX_PROMPTS])
    ]


def _length(u: Utterance) -> int:
    """Words, or for a language written without spaces, characters counted as half a word each."""
    return (len(u.text.strip()) + 1) // 2 if content_unit(_lang(u.language)) == "char" else len(u.text.split())


class LanguageSettings(NamedTuple):
    """What a corpus's language changes in the plans: the evaluators, the gate's content metric, the audit."""

    metrics: dict[str, Any]
    content_metric: str
    asr_agreement: dict[str, Any]
    validity: dict[str, Any]


# Whisper tiny.en, beam 5. Measured on the 180 clips of `voxledger demo voice` (espeak-ng): the right transcript's
# CER reaches 0.77 (p95 0.45) but stays below 0.88 of its chance CER; a neighbour's transcript is at or above 0.9
# of chance for 83 % of clips. So: warn above CER 0.35, fail at 0.9 of chance (no false failure there).
ENGLISH_AGREEMENT: dict[str, Any] = {"enabled": True, "max_cer": 0.35, "severity": "warning", "fail_chance_ratio": 0.9}


def language_settings(language: str) -> LanguageSettings:
    """English keeps every default (tiny.en, whisper_en, WER); another language gets the packaged multilingual
    Whisper base told the language, its own text rule (zh for Chinese and Cantonese, else basic) and its own content
    metric (CER for zh/yue/ja/ko, else WER). The audit then fails a line only when another line fits what was heard
    better (better_fit_margin): measured on the Mandarin demo corpus, where Whisper base's median CER is about 0.6,
    the chance rule failed 27 correct lines of 131 and the better-fit rule none (docs/evaluation.md)."""
    lang = _lang(language)
    if lang == "en":
        return LanguageSettings({}, "wer:whisper_en", dict(ENGLISH_AGREEMENT), {})
    normaliser = "zh" if lang in ("zh", "yue") else "basic"
    asr: dict[str, Any] = {"model_name": "whisper-base-ct2", "language": lang}
    if lang in ("zh", "yue"):
        asr["no_repeat_ngram_size"] = 3  # a small model loops on Mandarin ("天天天..."): see AsrSpec
    metrics = {
        "asr": asr,
        "text": [{"normaliser": normaliser}, *([{"normaliser": "zh_digits"}] if normaliser == "zh" else [])],
        "content_gate": {"unit": "by_language", "text_metric": {"normaliser": normaliser}},
    }
    unit = content_unit(lang)
    agreement = {"enabled": True, "max_cer": 0.6, "severity": "warning", "better_fit_margin": 0.25, "asr": asr}
    # espeak-ng's Mandarin reads 2.9-3.9 Han characters per second; people read 4-6
    validity = {"min_chars_per_s": 2.0, "nominal_chars_per_s": 4.0, "max_chars_per_s": 8.0} if lang in ("zh", "yue") else {}
    return LanguageSettings(metrics, f"{'cer' if unit == 'char' else 'wer'}:{normaliser}", agreement, validity)


def _references(prompts: list[dict[str, Any]], refs: list[Utterance]) -> dict[str, str]:
    """Round-robin target recordings (from the train split, never a prompt's own) per prompt and seed 0."""
    return {f"{p['id']}:0": refs[k % len(refs)].audio for k, p in enumerate(prompts)}


def _audit_policy(name: str, roles: CorpusRoles, utts: tuple[Utterance, ...]) -> dict[str, Any]:
    leakage = [{"key": "speaker", "partition": [sorted({u.split for u in utts})]}, {"key": "recording_id"}, {"key": "text_norm"}]
    language = language_settings(roles.language)
    return {
        "kind": "audit_policy",
        "name": name,
        "leakage": leakage,
        "sample_rate_hz": roles.sample_rate_hz,
        "channels": roles.channels,
        "asr_agreement": language.asr_agreement,
        **({"validity": language.validity} if language.validity else {}),
    }


def _base_training(name: str, backend: BackendName, roles: CorpusRoles, full: PlanRecipe) -> dict[str, Any]:
    return {
        "kind": "training_plan",
        "name": f"{name}-base",
        "backend": backend,
        "mode": "full",
        "train_splits": [roles.train],
        "cv_splits": [roles.dev],
        "speakers": list(roles.base_speakers or (roles.target,)),
        "seed": 0,
        "threads": 2,
        "frames_per_batch": full.frames_per_batch,
        "precision": full.precision,
        "max_epochs": 9,
        "patience": 3,
        "min_delta": 0.002,
        "checkpoint_every_steps": 40,
        "optim": dict(full.optim),
        "model": {},
    }


def _adapter_training(name: str, backend: BackendName, roles: CorpusRoles, lora: PlanRecipe) -> dict[str, Any]:
    return {
        "kind": "training_plan",
        "name": f"{name}-adapter",
        "backend": backend,
        "mode": "lora",
        "train_splits": [roles.train],
        "cv_splits": [roles.dev],
        "speakers": [roles.target],
        "new_speaker": roles.target,
        "seed": 0,
        "threads": 2,
        "frames_per_batch": lora.frames_per_batch,
        "precision": lora.precision,
        "max_epochs": 60,
        "patience": 6,
        "min_delta": 0.001,
        "checkpoint_every_steps": 20,
        "optim": dict(lora.optim),
        "lora": dict(lora.lora or {}),
    }


def _evaluation(
    name: str, backend: BackendName, roles: CorpusRoles, base_voice: str, prompts: list[dict[str, Any]], references: dict[str, str]
) -> dict[str, Any]:
    # an own base (cosyvoice3) speaks zero-shot from the voice prompt the adapter bundles: its artifact is the adapter's tree
    base_artifact, base_ref = ("input:adapter", OWN_BASE) if roles.own_base else ("input:base", "input:base")
    candidates: list[dict[str, Any]] = [
        {"name": "base", "backend": backend, "runtime": "base", "artifact": base_artifact, "speaker": base_voice}
    ]
    if roles.adapts:
        adapter = {
            "name": "adapter",
            "backend": backend,
            "runtime": "adapter",
            "artifact": "input:adapter",
            "base": base_ref,
            "speaker": roles.target,
        }
        candidates.append(adapter)
    candidates.append({"name": "recordings", "backend": "recordings", "runtime": "recordings"})
    metrics = language_settings(roles.language).metrics
    return {
        "kind": "evaluation_plan",
        "name": f"{name}-eval",
        "seeds": [0],
        "baseline": "base",
        "candidates": candidates,
        "prompts": prompts,
        "speaker_references": references,
        **({"metrics": metrics} if metrics else {}),
    }


def _listening(name: str, sample_rate_hz: int) -> dict[str, Any]:
    naturalness = {"name": "naturalness", "task": "acr", "question": "How natural does this voice sound?", "direction": "higher_better"}
    quality = {
        "name": "quality",
        "task": "mushra",
        "question": "Rate the overall quality of each sample against the reference.",
        "low_anchor_cutoff_hz": 3500,
        "mid_anchor_cutoff_hz": 7000,
    }
    return {
        "kind": "listening_protocol",
        "name": f"{name}-listening",
        "title": "Voice quality listening test",
        "reference_candidate": "recordings",
        "sample_rate_hz": sample_rate_hz,  # the backend's own rate: listeners hear its whole bandwidth
        "criteria": [naturalness, quality],
        "design": {"raters": 6, "raters_per_prompt": 3, "seed": 7, "gold_items": 2, "attention_checks": 1},
    }


def _gate_rule(metric: str, statistic: str, op: str, threshold: float, why: str) -> dict[str, Any]:
    return {"metric": metric, "statistic": statistic, "op": op, "threshold": threshold, "why": why}


def _promotion(
    name: str, base_voice: str, gate: list[dict[str, Any]], references: dict[str, str], language: str = "en", line: str | None = None
) -> dict[str, Any]:
    says_the_text = "at least half of the gate prompts must say the text and nothing else"
    fails = "at most 1 generation in 10 may fail outright (no audio); each failure also counts against the content rules"
    rules = [
        _gate_rule("content_gate_pass", "challenger_mean", ">=", 0.5, says_the_text),
        _gate_rule("invalid_rate", "challenger_mean", "<=", 0.1, fails),
    ]
    settings = language_settings(language)
    metric = settings.content_metric
    unit = "CER" if metric.startswith("cer:") else "WER"
    if len(gate) >= PAIRED_GATE_MIN_PROMPTS:
        margin = failure_margin(len(gate), StatisticsSettings().confidence, 3)  # best_k 2 + the last epoch, as written below
        rules += [
            _gate_rule(
                metric,
                "new_failure_rate_high",
                "<=",
                margin,
                f"the challenger newly fails ({unit} >= 0.5 where the incumbent did not) under {100 * margin:.0f}% of the "
                f"{len(gate)} gate prompts, the finest bound they can pass (voxledger plan check says what they resolve)",
            ),
            _gate_rule(
                metric, "kept_delta_mean", "<=", 0.10, f"on the other prompts {unit} may not rise by more than 10 points on average"
            ),
            _gate_rule("speaker_sim", "delta_mean", ">=", 0.05, "the adapter must move the voice toward the target"),
        ]
    return {
        "kind": "promotion_policy",
        "name": f"{name}-promote",
        **({"line": line} if line else {}),
        "best_k": 2,
        "include_last": True,
        "baseline_speaker": base_voice,
        "gate_plan": {
            "name": f"{name}-gate",
            "prompts": gate,
            "seeds": [0],
            "speaker_references": references,
            **({"metrics": settings.metrics} if settings.metrics else {}),
        },
        "rules": rules,
    }


def _pipeline(name: str, shipped_base: BackendName | None, own_base: bool = False) -> dict[str, Any]:
    base: dict[str, Any] = {"shipped_base": shipped_base} if shipped_base else {} if own_base else {"base_training": "train-base.yaml"}
    return {
        "kind": "pipeline_plan",
        "name": name,
        "audit_policy": "audit.yaml",
        **base,
        "adapter_training": "train-adapter.yaml",
        "promotion_policy": "promote.yaml",
        "evaluation": "eval.yaml",
        "listening_protocol": "listening.yaml",
        "package": True,
    }


def plan_documents(
    loaded: LoadedCorpus, roles: CorpusRoles, name: str, backend: BackendName = DEFAULT_BACKEND, *, sweep: bool = False
) -> dict[str, dict[str, Any]]:
    """File name -> plan document, written by `init_plans`; training settings are ``backend``'s measured recipes.
    With ``sweep``, a corpus that gets an adapter also gets ``sweep.yaml`` (a small sweep of it: `_sweep`).

    Raises:
        BackendCapabilityError: the backend has no recipe for a plan that is needed.
    """
    utts = loaded.utterances.utterances
    of_target = [u for u in utts if u.speaker == roles.target]
    refs = [u for u in of_target if u.split == roles.train]
    gate = _prompts([u for u in of_target if u.split == roles.dev], "g")
    final = _prompts([u for u in of_target if u.split == (roles.test or roles.dev)], "e")
    base_voice = roles.base_voice()
    models = get_backend(backend)
    docs: dict[str, dict[str, Any]] = {"audit.yaml": _audit_policy(name, roles, utts)}
    if roles.shipped is None and not roles.own_base:
        docs["train-base.yaml"] = _base_training(name, backend, roles, models.plan_recipe("full"))
    docs["eval.yaml"] = _evaluation(name, backend, roles, base_voice, final, _references(final, refs or of_target))
    docs["listening.yaml"] = _listening(name, models.inference_settings()[0])
    if not roles.adapts:
        return docs
    docs["train-adapter.yaml"] = _adapter_training(name, backend, roles, models.plan_recipe("lora"))
    line = model_line(roles.target, backend)  # the corpus's own model line: its aliases are no other voice's
    docs["promote.yaml"] = _promotion(name, base_voice, gate, _references(gate, refs), roles.language, line)
    docs["pipeline.yaml"] = _pipeline(name, backend if roles.shipped is not None else None, roles.own_base)
    if sweep:
        docs["sweep.yaml"] = _sweep(name, docs["train-adapter.yaml"])
    return docs


def _sweep(name: str, adapter: dict[str, Any]) -> dict[str, Any]:
    """A small default sweep: the adapter plan at half, the same and twice its learning rate (the
    setting that most often decides whether a LoRA helps), all judged by promote.yaml in one gate."""
    from voxledger.schemas.training import TrainingPlan

    lr = TrainingPlan.model_validate(adapter).optim.peak_lr
    stem = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")
    stem = stem if stem[:1].isalpha() else f"s-{stem}".rstrip("-")
    return {
        "kind": "sweep_plan",
        "name": f"{stem[:36].rstrip('-_')}-lr",
        "training": "train-adapter.yaml",
        "policy": "promote.yaml",
        "grid": {"peak_lr": [lr / 2, lr, lr * 2]},
        "workers": 2,
        "threads_per_member": 1,
    }


def _recipe_notes(backend: BackendName, roles: CorpusRoles) -> dict[str, str]:
    """The backend's words on its recipes (full, and lora when there is an adapter), filled in for this corpus."""
    models = get_backend(backend)
    fill = {
        "speakers": ", ".join(repr(s) for s in roles.base_speakers or (roles.target,)),
        "language": roles.language,
        "target": roles.target,
    }
    modes: list[Literal["full", "lora"]] = ["full"] if roles.shipped is None and not roles.own_base else []
    modes += ["lora"] if roles.adapts else []
    return {mode: models.plan_recipe(mode).note.format(**fill) for mode in modes}


def _headers(corpus: str, out: str, roles: CorpusRoles, n_gate: int, notes: dict[str, str]) -> dict[str, str]:
    """The first lines of each file: the command that runs it, then what was decided and why."""
    split_note = (
        f"train {roles.train!r}, dev {roles.dev!r}, test {roles.test!r}"
        if roles.test
        else f"train {roles.train!r}, dev {roles.dev!r} (no test split: evaluation reads dev)"
    )
    pairs = (
        ""
        if n_gate >= PAIRED_GATE_MIN_PROMPTS
        else (
            f"\n# Only the content and failed-generation rules: the dev split has {n_gate} prompt(s) of {roles.target!r}; rules comparing challenger and incumbent "
            f"(delta_mean of wer/speaker_sim) need {PAIRED_GATE_MIN_PROMPTS}."
        )
    )
    adapter_bind = " --bind adapter=SHA" if roles.adapts else ""
    base_bind = "" if roles.own_base else " --bind base=SHA"
    base_opt = "" if roles.own_base else " --base BASE_TREE"
    if roles.own_base:
        base_line = "the configured model folder's own LLM (VOXLEDGER_COSYVOICE_MODEL_DIR; bound by the backend identity)"
        base_arg, base_step = "", base_line
    elif roles.shipped is not None:
        s = roles.shipped
        base_line = f"the shipped {s.backend} base {s.name} (tree {s.tree_sha256[:12]}; voices {', '.join(s.speakers)}; {s.summary})"
        base_arg, base_step = "  (from: voxledger base import " + s.backend + ")", f"{base_line}"
    else:
        base_line = f"base on {', '.join(roles.base_speakers)}"
        base_arg, base_step = "", base_line
    return {
        "audit.yaml": (
            f"# voxledger audit {corpus} --policy {out}/audit.yaml\n"
            f"# Splits: {split_note}. Speakers may appear in every split; no recording and no sentence may cross splits.\n"
        ),
        "train-base.yaml": f"# voxledger train {corpus} --audit AUDIT_RECEIPT --plan {out}/train-base.yaml\n# {notes.get('full', '')}\n",
        "train-adapter.yaml": (
            f"# voxledger train {corpus} --audit AUDIT_RECEIPT --plan {out}/train-adapter.yaml{base_opt}{base_arg}\n"
            f"# Base: {base_step}.\n# {notes.get('lora', '')}\n"
        ),
        "promote.yaml": (
            f"# voxledger promote TRAINING_RUN --policy {out}/promote.yaml --corpus {corpus}\n"
            f"# Gate prompts: the dev split {roles.dev!r} of {roles.target!r}; speaker references: its train recordings.{pairs}\n"
        ),
        "eval.yaml": (
            f"# voxledger eval run {out}/eval.yaml --corpus {corpus}{base_bind}{adapter_bind}\n"
            f"# Prompts: split {roles.test or roles.dev!r} of {roles.target!r}.\n"
        ),
        "listening.yaml": (
            f"# voxledger packets export --plan {out}/listening.yaml --stimuli stimuli.json ./packets\n"
            "# (or the listening stage of the pipeline). Omitted fields take the schema defaults (schemas/listening.py).\n"
        ),
        "sweep.yaml": (
            f"# voxledger sweep run {out}/sweep.yaml --corpus {corpus} --audit AUDIT_RECEIPT{base_opt}{base_arg}\n"
            "# Three adapters at half, the same and twice train-adapter.yaml's learning rate, 2 at a time, every checkpoint\n"
            "# they keep judged by promote.yaml in one gate (docs/sweeps.md). Add axes (lora_r, seed, ...) or variants.\n"
        ),
        "pipeline.yaml": (
            f"# voxledger pipeline run {out}/pipeline.yaml --corpus {corpus} --packets ./packets\n"
            f"# audit -> {base_line} -> LoRA for {roles.target} -> promote -> evaluate -> package -> packets.\n"
        ),
    }


def init_plans(
    corpus: Path,
    out: Path | None = None,
    *,
    name: str | None = None,
    force: bool = False,
    backend: BackendName = DEFAULT_BACKEND,
    base: BaseChoice = "auto",
    sweep: bool = False,
    **choices: str | None,
) -> InitResult:
    """Write editable plans for ``corpus`` into ``out``; refuse to overwrite unless ``force``.

    Args:
        out: the plans folder; default ``plans-<name>`` in the current folder, so corpora sit side by side.
        backend: whose measured recipes the training plans take (and which the plans name).
        base: ``shipped`` adapts the backend's shipped base, ``train`` trains one on the corpus's
            other speakers; ``auto`` trains one when there are other speakers, else uses the shipped one.
        sweep: also write ``sweep.yaml``, a small sweep of the adapter plan (``voxledger sweep run``).
        choices: ``train_split``, ``dev_split``, ``test_split``, ``target`` (see `corpus_roles`).

    Raises:
        CorpusError: the corpus lacks what a plan needs (`corpus_roles`), or a file exists.
        BackendCapabilityError: ``backend`` has no recipe for a plan that is needed.
    """
    loaded = load_corpus(corpus)
    segments = [u.id for u in loaded.utterances.utterances if u.is_segment]
    if segments:
        raise CorpusError(
            f"{loaded.root}: {len(segments)} utterance(s) are cuts of longer recordings (start_s/end_s, Kaldi segments), e.g. "
            f"{segments[0]}; evaluation prompts and speaker references name whole files: cut each utterance into its own file "
            f"with `voxledger corpus prepare {corpus} --policy POLICY.yaml --out PREPARED` and run init on PREPARED (nothing written)"
        )
    roles = with_base(corpus_roles(loaded, **choices), backend, base)
    name = name or _plan_name(corpus)
    out = out if out is not None else Path(f"plans-{name}")
    docs = plan_documents(loaded, roles, name, backend, sweep=sweep)
    clash = [out / f for f in docs if (out / f).exists()]
    if clash and not force:
        raise CorpusError(f"{clash[0]} exists; choose another --out folder or pass --force to overwrite (nothing written)")
    n_gate = len(docs["promote.yaml"]["gate_plan"]["prompts"]) if "promote.yaml" in docs else 0
    headers = _headers(str(corpus), str(out), roles, n_gate, _recipe_notes(backend, roles))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for file, doc in docs.items():
        (out / file).write_text(headers[file] + yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True), encoding="utf-8")
        written.append(out / file)
    notes: list[str] = []
    if not roles.adapts:
        notes.append(
            f"one speaker ({roles.target!r}) and {backend} ships no base: no adapter, promotion or pipeline plan; "
            "train a model of this voice with train-base.yaml and evaluate it with eval.yaml"
        )
    if roles.shipped is not None:
        s = roles.shipped
        notes.append(f"the adapter adapts the shipped {backend} base {s.name} (tree {s.tree_sha256[:12]}, voices {', '.join(s.speakers)})")
    if roles.own_base:
        notes.append(f"the adapter adapts {backend}'s own configured model; its base candidate speaks zero-shot from the adapter's prompt")
    if loaded.split_rule is not None:
        notes.append(f"{loaded.root.name} names no splits: split by {loaded.split_rule}")
    return InitResult(roles, tuple(written), tuple(notes))


def with_base(roles: CorpusRoles, backend: BackendName, base: BaseChoice) -> CorpusRoles:
    """``roles`` with the adapter's base decided (see `init_plans`).

    Raises:
        CorpusError: ``train`` on a one-speaker corpus, or a shipped base that cannot adapt this corpus
            (another language, or a target named like one of its voices).
        BackendCapabilityError: ``shipped`` for a backend that ships no base.
    """
    if not get_backend(backend).needs_stored_base:
        if base != "auto":
            raise BackendCapabilityError(
                f"backend {backend} adapts its own configured model (its base is not trained or shipped here); drop --base {base}"
            )
        return replace(roles, own_base=True, base_speakers=())
    if base == "train" or (base == "auto" and roles.base_speakers):
        if not roles.base_speakers:
            raise CorpusError(
                f"one speaker ({roles.target!r}): there are no other voices to train a base on; use --base shipped (the default)"
            )
        return roles
    folder = get_backend(backend).shipped_base()
    if folder is None:
        if base == "shipped":
            raise BackendCapabilityError(f"backend {backend} ships no trained base; use --base train on a corpus with several speakers")
        return roles
    shipped = read_bundle(folder)
    if _lang(roles.language) != _lang(shipped.language):
        raise CorpusError(
            f"the corpus speaks {roles.language!r} and the shipped {backend} base {shipped.language!r}; "
            "an adapter cannot teach it a language: train a base on a multi-speaker corpus in that language (--base train)"
        )
    if roles.target in shipped.speakers:
        raise CorpusError(
            f"speaker {roles.target!r} is also a voice of the shipped base ({', '.join(shipped.speakers)}); "
            "rename the speaker in the corpus manifest (the adapter adds a new voice)"
        )
    return replace(roles, shipped=shipped, base_speakers=())


def _lang(code: str) -> str:
    return code.lower().split("-")[0]


def _plan_name(corpus: Path) -> str:
    stem = corpus.absolute().name if corpus.is_dir() else corpus.absolute().parent.name
    return re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-") or "corpus"
