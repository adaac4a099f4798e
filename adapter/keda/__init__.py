"""KEDA: the external-scaler gRPC service (with push) and the metrics-api JSON endpoint."""
