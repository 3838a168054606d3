"""A Kubernetes node for end-to-end tests: a kubelet that runs every container of every pod —
as a process, or as a real container — and the controllers a cluster would run beside the
operator.

* :mod:`node.network` — the node's bridge, one network namespace per pod, Service IPs;
* :mod:`node.services` — the service proxy (kube-proxy's userspace mode) and the API
  server's TLS front (the ``kubernetes`` Service);
* :mod:`node.images` — images as commands, pulled (by digest) from a registry stand-in;
* :mod:`node.volumes` — emptyDir, Secret, ConfigMap, projected and downward-API volumes
  with the pod's ``fsGroup``;
* :mod:`node.runtime` — what the kubelet asks of a container runtime, and the process
  runtime (images as commands);
* :mod:`node.podman` — the container runtime: podman and runc run each container from the
  image the node pulled from a real registry;
* :mod:`node.launcher` — the process runtime's last step, run as a program: mounts,
  root filesystem, user, then ``exec``;
* :mod:`node.containers` — one container's process: start, signals, exit, termination
  message, logs;
* :mod:`node.kubelet` — the pod lifecycle: images, network, volumes, env, native-sidecar
  order, probes, restarts, deadlines, deletion, and the status it reports;
* :mod:`node.controllers` — stand-ins for the Deployment controller and the Agent Sandbox
  controller;
* :mod:`node.sandboxpools` — Agent Sandbox's templates, warm pools and claims;
* :mod:`node.kueue` (objects in :mod:`node.kueueobjects`) — Kueue: its pod webhook, quota,
  fair sharing and preemption;
* :mod:`node.crds` — the permissive definitions those stand-ins install.
"""
