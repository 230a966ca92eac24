"""Master rank: BLEU of the translation model on validation sentences, with samples."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import tf_keras as keras

TRANSLATIONS = "translations"  # folder in the run directory
CHUNK = 256  # sentences decoded at once


class BleuEvaluation(keras.callbacks.Callback):
    """Every ``every_epochs`` and after the last epoch: decode, score, write samples.

    Adds ``bleu`` and ``bleu_uncased`` to the epoch logs (before they are logged).
    """

    def __init__(self, dataset: Any, run_dir: Path, every_epochs: int, max_sentences: int,
                 beam_size: int, max_length: int) -> None:  # fmt: skip
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
        from tntrun.bleu import bleu_scores, write_samples

        hypotheses = self.translate()
        scores = bleu_scores(hypotheses, self.references)
        logs.update(scores)
        folder = self.run_dir / TRANSLATIONS
        folder.mkdir(exist_ok=True)
        write_samples(folder / f"epoch-{epoch + 1:04d}.md", self.sources, self.references,
                      hypotheses)  # fmt: skip
