"""PEFT LoRA on the Qwen2 layers inside upstream's ``CosyVoice3LM``, and merging back to ``llm.pt`` keys.

Adapters are injected in place (``peft.inject_adapter_in_model``), so the module stays an
upstream ``CosyVoice3LM``: its own ``forward(batch, device)`` and ``inference`` run unchanged
(upstream checks ``self.__class__.__name__``). Only modules whose full name matches
``llm.model.model.layers.<i>.self_attn.<q|k|v|o>_proj`` (or ``mlp.<gate|up|down>_proj``) are
adapted, so nothing outside the Qwen2 blocks is touched; every other weight is frozen.

`merged_state_dict` folds ``scaling * B @ A`` into each adapted weight without changing the
model and returns a state dict with exactly the key set of the plain model (= ``llm.pt``'s).
"""

from __future__ import annotations

import torch
from peft import LoraConfig, inject_adapter_in_model
from peft.tuners.lora import LoraLayer

from voxledger.schemas.errors import PlanError, TrainingError
from voxledger.schemas.training import LoraSettings

ADAPTER = "default"
PARENTS = {
    "q_proj": "self_attn",
    "k_proj": "self_attn",
    "v_proj": "self_attn",
    "o_proj": "self_attn",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "down_proj": "mlp",
}
LAYER_PREFIX = r"llm\.model\.model\.layers\.\d+"


def target_regex(targets: tuple[str, ...]) -> str:
    """Full-name regex of the adapted Qwen2 projections; unknown names are a PlanError."""
    unknown = sorted(set(targets) - set(PARENTS))
    if unknown or not targets:
        raise PlanError(f"LoRA targets {list(targets)}: {unknown or 'none given'} are not Qwen2 projections; choose from {sorted(PARENTS)}")
    alts = "|".join(f"{PARENTS[t]}\\.{t}" for t in sorted(set(targets)))
    return f"{LAYER_PREFIX}\\.(?:{alts})"


def lora_config(settings: LoraSettings) -> LoraConfig:
    """The PEFT config of an adapter: LoRA on the Qwen2 projections ``settings.targets`` names (full-name regex).

    The one place it is made: training (`inject_lora`) and the PEFT export (`peft_config`) write the
    same config, so PEFT rebuilds the very adapter that trained.
    """
    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,  # type: ignore[arg-type]  # peft scales by alpha/r: a float is fine
        lora_dropout=settings.dropout,
        target_modules=target_regex(settings.targets),
    )


def inject_lora(llm: torch.nn.Module, settings: LoraSettings) -> int:
    """Add adapters to ``llm`` in place and freeze everything else; return the adapted count.

    Raises:
        TrainingError: the adapted-module count is not (Qwen2 layers x targets).
    """
    n_layers = len(llm.llm.model.model.layers)  # type: ignore[union-attr,arg-type]
    inject_adapter_in_model(lora_config(settings), llm, adapter_name=ADAPTER)
    adapted = [n for n, m in llm.named_modules() if isinstance(m, LoraLayer)]
    if len(adapted) != n_layers * len(set(settings.targets)):
        raise TrainingError(f"LoRA adapted {len(adapted)} modules, expected {n_layers} layers x {len(set(settings.targets))} targets")
    for name, param in llm.named_parameters():
        param.requires_grad = ".lora_" in name
    return len(adapted)


