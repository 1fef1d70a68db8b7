"""LoRA training through upstream's CosyVoice3LM (fake tree): setup, steps, CV, state, export, merge, resume."""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from voxledger.schemas.errors import PlanError, TrainingError
from voxledger.schemas.training import (
    EpochRecord,
    LoraSettings,
    OptimSettings,
    TrainingInputs,
    TrainingPlan,
)
from voxledger.tasks.backends.base import TrainingSetup
from voxledger.tasks.backends.cosyvoice3 import lora
from voxledger.tasks.backends.cosyvoice3.backend import (
    ADAPTER_CONFIG,
    ADAPTER_FILE,
    CosyVoice3Backend,
)
from voxledger.tasks.backends.cosyvoice3.config import CosyVoice3Config
from voxledger.tasks.backends.cosyvoice3.upstream import read_llm_state
from voxledger.tasks.tensorio import save_deterministic
from voxledger.tasks.training.loop import run_loop

PROJECTION = re.compile(r"llm\.model\.model\.layers\.\d+\.self_attn\.(q|k|v|o)_proj\.weight")


def make_plan(**over: object) -> TrainingPlan:
    fields: dict[str, object] = {
        "name": "cv3-lora", "backend": "cosyvoice3", "mode": "lora", "train_splits": ("target_train",), "cv_splits": ("target_dev",),
        "speakers": ("spk_t",), "new_speaker": "spk_t", "lora": LoraSettings(r=8, alpha=16), "frames_per_batch": 400, "max_epochs": 2,
        "checkpoint_every_steps": 1, "threads": 1, "optim": OptimSettings(peak_lr=3e-2, warmup_steps=0, weight_decay=0.0),
    }  # fmt: skip
    fields.update(over)
    return TrainingPlan(**fields)  # type: ignore[arg-type]


@dataclass
class Trained:
    backend: CosyVoice3Backend
    setup: TrainingSetup
    losses: list[float]
    cv_before: float


@pytest.fixture(scope="module")
def trained(fake_config: CosyVoice3Config, small_corpus: Path) -> Trained:
    backend = CosyVoice3Backend(fake_config)
    setup = backend.setup(small_corpus, make_plan(), None)
    optimizer = torch.optim.AdamW([p for p in setup.model.parameters() if p.requires_grad], lr=3e-2)
    cv_before = backend.cv_loss(setup.model, setup.cv_batches)
    batches = backend.epoch_batches(0, 0)
    losses = [backend.train_step(setup.model, batches[0], optimizer, 3e-2, 1.0)["loss"] for _ in range(12)]
    return Trained(backend, setup, losses, cv_before)


def test_setup_records_upstream_identity_filters_and_effective_values(trained: Trained) -> None:
    eff = trained.setup.effective_config
    assert eff["train_utterances"] == 4 and eff["cv_utterances"] == 1 and eff["dropped"] == {"train": {}, "cv": {}}
    assert eff["adapted_modules"] == 2 * 4  # 2 Qwen2 layers x q/k/v/o
    assert eff["max_epochs"] == 2 and eff["upstream_yaml_max_epoch_ignored"] == 200
    meta = eff["cosyvoice3"]
    assert meta["upstream"]["source_files"] == 21 and len(meta["base_weights_sha256"]) == 64
    assert meta["prompt"]["utt"].startswith("spk_t_") and meta["prompt"]["file"] == "prompt.wav"
    assert type(trained.setup.model).__name__ == "CosyVoice3LM"  # injected in place: upstream's class is kept


def test_only_adapters_train_and_the_loss_falls(trained: Trained) -> None:
    model = trained.setup.model
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert len(trainable) == 2 * 4 * 2 and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # 12 steps on one batch, lr 3e-2: measured 8.98 -> 8.49 with this fake model and seed (print trained.losses)
    assert trained.losses[-1] < trained.losses[0] - 0.2, trained.losses


def test_cv_loss_is_repeatable_and_leaves_python_rng_alone(trained: Trained) -> None:
    random.seed(123)
    expected_next = random.random()
    random.seed(123)
    first = trained.backend.cv_loss(trained.setup.model, trained.setup.cv_batches)
    assert random.random() == expected_next
    assert trained.backend.cv_loss(trained.setup.model, trained.setup.cv_batches) == first
    assert first != trained.cv_before  # the adapters changed the model


