"""Corpus -> upstream training data: Kaldi files, speaker embeddings, speech tokens, parquet.

For each split this writes what upstream's recipe writes (``examples/libritts/cosyvoice3``,
stages 0-3): a Kaldi folder with ``wav.scp`` (absolute paths), ``text``, ``utt2spk``,
``spk2utt`` and ``instruct`` (mandatory for v3; every line ends with ``<|endofprompt|>``, see
`instruct_text`), campplus embeddings per utterance and per speaker (the mean over the split,
as ``tools/extract_embedding.py``), speech tokens (``tools/extract_speech_token.py``), and
parquet files with ``tools/make_parquet_list.py``'s columns (``utt, audio_data, wav, text,
spk, utt_embedding, spk_embedding, speech_token, instruct``; 1000 utterances per
``parquet_%09d.tar``) plus a ``data.list``. Differences, on purpose: the ``wav`` column holds
the corpus-relative path (so the bytes do not depend on where the corpus lies), texts are
whitespace-normalised exactly as reading the Kaldi ``text`` file back would, and the
intermediate ``*.pt`` files are not written (the parquet carries the same values).

The output is cached under ``<work_dir>/prep/<key>``, where the key digests every input row
(ids, audio sha256, texts, speakers, instructs), both ONNX files, the ONNX provider and this
code; a cache hit re-hashes the parquet files against ``done.json``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from voxledger.schemas.canonical import canonical_bytes, canonical_digest, sha256_hex
from voxledger.schemas.errors import CorpusError
from voxledger.schemas.manifest import Utterance
from voxledger.stores.hashing import StatCache, hash_files
from voxledger.tasks.backends.cosyvoice3 import features
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config, instruct_text
from voxledger.tasks.corpus.manifests import load_corpus

PREP_FORMAT = "cosyvoice3-prep/1"
UTTS_PER_PARQUET = 1000
DONE = "done.json"


@dataclass(frozen=True)
class PreparedData:
    """Prepared splits: parquet files per split and the sha256 of each (by relative path)."""

    root: Path
    key: str
    parquet: dict[str, tuple[Path, ...]]
    parquet_sha256: dict[str, str]
    utterances: dict[str, int]

    @property
    def digest(self) -> str:
        """Digest of the prepared content (paths relative, so it is machine-independent)."""
        return canonical_digest({"format": PREP_FORMAT, "parquet": self.parquet_sha256})


def _select(corpus_root: Path, splits: tuple[str, ...], speakers: tuple[str, ...] | None) -> tuple[Path, list[Utterance]]:
    loaded = load_corpus(corpus_root)
    if loaded.issues:
        first = "; ".join(f"{i.file}:{i.line} {i.message}" for i in loaded.issues[:3])
        raise CorpusError(f"corpus {corpus_root} has {len(loaded.issues)} unreadable manifest line(s) ({first}); audit and fix it first")
    utts = [u for u in loaded.utterances.utterances if u.split in splits and (speakers is None or u.speaker in speakers)]
    bad = [u.id for u in utts if any(len(v.split()) != 1 for v in (u.id, u.speaker)) or "\n" in u.text or "\n" in (u.instruction or "")]
    if bad:
        raise CorpusError(
            f"corpus {corpus_root}: utterances {bad[:5]} have whitespace in the id or speaker, or a newline in the "
            "text/instruction; Kaldi files cannot hold them: rename or fix them"
        )
    cuts = [u.id for u in utts if u.is_segment]
    if cuts:
        raise CorpusError(
            f"corpus {corpus_root}: {len(cuts)} utterance(s) are cuts of longer recordings (start_s/end_s), e.g. {cuts[0]}; "
            "upstream's training data holds whole files: cut each into its own file with `voxledger corpus prepare` and train on that"
        )
    empty = [s for s in splits if not any(u.split == s for u in utts)]
    if empty:
        raise CorpusError(f"corpus {corpus_root}: no utterances in split(s) {empty} for speakers {speakers}")
    return loaded.root, sorted(utts, key=lambda u: (u.split, u.id))


def _code_digest() -> str:
    here = Path(__file__).parent
    return canonical_digest([sha256_hex((here / n).read_bytes()) for n in ("prepare.py", "features.py")])


def prepare_corpus(
    corpus_root: Path, splits: tuple[str, ...], speakers: tuple[str, ...] | None, config: CosyVoice3Config, system_prompt: str
) -> PreparedData:
    """Prepare (or reuse) the upstream training data of ``splits``, restricted to ``speakers``.

    Raises:
        CorpusError: unreadable manifest lines, names Kaldi cannot hold, a missing audio file, or
            an empty split.
    """
    root, utts = _select(corpus_root, splits, speakers)
    paths = {u.id: root / u.audio for u in utts}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise CorpusError(f"corpus {corpus_root}: {len(missing)} audio file(s) missing, e.g. {missing[:3]}")
    cache = StatCache(config.cache_dir / "stat-cache.sqlite")
    digests = hash_files([*paths.values(), config.campplus_path, config.speech_tokenizer_path], cache=cache)
    fx = features.FeatureExtractor(config.campplus_path, config.speech_tokenizer_path, config.torch_device())
    rows = [
        [u.split, u.id, u.audio, digests[paths[u.id]], " ".join(u.text.split()), u.speaker, instruct_text(u.instruction, system_prompt)]
        for u in utts
    ]
    key = canonical_digest(
        {
            "format": PREP_FORMAT,
            "features": features.FEATURES_VERSION,
            "code": _code_digest(),
            "rows": rows,
            "campplus": digests[config.campplus_path],
            "tokenizer": digests[config.speech_tokenizer_path],
            "providers": fx.providers,
        }
    )
    out = config.cache_dir / "prep" / key
    if (out / DONE).is_file():
        cached = _reuse(out, key)
        if cached is not None:
            return cached
    if out.exists():
        shutil.rmtree(out)
    tmp = out.parent / f".tmp-{key[:16]}-{secrets.token_hex(4)}"
    tmp.mkdir(parents=True)
    try:
        for split in splits:
            _write_split(tmp / split, root, [u for u in utts if u.split == split], fx, system_prompt)
        _write_done(tmp, key, splits)
        try:
            os.replace(tmp, out)
        except OSError:  # another process finished the same preparation first
            if _reuse(out, key) is None:
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    result = _reuse(out, key)
    if result is None:
        raise CorpusError(f"prepared data in {out} does not verify right after writing it; check the disk")
    return result


def _write_split(d: Path, root: Path, utts: list[Utterance], fx: features.FeatureExtractor, system_prompt: str) -> None:
    d.mkdir(parents=True)
    spk2utt: dict[str, list[str]] = {}
    for u in utts:
        spk2utt.setdefault(u.speaker, []).append(u.id)
    texts = {u.id: " ".join(u.text.split()) for u in utts}
    instructs = {u.id: instruct_text(u.instruction, system_prompt) for u in utts}
    kaldi = {
        "wav.scp": [f"{u.id} {(root / u.audio).absolute()}" for u in utts],
        "text": [f"{u.id} {texts[u.id]}" for u in utts],
        "utt2spk": [f"{u.id} {u.speaker}" for u in utts],
        "spk2utt": [f"{s} {' '.join(ids)}" for s, ids in sorted(spk2utt.items())],
        "instruct": [f"{u.id} {instructs[u.id]}" for u in utts],
    }
    for name, lines in kaldi.items():
        (d / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    utt_emb, tokens = {}, {}
    for u in utts:
        channels, sr = features.read_channels(root / u.audio)
        utt_emb[u.id] = fx.embedding(features.embedding_input_16k(channels, sr))
        tokens[u.id] = fx.speech_tokens(features.token_input_16k(channels, sr))
    spk_emb = {s: np.mean([utt_emb[i] for i in ids], axis=0, dtype=np.float64).astype(np.float32) for s, ids in spk2utt.items()}
    for n, start in enumerate(range(0, len(utts), UTTS_PER_PARQUET)):
        chunk = utts[start : start + UTTS_PER_PARQUET]
        audio = {u.id: (root / u.audio).read_bytes() for u in chunk}  # one chunk's audio in memory at a time
        table = pa.table(
            {
                "utt": [u.id for u in chunk],
                "audio_data": pa.array([audio[u.id] for u in chunk], pa.binary()),
                "wav": [u.audio for u in chunk],
                "text": [texts[u.id] for u in chunk],
                "spk": [u.speaker for u in chunk],
                "utt_embedding": pa.array([utt_emb[u.id].tolist() for u in chunk], pa.list_(pa.float32())),
                "spk_embedding": pa.array([spk_emb[u.speaker].tolist() for u in chunk], pa.list_(pa.float32())),
                "speech_token": pa.array([tokens[u.id] for u in chunk], pa.list_(pa.int32())),
                "instruct": [instructs[u.id] for u in chunk],
            }
        )
        pq.write_table(table, d / f"parquet_{n:09d}.tar")


def _write_done(tmp: Path, key: str, splits: tuple[str, ...]) -> None:
    shas = {}
    counts = {}
    for split in splits:
        for f in sorted((tmp / split).glob("parquet_*.tar")):
            shas[f"{split}/{f.name}"] = sha256_hex(f.read_bytes())
        counts[split] = sum(pq.ParquetFile(f).metadata.num_rows for f in (tmp / split).glob("parquet_*.tar"))
    (tmp / DONE).write_bytes(canonical_bytes({"format": PREP_FORMAT, "key": key, "parquet_sha256": shas, "utterances": counts}))


def _reuse(out: Path, key: str) -> PreparedData | None:
    """The cached preparation, or None when ``done.json`` or a parquet file does not verify."""
    try:
        done = json.loads((out / DONE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if done.get("format") != PREP_FORMAT or done.get("key") != key:
        return None
    shas: dict[str, str] = done["parquet_sha256"]
    for rel, sha in shas.items():
        path = out / rel
        if not path.is_file() or sha256_hex(path.read_bytes()) != sha:
            return None
    splits = sorted({rel.split("/")[0] for rel in shas})
    parquet = {s: tuple(out / rel for rel in sorted(shas) if rel.split("/")[0] == s) for s in splits}
    for s, files in parquet.items():  # data.list points at where the files lie now (upstream reads it)
        (out / s / "data.list").write_text("".join(f"{f}\n" for f in files), encoding="utf-8")
    return PreparedData(root=out, key=key, parquet=parquet, parquet_sha256=shas, utterances=dict(done["utterances"]))
