"""The operator: CRD models, cells and their manifests, grading, the run scheduler, the judge
service, RBAC and metrics — against the Kubernetes API emulator (support/kube).
"""