def adapter_state(llm: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter tensors (CPU copies), keyed by their names in the model."""
    return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in llm.state_dict().items() if ".lora_" in k}


def load_adapter_state(llm: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put adapter tensors back; the key sets and shapes must match exactly.

    Raises:
        TrainingError: naming missing / unexpected keys or the first shape mismatch.
    """
    own = {k: v for k, v in llm.state_dict().items() if ".lora_" in k}
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        raise TrainingError(
            f"adapter state does not fit the model: missing {missing[:3]} ({len(missing)}), unexpected {unexpected[:3]} ({len(unexpected)})"
        )
    bad = [k for k in own if own[k].shape != state[k].shape]
    if bad:
        raise TrainingError(f"adapter tensor {bad[0]} has shape {tuple(state[bad[0]].shape)}, the model has {tuple(own[bad[0]].shape)}")
    result = llm.load_state_dict(state, strict=False)
    if result.unexpected_keys:
        raise TrainingError(f"adapter state has unexpected keys {result.unexpected_keys[:3]}")


def merged_state_dict(llm: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Weights with adapters folded in, under the plain model's key names (CPU copies)."""
    deltas = {}
    for name, module in llm.named_modules():
        if isinstance(module, LoraLayer):
            deltas[f"{name}.weight"] = module.get_delta_weight(ADAPTER).detach()  # type: ignore[attr-defined]  # on every concrete LoRA layer
    merged: dict[str, torch.Tensor] = {}
    for key, value in llm.state_dict().items():
        if ".lora_" in key:
            continue
        plain = key.replace(".base_layer.", ".")
        tensor = value.detach()
        if plain in deltas:
            tensor = tensor + deltas[plain].to(tensor.dtype)
        merged[plain] = tensor.to("cpu", copy=True).contiguous()
    return merged


def tied_keys(llm: torch.nn.Module) -> dict[str, str]:
    """Keys (under the plain model's names) whose tensor is another key's: alias -> the first such key.

    Qwen2 ties its LM head to the text embedding (``tie_word_embeddings``): ``llm.pt`` stores that
    storage once, and a merged export must too.
    """
    seen: dict[tuple[int, int, tuple[int, ...], tuple[int, ...]], str] = {}
    aliases: dict[str, str] = {}
    for key, value in llm.state_dict(keep_vars=True).items():
        if ".lora_" in key:
            continue
        plain = key.replace(".base_layer.", ".")
        ident = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape), tuple(value.stride()))
        if ident in seen:
            aliases[plain] = seen[ident]
        else:
            seen[ident] = plain
    return aliases


def unwrap_lora(llm: torch.nn.Module) -> None:
    """Replace every LoRA layer by its base layer (the adapters are dropped, not merged)."""
    for name, module in list(llm.named_modules()):
        if isinstance(module, LoraLayer):
            parent_name, _, child = name.rpartition(".")
            setattr(llm.get_submodule(parent_name), child, module.get_base_layer())
    if hasattr(llm, "peft_config"):
        del llm.peft_config


def merge_in_place(llm: torch.nn.Module) -> None:
    """Fold the adapters into ``llm`` and remove them: afterwards it is a plain upstream model."""
    state = merged_state_dict(llm)
    unwrap_lora(llm)
    device = next(llm.parameters()).device
    llm.load_state_dict({k: v.to(device) for k, v in state.items()}, strict=True)


PEFT_PREFIX = "base_model.model."
"""Where ``PeftModel`` keeps the wrapped model: its state-dict keys start here."""


def peft_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Adapter tensors under the names a saved PEFT adapter uses: ``PeftModel``'s prefix, no adapter name
    (``llm.model.model.layers.0.self_attn.q_proj.lora_A.default.weight`` ->
    ``base_model.model.llm.model.model.layers.0.self_attn.q_proj.lora_A.weight``).

    Raises TrainingError naming a key that is no LoRA A/B weight of the ``default`` adapter.
    """
    out = {}
    for key, value in state.items():
        renamed = key.replace(f".lora_A.{ADAPTER}.", ".lora_A.").replace(f".lora_B.{ADAPTER}.", ".lora_B.")
        if renamed == key or not renamed.endswith(".weight"):
            raise TrainingError(f"adapter tensor {key} is no LoRA A/B weight of adapter {ADAPTER!r}; this is no cosyvoice3 LoRA adapter")
        out[PEFT_PREFIX + renamed] = value
    return out


def peft_config(settings: LoraSettings, base_model: str) -> dict[str, object]:
    """PEFT's ``adapter_config.json`` for ``settings``: the LoRA config training injects (`inject_lora`), its
    targets as the same full-name regex, ``base_model_name_or_path`` = ``base_model``; sets as sorted lists."""
    config: dict[str, object] = lora_config(settings).to_dict()  # type: ignore[no-untyped-call]  # peft leaves it unannotated
    config |= {"base_model_name_or_path": base_model, "inference_mode": True}
    return {k: sorted(v) if isinstance(v, set) else v for k, v in config.items()}