def test_trainable_state_round_trips_strictly(trained: Trained) -> None:
    backend, model = trained.backend, trained.setup.model
    state = backend.trainable_state(model)
    assert len(state) == 16 and all(v.device.type == "cpu" for v in state.values())
    backend.load_trainable_state(model, state)
    with pytest.raises(TrainingError, match="missing"):
        backend.load_trainable_state(model, dict(list(state.items())[1:]))
    bad = {k: (v[:1] if i == 0 else v) for i, (k, v) in enumerate(state.items())}
    with pytest.raises(TrainingError, match="shape"):
        backend.load_trainable_state(model, bad)


def test_export_is_byte_reproducible(trained: Trained, tmp_path: Path) -> None:
    trained.backend.export(trained.setup.model, tmp_path / "a")
    trained.backend.export(trained.setup.model, tmp_path / "b")
    for name in (ADAPTER_FILE, ADAPTER_CONFIG, "prompt.wav"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert set(load_file(str(tmp_path / "a" / ADAPTER_FILE))) == set(trained.backend.trainable_state(trained.setup.model))


def test_merge_gives_llm_pt_keys_and_changes_only_projections(trained: Trained, fake_config: CosyVoice3Config) -> None:
    original = read_llm_state(fake_config.model_dir / "llm.pt")
    merged = lora.merged_state_dict(trained.setup.model)
    assert list(merged) == list(original)  # same keys, same order
    assert all(merged[k].shape == original[k].shape and merged[k].dtype == original[k].dtype for k in original)
    changed = sorted(k for k in original if not torch.equal(merged[k], original[k]))
    assert len(changed) == 8 and all(PROJECTION.fullmatch(k) for k in changed), changed


def test_merged_model_computes_what_the_adapter_model_computes(trained: Trained, fake_config: CosyVoice3Config) -> None:
    from voxledger.tasks.backends.cosyvoice3.upstream import build_llm

    plain, _ = build_llm(fake_config)
    plain.load_state_dict(lora.merged_state_dict(trained.setup.model), strict=True)
    batch = trained.setup.cv_batches[0]
    with torch.no_grad():
        random.seed(5)
        a = float(trained.setup.model.eval()(batch, torch.device("cpu"))["loss"])
        random.seed(5)
        b = float(plain.eval()(batch, torch.device("cpu"))["loss"])
    assert abs(a - b) < 1e-4


def test_base_checkpoint_with_counters_loads_and_extra_keys_are_named(
    fake_config: CosyVoice3Config, small_corpus: Path, tmp_path: Path
) -> None:
    state = read_llm_state(fake_config.model_dir / "llm.pt")
    base = tmp_path / "base"
    base.mkdir()
    torch.save({**state, "epoch": 3, "step": 1200}, base / "llm.pt")  # as upstream's save_model writes it
    backend = CosyVoice3Backend(fake_config)
    setup = backend.setup(small_corpus, make_plan(), base)
    assert setup.effective_config["base_weights"] == "base/llm.pt"
    torch.save({**state, "extra.weight": torch.zeros(1)}, base / "llm.pt")
    with pytest.raises(TrainingError, match=r"1 unexpected keys \['extra.weight'\]"):
        CosyVoice3Backend(fake_config).setup(small_corpus, make_plan(), base)
    # a merged export wins over llm.pt (clones: the tied embedding / LM-head pair shares memory in llm.pt)
    save_deterministic({k: v.clone() for k, v in state.items()}, base / "llm.safetensors")
    assert CosyVoice3Backend(fake_config).setup(small_corpus, make_plan(), base).effective_config["base_weights"] == "base/llm.safetensors"


def test_refusals(fake_config: CosyVoice3Config, small_corpus: Path) -> None:
    backend = CosyVoice3Backend(fake_config)
    with pytest.raises(TrainingError, match="LoRA adapters only"):
        backend.setup(small_corpus, make_plan(mode="full", lora=None, new_speaker=None), None)
    with pytest.raises(TrainingError, match="has no training utterance"):
        backend.setup(small_corpus, make_plan(new_speaker="spk_a"), None)
    with pytest.raises(TrainingError, match="expects upstream"):
        backend.setup(small_corpus, make_plan(model={"expect_upstream_sha256": "0" * 64}), None)
    with pytest.raises(PlanError, match="not Qwen2 projections"):
        backend.setup(small_corpus, make_plan(lora=LoraSettings(targets=("q_proj", "qkv"))), None)


def _run(
    config: CosyVoice3Config, corpus: Path, ckpt: Path, crash_at_epoch: int | None, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, torch.Tensor], list[int]]:
    backend = CosyVoice3Backend(config)
    setup = backend.setup(corpus, make_plan(), None)
    bound = TrainingInputs(audit_receipt="a" * 64, plan_sha256="b" * 64, base_sha256=None, manifest_sha256="c" * 64,
                           audio_tree_sha256="d" * 64, features_sha256="e" * 64, code_sha256="f" * 64, backend_sha256="0" * 64)  # fmt: skip

    def on_epoch_end(epoch: int, model: torch.nn.Module, record: EpochRecord) -> str:
        if epoch == crash_at_epoch:
            raise KeyboardInterrupt("simulated crash")
        return f"{epoch:064d}"

    result = run_loop(backend, setup.model, setup.cv_batches, make_plan(), bound, ckpt, on_epoch_end, progress)
    assert result.state.stop_reason == "max_epochs" and len(result.state.history) == 2
    return backend.trainable_state(result.model), result.state.resumed_at


