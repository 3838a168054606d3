"""The engine's rooms: loading, running, outcome, reports and reporters, recording and replay,
comparing, and the cell's controller.
"""
