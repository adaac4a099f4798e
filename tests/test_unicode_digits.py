"""Digits that are not ASCII: ``str.isdigit`` accepts superscripts ("²³") and other scripts' digits
that ``int`` refuses, so every place that reads a number from hostile text checks for ASCII digits.

End to end: a vLLM page whose ``cache_config_info`` says ``num_gpu_blocks="²³"`` leaves the KV-cache
pool unknown and the queue's depth published, as ``1e30`` or ``-5`` do, with no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from queue_fakes import LLAMA
from queue_servers import FakeHttpServer
from servers import exporter, http_get, wait_for
from test_kv_pool import vllm_page

from adapter.sources.source_states import split_parts
from adapter.vectors import Series
from exporter.sources.pods.cgroup import parse_cgroup
from exporter.sources.queues.base import QueueSourceError
from exporter.sources.queues.http_json import lookup
from exporter.sources.queues.kv_pool import pool_bytes
from exporter.sources.queues.scrape import PRESETS, ExpositionReader
from rightsizing.command.report_queues import link_sample
from rightsizing.models import BUILTIN

HOSTILE = ["²³", "١٢", "①", "\U0001d7d7"]  # superscripts, Arabic-Indic digits, a circled one, a bold 9


@pytest.mark.parametrize("blocks", HOSTILE)
def test_a_block_count_in_other_digits_gives_no_pool_and_keeps_the_depth(blocks: str) -> None:
    value = ExpositionReader(PRESETS["vllm"], {}).read(vllm_page(LLAMA, blocks), False)
    assert value.depth == 2 and value.kv_cache_usage == 0.05 and value.kv_cache_bytes is None
    arch = BUILTIN["llama-3.1-8b"]
    assert pool_bytes([{"num_gpu_blocks": "10", "block_size": blocks}], arch) is None


@pytest.mark.parametrize("part", HOSTILE)
def test_a_json_path_index_in_other_digits_is_not_found(part: str) -> None:
    with pytest.raises(QueueSourceError, match=f"path workers.{part} not found"):
        lookup({"workers": [1, 2, 3]}, ("workers", part), f"workers.{part}")
    assert lookup({"workers": [1, 2, 3]}, ("workers", "-1"), "workers.-1") == 3


@pytest.mark.parametrize("gpu", HOSTILE)
def test_a_gpu_label_in_other_digits_is_no_index(gpu: str) -> None:
    assert link_sample({"gpu": gpu, "UUID": "GPU-1"}, 80e9).identity.index == -1
    assert link_sample({"gpu": "3", "UUID": "GPU-1"}, 80e9).identity.index == 3


@pytest.mark.parametrize("mark", HOSTILE)
def test_a_source_state_marker_in_other_digits_belongs_to_no_part(mark: str) -> None:
    values, parts = split_parts([Series({"rightsizer_adapter_source_state": "p" + mark}, 1.0)], ["a", "b"])
    assert values == [] and parts == {"a": [], "b": []}
    _, parts = split_parts([Series({"rightsizer_adapter_source_state": "p1"}, 1.0)], ["a", "b"])
    assert len(parts["b"]) == 1


def test_a_cgroup_line_numbered_in_other_digits_is_not_a_hierarchy() -> None:
    pod = "/kubepods/besteffort/pod0f5d5b5e-1c2b-4f3a-9d8e-7a6b5c4d3e2f/" + "a" * 64
    assert parse_cgroup(f"²:cpuset:{pod}\n") is None
    found = parse_cgroup(f"3:cpuset:{pod}\n")
    assert found is not None and found.pod_uid == "0f5d5b5e-1c2b-4f3a-9d8e-7a6b5c4d3e2f"


def test_the_exporter_keeps_the_queue_when_vllm_says_superscript_blocks(tmp_path: Path) -> None:
    pages = {"chat": vllm_page(LLAMA, "²³"), "ok": vllm_page(LLAMA, "1000")}
    with FakeHttpServer() as srv:
        for name, page in pages.items():
            srv.route(f"/{name}", body=lambda page=page: page.encode())
        config = tmp_path / "exporter.yaml"
        config.write_text(
            "queues:\n"
            + "".join(f"  - {{name: {n}, kind: vllm, url: '{srv.url(f'/{n}')}'}}\n" for n in pages)
        )
        with exporter(["--simulate", "--interval", "0.2", "--config", str(config)]) as p:

            def pools() -> dict[str, dict[str, float]]:
                text = http_get(p.url + "/metrics")[2].decode()
                out: dict[str, dict[str, float]] = {}
                for line in text.splitlines():
                    for family in ("rightsizer_queue_depth", "rightsizer_queue_kv_cache_capacity_bytes",
                                   "rightsizer_queue_source_up"):  # fmt: skip
                        if line.startswith(family + "{"):
                            queue = line.split('queue="')[1].split('"')[0]
                            if queue in pages:  # not the simulated fleet's queues
                                out.setdefault(family, {})[queue] = float(line.rsplit(" ", 1)[1])
                return out

            found = wait_for(
                lambda: (x := pools()).get("rightsizer_queue_kv_cache_capacity_bytes", {}).get("ok") and x,
                30, what="the good server's pool",
            )  # fmt: skip
            assert found["rightsizer_queue_source_up"] == {"chat": 1.0, "ok": 1.0}
            assert found["rightsizer_queue_depth"] == {"chat": 2.0, "ok": 2.0}
            assert "chat" not in found["rightsizer_queue_kv_cache_capacity_bytes"]  # unknown, not 0
            assert "Traceback" not in p.log() and "invalid literal" not in p.log()
