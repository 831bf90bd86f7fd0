"""Lab 03: synchronization stall."""

from __future__ import annotations

from .. import metrics as m
from ..diagnosis import diagnose
from ..model import Trace
from ._core import CheckFailed, _check, _close, _record, data_wait_share, learner_trace_problem  # noqa: F401

#: The self-check items this lab earns, per track, and the checks of the learner's work each needs.
CREDIT: dict[str, dict[str, tuple[str, ...]]] = {
    "sync": {"gpu": ("check_sync_scan_clean", "check_sync_fixed"), "cpu": ("check_sync_scan_clean", "check_sync_fixed")},
}


# --- lab 03 ----------------------------------------------------------------------------------
def check_sync_fixed(before: Trace, after: Trace, max_per_step: float = 0.2) -> str:
    """After the fix: at most ``max_per_step`` syncing ops per step (one read every LOG_EVERY steps is fine)."""
    sb, sa = m.sync_stats(before), m.sync_stats(after)
    key = "sync_points_per_step" if after.has_gpu else "syncing_ops_per_step"
    ok = sa[key] <= max_per_step and "sync_stall" not in [f.pattern for f in diagnose(after)]
    return _check("sync", "check_sync_fixed", ok,
                  f"{key.replace('_', ' ')}: {sb[key]:.1f} -> {sa[key]:.1f} (want <= {max_per_step}); still caused by "
                  f"{list(sa['causes'])[:3] or 'aten::item / .cpu() / print'}. Keep losses on the GPU "
                  "(loss.detach() into a running sum) and read them with one .item() every N steps.")


def check_sync_scan_clean(sites: list) -> str:
    return _check("sync", "check_sync_scan_clean", not sites,
                  "The scan still finds: " + "; ".join(f"line {s.line}: {s.code}" for s in sites[:3]) +
                  ". Move those reads out of the per-step path or do them every N steps.")
