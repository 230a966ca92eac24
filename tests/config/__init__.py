"""Config composition, the semantic checks, the CLI's flags and the seed recipes."""
