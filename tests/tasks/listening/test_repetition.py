"""Repetition cannot tell conditions apart (issue 61, item 1).

Before, a rater heard each prompt in ACR (or MUSHRA) and in A/B: every clip A/B pairs came back
within the packet and the reference's never did (A/B leaves it out), so "does this clip reappear"
separated them perfectly (AUC 1.000 within ACR on this export). Now a rater hears a prompt in A/B
or in the other tasks, and the leak check measures repetition within and across packets.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from tests.tasks.listening.conftest import Exported
from voxledger.schemas.listening import PacketManifest
from voxledger.schemas.listening_receipts import StimulusFeatures
from voxledger.tasks.listening.leakcheck import PacketFile, repetition


def test_no_prompt_is_heard_in_ab_and_in_another_task_by_one_rater(exported: Exported) -> None:
    tasks: dict[tuple[str, str], set[str]] = defaultdict(set)  # (rater, prompt) -> tasks it is heard in
    for folder in sorted(exported.packets.iterdir()):
        if not folder.is_dir():
            continue
        manifest = PacketManifest.model_validate_json((folder / "packet.json").read_bytes())
        for trial in manifest.trials:
            for name in trial.stimuli:
                entry = exported.key[name]
                if entry.role in ("stimulus", "hidden_reference"):
                    tasks[(manifest.rater_id, entry.prompt_id)].add(trial.task)
    assert len(tasks) >= 18, len(tasks)  # 6 raters x 3 prompts each at least
    assert not [k for k, t in tasks.items() if "ab" in t and len(t) > 1]
    assert {"ab"} in tasks.values() and any("acr" in t for t in tasks.values())  # both groups are used


def test_the_leak_check_measures_repetition_and_finds_it_balanced(exported: Exported) -> None:
    leak = exported.receipt.parameters.leak_check
    assert leak is not None
    worst = {w.feature: w for w in leak.worst}
    assert worst["repeats_in_packet"].gated and not worst["repeats_across_packets"].gated
    # measured on this export (tests/tasks/listening/conftest.py: listening-demo.yaml, espeak stimuli): 0.500 and 0.550
    assert worst["repeats_in_packet"].auc <= 0.6, worst["repeats_in_packet"]
    assert worst["repeats_across_packets"].auc <= 0.6, worst["repeats_across_packets"]
    assert all(f.repeats_in_packet is not None and f.repeats_across_packets is not None for f in leak.features)
    # MUSHRA screens still repeat a clip across tasks for every candidate alike (ACR and MUSHRA share prompts here)
    assert {f.repeats_in_packet for f in leak.features} == {0, 1}


def _file(rater: str, trial: str, role: str, source: str) -> PacketFile:
    return PacketFile(rater, f"{rater}-{trial}-{role}", trial, "acr", role, source.split(":")[-1], "p1", np.zeros(1, np.int16), source)


def test_repetition_counts_other_trials_and_other_packets() -> None:
    files = [
        _file("r1", "t1", "stimulus", "stim:p1:a"),
        _file("r1", "t2", "stimulus", "stim:p1:a"),
        _file("r1", "t3", "stimulus", "stim:p1:a"),
        _file("r1", "t4", "hidden_reference", "stim:p1:ref"),
        _file("r1", "t4", "open_reference", "stim:p1:ref"),  # its own screen: one trial, told to the rater
        _file("r2", "t1", "stimulus", "stim:p1:a"),
        _file("r3", "t9", "stimulus", "stim:p1:ref"),
    ]
    assert repetition(files) == {
        "r1-t1-stimulus": (2, 1),
        "r1-t2-stimulus": (2, 1),
        "r1-t3-stimulus": (2, 1),
        "r1-t4-hidden_reference": (0, 1),
        "r1-t4-open_reference": (0, 1),
        "r2-t1-stimulus": (0, 1),
        "r3-t9-stimulus": (0, 1),
    }


def test_receipts_written_before_repetition_was_measured_still_validate() -> None:
    old = {"pseudonym": "s1", "candidate": "a", "prompt_id": "p1", "dc_lsb": 0.0, "leading_silence_s": 0.1,
           "trailing_silence_s": 0.1, "leading_zeros": 0, "rms_dbfs": -26.0, "peak_dbfs": -3.0, "duration_s": 2.0,
           "reference_correlation": 0.1}  # fmt: skip
    f = StimulusFeatures.model_validate(old)
    assert f.repeats_in_packet is None and "repeats_in_packet" not in f.model_dump(mode="json")
    new = f.model_copy(update={"repeats_in_packet": 0, "repeats_across_packets": 2}).model_dump(mode="json")
    assert new["repeats_in_packet"] == 0 and new["repeats_across_packets"] == 2
