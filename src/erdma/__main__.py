"""`python -m erdma` is the `erdma` command."""

from erdma.cli import main

main()
