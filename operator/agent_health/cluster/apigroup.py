"""The API group and version of agent-health's custom resources, named once.

The CRDs (:mod:`.api.crds`), the kopf handlers, the API client's resources (:mod:`.kube`), the
ClusterRole (:mod:`.rbac`), the objects the operator writes and the labels and annotations it
sets all read them here. The models' ``apiVersion`` fields spell :data:`API_VERSION` as a
``Literal`` (a type cannot read a constant); a test holds them to it.
"""

GROUP = "agenthealth.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
