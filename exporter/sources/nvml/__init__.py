"""GPUs through NVML (nvidia-ml-py): the ``NvmlSource`` in ``source``.

``calls`` says what is read from a GPU and how each answer becomes SI-unit fields, ``read`` reads
them, ``device`` keeps one GPU's state on the event loop, ``gpm`` and ``mig`` add the profiling
metrics and MIG instances, ``events`` watches XID errors, ``lifecycle`` initialises and shuts NVML
down, ``sampling`` and ``worker`` run the blocking calls off the event loop with a deadline.
Kept free of imports here, so loading one module does not load NVML's whole source.
"""
