"""Tests of the IIIF package."""
