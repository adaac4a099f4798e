"""Sources of samples: one module each behind the ``GpuSource`` protocol (see ``base``)."""
