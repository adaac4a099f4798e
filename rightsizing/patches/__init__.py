"""Reviewable Kubernetes changes for recommendations: a kustomize patch of each workload's owning
object that moves it where its verdict says, with the evidence in the patch and in a README.

``build`` is the entry point (``build_patches``); ``plan`` decides each owner's move, ``owners``
finds who owns a pod, ``change`` writes a patch's body (``manifests`` when the object's manifest is
known), ``render`` and ``readme`` the files; ``names`` holds the Kubernetes facts they rest on.
"""
