"""The simulated fleet: the ``SimulatedSource`` in ``source`` reads a scenario instead of NVML.

``schema`` and ``scenario`` load and check a scenario file, ``workloads`` and ``physics`` turn a
workload and a board into fields at a simulated time, ``mig`` splits a GPU into MIG instances, and
``queues`` publishes the scenario's queues. Kept free of imports here, so the exporter's ``--help``
can list the scenarios without loading the fleet.
"""
