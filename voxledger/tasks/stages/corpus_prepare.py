"""``corpus prepare``: cut, down-mix, resample and loudness-normalise a corpus into a derived corpus
that meets an audit policy, with a receipt binding every derived file to its source.

The derived corpus is a plain voxledger corpus (``manifest.jsonl`` + ``audio/<split>/<id>.wav``)
that training reads like any other; its files are also blobs in the store. It is written under a
temporary name and renamed when complete, so a failure leaves nothing half-written. Utterances
are processed one at a time per worker thread, so memory stays flat whatever the corpus size.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from voxledger.schemas.audit import AuditPolicy
from voxledger.schemas.base import Artifact, InputRef, utc_now
from voxledger.schemas.canonical import canonical_bytes, sha256_hex
from voxledger.schemas.corpus import (
    DerivedFile,
    PrepareParameters,
    PrepareReceipt,
    PrepareResult,
    PrepareTransform,
)
from voxledger.schemas.errors import CorpusError
from voxledger.schemas.manifest import Utterance, UtteranceSet
from voxledger.stores.hashing import default_workers
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, TreeEntry, TreeManifest, manifest_bytes
from voxledger.tasks.corpus.audio import DECODE_ERRORS, read_utterance
from voxledger.tasks.corpus.manifests import LoadedCorpus, load_corpus
from voxledger.tasks.corpus.sources import audio_digests, audio_tree
from voxledger.tasks.plans import register_plan
from voxledger.tasks.receipting import artifact, build_receipt, cache_key
from voxledger.tasks.stage import reuse

MANIFEST_MEDIA_TYPE = "application/vnd.voxledger.manifest+json"
MANIFEST_FILE_MEDIA_TYPE = "application/x-ndjson"
DERIVATIONS_MEDIA_TYPE = "application/vnd.voxledger.derivations+jsonl"
MIN_LOUDNESS_S = 0.4  # BS.1770 gating blocks are 400 ms: shorter clips have no integrated loudness
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class PrepareOutcome:
    """The receipt id, the receipt, whether it was reused, and where the derived corpus lies."""

    receipt_id: str
    receipt: PrepareReceipt
    cached: bool
    corpus_dir: Path


@dataclass(frozen=True)
class _Derived:
    file: DerivedFile
    wav: bytes
    frames: int
    cut: bool
    resampled: bool
    downmixed: bool
    normalised: bool
    limited: bool


def transform_of(policy: AuditPolicy) -> PrepareTransform:
    """The transform a policy asks for (prepare down-mixes to mono only)."""
    if policy.channels != 1:
        raise CorpusError(f"policy {policy.name}: channels {policy.channels}; corpus prepare writes mono only, set channels: 1")
    return PrepareTransform(sample_rate_hz=policy.sample_rate_hz, loudness_lufs=policy.loudness_lufs)


def derive(path: Path, utt: Utterance, source_sha256: str, t: PrepareTransform) -> _Derived:
    """Cut, down-mix, resample, normalise and encode one utterance (pure given its inputs)."""
    data, rng = read_utterance(path, utt)
    mono = data.mean(axis=1, dtype=np.float64) if data.shape[1] > 1 else data[:, 0].astype(np.float64)
    y = soxr.resample(mono, rng.sample_rate_hz, t.sample_rate_hz, quality="VHQ") if rng.sample_rate_hz != t.sample_rate_hz else mono
    gain_db, normalised = 0.0, False
    if t.loudness_lufs is not None and y.size >= MIN_LOUDNESS_S * t.sample_rate_hz:
        import pyloudnorm

        loudness = pyloudnorm.Meter(t.sample_rate_hz).integrated_loudness(y)
        if np.isfinite(loudness):
            gain_db, normalised = t.loudness_lufs - loudness, True
    peak = float(np.abs(y).max()) if y.size else 0.0
    limited = peak * 10 ** (gain_db / 20) > t.peak_ceiling
    if limited:
        gain_db = 20 * np.log10(t.peak_ceiling / peak)
    pcm = np.round(np.clip(y * 10 ** (gain_db / 20), -1.0, 1.0) * 32767).astype("<i2")
    buf = io.BytesIO()
    sf.write(buf, pcm, t.sample_rate_hz, format="WAV", subtype=t.subtype)
    wav = buf.getvalue()
    file = DerivedFile(
        utterance_id=utt.id,
        source_sha256=source_sha256,
        source_start_sample=rng.start,
        source_stop_sample=rng.stop,
        source_sample_rate_hz=rng.sample_rate_hz,
        source_channels=data.shape[1],
        gain_db=round(float(gain_db), 6),
        derived_sha256=sha256_hex(wav),
    )
    return _Derived(file, wav, len(pcm), not rng.whole, y is not mono, data.shape[1] > 1, normalised, bool(limited))


def _derived_name(utt: Utterance) -> str:
    return f"audio/{_UNSAFE.sub('_', utt.split)}/{_UNSAFE.sub('_', utt.id)}.wav"


def _derived_utterance(utt: Utterance, d: _Derived, t: PrepareTransform) -> Utterance:
    extra = {**utt.extra, "source_audio_sha256": d.file.source_sha256}
    return utt.model_copy(
        update={
            "audio": _derived_name(utt),
            "start_s": None,
            "end_s": None,
            "extra": extra,
            "duration_s": round(d.frames / t.sample_rate_hz, 6),
            "sample_rate_hz": t.sample_rate_hz,
        }
    )


def _check_loaded(corpus: LoadedCorpus, paths: dict[str, Path]) -> None:
    problems = [f"{i.file}:{i.line}: {i.message}" for i in corpus.issues]
    problems += [
        f"{corpus.origins.get(u.id, u.id)}: audio {u.audio!r} is missing or outside the corpus and audio roots"
        for u in corpus.utterances.utterances
        if u.id not in paths
    ]
    if problems:
        raise CorpusError(
            f"{len(problems)} utterance(s) cannot be prepared, first: {problems[0]}; run voxledger audit on the corpus and fix them"
        )


def prepare_corpus_fn(
    home: Home,
    corpus_path: Path,
    policy: AuditPolicy,
    *,
    policy_name: str,
    out_dir: Path | None = None,
    audio_roots: tuple[Path, ...] = (),
    flow: str = "prepare_corpus",
    workers: int | None = None,
) -> PrepareOutcome:
    """Prepare ``corpus_path`` for ``policy`` into ``out_dir`` (default ``<home>/corpora/<name>-<key>``).

    ``audio_roots`` only resolve paths; they are in no digest and no cache key.

    Raises:
        CorpusError: unreadable manifest lines, missing or undecodable audio, or an ``out_dir``
            that exists and is not this preparation's output. Nothing is written then.
    """
    started = utc_now()
    transform = transform_of(policy)
    plan_rid, policy_sha = register_plan(home, policy, source_name=policy_name, flow=flow)
    corpus = load_corpus(corpus_path, audio_roots=audio_roots)
    digests, paths = audio_digests(corpus, home.stat_cache)
    _check_loaded(corpus, paths)
    source_manifest = home.blobs.put_bytes(canonical_bytes(corpus.utterances))
    source_tree = home.blobs.put_bytes(manifest_bytes(audio_tree(corpus, digests, paths)))
    key = cache_key(
        "corpus_prepare", {"manifest": source_manifest, "audio_tree": source_tree}, policy_sha, transform.model_dump(mode="json")
    )
    out = out_dir or home.root / "corpora" / f"{_UNSAFE.sub('_', corpus.utterances.name)}-{key[:12]}"
    hit = reuse(home, key, PrepareReceipt)
    if hit is not None:
        _materialise(home, hit.receipt, out)
        return PrepareOutcome(hit.receipt_id, hit.receipt, True, out)
    if out.exists():
        raise CorpusError(f"{out} exists and is not this preparation's output; choose another --out (nothing overwritten)")
    tmp = out.parent / f".{out.name}.tmp-{secrets.token_hex(4)}"
    try:
        subjects, result = _run(home, corpus, digests, paths, transform, tmp, workers or workers_for(len(corpus.utterances.utterances)))
        receipt = build_receipt(
            PrepareReceipt,
            flow=flow,
            task="prepare_corpus",
            started_at=started,
            key=key,
            subjects=subjects,
            inputs=[
                InputRef(role="policy", sha256=plan_rid, ref="receipt"),
                InputRef(role="source_manifest", sha256=source_manifest, ref="artifact"),
                InputRef(role="source_audio_tree", sha256=source_tree, ref="artifact"),
            ],
            parameters=PrepareParameters(
                corpus_name=corpus.utterances.name,
                policy_sha256=policy_sha,
                source_manifest_sha256=source_manifest,
                source_audio_tree_sha256=source_tree,
                transform=transform,
            ),
            result=result,
        )
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return PrepareOutcome(home.record(receipt), receipt, False, out)


def _tree_entry(tmp: Path, utt: Utterance, file: DerivedFile) -> TreeEntry:
    """The tree entry of one derived file written under ``tmp``."""
    path = _derived_name(utt)
    return TreeEntry(path=path, size_bytes=(tmp / path).stat().st_size, sha256=file.derived_sha256, executable=False)


def _run(
    home: Home, corpus: LoadedCorpus, digests: dict[str, str], paths: dict[str, Path], t: PrepareTransform, tmp: Path, workers: int
) -> tuple[list[Artifact], PrepareResult]:
    utts = list(corpus.utterances.utterances)
    counts = dict.fromkeys(("cut", "resampled", "downmixed", "normalised", "limited"), 0)
    derived_utts: list[Utterance] = []
    files: list[DerivedFile] = []
    frames = 0

    def one(u: Utterance) -> _Derived:
        try:
            d = derive(paths[u.id], u, digests[u.id], t)
        except DECODE_ERRORS as exc:
            raise CorpusError(
                f"{corpus.origins.get(u.id, u.id)}: {u.audio}: cannot decode audio ({exc}); run voxledger audit and fix it"
            ) from None
        target = tmp / _derived_name(u)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(d.wav)
        home.blobs.put_bytes(d.wav)
        return d

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for u, d in zip(utts, pool.map(one, utts), strict=True):  # map keeps order; results are dropped as they are used
            derived_utts.append(_derived_utterance(u, d, t))
            files.append(d.file)
            frames += d.frames
            for k in counts:
                counts[k] += int(getattr(d, k))
    derived = UtteranceSet(name=corpus.utterances.name, utterances=tuple(derived_utts))
    manifest_text = "".join(json.dumps(u.to_record(), ensure_ascii=False) + "\n" for u in derived_utts).encode("utf-8")
    (tmp / "manifest.jsonl").write_bytes(manifest_text)
    entries = [_tree_entry(tmp, u, f) for u, f in zip(derived_utts, files, strict=True)]
    tree = TreeManifest(entries=tuple(sorted(entries, key=lambda e: e.path)))
    shas = {
        "manifest": (home.blobs.put_bytes(canonical_bytes(derived)), MANIFEST_MEDIA_TYPE),
        "manifest_file": (home.blobs.put_bytes(manifest_text), MANIFEST_FILE_MEDIA_TYPE),
        "audio_tree": (home.blobs.put_bytes(manifest_bytes(tree)), TREE_MEDIA_TYPE),
        "derivations": (home.blobs.put_bytes("".join(f.model_dump_json() + "\n" for f in files).encode()), DERIVATIONS_MEDIA_TYPE),
    }
    subjects = [artifact(home.blobs, role, sha, media) for role, (sha, media) in shas.items()]
    result = PrepareResult(
        n_utterances=len(utts),
        n_cut=counts["cut"],
        n_resampled=counts["resampled"],
        n_downmixed=counts["downmixed"],
        n_loudness_normalised=counts["normalised"],
        n_peak_limited=counts["limited"],
        hours=round(frames / t.sample_rate_hz / 3600, 6),
    )
    return subjects, result


def workers_for(n: int) -> int:
    return max(1, min(default_workers(), n))


def _materialise(home: Home, receipt: PrepareReceipt, out: Path) -> None:
    """Write a reused preparation's corpus to ``out`` from the store (every blob verified), unless it is there."""
    subject = {s.role: s.sha256 for s in receipt.subjects}
    manifest_text = home.blobs.get_bytes(subject["manifest_file"])
    if (out / "manifest.jsonl").is_file() and (out / "manifest.jsonl").read_bytes() == manifest_text:
        return
    if out.exists():
        raise CorpusError(f"{out} exists and is not this preparation's output; choose another --out (nothing overwritten)")
    tree = TreeManifest.model_validate(json.loads(home.blobs.get_bytes(subject["audio_tree"])))
    tmp = out.parent / f".{out.name}.tmp-{secrets.token_hex(4)}"
    try:
        for e in tree.entries:
            (tmp / e.path).parent.mkdir(parents=True, exist_ok=True)
            (tmp / e.path).write_bytes(home.blobs.get_bytes(e.sha256))
        (tmp / "manifest.jsonl").write_bytes(manifest_text)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
