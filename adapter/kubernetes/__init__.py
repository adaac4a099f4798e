"""Kubernetes metrics APIs: external.metrics.k8s.io and custom.metrics.k8s.io, behind an APIService."""
