"""End to end: the chart's operator on the Kubernetes API emulator, with pods run by the test
node (support/node); and the emulator and node themselves.
"""
