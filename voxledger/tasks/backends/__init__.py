"""TTS backends: each trains, adapts and synthesizes one model family behind a common interface."""
