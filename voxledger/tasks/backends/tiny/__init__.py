"""The ``tiny`` backend: a small neural TTS (conv encoder + Qwen2 backbone + Griffin-Lim) that
trains on a few CPU cores in minutes and adapts to a new voice with PEFT LoRA on the backbone's attention and MLP projections.

Modules: ``audio`` (16 kHz log-mel front end, normalisation statistics, vocoder), ``model``
(`TinyTTSConfig`, `TinyTTS`, LoRA attach/merge, safetensors I/O), ``data`` (demo corpus ->
aligned examples, seeded length-grouped batches), ``training`` (losses, one step, CV loss, lr
schedule, measured recipes), ``synth`` (text -> audio).
"""
