"""``rightsizer report --format patches --output DIR``: the fleet's moves as kustomize patches.

The owners of the GPUs' pods come from kube-state-metrics in the same Prometheus
(``kube_pod_owner``, ``kube_replicaset_owner``, ``kube_job_owner``), each query joined to the pods
that held a GPU over the window so that its answer stays as small as the fleet; without those
series, from the pods' names (``rightsizing.patches.owners``). The folder is written file by file,
each whole or not at all (``output_file.write_output``: only over a regular file); a path that
exists and is not a folder, or a link, is refused before any query, and so are files in it that
this command did not write.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import stat
from typing import Any

from ..catalog import Catalog
from ..patches.build import PatchSet, build_patches
from ..patches.manifests import ManifestError, Manifests, read_manifests
from ..patches.owners import OwnerSeries, Ref
from ..patches.plan import Context, Held
from ..patches.readme import README_MARKER
from ..patches.render import MARKER
from ..patches.settings import PatchSettings
from .exporter_config import EngineSettings
from .output_file import OutputError, write_output
from .promapi import PrometheusClient, ReportError, promql_duration
from .report import Fleet


def add_patch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--manifests",
        action="append",
        metavar="PATH",
        help="--format patches: the workloads' manifests (YAML files or folders, as in the repository "
        "or rendered by kubectl kustomize), to patch exactly what they hold; repeatable",
    )
    p.add_argument(
        "--mig-strategy",
        choices=["mixed", "single"],
        help="--format patches: the device plugin's MIG strategy (default: patches.mig_strategy, mixed)",
    )
    p.add_argument(
        "--include-estimated-prices",
        action="store_true",
        help="--format patches: patch moves priced by estimates too (default: list and configured prices)",
    )


def settings_of(args: argparse.Namespace, configured: PatchSettings) -> PatchSettings:
    changes: dict[str, Any] = {}
    if args.mig_strategy:
        changes["mig_strategy"] = args.mig_strategy
    if args.include_estimated_prices:
        changes["include_estimated_prices"] = True
    return dataclasses.replace(configured, **changes)


def owner_series(client: PrometheusClient, at: float, window: float) -> OwnerSeries:
    w = promql_duration(window)
    gpu_pods = f'group by (namespace, pod) (last_over_time(DCGM_FI_DEV_FB_USED{{pod!=""}}[{w}]))'

    def owned(selector: str = "") -> str:  # the owners of pods that held a GPU
        return f"max_over_time(kube_pod_owner{selector}[{w}]) and on (namespace, pod) {gpu_pods}"

    pods: dict[tuple[str, str], Ref] = {}
    controller: set[tuple[str, str]] = set()
    for s in client.query(
        f"max by (namespace, pod, owner_kind, owner_name, owner_is_controller) ({owned()})", at
    ):
        lab = dict(s.labels)
        key = (lab.get("namespace", ""), lab.get("pod", ""))
        is_controller = lab.get("owner_is_controller") == "true"
        if key in controller and not is_controller:
            continue  # the controller's reference wins over other owner references
        pods[key] = (lab.get("owner_kind", ""), lab.get("owner_name", ""))
        if is_controller:
            controller.add(key)
    present = bool(pods) or bool(client.query(f"count(last_over_time(kube_pod_owner[{w}]))", at))

    def above(metric: str, label: str, kind: str) -> dict[tuple[str, str], Ref]:
        selector = '{owner_kind="' + kind + '"}'
        names = f"max by (namespace, owner_name) ({owned(selector)})"
        mine = f'label_replace({names}, "{label}", "$1", "owner_name", "(.+)")'
        expr = (f"max by (namespace, {label}, owner_kind, owner_name) (max_over_time({metric}[{w}])) "
                f"and on (namespace, {label}) {mine}")  # fmt: skip
        return {
            (dict(s.labels).get("namespace", ""), dict(s.labels).get(label, "")): (
                dict(s.labels).get("owner_kind", ""), dict(s.labels).get("owner_name", ""))
            for s in client.query(expr, at)
        }  # fmt: skip

    kinds = {k for k, _ in pods.values()}
    replicasets = above("kube_replicaset_owner", "replicaset", "ReplicaSet") if "ReplicaSet" in kinds else {}
    jobs = above("kube_job_owner", "job_name", "Job") if "Job" in kinds else {}
    return OwnerSeries(pods, replicasets, jobs, present)


def held_of(fleet: Fleet) -> list[Held]:
    out = []
    for u in fleet.units:
        lab = u.labels
        if lab.get("pod"):
            gpu = lab.get("UUID", "") + (f"/{lab['GPU_I_ID']}" if lab.get("GPU_I_ID") else "")
            out.append(Held(lab.get("namespace", ""), lab["pod"], lab.get("container", ""), gpu, u.assessment,
                            u.evidence))  # fmt: skip
    return out


def prepare_patches(args: argparse.Namespace) -> Manifests | None:
    """Before any query: the output folder checked and the manifests read (None without any)."""
    check_patch_folder(args.output)
    try:
        return read_manifests(args.manifests) if args.manifests else None
    except ManifestError as exc:
        raise ReportError(str(exc)) from None


def patches(
    args: argparse.Namespace,
    fleet: Fleet,
    client: PrometheusClient,
    catalog: Catalog,
    cfg: EngineSettings,
    manifests: Manifests | None,
) -> PatchSet:
    series = owner_series(client, fleet.at, fleet.window_seconds)
    read = (
        "kube-state-metrics in the same Prometheus (kube_pod_owner)"
        if series.present
        else "pod names (no kube-state-metrics series in Prometheus)"
    )
    settings = settings_of(args, cfg.patches)
    margin = cfg.rightsizing.slo_margin_ratio
    ctx = Context(fleet.at, fleet.window_seconds, catalog, settings, "rightsizer report", series, read,
                  manifests, margin)  # fmt: skip
    return build_patches(held_of(fleet), ctx)


def _ours(path: str) -> bool:
    """Whether ``path`` is a regular file this command wrote (its first line says so)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        line = os.read(fd, 256).decode("utf-8", "replace").split("\n", 1)[0]
    finally:
        os.close(fd)
    return line.startswith(f"# {MARKER}") or line.startswith(README_MARKER)


