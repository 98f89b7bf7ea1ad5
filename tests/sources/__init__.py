"""Tests for pinguard.sources: one module per transport, against real components."""
