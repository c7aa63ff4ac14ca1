"""The offline embedded judge: sentence embeddings + calibrated per-instruction checks."""
