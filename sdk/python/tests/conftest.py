"""Fixtures of the client tests; the helpers they share are in gatedkit."""

from gatedkit import gated_bin, server

__all__ = ["gated_bin", "server"]
