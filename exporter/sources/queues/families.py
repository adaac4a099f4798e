"""The queue families' names, shared by the real queue sources and the simulated ones.

Each name is looked up in the metric table, so a rename there fails at import, not at a scrape.
"""

from __future__ import annotations

from ...metrics import FAMILIES_BY_NAME


def _family(name: str) -> str:
    return FAMILIES_BY_NAME[name].name


DEPTH = _family("rightsizer_queue_depth")
IN_FLIGHT = _family("rightsizer_queue_in_flight")
SOURCE_UP = _family("rightsizer_queue_source_up")
SOURCE_DURATION = _family("rightsizer_queue_source_duration_seconds")
LAST_SUCCESS = _family("rightsizer_queue_last_success_timestamp_seconds")
KV_CACHE = _family("rightsizer_queue_kv_cache_usage_ratio")
PREEMPTIONS = _family("rightsizer_queue_preemptions_total")
KV_CAPACITY = _family("rightsizer_queue_kv_cache_capacity_bytes")
GENERATED_TOKENS = _family("rightsizer_queue_generated_tokens_total")
PROMPT_TOKENS = _family("rightsizer_queue_prompt_tokens_total")
REQUESTS = _family("rightsizer_queue_requests_total")
THROUGHPUT = (GENERATED_TOKENS, PROMPT_TOKENS, REQUESTS)
FAMILY_NAMES = (
    DEPTH,
    IN_FLIGHT,
    SOURCE_UP,
    SOURCE_DURATION,
    LAST_SUCCESS,
    KV_CACHE,
    PREEMPTIONS,
    KV_CAPACITY,
    *THROUGHPUT,
)
