"""Training plans, per-epoch curves, checkpoint and training-run receipts."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue, model_validator

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256

BackendName = Literal["tiny", "cosyvoice3"]
"""The closed backend registry as the plan schema sees it (``tasks/backends/base.py`` maps each name to its class)."""
DEFAULT_BACKEND: BackendName = "tiny"
"""The backend a plan that names none runs on, and the one generated plans name."""


class LoraSettings(Frozen):
    """PEFT LoRA settings; targets are the attention projections of the Qwen2 backbone."""

    r: int = Field(default=16, ge=1, le=256)
    alpha: float = Field(default=32.0, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


class OptimSettings(Frozen):
    """AdamW with linear warm-up and cosine decay; the lr is a pure function of the step."""

    peak_lr: float = Field(default=2e-3, gt=0)
    warmup_steps: int = Field(default=100, ge=0)
    final_lr_fraction: float = Field(default=0.05, ge=0, le=1)
    weight_decay: float = Field(default=0.01, ge=0)
    max_grad_norm: float = Field(default=1.0, gt=0)


class TrainingPlan(Frozen):
    """Everything a training run does; nothing outside this plan changes its result."""

    kind: Literal["training_plan"] = "training_plan"
    name: str
    backend: BackendName = DEFAULT_BACKEND
    mode: Literal["full", "lora"]
    train_splits: tuple[str, ...] = Field(min_length=1)
    cv_splits: tuple[str, ...] = Field(min_length=1)
    speakers: tuple[str, ...] | None = None
    new_speaker: str | None = None
    seed: int = 0
    threads: int = Field(default=2, ge=1)
    frames_per_batch: int = Field(default=3000, ge=100)
    precision: Literal["fp32", "bf16", "tf32"] = Field(
        default="fp32", description="fp32; bf16 autocast; tf32: CUDA TF32 matmuls (backend cosyvoice3 only, docs/cosyvoice3.md)"
    )
    max_epochs: int = Field(default=20, ge=1)
    steps_per_epoch: int | None = Field(default=None, ge=1)
    patience: int = Field(default=3, ge=1)
    min_delta: float = Field(default=0.0, ge=0)
    checkpoint_every_steps: int = Field(default=50, ge=1)
    keep_last: int = Field(default=2, ge=1)
    optim: OptimSettings = OptimSettings()
    lora: LoraSettings | None = None
    model: dict[str, JsonValue] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> TrainingPlan:
        if self.mode == "lora" and (self.lora is None or self.new_speaker is None):
            raise ValueError("mode 'lora' needs a 'lora' section and 'new_speaker' (the voice being added)")
        if self.mode == "full" and self.lora is not None:
            raise ValueError("mode 'full' trains every weight: remove the 'lora' section or use mode 'lora'")
        if self.precision == "tf32" and self.backend != "cosyvoice3":
            raise ValueError(
                f"precision tf32 (CUDA TF32 matmuls) is offered by backend cosyvoice3 only; backend {self.backend} takes fp32 or bf16"
            )
        if set(self.train_splits) & set(self.cv_splits):
            raise ValueError(f"train_splits {self.train_splits} and cv_splits {self.cv_splits} overlap: CV must be held out")
        return self


class EpochRecord(Frozen):
    """One epoch of the training curve."""

    epoch: int = Field(ge=0)
    steps: int = Field(ge=0)
    global_step: int = Field(ge=0)
    train_loss: float
    cv_loss: float
    grad_norm_mean: float
    lr_end: float
    frames_per_s: float
    utterances_per_s: float
    wall_s: float
    checkpoint_overhead_s: float


class TrainingInputs(Frozen):
    """Digests a run (and each of its checkpoints) is bound to; resume refuses any change."""

    audit_receipt: Sha256
    plan_sha256: Sha256
    base_sha256: Sha256 | None
    manifest_sha256: Sha256
    audio_tree_sha256: Sha256
    features_sha256: Sha256
    code_sha256: Sha256
    backend_sha256: Sha256 = Field(description="the backend's identity: for cosyvoice3 the checkout's imported sources and model files")


class CheckpointParameters(Frozen):
    """Where in the run this checkpoint was taken."""

    run_key: Sha256
    epoch: int = Field(ge=0)
    global_step: int = Field(ge=0)
    cv_loss: float
    train_loss: float
    bound: TrainingInputs


class CheckpointReceipt(ReceiptBase):
    """An epoch-end checkpoint: the trainable weights as a stored tree (adapter or model)."""

    kind: Literal["checkpoint"] = "checkpoint"
    parameters: CheckpointParameters


class TrainingResult(Frozen):
    """Curves and the stopping decision."""

    epochs: tuple[EpochRecord, ...]
    best_epoch: int
    best_cv_loss: float
    stop_reason: Literal["early_stopping", "max_epochs"]
    total_steps: int
    resumed_at_steps: tuple[int, ...]
    trainable_parameters: int
    total_parameters: int


class TrainingRunParameters(Frozen):
    """The effective configuration, recorded exactly."""

    run_key: Sha256
    backend: BackendName
    mode: Literal["full", "lora"]
    bound: TrainingInputs
    effective_config: dict[str, JsonValue]


class TrainingRunReceipt(ReceiptBase):
    """A finished training run; subjects are the best and the last checkpoint trees."""

    kind: Literal["training_run"] = "training_run"
    parameters: TrainingRunParameters
    result: TrainingResult
