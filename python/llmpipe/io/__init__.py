"""Readers for raw inputs: discovery, format detection, one small reader per format."""
