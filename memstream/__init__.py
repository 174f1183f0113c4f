"""memstream: memory for AI agents as a Kafka stream-processing pipeline."""

__version__ = "0.1.0"
