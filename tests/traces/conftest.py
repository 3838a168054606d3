"""`result.traces`: the view, OpenSearch, received spans and the derived metrics."""