def test_generic_loop_resumes_to_identical_adapters(fake_config: CosyVoice3Config, small_corpus: Path, tmp_path: Path) -> None:
    from voxledger.tasks.threads import torch_threads

    # run_loop is called directly here, without the training stage's scoped thread setting: pin it,
    # so the three runs do not depend on what earlier tests in this process left behind
    with torch_threads(1):
        reference, _ = _run(fake_config, small_corpus, tmp_path / "ref", None)
        with pytest.raises(KeyboardInterrupt):
            _run(fake_config, small_corpus, tmp_path / "crash", crash_at_epoch=1)
        resumed, resumed_at = _run(fake_config, small_corpus, tmp_path / "crash", None)
    assert resumed_at == [3]  # epoch 0 = 2 steps, then 1 step of epoch 1 before the crash
    assert set(resumed) == set(reference)
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)


def test_draws_from_the_global_random_elsewhere_do_not_change_the_adapters(
    fake_config: CosyVoice3Config, small_corpus: Path, tmp_path: Path
) -> None:
    """Upstream's per-utterance random.random() draws from the backend's own generator: what other
    threads (Prefect's event loop) draw from the process-wide one meanwhile changes nothing."""
    from voxledger.tasks.threads import torch_threads

    stop = threading.Event()

    def hammer() -> None:  # another thread drawing at unpredictable times, as Prefect's does
        while not stop.is_set():
            random.random()

    with torch_threads(1):
        reference, _ = _run(fake_config, small_corpus, tmp_path / "ref", None)
        again, _ = _run(fake_config, small_corpus, tmp_path / "again", None)
        worker = threading.Thread(target=hammer, daemon=True)
        worker.start()
        try:  # and a deterministic draw from the global generator after every step
            disturbed, _ = _run(fake_config, small_corpus, tmp_path / "disturbed", None, progress=lambda line: random.seed(len(line)))
        finally:
            stop.set()
            worker.join()
    for other in (again, disturbed):
        assert set(other) == set(reference) and all(torch.equal(other[k], reference[k]) for k in reference)


def test_upstreams_draws_go_to_the_private_generator_and_the_module_is_restored(trained: Trained) -> None:
    import cosyvoice.llm.llm as upstream_llm

    from voxledger.tasks.backends.cosyvoice3 import rng

    assert upstream_llm.random is random
    seen: list[float] = []
    with rng.private_random(random.Random(7)):
        assert upstream_llm.random is not random
        random.seed(1)  # the process-wide generator is not the one upstream draws from
        seen.append(upstream_llm.random.random())
        assert upstream_llm.random.Random is random.Random  # the rest of the module stays reachable
    assert upstream_llm.random is random
    assert seen == [random.Random(7).random()]
    # the backend's generator state is its seed and step: saved in checkpoints, refused when foreign
    state = trained.backend.rng_state()
    assert state["step"] == 12 and state["seed"] == 0
    with pytest.raises(TrainingError, match="cannot be resumed exactly"):
        trained.backend.load_rng_state({})
