"""Every example under examples/ runs as its README says."""
