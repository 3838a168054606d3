"""agent-health serve: its pages, JSON API, live feed and the cluster behind it."""
