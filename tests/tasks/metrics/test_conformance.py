"""Conformance: voxledger's ``seed-tts-eval`` text rules give the published protocol's numbers.

The reference below re-implements Seed-TTS-eval's scoring from its published source, independently
of voxledger's code path (no jiwer, no voxledger normaliser): BytedanceSpeech/seed-tts-eval at commit
95003fe, ``run_wer.py`` ``process_one`` (every character of ``zhon.hanzi.punctuation +
string.punctuation`` except the apostrophe deleted from both texts; one ``"  " -> " "`` pass;
``zh``: the texts split into characters joined by spaces; ``en``: lowercased; then jiwer's
``compute_measures`` with its default transform, which collapses runs of whitespace, strips and
splits on spaces, and returns (S + D + I) / N over those tokens), its ASR step (the Chinese ASR
output converted with ``zhconv.convert(text, "zh-cn")``) and ``average_wer.py`` (the reported
number is ``np.mean`` of the utterance rates).

Limits of the set (by design): no reference empties after normalisation (the published script
divides by zero there; voxledger's rule is in TextMetricSpec), and every Chinese reference is in
simplified characters (voxledger converts both sides with zhconv, the script only the hypothesis).
"""

from __future__ import annotations

import string

import pytest
from zhon.hanzi import punctuation as CJK_PUNCTUATION

from voxledger.schemas.evaluation import StatisticsSettings
from voxledger.schemas.metrics import TextMetricSpec
from voxledger.tasks.evaluation.stats import clustered_interval
from voxledger.tasks.metrics.textmetrics import aggregate, score_text

# (reference, ASR hypothesis): Chinese, with the failure modes a TTS evaluation meets
ZH = [
    ("今天天气很好，我们去公园散步吧。", "今天天气很好我们去公园散步吧"),
    ("我每天早上七点起床。", "我每天早上起点起床"),
    ("请把窗户关上，外面风很大。", "请把窗户关上外面风很大"),
    ("这家餐厅的菜非常好吃！", "這家餐廳的菜非常好吃"),
    ("他昨天晚上没有回家。", "他昨天晚上没有回家他昨天晚上没有回家"),
    ("我们下周一开会。", "我们下周一"),
    ("你喜欢喝茶还是咖啡？", "你喜欢喝茶还是喝咖啡呢"),
    ("火车站离这里不远。", "火车站离这里不远。。"),
    ("她用iPhone拍了一张照片。", "她用iphone拍了一张照片"),
    ("我买了三本书。", "我买了3本书"),
    ("明天会下雨吗？", "明天会下雨吗"),
    ("《红楼梦》是一本很有名的小说。", "红楼梦是一本很有名的小说"),
    ("“你好”，他说。", "你好他说"),
    ("孩子们在院子里玩耍。", "孩子们在院子里玩"),
    ("这个问题很难回答。", "这个问题很难"),
    ("我们一起去看电影吧。", "我们一起去看电影吧"),
    ("医生说他需要多休息。", "医生说她需要多休息"),
    ("超市里的水果很新鲜。", "超市里水果很新鲜"),
    ("飞机晚点了两个小时。", "飞机晚点了两个小时了"),
    ("请问洗手间在哪里？", "请问洗手间在哪"),
    ("我的生日是五月八号。", "我的生日是5月8号"),
    ("他会说英语和法语。", "他会说English和法语"),
    ("图书馆周末也开门。", "图书馆周末开门"),
]

# (reference, ASR hypothesis): English
EN = [
    ("The birch canoe slid on the smooth planks.", "The birch canoe slid on the smooth planks."),
    ("Glue the sheet to the dark blue background.", "glue the sheet to the dark blue background"),
    ("It's easy to tell the depth of a well.", "Its easy to tell the depth of a well."),
    ("These days a chicken leg is a rare dish.", "These days, a chicken leg is a rare dish!"),
    ("Rice is often served in round bowls.", "Rice is served in round bowls."),
    ("The juice of lemons makes fine punch.", "The juice of lemons makes fine punch punch punch."),
    ("The box was thrown beside the parked truck.", "The box was thrown beside the park truck."),
    ("The hogs were fed chopped corn and garbage.", "The hogs were fed chopped corn and cabbage."),
    ("Four hours of steady work faced us.", "4 hours of steady work faced us."),
    ("A large size in stockings is hard to sell.", "A large size in stockings is hard to sell"),
    ("The boy was there when the sun rose.", "the boy was there when the son rose"),
    ("A rod is used to catch pink salmon.", "A rod is used to catch pink salmon."),
    ("The source of the huge river is the clear spring.", "The source of the huge river is the clear spring."),
    ("Kick the ball straight and follow through.", "Kick the ball straight and follow-through."),
    ("Help the woman get back to her feet.", "Help the woman get back to her feet."),
    ("A pot of tea helps to pass the evening.", "A pot of tea helps pass the evening."),
    ("Smoky fires lack flame and heat.", "Smokey fires lack flame and heat."),
    ("The soft cushion broke the man's fall.", "The soft cushion broke the mans fall."),
    ("The salt breeze came across from the sea.", "The salt breeze came across from the sea."),
    ("The girl at the booth sold fifty bonds.", "The girl at the booth sold 50 bonds."),
    ("Don't ask me to carry an oily rag like that.", "Don't ask me to carry an oily rag like that."),
    ("Mr. Smith's well-known café opens at 9:30.", "Mr Smith's well known cafe opens at 930."),
    ("What joy there is in living!", "What joy is there in living"),
]

