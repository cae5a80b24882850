"""Tests of what every tool shares."""
