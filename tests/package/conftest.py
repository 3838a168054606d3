"""The package as a whole: its public API, and its top-level modules (timeouts, tls)."""
