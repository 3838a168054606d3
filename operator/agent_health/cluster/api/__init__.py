"""The custom resources: RunSpec and EvaluationRun models, shared pieces, generated CRDs."""
