"""Plot catastrophic-failure probability vs group size per scheme (reference 002, Figure 5(e)/(f)).

matplotlib is optional (the ``plot`` extra): it is imported here only, with the non-interactive Agg backend,
so ``import ftkit.models`` stays light and plotting works without a display; without it, plotting raises a
:class:`~ftkit.errors.ModelError` that says how to install it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import ModelError
from .compare import SchemeResult

__all__ = ["plot_comparison", "require_matplotlib"]

_STYLE = {"rs": ("tab:orange", "o"), "xor": ("tab:blue", "s"), "partner": ("tab:green", "^")}


def require_matplotlib() -> None:
    """Raise unless matplotlib can be imported.

    Raises
    ------
    ModelError
        If matplotlib is not installed, naming the extra that installs it.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ModelError("plotting needs matplotlib, which is not installed: `pip install 'ftkit[plot]'` "
                         f"(or `pip install matplotlib`), or leave out --plot ({exc})") from None


def plot_comparison(results: Sequence[SchemeResult], path: str | Path, *, nodes: int | None = None) -> Path:
    """Write a PNG with one log-scale panel per scenario: probability vs group size, one line per scheme.

    Probabilities that are exactly 0 (no event in the scenario exceeds the tolerance) cannot be drawn on a
    log axis and are left out of their line.

    Parameters
    ----------
    results
        Output of :func:`~ftkit.models.compare.compare_schemes`.
    path
        Output file (PNG).
    nodes
        Node count, shown in the title.

    Returns
    -------
    Path
        The file written.

    Raises
    ------
    ModelError
        If there is nothing to plot, matplotlib is missing, or the file cannot be written.
    """
    if not results:
        raise ModelError("nothing to plot: no results")
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(r.scenario for r in results))
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5.5 * len(scenarios), 4.2), squeeze=False,
                             sharey=True)
    try:
        for ax, scenario in zip(axes[0], scenarios, strict=True):
            rows = [r for r in results if r.scenario == scenario]
            sizes = sorted({r.group_size for r in rows})
            for scheme in dict.fromkeys(r.scheme for r in rows):
                pts = sorted((r.group_size, r.probability) for r in rows
                             if r.scheme == scheme and r.probability > 0)
                color, marker = _STYLE.get(scheme, (None, "x"))
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, color=color,
                        label=next(r.label for r in rows if r.scheme == scheme))
            ax.set_xscale("log", base=2)
            ax.set_xticks(sizes, [str(s) for s in sizes])
            ax.minorticks_off()
            ax.set_yscale("log")
            ax.set_xlabel("group size k (nodes)")
            ax.set_title(scenario, fontsize=9)
            ax.grid(True, which="major", alpha=0.3)
        axes[0][0].set_ylabel("catastrophic failure probability per event")
        axes[0][0].legend(fontsize=8)
        if nodes is not None:
            fig.suptitle(f"Catastrophic failure probability, {nodes} nodes (eq. 3, exact conditional)")
        fig.tight_layout()
        path = Path(path)
        try:
            fig.savefig(path, format="png", dpi=100)
        except OSError as exc:
            raise ModelError(f"cannot write plot {path}: {exc.strerror or exc}") from exc
    finally:
        plt.close(fig)
    return path
