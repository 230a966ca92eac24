"""The repository's own rules: the formatter's layout, real components never skipped silently."""
