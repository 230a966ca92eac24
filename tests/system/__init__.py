"""tntrun whole, from outside: the Python API, the CLI end to end, the built wheel."""
