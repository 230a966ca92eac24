"""The translation datasets: number words in English and German, numbers_translation,
synthetic_translation and the WMT14 reader, their configs, and sizing them (info()) without
TensorFlow.

The WMT14 reader runs on small parallel files written here (sentences built
from the number converters), with a sentencepiece vocabulary trained on them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.components import require_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")
require_module("sentencepiece")
require_module("sacrebleu")


from tntrun.config.zoo import build_dataset, build_model  # noqa: E402
from tntrun.datasets.numbers_translation import (  # noqa: E402
    NumbersTranslationDataset,
    english_tokens,
    english_words,
    german_tokens,
    german_words,
    join_german,
)
from tntrun.datasets.synthetic_translation import SyntheticTranslationDataset  # noqa: E402
from tntrun.datasets.translation_text import BOS_ID, EOS_ID  # noqa: E402
from tntrun.datasets.wmt14 import Wmt14Dataset, sentences_per_batch  # noqa: E402
from tntrun.engine.bleu import detokenize_pieces  # noqa: E402

pytestmark = pytest.mark.slow


# -- number words ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "english", "german"),
    [
        (0, "zero", "null"),
        (1, "one", "eins"),
        (16, "sixteen", "sechzehn"),
        (17, "seventeen", "siebzehn"),
        (21, "twenty-one", "einundzwanzig"),
        (30, "thirty", "dreißig"),
        (71, "seventy-one", "einundsiebzig"),
        (100, "one hundred", "hundert"),
        (101, "one hundred one", "hunderteins"),
        (103, "one hundred three", "hundertdrei"),
        (1000, "one thousand", "tausend"),
        (1001, "one thousand one", "tausendeins"),
        (2000, "two thousand", "zweitausend"),
        (2023, "two thousand twenty-three", "zweitausenddreiundzwanzig"),
        (21_000, "twenty-one thousand", "einundzwanzigtausend"),
        (101_000, "one hundred one thousand", "hunderteintausend"),
        (111_111, "one hundred eleven thousand one hundred eleven", "hundertelftausendhundertelf"),
        (
            999_999,
            "nine hundred ninety-nine thousand nine hundred ninety-nine",
            "neunhundertneunundneunzigtausendneunhundertneunundneunzig",
        ),
        (1_000_000, "one million", "eine Million"),
        (1_000_001, "one million one", "eine Million eins"),
        (2_000_000, "two million", "zwei Millionen"),
        (
            7_654_321,
            "seven million six hundred fifty-four thousand three hundred twenty-one",
            "sieben Millionen sechshundertvierundfünfzigtausenddreihunderteinundzwanzig",
        ),
    ],
)
def test_number_words_in_both_languages(n, english, german):
    assert english_words(n) == english
    assert german_words(n) == german
    assert join_german(german_tokens(n)) == german


def test_numbers_outside_the_range_are_refused():
    with pytest.raises(ValueError, match="outside the supported range"):
        german_tokens(10_000_000)
    with pytest.raises(ValueError, match="outside the supported range"):
        english_tokens(-1)


def small_numbers(**overrides) -> NumbersTranslationDataset:
    return NumbersTranslationDataset(**{"num_train": 500, "num_val": 100, "seed": 3, **overrides})


def test_numbers_dataset_is_deterministic_with_disjoint_splits():
    a, b = small_numbers(), small_numbers()
    for split in ("train", "val"):
        np.testing.assert_array_equal(a.arrays(split).source, b.arrays(split).source)
        np.testing.assert_array_equal(a.arrays(split).target_output, b.arrays(split).target_output)
    train, val = a.numbers
    assert len(set(train.tolist())) == 500 and len(set(val.tolist())) == 100
    assert not set(train.tolist()) & set(val.tolist())
    assert not set(map(tuple, a.arrays("train").source)) & set(map(tuple, a.arrays("val").source))
    assert not np.array_equal(small_numbers(seed=4).numbers[0], train)
    assert min(len(str(n)) for n in train.tolist()) <= 3, "short numbers are drawn too"


def test_numbers_dataset_rejects_bad_sizes():
    with pytest.raises(ValueError, match="dataset.max_length=8 is too short"):
        small_numbers(max_length=8)
    with pytest.raises(ValueError, match="distinct numbers"):
        NumbersTranslationDataset(num_train=90, num_val=20, max_number=99)


def check_examples(train, max_length: int) -> list:
    """Every element: int32 vectors of max_length, EOS/BOS framing, zero padding after it."""
    spec = train.element_spec
    assert [s.dtype for s in (*spec[0], spec[1])] == [tf.int32] * 3
    examples = list(train.as_numpy_iterator())
    for (source, target_in), target_out in examples[:200]:
        assert source.shape == target_in.shape == target_out.shape == (max_length,)
        n_src, n_tgt = np.count_nonzero(source), np.count_nonzero(target_out)
        assert source[n_src - 1] == EOS_ID and not source[n_src:].any()
        assert target_in[0] == BOS_ID and np.count_nonzero(target_in) == n_tgt
        assert target_out[n_tgt - 1] == EOS_ID and not target_out[n_tgt:].any()
        np.testing.assert_array_equal(target_in[1:n_tgt], target_out[: n_tgt - 1])
    return examples


def test_numbers_load_gives_framed_padded_pairs():
    ds = small_numbers()
    info = ds.info()
    assert (info.num_train, info.num_val, info.input_shape) == (500, 100, (16,))
    assert info.num_classes == len(ds.vocabulary)
    train, val = ds.load()
    examples = check_examples(train, 16)
    assert len(examples) == 500 and len(list(val)) == 100
    (source, _), target = examples[0]
    n = int(ds.numbers[0][0])
    assert ds.vocabulary.decode(source) == english_tokens(n)
    assert ds.decode(target) == " ".join(german_tokens(n))
    sources, references = ds.val_text()
    assert references[0] == " ".join(german_tokens(int(ds.numbers[1][0])))
    assert sources[0] == " ".join(english_tokens(int(ds.numbers[1][0])))


@pytest.mark.parametrize("task", ["reverse", "permute", "copy"])
def test_synthetic_targets_follow_the_rule(task):
    ds = SyntheticTranslationDataset(
        vocab_size=30, max_length=10, num_train=64, num_val=16, task=task, seed=1
    )
    arrays = ds.arrays("train")
    check_examples(ds.load()[0], 10)
    for source, target in zip(arrays.source, arrays.target_output, strict=True):
        src, tgt = source[: np.argmax(source == EOS_ID)], target[: np.argmax(target == EOS_ID)]
        expected = {"reverse": src[::-1], "permute": ds.permutation[src], "copy": src}[task]
        np.testing.assert_array_equal(tgt, expected)
    again = SyntheticTranslationDataset(
        vocab_size=30, max_length=10, num_train=64, num_val=16, task=task, seed=1
    )
    np.testing.assert_array_equal(again.arrays("val").source, ds.arrays("val").source)
    assert ds.info().num_classes == 30 and ds.info().input_shape == (10,)


NOUNS = [("red houses", "rote Häuser"), ("old trees", "alte Bäume"), ("small dogs", "kleine Hunde")]


def write_parallel(folder: Path, name: str, count: int, seed: int, long_every: int = 0) -> None:
    """``count`` English/German sentence pairs; every ``long_every``-th one is long."""
    rng = np.random.default_rng(seed)
    english, german = [], []
    for i in range(count):
        n = int(rng.integers(0, 100_000))
        en_noun, de_noun = NOUNS[i % len(NOUNS)]
        en, de = f"I see {english_words(n)} {en_noun} .", f"Ich sehe {german_words(n)} {de_noun} ."
        if long_every and i % long_every == 0:
            en, de = f"{en} And then I see them again and again and again .", f"{de} " * 4
        english.append(en)
        german.append(de.strip())
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.en").write_text("\n".join(english) + "\n", encoding="utf-8")
    (folder / f"{name}.de").write_text("\n".join(german) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def wmt_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wmt14")
    write_parallel(folder, "train", 300, seed=0, long_every=10)
    write_parallel(folder, "newstest2014", 40, seed=1)
    return folder


def wmt(data_dir: Path, **overrides) -> Wmt14Dataset:
    return Wmt14Dataset(str(data_dir), **{"vocab_size": 120, "max_length": 48, **overrides})


def test_wmt14_trains_caches_and_reuses_the_vocabulary(wmt_dir):
    ds = wmt(wmt_dir)
    info = ds.info()
    vocab = wmt_dir / "spm_bpe_120.model"
    assert vocab.is_file() and info.num_classes == ds.processor.get_piece_size() <= 120
    meta = json.loads((ds.cache_dir() / "meta.json").read_text())
    assert meta["dropped_train"] == 30 and info.num_train == 270 and info.num_val == 40
    stamp = vocab.stat().st_mtime_ns
    again = wmt(wmt_dir)
    assert again.info() == info and again.cache_dir() == ds.cache_dir()
    assert vocab.stat().st_mtime_ns == stamp, "the cached vocabulary was trained again"
    copy = wmt_dir / "copied.model"
    copy.write_bytes(vocab.read_bytes())
    assert wmt(wmt_dir, vocab_file=str(copy)).info() == info


def test_wmt14_filters_or_truncates_long_pairs(wmt_dir):
    filtered, truncated = wmt(wmt_dir), wmt(wmt_dir, long_pairs="truncate")
    assert truncated.info().num_train == 300 > filtered.info().num_train
    train, val = filtered.load()
    check_examples(train, 48)
    check_examples(truncated.load()[0], 48)
    sources, references = filtered.val_text()
    decoded = [filtered.decode(target) for _, target in val.as_numpy_iterator()]
    assert decoded == references
    ids = filtered.encode_sources(sources[:3])
    assert ids.dtype == np.int32 and (ids == EOS_ID).sum() == 3
    pieces = filtered.processor.encode(sources[0])
    assert detokenize_pieces(pieces, filtered.processor) == sources[0]
    assert detokenize_pieces(ids[0], str(filtered.vocab_path)) == sources[0]


def test_wmt14_missing_files_name_the_key(tmp_path, wmt_dir):
    with pytest.raises(FileNotFoundError, match=r"^dataset\.data_dir=.*missing"):
        wmt(tmp_path / "missing").info()
    with pytest.raises(FileNotFoundError, match=r"^dataset\.val_target=.*newstest2013\.de"):
        wmt(wmt_dir, val_source="train.en", val_target="newstest2013.de").info()
    (tmp_path / "short.de").write_text("nur eine Zeile\n", encoding="utf-8")
    (tmp_path / "short.en").write_text("one line\nand another\n", encoding="utf-8")
    for name in ("train.en", "train.de"):
        (tmp_path / name).write_bytes((wmt_dir / name).read_bytes())
    with pytest.raises(ValueError, match="dataset.val_source and dataset.val_target differ"):
        wmt(tmp_path, val_source="short.en", val_target="short.de").info()


def test_sentences_per_batch():
    assert sentences_per_batch(4096, 64) == 64 and sentences_per_batch(4096, 100) == 40
    with pytest.raises(ValueError):
        sentences_per_batch(32, 64)


def test_info_does_not_import_tensorflow(wmt_dir):
    wmt(wmt_dir).info()  # prepared here: the subprocess reads the cache
    code = textwrap.dedent(f"""
        import json, sys, time
        from tntrun.datasets.numbers_translation import NumbersTranslationDataset
        from tntrun.datasets.synthetic_translation import SyntheticTranslationDataset
        from tntrun.datasets.wmt14 import Wmt14Dataset
        import tntrun.models.transformer, tntrun.models.translate, tntrun.engine.translation_loss
        seconds = {{}}
        for name, ds in [
            ("numbers", NumbersTranslationDataset()),
            ("synthetic", SyntheticTranslationDataset()),
            ("wmt14", Wmt14Dataset({str(wmt_dir)!r}, vocab_size=120, max_length=48)),
        ]:
            start = time.perf_counter()
            ds.info()
            seconds[name] = time.perf_counter() - start
        bad = [m for m in ("tensorflow", "tf_keras", "keras") if m in sys.modules]
        print(json.dumps({{"bad": bad, "seconds": seconds}}))
        sys.exit(f"imported {{bad}}" if bad else 0)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert_succeeded(result)
    print(json.loads(result.stdout.strip().splitlines()[-1])["seconds"])  # speed: a bench's


