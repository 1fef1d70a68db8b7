"""Packet export: what a rater receives reveals nothing, binds to the home, and is recorded."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from click.testing import CliRunner

from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.factory import PROMPTS, read_binding
from voxledger.cli import main
from voxledger.schemas.canonical import sha256_hex
from voxledger.schemas.errors import BlobMissingError, PacketError
from voxledger.schemas.listening import ListeningProtocol, PacketManifest, StimulusSet
from voxledger.stores.home import Home
from voxledger.stores.trees import build_manifest
from voxledger.tasks.listening.audio import integrated_loudness
from voxledger.tasks.listening.keys import home_secret, rater_token, sealed_dir
from voxledger.tasks.listening.verify import verify_packet_dir
from voxledger.tasks.stages.packets import export_packets


def test_packets_reveal_no_candidate(exported: Exported, stimuli: StimulusSet) -> None:
    p = exported.receipt.parameters
    assert sorted(d.name for d in exported.packets.iterdir()) == [*(f"r0{i}" for i in range(1, 7)), "trials.csv"]
    secrets_in_home = [home_secret(exported.home).hex(), *(f.read_text() for f in sealed_dir(exported.home).glob("*.json"))]
    leaks = ["recordings", "sys_a", "sys_b", "low_anchor", "gold", "attention", "prompt_id", *PROMPTS, "birch canoe"]
    leaks += [s.audio_sha256 for s in stimuli.stimuli] + [p.key_commitment_sha256]
    for folder in (exported.packets / f"r0{i}" for i in range(1, 7)):
        files = sorted(f.relative_to(folder).as_posix() for f in folder.rglob("*") if f.is_file())
        assert files[-2:] == ["index.html", "packet.json"]
        assert all(re.fullmatch(r"audio/s[0-9a-f]{16}\.wav", f) for f in files[:-2])
        for f in folder.rglob("*"):
            if f.is_file():
                data = f.read_bytes()
                # a short id ("p06") turns up in PCM samples by chance (1 in ~170 files); audio is searched for long
                # tokens everywhere and for every token in the bytes around its samples (header, any metadata chunk)
                if f.suffix == ".wav":
                    start = data.index(b"data") + 8
                    end = start + int.from_bytes(data[start - 4 : start], "little")
                    text, words = data[:start] + data[end:], [w for w in leaks + secrets_in_home if len(w) >= 8]
                    found = [w for w in leaks + secrets_in_home if w.encode() in text] + [w for w in words if w.encode() in data]
                else:
                    found = [w for w in leaks + secrets_in_home if w.encode() in data]
                assert not found, f"{f} reveals {found}"
        audio = [f.read_bytes() for f in (folder / "audio").iterdir()]
        assert len(set(audio)) == len(audio), "two files in one packet are byte-identical"
    text = (exported.packets / "trials.csv").read_text()
    assert not [w for w in leaks if w in text]


def test_audio_is_levelled_and_padded_per_prompt(exported: Exported) -> None:
    folder = exported.packets / "r01"
    manifest = PacketManifest.model_validate_json((folder / "packet.json").read_bytes())
    loudness = []
    for a in manifest.audio:
        audio, rate = sf.read(folder / a.file)
        assert rate == 16000 and audio.ndim == 1
        hidden = exported.key[a.id].role == "hidden_reference"  # set hidden_reference_gain_db (-0.2 dB) apart on purpose
        loudness.append(integrated_loudness(audio, rate) + (0.2 if hidden else 0.0))
    applied = exported.receipt.parameters.loudness.applied_lufs
    assert max(abs(x - applied) for x in loudness) < 0.05, loudness  # 16-bit rounding and dither only
    for t in manifest.trials:
        if t.task in ("mushra", "ab"):  # every sample on one screen has the same length
            assert len({(folder / "audio" / f"{s}.wav").stat().st_size for s in (*t.stimuli, *([t.reference] if t.reference else []))}) == 1


def test_receipt_binds_packets_key_and_inputs(exported: Exported, stimuli: StimulusSet) -> None:
    r, p = exported.receipt, exported.receipt.parameters
    assert [s.role for s in r.subjects][:7] == [f"packet:r0{i}" for i in range(1, 7)] + ["trials_csv"]
    assert {i.sha256 for i in r.inputs if i.role == "stimulus_audio"} == {s.audio_sha256 for s in stimuli.stimuli}
    sealed = sealed_dir(exported.home) / f"{p.key_commitment_sha256}.json"
    assert sha256_hex(sealed.read_bytes()) == p.key_commitment_sha256
    assert not exported.home.blobs.has(p.key_commitment_sha256), "the key must stay sealed until aggregation"
    secret = home_secret(exported.home)
    for ref in p.packets:
        folder = exported.packets / ref.rater_id
        assert sha256_hex((folder / "packet.json").read_bytes()) == ref.packet_sha256
        assert read_binding(folder / "index.html") == {"packet_sha256": ref.packet_sha256, "token": rater_token(secret, ref.packet_sha256)}
        assert (
            exported.home.blobs.get_bytes(ref.tree_sha256)
            == json.dumps(build_manifest(folder).model_dump(mode="json"), separators=(",", ":"), sort_keys=True).encode()
        )
        assert verify_packet_dir(folder).rater_id == ref.rater_id
    b = p.balance
    # demo plan: 6 prompts, 6 raters, k = 3 -> 3 prompts and 16-17 trials per rater (measured)
    assert (b.raters_per_prompt_min, b.raters_per_prompt_max, b.prompts_per_rater_min, b.prompts_per_rater_max) == (3, 3, 3, 3)
    assert b.position_spread_max <= 1 and not p.skipped
    rows = list(csv.DictReader(io.StringIO((exported.packets / "trials.csv").read_text())))
    assert len(rows) == sum(len(t.stimuli) for ref in p.packets for t in PacketManifest.model_validate_json(
        (exported.packets / ref.rater_id / "packet.json").read_bytes()).trials)  # fmt: skip


def test_second_export_is_served_from_cache(exported: Exported, protocol: ListeningProtocol, stimuli: StimulusSet, tmp_path: Path) -> None:
    again = export_packets(exported.home, protocol, make_same(exported, stimuli), tmp_path / "again", protocol_name="listening-demo.yaml")
    assert again.cached and again.receipt_id == exported.receipt_id
    for ref in exported.receipt.parameters.packets:
        assert build_manifest(tmp_path / "again" / ref.rater_id) == build_manifest(exported.packets / ref.rater_id)


def make_same(exported: Exported, stimuli: StimulusSet) -> StimulusSet:
    """The stimuli of the module export (audio is put into every home identically)."""
    return stimuli


def test_export_refuses_bad_input(home: Home, protocol: ListeningProtocol, stimuli: StimulusSet, tmp_path: Path) -> None:
    ghost = stimuli.model_copy(
        update={"stimuli": (*stimuli.stimuli[:-1], stimuli.stimuli[-1].model_copy(update={"audio_sha256": "0" * 64}))}
    )
    with pytest.raises(BlobMissingError, match=r"p06/sys_b \(0000"):
        export_packets(home, protocol, ghost, tmp_path / "a", protocol_name="x.yaml")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(PacketError, match="exists and is not empty"):
        export_packets(home, protocol, stimuli, tmp_path / "full", protocol_name="x.yaml")
    buf = io.BytesIO()
    sf.write(buf, np.zeros(2205), 22050, format="WAV", subtype="PCM_16")
    wrong = stimuli.model_copy(
        update={
            "stimuli": (
                *stimuli.stimuli[:-1],
                stimuli.stimuli[-1].model_copy(update={"audio_sha256": home.blobs.put_bytes(buf.getvalue())}),
            )
        }
    )
    with pytest.raises(PacketError, match="stimulus p06/sys_b: audio is 1 channel\\(s\\) at 22050 Hz"):
        export_packets(home, protocol, wrong, tmp_path / "b", protocol_name="x.yaml")


@pytest.mark.prefect
def test_cli_export_and_verify(tmp_path: Path, stimuli: StimulusSet, home: Home) -> None:
    (tmp_path / "stimuli.json").write_text(stimuli.model_dump_json())
    runner = CliRunner()
    res = runner.invoke(
        main, ["--home", str(home.root), "packets", "export", "--stimuli", str(tmp_path / "stimuli.json"), str(tmp_path / "out"), "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert len(out["packets"]) == 6 and out["balance"]["raters_per_prompt_min"] == 3 and out["loudness"]["output_lufs_spread"] < 0.01
    res = runner.invoke(main, ["packets", "verify", str(tmp_path / "out" / "r02")])
    assert res.exit_code == 0 and "ok: packet of rater r02" in res.output
    (tmp_path / "bad.json").write_text('{"evaluation_plan_sha256": "nope", "stimuli": []}')
    res = runner.invoke(
        main, ["--home", str(home.root), "packets", "export", "--stimuli", str(tmp_path / "bad.json"), str(tmp_path / "o2")]
    )
    assert res.exit_code != 0 and "2 problem(s)" in res.output and "evaluation_plan_sha256" in res.output


# --- issue 19, items 5 and 6: the audio must not identify its source ------------------------------


def test_rendering_removes_dc_and_leading_silence_differences() -> None:
    from voxledger.tasks.listening import audio as au

    rate, rng = 16000, np.random.default_rng(0)
    speech = np.sin(2 * np.pi * 220 * np.arange(rate) / rate) * np.hanning(rate) * 0.5
    recording = np.concatenate([rng.normal(0, 1e-3, 1600), speech]) + 40 / 32768  # room noise and a 40 LSB DC offset
    synthetic = np.concatenate([np.zeros(4000), speech])  # 250 ms of digital silence in front
    rendered = [au.trim_silence(au.high_pass(x, rate, 60.0), rate, -40.0, 0.15) for x in (recording, synthetic)]
    assert all(abs(float(np.mean(r)) * 32768) < 0.5 for r in rendered)  # DC gone (was 40 LSB)
    starts = [au.speech_bounds(r, rate, -40.0)[0] for r in rendered]
    assert abs(starts[0] - starts[1]) <= 160  # both start speaking 150 ms in, to within one 10 ms frame


def test_leak_check_fails_a_separating_feature() -> None:
    from voxledger.schemas.listening import Blinding
    from voxledger.tasks.listening.leakcheck import PacketFile, check_leaks

    rng = np.random.default_rng(1)

    def clip(dc: float) -> np.ndarray:
        return (rng.normal(0, 300, 8000) + dc).astype("<i2")

    files = [PacketFile("r01", f"s{c}{i}", f"t{i}", "acr", "stimulus", c, f"p{i}", clip(30.0 if c == "recordings" else 0.0))
             for i in range(8) for c in ("recordings", "tts")]  # fmt: skip
    leak = check_leaks(files, 16000, Blinding())
    assert not leak.passed and leak.leaks[0].startswith("dc_lsb separates recordings from tts (AUC 1.000 > 0.8)")
    assert len(leak.features) == 16


def test_packet_set_records_leak_features_and_passes(exported: Exported) -> None:
    leak = exported.receipt.parameters.leak_check
    assert leak is not None and leak.passed and not leak.leaks, leak.leaks if leak else None
    files = sum(len(PacketManifest.model_validate_json((exported.packets / r.rater_id / "packet.json").read_bytes()).audio)
                for r in exported.receipt.parameters.packets)  # fmt: skip
    assert len(leak.features) == files
    gated = {w.feature: w.auc for w in leak.worst if w.gated}
    assert set(gated) == {"dc_lsb", "leading_silence_s", "leading_zeros", "duration_s", "reference_correlation",
                          "onset_35_s", "onset_25_s", "repeats_in_packet"}  # fmt: skip
    assert all(v <= leak.auc_max for v in gated.values())


def test_hidden_reference_is_not_the_open_reference(exported: Exported) -> None:
    # landed code: the hidden reference differed from the open one by dither only (max 2 LSB, r > 0.999)
    screens = 0
    for ref in exported.receipt.parameters.packets:
        folder = exported.packets / ref.rater_id
        for t in PacketManifest.model_validate_json((folder / "packet.json").read_bytes()).trials:
            if t.task != "mushra":
                continue
            hidden = next(s for s in t.stimuli if exported.key[s].role == "hidden_reference")
            a, _ = sf.read(folder / "audio" / f"{t.reference}.wav", dtype="int16")
            b, _ = sf.read(folder / "audio" / f"{hidden}.wav", dtype="int16")
            assert np.max(np.abs(a.astype(int) - b.astype(int))) > 100 and np.corrcoef(a, b)[0, 1] < 0.999
            screens += 1
    assert screens == 5  # demo plan: 3 news prompts x 3 raters, each rater hearing a prompt in MUSHRA or in A/B (design.split)
    assert exported.receipt.parameters.leak_check.hidden_reference_correlation_max < 0.999  # type: ignore[union-attr]


def _bursts(rng: np.random.Generator, noise: float, onset_s: float, rate: int = 16000, rise_s: float = 0.0) -> np.ndarray:
    """Bursts of "speech" with pauses whose floor is ``noise`` (LSB RMS), starting at ``onset_s``
    with a cubic rise over ``rise_s`` from -57 dBFS (above the -60 dBFS silence threshold)."""
    burst = np.concatenate([rng.normal(0, 3000, 3200), rng.normal(0, noise, 1600)] * 4)
    rise = int(rise_s * rate)
    burst[:rise] *= 0.015 + 0.985 * np.linspace(0, 1, rise) ** 3
    return np.concatenate([np.zeros(int(onset_s * rate)), burst]).astype("<i2")


def test_leak_check_gates_pause_noise_and_onsets() -> None:
    from voxledger.schemas.listening import Blinding
    from voxledger.tasks.listening.leakcheck import PacketFile, check_leaks

    rng = np.random.default_rng(2)

    def files(noise: float, rise_s: float) -> list[PacketFile]:
        return [PacketFile(f"r0{i % 2}", f"s{c}{i}", f"t{i}", "acr", "stimulus", c, f"p{i}",
                           _bursts(rng, noise if c == "recordings" else 4.0, 0.15, rise_s=rise_s if c == "recordings" else 0.0))
                for i in range(8) for c in ("recordings", "tts")]  # fmt: skip

    noisy = check_leaks(files(60.0, 0.0), 16000, Blinding())
    assert noisy.passed and noisy.unremoved == (
        "pause_noise_dbfs separates recordings from tts (AUC 1.000); rendering cannot remove it without changing what is judged, not gated",
    )
    slow = check_leaks(files(4.0, 0.08), 16000, Blinding())  # an 80 ms rise: later at -45, -35 and -25 dBFS
    assert not slow.passed and [s.split()[0] for s in slow.leaks] == ["onset_35_s", "onset_25_s"]
    assert [s.split()[0] for s in slow.unremoved] == ["onset_45_s"]
    worst = {w.feature: w for w in slow.worst}
    assert worst["onset_35_s"].gated and worst["onset_25_s"].gated and not worst["onset_45_s"].gated and not worst["pause_noise_dbfs"].gated
    from types import SimpleNamespace

    from voxledger.tasks.stages.packets import summary as _leak_summary  # what `voxledger demo report` prints for the packet set

    assert _leak_summary(SimpleNamespace(parameters=SimpleNamespace(leak_check=slow))).endswith("; not removable, stated: onset_45_s")
    assert check_leaks(files(4.0, 0.0), 16000, Blinding()).passed


def test_leak_check_states_cross_packet_links() -> None:
    from voxledger.schemas.listening import Blinding
    from voxledger.tasks.listening.leakcheck import PacketFile, check_leaks

    rng = np.random.default_rng(2)
    files = [PacketFile(f"r0{i % 2}", f"s{c}{i}", f"t{i}", "acr", "stimulus", c, f"p{i}", _bursts(rng, 4.0, 0.15))
             for i in range(8) for c in ("recordings", "tts")]  # fmt: skip
    ref = files[0].pcm  # the recordings clip of p0, labelled as a MUSHRA reference in another rater's packet
    files.append(PacketFile("r01", "sref", "tm", "mushra", "open_reference", "recordings", "p0", ref.copy()))
    leak = check_leaks(files, 16000, Blinding())
    assert leak.passed and not leak.leaks and not leak.unremoved  # one linked clip of eight separates nothing
    feats = {f.pseudonym: f for f in leak.features}
    assert feats["srecordings0"].cross_packet_correlation == 1.0 and leak.cross_packet_links == 1  # r00's clip, r01's reference
    assert feats["stts0"].cross_packet_correlation < 0.5
    assert feats["stts2"].onset_45_s == feats["stts2"].onset_35_s == feats["stts2"].onset_25_s == 0.15
    assert feats["stts2"].onset_30_s is None  # recorded by older receipts only
    assert not {w.feature: w for w in leak.worst}["cross_packet_correlation"].gated


def test_packet_set_receipt_holds_the_new_leak_features(exported: Exported) -> None:
    leak = exported.receipt.parameters.leak_check
    assert leak is not None
    new = ("pause_noise_dbfs", "onset_45_s", "onset_35_s", "onset_25_s", "cross_packet_correlation")
    cands = [f for f in leak.features if exported.key[f.pseudonym].role in ("stimulus", "hidden_reference")]
    assert cands and all(None not in [getattr(f, n) for n in new] for f in cands)
    worst = {w.feature: w for w in leak.worst}
    assert [worst[n].gated for n in new] == [False, False, True, True, False]
    assert all(worst[n].auc <= leak.auc_max for n in new if worst[n].gated)
    unremoved = ("pause_noise_dbfs", "onset_45_s", "cross_packet_correlation")
    assert {s.split()[0] for s in leak.unremoved} == {n for n in unremoved if worst[n].auc > leak.auc_max}


def test_older_leak_check_stays_readable() -> None:
    from voxledger.schemas.listening_receipts import StimulusFeatures

    old = {"pseudonym": "s1", "candidate": "a", "prompt_id": "p", "dc_lsb": 0.0, "leading_silence_s": 0.15, "trailing_silence_s": 0.2,
           "leading_zeros": 0, "rms_dbfs": -30.0, "peak_dbfs": -10.0, "duration_s": 2.0, "reference_correlation": 0.1,
           "pause_noise_dbfs": -60.0, "onset_45_s": 0.15, "onset_30_s": 0.16, "cross_packet_correlation": 0.2}  # fmt: skip
    f = StimulusFeatures.model_validate(old)
    assert f.onset_30_s == 0.16 and f.onset_35_s is None and f.onset_25_s is None
