"""BLEU on the master rank: corpus BLEU (sacrebleu), detokenisation, sample files, the callback.

Scores are sacrebleu's corpus BLEU on detokenised text with its standard
``13a`` tokenisation, as floats in 0..100; ``uncased`` lower-cases both sides.
sacrebleu and sentencepiece are imported on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import keras

from tntrun.contract.run_files import TRANSLATIONS
from tntrun.datasets.translation_text import strip_special


def corpus_bleu(
    hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False
) -> float:
    """BLEU of ``hypotheses`` against one reference each (``lowercase``: uncased BLEU)."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    score = sacrebleu.corpus_bleu(list(hypotheses), [list(references)], lowercase=lowercase)
    return float(score.score)


def bleu_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """``{"bleu": cased, "bleu_uncased": uncased}``, ready to log as metrics."""
    return {
        "bleu": corpus_bleu(hypotheses, references),
        "bleu_uncased": corpus_bleu(hypotheses, references, lowercase=True),
    }


def detokenize_words(tokens: Iterable[str]) -> str:
    """Word-level tokens as text: joined by spaces, `` - `` re-attached (``twenty-one``)."""
    return " ".join(tokens).replace(" - ", "-")


def detokenize_ids(ids: Iterable[int], vocabulary: Sequence[str]) -> str:
    """Word-level ids (decoder output, up to EOS) as text via the id -> token list."""
    return detokenize_words(vocabulary[i] for i in strip_special(ids))


def detokenize_pieces(ids: Iterable[int], processor: Any) -> str:
    """Sentencepiece ids (up to EOS) as text; ``processor`` is a model path or a processor."""
    if isinstance(processor, str | Path):
        import sentencepiece as spm

        processor = spm.SentencePieceProcessor(model_file=str(processor))
    return processor.decode(strip_special(ids))


def write_samples(
    path: Path | str,
    sources: Sequence[str],
    references: Sequence[str],
    hypotheses: Sequence[str],
    limit: int = 20,
    title: str = "Sample translations",
) -> Path:
    """The first ``limit`` (source, reference, hypothesis) triples as a Markdown file."""
    path = Path(path)
    lines = [f"# {title}", ""]
    triples = list(zip(sources, references, hypotheses, strict=True))[:limit]
    for i, (source, reference, hypothesis) in enumerate(triples, 1):
        mark = "" if hypothesis == reference else " (differs)"
        lines += [
            f"## {i}{mark}",
            "",
            f"- source: {source}",
            f"- reference: {reference}",
            f"- hypothesis: {hypothesis}",
            "",
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


CHUNK = 256  # sentences decoded at once


class BleuEvaluation(keras.callbacks.Callback):
    """Every ``every_epochs`` and after the last epoch: decode, score, write samples.

    Adds ``bleu`` and ``bleu_uncased`` to the epoch logs (before they are logged).
    """

    def __init__(
        self,
        dataset: Any,
        run_dir: Path,
        every_epochs: int,
        max_sentences: int,
        beam_size: int,
        max_length: int,
    ) -> None:
        super().__init__()
        self.dataset, self.run_dir = dataset, run_dir
        self.every, self.beam_size, self.max_length = max(1, every_epochs), beam_size, max_length
        sources, references = dataset.val_text()
        limit = max_sentences or len(references)
        self.sources, self.references = sources[:limit], references[:limit]
        self.source_ids = dataset.bleu_sources(limit)

    def translate(self) -> list[str]:
        from tntrun.models.translate import beam_translate, greedy_translate

        decode: Callable = greedy_translate
        kwargs: dict[str, Any] = {}
        if self.beam_size > 1:
            decode, kwargs = beam_translate, {"beam_size": self.beam_size}
        hypotheses = []
        for start in range(0, len(self.source_ids), CHUNK):
            ids = decode(
                self.model, self.source_ids[start : start + CHUNK], self.max_length, **kwargs
            )
            hypotheses += [self.dataset.decode(row) for row in ids]
        return hypotheses

    def on_epoch_end(self, epoch, logs=None):
        last = epoch + 1 == self.params.get("epochs")
        if logs is None or ((epoch + 1) % self.every and not last):
            return
        hypotheses = self.translate()
        scores = bleu_scores(hypotheses, self.references)
        logs.update(scores)
        folder = self.run_dir / TRANSLATIONS
        folder.mkdir(exist_ok=True)
        write_samples(
            folder / f"epoch-{epoch + 1:04d}.md", self.sources, self.references, hypotheses
        )