def check_patch_folder(directory: str | None) -> None:
    """Refuse, before any query, an ``--output`` that is missing or exists as anything but a folder."""
    if not directory or directory == "-":
        raise OutputError("--format patches writes a folder: give it with --output DIR")
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputError(f"--output {directory}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a folder"
        raise OutputError(f"--output {directory}: {kind}: patches are written into a folder of their own")


def write_patches(ps: PatchSet, directory: str) -> None:
    """``ps``'s files in ``directory`` (made when missing), each through ``write_output`` (whole, and
    only over a regular file); patches it wrote before and no longer lists are removed, nothing else."""
    check_patch_folder(directory)
    try:
        os.mkdir(directory)
    except FileExistsError:
        check_patch_folder(directory)  # made by someone else meanwhile: still a folder?
    except OSError as exc:
        raise OutputError(f"--output {directory}: {exc.strerror or exc}") from None
    try:
        existing = set(os.listdir(directory))
        for name in sorted(existing & set(ps.files)):
            if not _ours(os.path.join(directory, name)):
                why = f"{name} is not a file this command wrote: not replaced"
                raise OutputError(f"--output {directory}: {why}")
        for name, text in ps.files.items():
            write_output(text, os.path.join(directory, name))
        for name in sorted(existing - set(ps.files)):
            if name.endswith(".yaml") and _ours(os.path.join(directory, name)):
                os.unlink(os.path.join(directory, name))
    except OSError as exc:
        raise OutputError(f"--output {directory}: {exc.strerror or exc}") from None
