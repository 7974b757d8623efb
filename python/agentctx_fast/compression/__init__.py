"""Compression: compressors, the compression coordinator and its state."""
