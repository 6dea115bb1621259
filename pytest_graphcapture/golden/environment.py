"""How the golden's environment differs from the capture's: informational, never pass or fail.

A kernel change after a torch, CUDA/HIP runtime, driver or device change is most
likely explained by it, so those lead a failure (:func:`toolchain_changes`); the
rest is one note next to the diff (:func:`environment_note`).  A golden records the
environment that produced its content: a run whose content is the same keeps the
file as it is, whatever environment it ran in (:func:`keeping_environment_of`), so
developers on other torch builds never rewrite goldens for their header alone.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ..summary.platform import version_text

#: Environment fields that decide which kernels run, and how a failure names them.
TOOLCHAIN_FIELDS: tuple[tuple[str, str], ...] = (
    ("torch_version", "torch"),
    ("cuda_runtime_version", "CUDA runtime"),
    ("hip_runtime_version", "HIP runtime"),
    ("driver_version", "driver"),
    ("cuda_driver_version", "CUDA driver"),
    ("hip_driver_version", "HIP driver"),
    ("device_name", "device"),
)


def _flatten(env: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in env.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def _differs(name: str, old: Any, new: Any) -> bool:
    """Whether two values of one field differ once runtime versions are spelled alike.

    A summary written from a trace file before its integer versions were spelled like
    ``torch.version`` holds ``13000`` where a live capture holds ``"13.0"``, and a live ROCm
    capture holds ``torch.version.hip``'s ``"7.2.53211-<git hash>"`` where a trace holds
    ``"7.2.53211"``: the same runtime each time (:func:`~..summary.platform.version_text`).
    """
    return version_text(name, old) != version_text(name, new)


def environment_differences(
    expected_env: Mapping[str, Any], actual_env: Mapping[str, Any], *, limit: int = 6
) -> list[str]:
    """``["torch_version 2.11.0 → 2.12.0", ...]``: each field that differs, at most ``limit`` then a count."""
    old, new = _flatten(expected_env or {}), _flatten(actual_env or {})
    names = sorted(n for n in set(old) | set(new) if _differs(n, old.get(n, "(absent)"), new.get(n, "(absent)")))
    items = [f"{n} {old.get(n, '(absent)')} → {new.get(n, '(absent)')}" for n in names[:limit]]
    if len(names) > limit:
        items.append(f"… {len(names) - limit} more")
    return items


def environment_note(
    expected_env: Mapping[str, Any], actual_env: Mapping[str, Any], *, limit: int = 6
) -> Optional[str]:
    """One line saying how the golden's environment differs from the current one, or None.

    Informational only: the environment never decides pass or fail.
    """
    items = environment_differences(expected_env, actual_env, limit=limit)
    if not items:
        return None
    return "environment differs from the golden's (may explain the diff): " + "; ".join(items)


#: Fields a golden records but no check compares (how the capture was read, what ran it): a difference in
#: them alone is no change of what the golden gates, so no update rewrites a golden for it.
INFORMATIONAL_FIELDS = ("environment", "kernel_source")


def gated_content(data: Mapping[str, Any]) -> dict:
    """What a golden dict gates: all but :data:`INFORMATIONAL_FIELDS` and the wording of an incompleteness reason."""
    out = {k: v for k, v in data.items() if k not in INFORMATIONAL_FIELDS}
    if isinstance(out.get("complete"), Mapping) and not out["complete"].get("value", True):
        out["complete"] = {**out["complete"], "reason": None}  # incomplete either way: the check treats them alike
    return out


def keeping_environment_of(golden: Mapping[str, Any], current: dict) -> dict:
    """``current`` (a golden dict with the same content) carrying ``golden``'s environment.

    The rule for writers that find a golden's content unchanged (``--update-golden``,
    ``graphcapture accept``): the environment a golden records is the one that
    produced its content, so a rewrite for another reason (an older file layout)
    keeps it (and every other :data:`INFORMATIONAL_FIELDS`), and "torch X → Y since
    the goldens were written" names the change since the content was written.
    """
    out = {k: v for k, v in current.items() if k not in INFORMATIONAL_FIELDS}
    out.update((k, golden[k]) for k in INFORMATIONAL_FIELDS if k in golden)
    if "complete" in golden and "complete" in out:
        if gated_content({"complete": golden["complete"]}) == gated_content({"complete": out["complete"]}):
            out["complete"] = golden["complete"]
    return out


def toolchain_changes(expected_env: Mapping[str, Any], actual_env: Mapping[str, Any]) -> list[str]:
    """``["torch 2.11.0 → 2.12.0", ...]`` for each toolchain field (:data:`TOOLCHAIN_FIELDS`) that differs.

    A field absent on one side is no change: older goldens did not record every field.
    """
    changes = []
    for name, label in TOOLCHAIN_FIELDS:
        old, new = (expected_env or {}).get(name), (actual_env or {}).get(name)
        if old is not None and new is not None and _differs(name, old, new):
            changes.append(f"{label} {old} → {new}")
    return changes


def torch_release(version: Any) -> str:
    """The release part of a torch version: ``"2.13.0+cpu"`` → ``"2.13.0"``.

    Builds of one release (``+cpu``, ``+cu128``, ``+rocm6.4``) run the same operator
    decompositions; another release may not, so only the release part tells the two apart.
    """
    return str(version).split("+", 1)[0]


def torch_release_changed(expected_env: Mapping[str, Any], actual_env: Mapping[str, Any]) -> bool:
    """Whether the golden was written under another torch release than the capture ran on.

    A torch version absent on one side is no change (older goldens did not record it).
    """
    old, new = (expected_env or {}).get("torch_version"), (actual_env or {}).get("torch_version")
    return old is not None and new is not None and torch_release(old) != torch_release(new)


def toolchain_lead(changes: Sequence[str], release_changed: bool) -> Optional[str]:
    """The first line of a failure whose goldens were written under another toolchain, or None.

    ``changes`` are :func:`toolchain_changes` of the failed keys.  A new torch release is the
    likeliest explanation of a diff (ops decomposed or renamed, other kernels picked), so it is
    said in words rather than left for the reader to spot in a version number.
    """
    if not changes:
        return None
    listed = "; ".join(changes)
    if release_changed:
        return (
            f"torch release changed: {listed} since the goldens were written (a new torch release can "
            "decompose ops and pick kernels differently, which may explain the diff)"
        )
    return f"{listed} since the goldens were written (may explain the diff)"


def toolchain_lead_of_some(
    groups: Sequence[tuple[str, Sequence[str]]], named: int, failed: int, release_changed: bool
) -> str:
    """The first line when only some failed keys' goldens were written under another toolchain.

    ``groups`` are ``(labels, changes)``: the keys (``"bs=1, bs=2"``) whose goldens share
    :func:`toolchain_changes`; ``named`` keys in all of ``failed``.  The line names them, so
    a reader does not take the change for the cause of every key's diff.
    """
    if len(groups) == 1:
        labels, changes = groups[0]
        listed = "; ".join(changes)
    else:
        labels = ", ".join(group for group, _ in groups)
        listed = "; ".join(f"{'; '.join(changes)} ({group})" for group, changes in groups)
    some = f"{labels} ({named} of {failed} failed keys)"
    others = "the other failed keys show no toolchain change"
    if release_changed:
        return (
            f"torch release changed for {some}: {listed} since their goldens were written (a new torch release "
            f"can decompose ops and pick kernels differently, which may explain their diff; {others})"
        )
    return f"{listed} since the goldens of {some} were written (may explain their diff; {others})"
