"""Reconciliation: RunSpecs resolved, EvaluationRuns scheduled, cells graded into batched status."""
