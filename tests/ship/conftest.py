"""What ships: the chart, images, monitoring, GitOps, the docs and their runnable blocks, the
demo, the benchmarks, module sizes and faces.
"""
