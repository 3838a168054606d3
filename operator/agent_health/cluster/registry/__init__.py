"""Container registries: digest pinning through the v2 API and image pull Secret credentials."""