def test_translation_configs_compose_and_build(compose_cfg, wmt_dir):
    cfg = compose_cfg(
        "model=transformer",
        "dataset=numbers_translation",
        "model.param_set=tiny",
        "model.num_layers=1",
        "dataset.num_train=300",
        "dataset.num_val=50",
    )
    assert cfg.model.param_set == "tiny" and cfg.model.d_model is None
    info = build_dataset(cfg.dataset).info()
    assert (info.num_train, info.input_shape, info.num_classes) == (300, (16,), 71)
    model = build_model(cfg.model, info)
    assert model.get_layer("embedding").embeddings.shape == (71, 64)
    assert len(model.get_layer("encoder").blocks) == 1

    cfg = compose_cfg("model=transformer", "dataset=synthetic_translation")
    assert build_dataset(cfg.dataset).info().num_classes == cfg.dataset.vocab_size == 1000
    cfg = compose_cfg(
        "dataset=wmt14",
        f"dataset.data_dir={wmt_dir}",
        "dataset.vocab_size=120",
        "dataset.max_length=48",
    )
    assert build_dataset(cfg.dataset).info() == wmt(wmt_dir).info()
    with pytest.raises(Exception, match="d_modle"):
        compose_cfg("model=transformer", "model.d_modle=32")
    with pytest.raises(Exception, match="long_pairs"):
        compose_cfg("dataset=wmt14", "dataset.long_pairs=[1]")
