"""Audit: signed checkpoints over the runs' hash chains, verifiable exports, retention.

Kept free of Django imports so `audit.verify` and `audit.merkle` run on a machine with no
database and no settings (the offline verifier).
"""
