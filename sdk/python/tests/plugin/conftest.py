"""Fixtures of the plugin tests; the helpers they share are in pluginkit."""

from pluginkit import gated_bin, served

__all__ = ["gated_bin", "served"]
