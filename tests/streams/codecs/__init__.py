"""Tests of streams/codecs: one module per topic codec."""
