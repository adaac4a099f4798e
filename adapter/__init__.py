"""Rightsizer's scaling-signal adapter (Kubernetes metrics APIs and KEDA).

Not implemented yet: this package exists so the distribution's layout is fixed. There is no
``rightsizer-adapter`` command until it works.
"""
