"""Backend ``cosyvoice3``: LoRA fine-tuning and synthesis with a real FunAudioLLM/CosyVoice checkout.

Modules: ``config`` (paths from the environment, plan options), ``upstream`` (preflight,
digests, imports, strict loading), ``features`` and ``prepare`` (upstream-style data
preparation), ``data`` (examples, batches), ``lora`` (PEFT injection and merging), ``synth``
(synthesis guards), ``distributed`` (rank agreement), ``backend`` (the ``Backend``).
"""
