"""Tests of the cosyvoice3 backend (against the fake CosyVoice tree in tests/fixtures/fake_cosyvoice)."""