PUNCTUATION_ALL = CJK_PUNCTUATION + string.punctuation  # run_wer.py: punctuation_all


def _levenshtein(ref: list[str], hyp: list[str]) -> int:
    """Edit distance over tokens (substitution, deletion, insertion cost 1), by the textbook table."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i]
        for j, h in enumerate(hyp, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h)))
        prev = cur
    return prev[-1]


def seed_tts_eval_wer(hypo: str, truth: str, lang: str) -> float:
    """``process_one`` of run_wer.py, re-implemented from its published rules (see the module doc)."""
    if lang == "zh":
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import zhconv
        hypo = zhconv.convert(hypo, "zh-cn")  # run_asr: applied to the Chinese ASR output
    for x in PUNCTUATION_ALL:
        if x == "'":
            continue
        truth, hypo = truth.replace(x, ""), hypo.replace(x, "")
    truth, hypo = truth.replace("  ", " "), hypo.replace("  ", " ")
    if lang == "zh":
        truth, hypo = " ".join(truth), " ".join(hypo)
    else:
        truth, hypo = truth.lower(), hypo.lower()
    ref, hyp = truth.split(), hypo.split()  # jiwer's default transform: collapse spaces, strip, split
    return _levenshtein(ref, hyp) / len(ref)


@pytest.mark.parametrize(("lang", "pairs", "normaliser"), [("zh", ZH, "seedtts_zh"), ("en", EN, "seedtts_en")])
def test_seed_tts_eval_profile_matches_the_published_rules(lang: str, pairs: list[tuple[str, str]], normaliser: str) -> None:
    assert len(pairs) >= 20, "the conformance set holds at least 20 pairs per language"
    spec = TextMetricSpec(normaliser=normaliser)  # type: ignore[arg-type]
    ours = [score_text(ref, hyp, spec) for ref, hyp in pairs]
    expected = [seed_tts_eval_wer(hyp, ref, lang) for ref, hyp in pairs]
    # Seed-TTS-eval reports "WER" in both languages; in zh its tokens are characters, so it is a CER
    got = [s.wer for s in ours]
    assert got == pytest.approx(expected, abs=1e-12), [
        (p, g, e) for p, g, e in zip(pairs, got, expected, strict=True) if abs(g - e) > 1e-12
    ]
    if lang == "zh":
        assert [s.cer for s in ours] == pytest.approx(expected, abs=1e-12)  # CER with spaces ignored: the same number
    # average_wer.py: the mean of utterance rates; voxledger's macro and its per-prompt mean (one seed per prompt)
    mean = sum(expected) / len(expected)
    assert aggregate(ours).wer_macro == pytest.approx(mean, abs=1e-12)
    interval = clustered_interval(got, [f"p{i}" for i in range(len(got))], metric=f"wer:{normaliser}", settings=StatisticsSettings())
    assert interval.mean == pytest.approx(mean, abs=1e-12) and interval.units == len(pairs)
    assert any(e > 0 for e in expected) and any(e == 0 for e in expected), "the set exercises errors and exact matches"


def test_the_chinese_normaliser_counts_characters_and_mixed_text() -> None:
    """The ``zh`` rule (voxledger's own, stated in normalise.py), on hand-worked cases."""
    zh = TextMetricSpec(normaliser="zh")
    # traditional hypothesis, full-width punctuation: nothing to count
    assert score_text("这家餐厅的菜非常好吃！", "這家餐廳的菜非常好吃", zh).cer == 0.0
    # one substitution over 6 Han characters (起 for 七), punctuation ignored
    assert score_text("我七点起床。", "我起点起床", zh).cer == pytest.approx(1 / 5)
    # mixed text: the MER ("wer") counts an English word as one unit, CER counts its letters
    s = score_text("她用iPhone拍照。", "她用iPad拍照", zh)
    assert (s.ref_words, s.wer) == (5, pytest.approx(1 / 5)) and s.ref_chars == 10
    # digits: zh keeps them (a mismatch), zh_digits reads them out (a match)
    assert score_text("我买了三本书。", "我买了3本书", zh).cer > 0
    assert score_text("我买了三本书。", "我买了3本书", TextMetricSpec(normaliser="zh_digits")).cer == 0.0
