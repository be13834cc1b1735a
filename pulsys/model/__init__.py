"""Shared vocabulary: plain data and pure helpers used by every plane."""
