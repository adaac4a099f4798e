"""One cycle's reads of one GPU by the call plan (``calls.READS``): the calls not skipped, with
every field read batched into one nvmlDeviceGetFieldValues call.

Blocks (nvidia-ml-py calls the driver); runs on a sampling thread, never on the event loop.
"""

from __future__ import annotations

import pynvml

from .calls import (
    ECC_CALL,
    ECC_MODE_CALL,
    FIELD_VALUES_CALL,
    LIFECYCLE_ERRORS,
    READS,
    CallTracker,
    Handle,
    ProcessReading,
    Read,
    describe,
    field_number,
)
from .result import DeviceResult


def sample_device(
    tracker: CallTracker, handle: Handle, skip: frozenset[str], ecc_enabled: bool | None, include_slow: bool
) -> DeviceResult:
    """Run every read not in ``skip`` (calls known NOT_SUPPORTED, static values already read), the
    slow ones only with ``include_slow``. Blocks; runs on a sampling thread."""
    result = DeviceResult(ecc_enabled=ecc_enabled, slow_read=include_slow)
    if ecc_enabled is None and ECC_CALL not in skip:
        tracker.mark(ECC_MODE_CALL)
        try:
            current, _pending = pynvml.nvmlDeviceGetEccMode(handle)
            result.ecc_enabled = current == pynvml.NVML_FEATURE_ENABLED
            result.succeeded.add(ECC_MODE_CALL)
        except pynvml.NVMLError as exc:
            if exc.value in LIFECYCLE_ERRORS:
                result.lifecycle = f"{ECC_MODE_CALL}: {describe(exc)}"
                return result
            if exc.value != pynvml.NVML_ERROR_NOT_SUPPORTED:
                result.errors[ECC_MODE_CALL] = f"{ECC_MODE_CALL}: {describe(exc)}"
            else:
                result.ecc_enabled = False
    batched: list[Read] = []
    for read in READS:
        if read.call in skip or (read.slow and not include_slow):
            continue
        if read.needs_ecc and not result.ecc_enabled:
            if result.ecc_enabled is False:  # ECC off or not supported: NVML answers NOT_SUPPORTED
                result.not_supported.add(read.call)
            continue
        if read.field_ids:
            batched.append(read)
            continue
        tracker.mark(read.call)
        try:
            values = read.read(handle)
        except pynvml.NVMLError as exc:
            if _failed(result, read.call, exc):
                return result
            continue
        except Exception as exc:  # a malformed answer: that field is left out, the rest go on
            result.errors[read.call] = f"{read.call}: {describe(exc)}"
            continue
        result.fields.update(values)
        result.succeeded.add(read.call)
        if isinstance(values, ProcessReading):
            result.processes = values.processes
    if batched:
        _read_fields(tracker, handle, batched, result)
    tracker.mark("")
    return result


def _failed(result: DeviceResult, call: str, exc: pynvml.NVMLError) -> bool:
    """Note an NVML error of ``call``; True when it is a lifecycle error (the job stops)."""
    if exc.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
        result.not_supported.add(call)  # an older driver without the function: the same answer
    elif exc.value in LIFECYCLE_ERRORS:
        result.lifecycle = f"{call}: {describe(exc)}"
        return True
    else:
        result.errors[call] = f"{call}: {describe(exc)}"
    return False


def _read_fields(tracker: CallTracker, handle: Handle, reads: list[Read], result: DeviceResult) -> None:
    """Every field read in one nvmlDeviceGetFieldValues call; each entry answers on its own (the call
    succeeds if any field did), so NOT_SUPPORTED and errors are per read."""
    ids = [i for r in reads for i in r.field_ids]
    tracker.mark(FIELD_VALUES_CALL)
    try:
        answers = pynvml.nvmlDeviceGetFieldValues(handle, ids)
    except pynvml.NVMLError as exc:
        for read in reads:
            if _failed(result, read.call, exc):
                return
        return
    at = 0
    for read in reads:
        entries = answers[at : at + len(read.field_ids)]
        at += len(read.field_ids)
        codes = [int(e.nvmlReturn) for e in entries]
        bad = next((c for c in codes if c != pynvml.NVML_SUCCESS), None)
        if bad is not None:
            _failed(result, read.call, pynvml.NVMLError(bad))
            continue
        try:
            numbers = [field_number(e) for e in entries]
        except ValueError as exc:
            result.errors[read.call] = f"{read.call}: {describe(exc)}"
            continue
        result.fields.update({k: v / read.divisor for k, v in zip(read.fields, numbers, strict=True)})
        result.succeeded.add(read.call)
