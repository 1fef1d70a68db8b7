// voxledger listening-test page: no dependencies. Static: no network, opens from disk (file://).
// Enforces play-to-the-end before rating, logs every presentation and playback event, and
// exports a submission bound to the packet digest and rater token, sealed by an HMAC-SHA256.
// Served (`voxledger packets serve`): the same page holds no token; it posts each event, in
// order, to its own origin, where the server times, checks and journals it, and seals the answers.
"use strict";
(function () {
  const P = JSON.parse(document.getElementById("packet").textContent);
  const BIND = JSON.parse(document.getElementById("binding").textContent);
  const SERVED = BIND.served === true;
  const CRIT = Object.fromEntries(P.criteria.map((c) => [c.name, c]));
  const FILE = Object.fromEntries(P.audio.map((a) => [a.id, a.file]));
  const app = document.getElementById("app");
  const log = [];
  let ratings = new Map();
  let ended = new Set();
  let practice = null; // during familiarisation: the scored answers, put aside ({ratings, ended})
  const PRACTICE = P.familiarisation || [];
  let index = -1;
  let players = [];
  let startedAt = null;
  let exported = null;
  let sessionId = hex(crypto.getRandomValues(new Uint8Array(16)));
  let clockOffset = 0; // a resumed session continues its clock, so the log stays in order
  const STORE = "voxledger:" + BIND.packet_sha256; // the small state: session, item, ratings, samples heard
  const EVENTS = STORE + ":log:"; // one key per logged event, appended and never rewritten
  const RETRY_MS = [500, 1500, 4000]; // a sample that fails to load is fetched again after these waits
  const HOW = {
    acr: "Play the sample to the end, then choose the score that fits it best.",
    ab: "Play A and B, each to the end (in any order, as often as you like), then say how B compares with A.",
    mushra: "Play the Reference, then every sample, each to the end. One of the samples is the reference itself, hidden: " +
      "find it and give it 100. One or two are deliberately muffled versions of the reference (low-pass anchors): rate them for what they are. " +
      "Rate every sample with its slider; a slider counts only once you have moved or clicked it.",
    smos: "Play the Reference (the voice of the target speaker, saying other words) and the sample, each to the end, " +
      "then say how similar the two voices are. Ignore the words, the quality of the recording and any errors: judge only the voice.",
  };
  const now = () => Math.max(0, Math.round(clockOffset + performance.now()));

  function note(event, trial, stimulus, detail) {
    if (practice) return; // practice items are unscored: nothing about them is logged, sent or exported
    const e = { t_ms: now(), event: event, trial: trial ?? null, stimulus: stimulus ?? null, detail: detail ?? null };
    log.push(e);
    if (SERVED) return send({ event: e.event, trial: e.trial, stimulus: e.stimulus, detail: e.detail });
    store(EVENTS + (log.length - 1), e); // one small write per event, whatever the length of the log
  }

  // ---- served: events go to the server one at a time, in order; a lost answer is retried ----
  const outbox = [];
  let seq = SERVED ? BIND.state.seq : 0;
  let sending = false;
  let halted = null;
  let drained = [];
  const pause = (ms) => new Promise((ok) => setTimeout(ok, ms));
  function send(ev) { outbox.push(Object.assign({ page: BIND.page, seq: seq++ }, ev)); pump(); }
  async function post(path, body) {
    const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      credentials: "same-origin", cache: "no-store" });
    return { status: r.status, body: await r.json().catch(() => ({})) };
  }
  async function pump() {
    if (sending || halted) return;
    sending = true;
    let wait = 0;
    while (outbox.length && !halted) {
      const ev = outbox[0];
      let r = null;
      try { r = await post("/api/events", ev); } catch (e) { r = null; } // a dropped connection: try again
      // delivered, or delivered before a lost reply (the server has it: it expects a later number now)
      if (r && (r.status === 200 || (r.body.code === "replay" && r.body.next_seq > ev.seq))) { outbox.shift(); wait = 0; continue; }
      if (r && r.status !== 429 && r.status < 500) { halt(r.body.error || ("the server refused event " + ev.seq + " (HTTP " + r.status + ")")); break; }
      wait = Math.min(4000, wait ? wait * 2 : 500);
      await pause(wait);
    }
    sending = false;
    if (!outbox.length) { const w = drained; drained = []; w.forEach((f) => f()); }
  }
  const flushed = () => (outbox.length || sending) ? new Promise((ok) => drained.push(ok)) : Promise.resolve();
  function halt(reason) {
    halted = reason;
    const banner = el("p", { class: "halted", id: "halted", role: "alert" }, "Your answers are not being saved: " + reason + ". Reload this page to continue.");
    document.body.prepend(banner);
  }

  // progress survives a reload (same browser, same packet); storage may be unavailable: then it simply does not
  function store(key, value) {
    if (SERVED) return; // the server keeps the state
    try { localStorage.setItem(key, JSON.stringify(value)); } catch (e) { /* no storage for file:// pages, or full */ }
  }
  function save() {
    if (practice) return;
    store(STORE, { v: 2, sessionId, startedAt, index, ratings: Array.from(ratings.values()), ended: Array.from(ended) });
  }
  function load() {
    if (SERVED) {
      const st = BIND.state;
      return st.started ? { v: 2, sessionId, startedAt: null, index: st.index, ratings: st.ratings, ended: st.ended, log: [] } : null;
    }
    try {
      const saved = JSON.parse(localStorage.getItem(STORE) || "null");
      if (!saved) return null;
      if (!saved.log) { // events are stored one per key, in order, from 0
        saved.log = [];
        for (let n = 0, raw; (raw = localStorage.getItem(EVENTS + n)) !== null; n++) saved.log.push(JSON.parse(raw));
      }
      return saved;
    } catch (e) { return null; }
  }
  function forget() {
    if (SERVED) return;
    try {
      localStorage.removeItem(STORE);
      for (let n = 0; localStorage.getItem(EVENTS + n) !== null; n++) localStorage.removeItem(EVENTS + n);
    } catch (e) { /* nothing stored */ }
  }
  function resume(saved) {
    sessionId = saved.sessionId;
    startedAt = saved.startedAt;
    saved.ratings.forEach((r) => ratings.set(r.trial + "|" + r.stimulus + "|" + r.criterion, r));
    saved.ended.forEach((k) => ended.add(k));
    if (saved.v !== 2) forget(); // an older page kept the whole log under one key: store it one event per key
    saved.log.forEach((e) => { log.push(e); if (saved.v !== 2) store(EVENTS + (log.length - 1), e); });
    clockOffset = (log.length ? log[log.length - 1].t_ms + 1 : 0) - performance.now();
    note("start", null, null, "resumed");
    show(saved.index);
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children) node.append(c);
    return node;
  }

  // ---- SHA-256 / HMAC / canonical JSON (RFC 8785 for strings, integers, objects, arrays) ----
  const K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2]);
  const rotr = (x, n) => (x >>> n) | (x << (32 - n));

  function sha256(msg) {
    const padded = new Uint8Array(((msg.length + 72) >> 6) << 6);
    padded.set(msg);
    padded[msg.length] = 0x80;
    const dv = new DataView(padded.buffer);
    dv.setUint32(padded.length - 8, Math.floor(msg.length / 0x20000000));
    dv.setUint32(padded.length - 4, (msg.length * 8) >>> 0);
    const H = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
    const W = new Uint32Array(64);
    for (let off = 0; off < padded.length; off += 64) {
      for (let i = 0; i < 16; i++) W[i] = dv.getUint32(off + 4 * i);
      for (let i = 16; i < 64; i++) {
        const s0 = rotr(W[i - 15], 7) ^ rotr(W[i - 15], 18) ^ (W[i - 15] >>> 3);
        const s1 = rotr(W[i - 2], 17) ^ rotr(W[i - 2], 19) ^ (W[i - 2] >>> 10);
        W[i] = (W[i - 16] + s0 + W[i - 7] + s1) >>> 0;
      }
      let [a, b, c, d, e, f, g, h] = H;
      for (let i = 0; i < 64; i++) {
        const t1 = (h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + W[i]) >>> 0;
        const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
        h = g; g = f; f = e; e = (d + t1) >>> 0; d = c; c = b; b = a; a = (t1 + t2) >>> 0;
      }
      [a, b, c, d, e, f, g, h].forEach((v, i) => { H[i] = (H[i] + v) >>> 0; });
    }
    const out = new Uint8Array(32);
    const ov = new DataView(out.buffer);
    H.forEach((v, i) => ov.setUint32(4 * i, v));
    return out;
  }

  function hmac(key, msg) {
    let k = key.length > 64 ? sha256(key) : key;
    const block = new Uint8Array(64);
    block.set(k);
    const inner = new Uint8Array(64 + msg.length);
    const outer = new Uint8Array(96);
    for (let i = 0; i < 64; i++) { inner[i] = block[i] ^ 0x36; outer[i] = block[i] ^ 0x5c; }
    inner.set(msg, 64);
    outer.set(sha256(inner), 64);
    return sha256(outer);
  }

  function hex(bytes) { return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(""); }
  function utf8(text) { return new TextEncoder().encode(text); }
  function canon(v) {
    if (v === null || typeof v !== "object") return JSON.stringify(v);
    if (Array.isArray(v)) return "[" + v.map(canon).join(",") + "]";
    return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canon(v[k])).join(",") + "}";
  }
  window.voxledgerSelfTest = () => hex(sha256(utf8("abc"))) + " " + hex(hmac(utf8("key"), utf8("The quick brown fox jumps over the lazy dog")));

  // ---- trials ----
  function stopAll() { players.forEach((a) => { if (!a.paused) a.pause(); }); }

  function markDone(btn, name) {
    btn.classList.remove("playing");
    btn.classList.add("done");
    btn.setAttribute("aria-label", "Play " + name + " again (played to the end)");
  }

  function player(trial, stim, label, name) {
    const audio = new Audio(FILE[stim]);
    audio.preload = "auto";
    players.push(audio);
    const btn = el("button", { type: "button", class: "play", "data-trial": trial.id, "data-stimulus": stim, "data-name": name, "aria-label": "Play " + name }, label);
    let failures = 0;
    let wanted = false; // the rater asked to play: start as soon as a retry has loaded the sample
    let resetting = false; // the seek to 0 that starts every play is not the rater's
    const play = () => {
      stopAll();
      resetting = audio.currentTime !== 0;
      audio.currentTime = 0;
      note("play", trial.id, stim);
      btn.classList.add("playing");
      audio.play().catch((e) => { if (!audio.error) note("pause", trial.id, stim, "play failed: " + e.name); });
    };
    audio.addEventListener("ended", () => {
      wanted = false;
      note("ended", trial.id, stim);
      ended.add(trial.id + "|" + stim);
      save();
      markDone(btn, name);
      refresh(trial);
    });
    // a transient failure (a 503, a dropped connection) is retried with growing waits; after the last the
    // button says so and stays usable: pressing it tries again
    audio.addEventListener("error", () => {
      failures += 1;
      note("pause", trial.id, stim, "load error " + failures);
      btn.classList.remove("playing");
      btn.classList.add("retrying");
      if (failures <= RETRY_MS.length) {
        btn.textContent = "↻ " + label.replace("▶ ", "") + ": loading again…";
        setTimeout(() => { audio.load(); if (wanted) play(); }, RETRY_MS[failures - 1]);
      } else {
        btn.textContent = "⚠ " + label.replace("▶ ", "") + ": did not load. Press to try again; if it keeps failing, tell the organiser";
      }
    });
    audio.addEventListener("playing", () => { btn.classList.remove("retrying"); btn.textContent = label; });
    audio.addEventListener("pause", () => { if (!audio.ended && !audio.error) { note("pause", trial.id, stim); btn.classList.remove("playing"); } });
    audio.addEventListener("seeking", () => { if (!resetting) note("seek", trial.id, stim, String(Math.round(audio.currentTime * 1000))); resetting = false; });
    audio.addEventListener("ratechange", () => {
      if (audio.playbackRate !== 1) { note("ratechange", trial.id, stim, String(audio.playbackRate)); audio.playbackRate = 1; }
    });
    btn.addEventListener("click", () => {
      wanted = true;
      if (audio.error) { // after the automatic retries: the rater's press tries once more
        failures = RETRY_MS.length - 1;
        btn.textContent = "↻ " + label.replace("▶ ", "") + ": loading again…";
        audio.load();
      }
      play();
    });
    return btn;
  }

  function rated(trial) {
    if (trial.task === "mushra") return trial.stimuli;
    return trial.task === "ab" ? [trial.stimuli[1]] : [trial.stimuli[0]];
  }
  // A/B: both samples; MUSHRA and SMOS: the open reference and the sample; ACR: the sample
  function needs(trial, stim) {
    if (trial.task === "ab") return trial.stimuli;
    return (trial.task === "mushra" || trial.task === "smos") && trial.reference ? [trial.reference, stim] : [stim];
  }

  function setRating(trial, stim, crit, score) {
    ratings.set(trial.id + "|" + stim + "|" + crit, { trial: trial.id, stimulus: stim, criterion: crit, score: score, t_ms: now() });
    note("rate", trial.id, stim, crit + "=" + score);
    save();
    refresh(trial);
  }

  function radios(trial, stim, crit) {
    const scale = CRIT[crit].scale;
    const labels = Object.fromEntries(scale.anchors.map((a) => [a.value, a.label]));
    const box = el("div", { class: "scale", role: "radiogroup", "aria-label": CRIT[crit].question, "aria-describedby": "hint" });
    for (let v = scale.min; v <= scale.max; v += scale.step) {
      const input = el("input", { type: "radio", name: trial.id + "|" + stim + "|" + crit, value: v, "data-stimulus": stim, "data-criterion": crit, disabled: true });
      input.addEventListener("change", () => setRating(trial, stim, crit, v));
      box.append(el("label", { class: "choice" }, input, el("span", { class: "value" }, String(v)), el("span", { class: "anchor" }, labels[v] || "")));
    }
    return box;
  }

  function slider(trial, stim, crit, label) {
    const scale = CRIT[crit].scale;
    const out = el("output", { class: "score", "aria-live": "polite" }, "not rated");
    // no value looks recorded before the rater sets one: the thumb stays hidden until the first move or click
    const input = el("input", { type: "range", class: "unset", min: scale.min, max: scale.max, step: scale.step, value: Math.round((scale.min + scale.max) / 2),
      "data-stimulus": stim, "data-criterion": crit, disabled: true, "aria-label": label + ": score " + scale.min + " to " + scale.max,
      "aria-valuetext": "not rated", "aria-describedby": "hint" });
    const take = () => {
      input.classList.remove("unset");
      out.textContent = input.value;
      input.setAttribute("aria-valuetext", input.value);
      setRating(trial, stim, crit, Number(input.value));
    };
    input.addEventListener("input", take);
    input.addEventListener("change", () => { if (!ratings.has(trial.id + "|" + stim + "|" + crit) || ratings.get(trial.id + "|" + stim + "|" + crit).score !== Number(input.value)) take(); });
    const ticks = el("div", { class: "ticks" }, ...scale.anchors.map((a) => el("span", {}, a.label)));
    return el("div", { class: "slider" }, input, out, ticks);
  }

  function refresh(trial) {
    if (baseRefresh(trial)) return;
    app.querySelectorAll("input[data-stimulus]").forEach((input) => {
      input.disabled = !needs(trial, input.dataset.stimulus).every((s) => ended.has(trial.id + "|" + s));
    });
    const done = trial.criteria.every((c) => rated(trial).every((s) => ratings.has(trial.id + "|" + s + "|" + c)));
    const next = document.getElementById("next");
    if (next) next.disabled = !done;
    const unplayed = Array.from(app.querySelectorAll("button.play")).filter((b) => !b.classList.contains("done"));
    const hint = document.getElementById("hint");
    const text = unplayed.length ? "Rating is disabled until you play " + unplayed.map((b) => b.dataset.name).join(", ") + " to the end."
      : !done ? "Now rate every sample to continue." : "All rated: press " + (next ? next.textContent.replace(" ›", "") : "Next") + ".";
    if (hint && hint.textContent !== text) hint.textContent = text;
  }

  // after a reload the item shows what the rater already did: samples heard, ratings given
  function restore(trial) {
    app.querySelectorAll("button.play").forEach((b) => { if (ended.has(trial.id + "|" + b.dataset.stimulus)) markDone(b, b.dataset.name); });
    app.querySelectorAll("input[data-stimulus]").forEach((input) => {
      const r = ratings.get(trial.id + "|" + input.dataset.stimulus + "|" + input.dataset.criterion);
      if (!r) return;
      if (input.type === "radio") input.checked = Number(input.value) === r.score;
      else {
        input.value = r.score;
        input.classList.remove("unset");
        input.setAttribute("aria-valuetext", String(r.score));
        input.parentElement.querySelector("output").textContent = String(r.score);
      }
    });
  }

  function show(i) {
    stopAll();
    players = [];
    const items = practice ? PRACTICE : P.trials;
    if (practice && i >= items.length) return endPractice();
    if (!practice) index = i;
    if (i >= items.length) { save(); return finish(); }
    const trial = items[i];
    const body = el("section", { class: "trial " + trial.task + (practice ? " practice" : ""), "data-trial": trial.id, "data-phase": practice ? "familiarisation" : "scored" });
    body.append(el("p", { class: "progress", id: "progress", tabindex: "-1" },
      practice ? `Practice item ${i + 1} of ${items.length}: not scored` : `Item ${i + 1} of ${P.trials.length}`));
    body.append(el("p", { class: "how" }, HOW[trial.task]));
    if (trial.task === "acr") {
      body.append(el("div", { class: "players" }, player(trial, trial.stimuli[0], "▶ Play sample", "the sample")));
      trial.criteria.forEach((c) => body.append(el("h2", {}, CRIT[c].question), radios(trial, trial.stimuli[0], c)));
    } else if (trial.task === "smos") {
      body.append(el("div", { class: "players" }, player(trial, trial.reference, "▶ Reference voice", "the reference"),
        player(trial, trial.stimuli[0], "▶ Play sample", "the sample")));
      trial.criteria.forEach((c) => body.append(el("h2", {}, CRIT[c].question), radios(trial, trial.stimuli[0], c)));
    } else if (trial.task === "ab") {
      body.append(el("div", { class: "players" }, player(trial, trial.stimuli[0], "▶ Play A", "A"), player(trial, trial.stimuli[1], "▶ Play B", "B")));
      trial.criteria.forEach((c) => body.append(el("h2", {}, CRIT[c].question), radios(trial, trial.stimuli[1], c)));
    } else {
      const c = trial.criteria[0];
      body.append(el("h2", {}, CRIT[c].question));
      if (trial.reference) body.append(el("div", { class: "players" }, player(trial, trial.reference, "▶ Reference", "the reference")));
      trial.stimuli.forEach((s, k) => body.append(el("div", { class: "row" }, player(trial, s, `▶ Sample ${k + 1}`, `sample ${k + 1}`), slider(trial, s, c, `Sample ${k + 1}`))));
    }
    body.append(el("p", { class: "hint", id: "hint", role: "status", "aria-live": "polite" }, ""));
    const last = practice ? "Start the test ›" : "Finish";
    const next = el("button", { type: "button", id: "next", class: "next", disabled: true }, i + 1 < items.length ? "Next ›" : last);
    next.addEventListener("click", () => { note("next", trial.id); show(i + 1); });
    body.append(next);
    app.replaceChildren(body);
    note("present", trial.id);
    save();
    restore(trial);
    refresh(trial);
    document.getElementById("progress").focus(); // a new item starts at its top for keyboard and screen-reader users
  }

  // ---- familiarisation: the packet's task types once each, unscored, before item 1 ----
  // unscored screens (practice items, the headphone check) keep their answers aside and log nothing
  function aside() { practice = { ratings, ended }; ratings = new Map(); ended = new Set(); }
  function back() { ({ ratings, ended } = practice); practice = null; }
  function practise() {
    if (!PRACTICE.length) return show(0);
    aside();
    show(0);
  }
  function endPractice() {
    back();
    note("start", null, null, `familiarisation: ${PRACTICE.length} practice items done`);
    show(0);
  }

  // ---- headphone screen (Huggins pitch, Milne et al. 2021): three noises, one hides a faint tone over headphones ----
  function headphones(then) {
    const H = P.headphone_check;
    if (!H) return then();
    aside();
    let attempt = 1;
    let k = 0;
    let right = 0;
    const trialScreen = () => {
      stopAll();
      players = [];
      const t = { id: "h" + String(k + 1).padStart(2, "0"), task: "headphones", stimuli: [H.trials[k].audio] };
      const choose = el("div", { class: "scale", role: "radiogroup", "aria-label": "Which noise held the tone?" });
      const next = el("button", { type: "button", id: "next", class: "next", disabled: true }, "Next ›");
      let answer = null;
      [1, 2, 3].forEach((v) => {
        const input = el("input", { type: "radio", name: "headphones", value: v, disabled: true, "data-headphones": v });
        input.addEventListener("change", () => { answer = v; next.disabled = false; });
        choose.append(el("label", { class: "choice" }, input, el("span", { class: "value" }, String(v)), el("span", { class: "anchor" }, ["First", "Second", "Third"][v - 1])));
      });
      const btn = player(t, H.trials[k].audio, "▶ Play the three noises", "the noises");
      const body = el("section", { class: "trial headphones", "data-trial": t.id, "data-phase": "headphones" },
        el("p", { class: "progress", id: "progress", tabindex: "-1" }, `Headphone check ${k + 1} of ${H.trials.length}` + (attempt > 1 ? ` (try ${attempt})` : "")),
        el("p", { class: "how" }, "Wear headphones. You will hear three noises; one of them hides a faint tone. Play the sound to the end, then choose the noise with the tone."),
        el("div", { class: "players" }, btn), choose, el("p", { class: "hint", id: "hint", role: "status", "aria-live": "polite" }, ""), next);
      app.replaceChildren(body);
      next.addEventListener("click", () => {
        right += answer === H.trials[k].answer ? 1 : 0;
        k += 1;
        if (k < H.trials.length) return trialScreen();
        const passed = right >= H.pass_min;
        back();
        note("start", null, null, `headphones huggins_pitch try ${attempt}: ${right}/${H.trials.length} ${passed ? "passed" : "failed"}`);
        if (passed) return then();
        if (attempt >= H.attempts) {
          return app.replaceChildren(el("section", { class: "finish", id: "headphones-failed" }, el("h2", {}, "This test needs headphones"),
            el("p", {}, "The headphone check did not find the tone often enough, so the test cannot go on. Thank you for your time.")));
        }
        const again = el("button", { type: "button", id: "retry", class: "next" }, "Try again");
        again.addEventListener("click", () => { aside(); attempt += 1; k = 0; right = 0; trialScreen(); });
        app.replaceChildren(el("section", { class: "intro", "data-phase": "headphones" }, el("h2", {}, "Please check your headphones"),
          el("p", {}, "Put on headphones (not loudspeakers), in a quiet place, and try once more."), again));
      });
      document.getElementById("progress").focus();
    };
    trialScreen();
  }
  // enables a headphone trial's answers once its sound has played to the end (player() calls refresh)
  const baseRefresh = (trial) => {
    if (trial.task !== "headphones") return false;
    const done = ended.has(trial.id + "|" + trial.stimuli[0]);
    app.querySelectorAll("input[data-headphones]").forEach((i) => { i.disabled = !done; });
    const hint = document.getElementById("hint");
    if (hint) hint.textContent = done ? "Choose the noise that held the tone." : "Play the sound to the end to answer.";
    return true;
  };

  function completion() {
    const C = P.completion;
    if (!C) return [];
    const out = [];
    if (C.code) out.push(el("p", { class: "code" }, "Your completion code: ", el("strong", { id: "completion-code" }, C.code)));
    if (C.redirect_url) out.push(el("p", {}, el("a", { id: "completion-link", href: C.redirect_url, rel: "noreferrer", target: "_top" }, "Return to the study platform")));
    return out;
  }

  function submission() {
    note("export");
    const doc = {
      format: "voxledger.submission/1", packet_sha256: BIND.packet_sha256, rater_id: P.rater_id, token: BIND.token,
      session_id: sessionId, user_agent: navigator.userAgent, started_at: startedAt, finished_at: new Date().toISOString(),
      ratings: Array.from(ratings.values()), log: log.slice(),
    };
    doc.mac = hex(hmac(utf8(BIND.token), utf8(canon(doc))));
    return JSON.stringify(doc, null, 1);
  }

  async function finishServed() {
    app.replaceChildren(el("section", { class: "finish" }, el("h2", {}, "Saving your answers…")));
    await flushed();
    for (let attempt = 0; !halted; attempt++) {
      let r = null;
      try { r = await post("/api/finish", { page: BIND.page }); } catch (e) { r = null; }
      if (r && r.status === 200) {
        app.replaceChildren(el("section", { class: "finish", id: "done" },
          el("h2", {}, "Thank you: every item is rated and your answers are saved."), ...completion(), el("p", {}, "You can close this page.")));
        return;
      }
      if (r && r.status !== 429 && r.status < 500) return halt(r.body.error || ("the server refused the answers (HTTP " + r.status + ")"));
      await pause(Math.min(4000, 500 * 2 ** attempt));
    }
  }

  function finish() {
    if (SERVED) return finishServed();
    const area = el("textarea", { id: "submission", readonly: true, rows: 6 });
    const button = el("button", { type: "button", id: "export", class: "next" }, "Export submission");
    button.addEventListener("click", () => {
      exported = submission();
      area.value = exported;
      const a = el("a", { href: URL.createObjectURL(new Blob([exported], { type: "application/json" })), download: `submission-${P.rater_id}-${sessionId.slice(0, 8)}.json` });
      document.body.append(a);
      a.click();
      a.remove();
      if (!document.getElementById("completion-code") && !document.getElementById("completion-link")) button.after(...completion());
    });
    app.replaceChildren(el("section", { class: "finish" },
      el("h2", {}, "Thank you: every item is rated."),
      el("p", {}, "Export your answers and send the downloaded file to the organiser. If no file appears, copy the text below."),
      button, area, ...(exported === null ? [] : completion())));
  }

  function start() {
    let go = el("button", { type: "button", id: "start", class: "next" }, "Start");
    go.addEventListener("click", () => { forget(); startedAt = new Date().toISOString(); note("start"); headphones(practise); });
    if (SERVED && BIND.state.finished) return finishServed();
    const saved = load();
    const again = saved && saved.index >= 0 ? el("button", { type: "button", id: "resume", class: "next" }, `Resume at item ${Math.min(saved.index + 1, P.trials.length)}`) : "";
    if (again) {
      again.addEventListener("click", () => resume(saved));
      go.textContent = "Start over";
      if (SERVED) go = ""; // the server keeps every answer given: a served test only resumes
    }
    app.replaceChildren(el("section", { class: "intro" },
      el("h1", {}, P.title), el("p", {}, P.instructions),
      el("p", { class: "meta" }, `Rater ${P.rater_id} · ${P.trials.length} items`), again, " ", go));
  }

  window.addEventListener("beforeunload", (e) => {
    if (SERVED ? outbox.length > 0 : index >= 0 && exported === null) { e.preventDefault(); e.returnValue = ""; }
  });
  // focus loss (another tab or window) and return, while an item is on screen
  window.addEventListener("blur", () => { if (index >= 0 && index < P.trials.length) note("blur", P.trials[index].id); });
  window.addEventListener("focus", () => { if (index >= 0 && index < P.trials.length) note("focus", P.trials[index].id); });
  start();
})();
