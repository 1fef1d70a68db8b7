"""Reproducible, content-addressed adapter packages: assemble, check, publish, attest, verify."""
