"""Examples, filters, seeded batches and upstream's batch dict, from the prepared parquet."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from voxledger.tasks.backends.cosyvoice3 import data
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config, CosyVoice3Options
from voxledger.tasks.backends.cosyvoice3.prepare import prepare_corpus
from voxledger.tasks.backends.cosyvoice3.upstream import load_model_yaml

# upstream processor.padding's keys for an LLM batch (speech_feat / whisper_feat are flow-only)
BATCH_KEYS = {"utts", "text", "text_token", "text_token_len", "speech_token", "speech_token_len", "instruct_token",
              "instruct_token_len", "utt_embedding", "spk_embedding", "embedding"}  # fmt: skip


@pytest.fixture(scope="module")
def loaded(fake_config: CosyVoice3Config, small_corpus: Path) -> tuple[tuple[Path, ...], object, object]:
    prep = prepare_corpus(small_corpus, ("train",), None, fake_config, "You are a helpful assistant.")
    configs = load_model_yaml(fake_config)
    return prep.parquet["train"], configs["get_tokenizer"](), configs["allowed_special"]


def test_filters_count_every_drop(loaded: tuple) -> None:
    files, tok, allowed = loaded
    everything = data.load_examples(files, tok, allowed, CosyVoice3Options())
    assert len(everything.examples) == 12 and everything.dropped == {}  # 2 base voices x 6 train sentences
    # spk_a's clips last 1.89-2.15 s with 8-11 text tokens (fake word-level tokenizer)
    strict = data.load_examples(files, tok, allowed, CosyVoice3Options(min_duration_s=2.0, max_text_tokens=8), ("spk_a",))
    assert strict.dropped == {"shorter_than_min_duration": 3, "speaker_not_in_plan": 6, "too_many_text_tokens": 2}
    assert [e.utt for e in strict.examples] == ["spk_a_4"]
    ex = everything.examples[0]
    assert ex.instruct_token[-1] == 151646  # <|endofprompt|>
    assert ex.frames == 2 * len(ex.speech_token)


def test_batches_are_a_pure_function_and_respect_the_budget(loaded: tuple) -> None:
    files, tok, allowed = loaded
    exs = data.load_examples(files, tok, allowed, CosyVoice3Options()).examples
    a, b = data.batch_indices(exs, 400, 3, 7), data.batch_indices(exs, 400, 3, 7)
    assert a == b and data.batch_indices(exs, 400, 4, 7) != a
    assert sorted(i for batch in a for i in batch) == list(range(len(exs)))
    for batch in a:
        assert len(batch) == 1 or max(exs[i].frames for i in batch) * len(batch) <= 400


def test_collate_builds_upstreams_padded_dict(loaded: tuple) -> None:
    files, tok, allowed = loaded
    exs = data.load_examples(files, tok, allowed, CosyVoice3Options()).examples[:3]
    batch = data.collate(exs)
    assert set(batch) == BATCH_KEYS
    assert batch["text_token"].dtype == torch.int64 and batch["text_token_len"].dtype == torch.int32
    durations = [next(e.duration_s for e in exs if e.utt == u) for u in batch["utts"]]
    assert durations == sorted(durations, reverse=True)  # longest first, as upstream orders rows
    lens = batch["speech_token_len"].tolist()
    assert batch["speech_token"].shape == (3, max(lens)) and int(batch["speech_token"][lens.index(min(lens)), -1]) == 0
    assert torch.allclose(batch["embedding"].norm(dim=1), torch.ones(3))
    assert torch.equal(batch["embedding"], batch["utt_embedding"])  # use_spk_embedding: False
    assert data.batch_frames(batch) == (2 * sum(lens), 3)
