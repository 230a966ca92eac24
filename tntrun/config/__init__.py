"""The config: its typed schema, composition without the CLI, every value checked before launch."""
