"""What the tests share: servers on loopback, the Kubernetes API emulator (:mod:`.kube`), the
node that runs pods (:mod:`.node`), suites, ledgers and reports to check.
"""
