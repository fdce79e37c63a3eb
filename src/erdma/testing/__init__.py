"""Fakes shipped with the package because `erdma sim` and the tests use them."""
