"""Judges: providers, the cache, agentic and custom judging, retries, and the judge service."""
