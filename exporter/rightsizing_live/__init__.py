"""Right-sizing inside the exporter: the sampler extension that feeds each cycle's samples to the
engine (``rightsizing``) and publishes its verdicts, bottlenecks and savings as metric rows."""
