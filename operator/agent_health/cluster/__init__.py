"""The Kubernetes operator: CRD models, cell manifests, reconciliation and grading."""
