"""A cell and its parts: the pod (or Sandbox), gateway sidecar, secrets, network policy.

The discovery pod lives here too: it is a cell without a target, gateway or tokens.
"""
