"""Analyses of the extracted features beyond the linear probes (issue 10)."""
