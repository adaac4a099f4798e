"""Right-sizing: pure maths over measurements (windows, verdicts, recommendations) and the GPU catalog."""
