"""A team's tracking server: PostgreSQL under `mlflow server` with proxied artifacts, and
the store check that refuses a store tntrun could not use before any rank starts."""
