"""An attacker's view: a hostile agent, pod or tenant, against every reader of what it sends."""
