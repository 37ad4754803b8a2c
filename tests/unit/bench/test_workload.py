from collections import Counter

import pytest

from bench.workload import TEXT_CHARS, ZipfSampler, bench_text, requests, zipf_voices


def test_zipf_probabilities_follow_the_power_law_and_sum_to_one() -> None:
    z = ZipfSampler(1000, 1.1)
    assert sum(z.probability(k) for k in range(1, 1001)) == pytest.approx(1.0)
    assert z.probability(1) / z.probability(10) == pytest.approx(10 ** 1.1)


def test_zipf_draws_match_the_distribution() -> None:
    z = ZipfSampler(50, 1.1, seed=3)
    n = 200_000
    counts = Counter(z.draw() for _ in range(n))
    assert set(counts) <= set(range(1, 51))
    for rank in (1, 2, 5, 20):
        assert counts[rank] / n == pytest.approx(z.probability(rank), rel=0.05)


def test_zipf_is_reproducible_from_its_seed() -> None:
    assert zipf_voices(100, 1000, 1.1, seed=7) == zipf_voices(100, 1000, 1.1, seed=7)
    assert zipf_voices(100, 1000, 1.1, seed=7) != zipf_voices(100, 1000, 1.1, seed=8)


def test_zipf_with_exponent_zero_is_uniform() -> None:
    z = ZipfSampler(4, 0.0)
    assert [z.probability(k) for k in range(1, 5)] == [0.25] * 4


def test_zipf_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ZipfSampler(0, 1.1)
    with pytest.raises(ValueError, match=">= 0"):
        ZipfSampler(10, -1.0)
    with pytest.raises(ValueError, match=r"within 1\.\.10"):
        ZipfSampler(10, 1.0).probability(11)


def test_bench_texts_have_a_fixed_length_and_requests_unique_ids() -> None:
    assert {len(bench_text(i)) for i in (0, 7, 12345678)} == {TEXT_CHARS}
    batch = requests(10, ["a", "b", "c"], prefix="x")
    assert len({r.request_id for r in batch}) == 10
    assert [r.voice_id for r in batch[:4]] == ["a", "b", "c", "a"]


def test_bench_texts_survive_the_text_front_end_unchanged() -> None:
    from pipeline.frontend import prepare

    for i in (0, 25, 26, 12345678):
        text = bench_text(i)
        assert prepare(text, language=None, instruct=None).sentences == [text]
    assert bench_text(1) != bench_text(26)
