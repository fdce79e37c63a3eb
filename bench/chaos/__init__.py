"""The fault suite: scenarios that break one thing at a time and check that the system holds.

Run `make chaos` (full trial counts, rewrites the table in docs/reliability.md) or
`python -m bench.chaos --short` (a few trials each, as `make test` runs it).
"""
