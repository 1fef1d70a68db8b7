"""Write one rater's packet folder: trials rendered per slot, the page, the manifest, the key entries.

Shared by ``packets export`` (``tasks/stages/packets.py``) and ``packets extend``
(``tasks/listening/extend.py``), so a packet added later is written exactly as the first ones.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from voxledger.schemas.canonical import canonical_bytes, sha256_hex
from voxledger.schemas.errors import PacketError
from voxledger.schemas.listening import (
    KeyEntry,
    ListeningProtocol,
    PacketAudio,
    PacketCompletion,
    PacketCriterion,
    PacketHeadphoneCheck,
    PacketHeadphoneTrial,
    PacketManifest,
    PacketTrial,
)
from voxledger.schemas.listening_receipts import PacketRef
from voxledger.stores.home import Home
from voxledger.stores.trees import put_tree
from voxledger.tasks.listening.audio import encode_int16
from voxledger.tasks.listening.design import Slot, TrialPlan
from voxledger.tasks.listening.headphones import encode_stereo, huggins_trial
from voxledger.tasks.listening.keys import home_secret, keyed_hex, pseudonym, rater_token
from voxledger.tasks.listening.leakcheck import PacketFile
from voxledger.tasks.listening.page import render_page
from voxledger.tasks.listening.render import AudioRenderer

COMPLETION_CODES = "completion-codes.csv"
CSV_COLUMNS = ("rater_id", "packet_sha256", "trial", "position", "task", "criteria", "slot", "stimulus", "file", "reference_file")


class PacketWriter:
    """Writes packets one rater at a time, collecting key entries, CSV rows and packet refs."""

    def __init__(
        self, home: Home, protocol: ListeningProtocol, protocol_sha: str, renderer: AudioRenderer, out_dir: Path, set_id: str
    ) -> None:
        self.home, self.protocol, self.protocol_sha, self.renderer, self.out_dir = home, protocol, protocol_sha, renderer, out_dir
        self.secret = home_secret(home)
        self.set_id = set_id
        self.entries: list[KeyEntry] = []
        self.rows: list[tuple[str, ...]] = []
        self.packets: list[PacketRef] = []
        self.dirs: dict[str, Path] = {}
        self.files: list[PacketFile] = []  # every rendered file, for the leak check

    def _name(self, rater: str, slot_key: str) -> str:
        return pseudonym(self.secret, self.set_id, rater, slot_key, self.protocol.blinding.pseudonym_hex_chars)

    def write(self, rater: str, plans: list[TrialPlan], practice: list[TrialPlan]) -> None:
        """One rater's folder: scored ``plans`` (``t001``...), unscored ``practice`` (``f01``...), headphone screen, page."""
        folder = self.out_dir / rater
        (folder / "audio").mkdir(parents=True)
        audio: list[PacketAudio] = []
        entries: list[KeyEntry] = []
        trials = [self._trial(folder, rater, f"t{n:03d}", plan, audio, entries) for n, plan in enumerate(plans, 1)]
        familiarisation = [self._trial(folder, rater, f"f{n:02d}", plan, audio, entries) for n, plan in enumerate(practice, 1)]
        headphones = self._headphones(folder, rater, audio)
        if len({a.id for a in audio}) != len(audio):
            raise PacketError(f"pseudonym collision in packet {rater}; raise blinding.pseudonym_hex_chars")
        manifest = PacketManifest(
            packet_set_id=self.set_id,
            rater_id=rater,
            protocol_sha256=self.protocol_sha,
            title=self.protocol.title,
            instructions=self.protocol.instructions,
            trials=tuple(trials),
            criteria=tuple(PacketCriterion(name=c.name, task=c.task, question=c.question, scale=c.scale) for c in self.protocol.criteria),
            audio=tuple(sorted(audio, key=lambda a: a.id)),
            familiarisation=tuple(familiarisation),
            headphone_check=headphones,
            completion=self._completion(rater),
        )
        body = canonical_bytes(manifest)
        packet_sha = sha256_hex(body)
        (folder / "packet.json").write_bytes(body)
        (folder / "index.html").write_text(render_page(manifest, packet_sha, rater_token(self.secret, packet_sha)), encoding="utf-8")
        tree_sha, _ = put_tree(self.home.blobs, folder, cache=self.home.stat_cache)
        self.packets.append(PacketRef(rater_id=rater, packet_sha256=packet_sha, tree_sha256=tree_sha, trials=len(trials)))
        self.entries += entries
        self.dirs[rater] = folder
        files = {a.id: a.file for a in audio}
        for pos, t in enumerate(trials, 1):
            for i, stim in enumerate(t.stimuli):
                ref = files[t.reference] if t.reference else ""
                self.rows.append((rater, packet_sha, t.id, str(pos), t.task, ";".join(t.criteria), str(i), stim, files[stim], ref))

    def _trial(self, folder: Path, rater: str, tid: str, plan: TrialPlan, audio: list[PacketAudio], entries: list[KeyEntry]) -> PacketTrial:
        """Render one trial's files (each slot its own pseudonym and copy) and return it as the page shows it."""
        labelled = [(str(i), s) for i, s in enumerate(plan.slots)] + ([("ref", plan.reference)] if plan.reference else [])
        names = {}
        for slot_key, slot in labelled:
            name = self._name(rater, f"{tid}/{slot_key}")
            pcm = self.renderer.samples(slot.source, f"{self.set_id}|{name}", hidden_reference=slot.role == "hidden_reference")
            data = encode_int16(pcm, self.renderer.rate)
            self.files.append(PacketFile(rater, name, tid, plan.task, slot.role, slot.candidate, slot.prompt_id, pcm, slot.source))
            (folder / "audio" / f"{name}.wav").write_bytes(data)
            audio.append(PacketAudio(id=name, file=f"audio/{name}.wav", sha256=sha256_hex(data)))
            entries.append(self._entry(name, rater, tid, slot, sha256_hex(data)))
            names[slot_key] = name
        stimuli = tuple(names[str(i)] for i in range(len(plan.slots)))
        return PacketTrial(id=tid, task=plan.task, criteria=plan.criteria, stimuli=stimuli, reference=names.get("ref"))

    def _headphones(self, folder: Path, rater: str, audio: list[PacketAudio]) -> PacketHeadphoneCheck | None:
        """The rater's Huggins-pitch trials (own noise, answers drawn from the home's secret), or None when the protocol has none."""
        check = self.protocol.headphone_check
        if check.method == "none":
            return None
        out = []
        for n in range(1, check.trials + 1):
            name = self._name(rater, f"h{n:02d}")
            answer = 1 + int(keyed_hex(self.secret, "headphones", self.set_id, rater, str(n))[:8], 16) % 3
            seed = int(keyed_hex(self.secret, "headphones-noise", self.set_id, rater, str(n))[:8], 16)
            data = encode_stereo(huggins_trial(check, self.renderer.rate, seed, answer), self.renderer.rate)
            (folder / "audio" / f"{name}.wav").write_bytes(data)
            audio.append(PacketAudio(id=name, file=f"audio/{name}.wav", sha256=sha256_hex(data)))
            out.append(PacketHeadphoneTrial(audio=name, answer=answer))
        return PacketHeadphoneCheck(method=check.method, trials=tuple(out), pass_min=check.pass_min, attempts=check.attempts)

    def completion_code(self, rater: str) -> str | None:
        """The rater's completion code under ``protocol.completion`` (None when there is none)."""
        c = self.protocol.completion
        if c.code == "fixed":
            return c.fixed_code
        return keyed_hex(self.secret, "completion", self.set_id, rater)[:10].upper() if c.code == "per_rater" else None

    def _completion(self, rater: str) -> PacketCompletion | None:
        c, code = self.protocol.completion, self.completion_code(rater)
        if code is None and c.redirect_url is None:
            return None
        url = c.redirect_url.replace("{code}", code or "") if c.redirect_url else None
        return PacketCompletion(code=code, redirect_url=url)

    def _entry(self, name: str, rater: str, tid: str, slot: Slot, rendered_sha: str) -> KeyEntry:
        source_sha = self.renderer.sources[slot.source].source_sha256
        return KeyEntry(
            pseudonym=name,
            rater_id=rater,
            trial_id=tid,
            role=slot.role,
            candidate=slot.candidate,
            prompt_id=slot.prompt_id,
            category=slot.category,
            audio_sha256=source_sha,
            rendered_sha256=rendered_sha,
            expected=slot.expected,
        )

    def codes_bytes(self) -> bytes:
        """``rater_id,completion_code`` per packet, for the organiser to check what raters paste into the platform."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(("rater_id", "completion_code"))
        w.writerows((p.rater_id, self.completion_code(p.rater_id) or "") for p in self.packets)
        return buf.getvalue().encode("utf-8")

    def csv_bytes(self) -> bytes:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        w.writerows(self.rows)
        return buf.getvalue().encode("utf-8")
