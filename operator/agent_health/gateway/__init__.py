"""The gateway sidecar: one recording proxy every exchange of a cell passes through."""
