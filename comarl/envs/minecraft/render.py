"""A built structure as a small PNG next to its target: one panel per layer, target above, build below.

StrBuild has one layer (the wall, top row up); HouseBuild one per y (rows = z, columns = x), bottom layer on the
left. Each cell is coloured by its block (air is white); a built cell that differs from the target gets a red
frame. Drawn with matplotlib's Agg canvas (no display, no pyplot state), so it is safe in any process.
"""
from __future__ import annotations

import hashlib
import io
from typing import Sequence

Grid = Sequence[Sequence[str]]

COLOURS = {
    "air": "#ffffff", "cave_air": "#ffffff", "void_air": "#ffffff",
    "oak_planks": "#b8945f", "planks": "#b8945f", "stone": "#8c8c8c", "cobblestone": "#7a7a7a",
    "white_concrete": "#cfdbe3", "obsidian": "#2a1f3d", "stone_bricks": "#6f6f6f", "stone_stairs": "#a2a2a2",
    "glass_pane": "#bfe3ef", "oak_log": "#6b5032", "sand": "#dcd3a0",
}


def colour(block: str) -> str:
    """The RGB hex colour a block is drawn in; an unknown block gets a stable colour from its name."""
    if block in COLOURS:
        return COLOURS[block]
    h = hashlib.md5(block.encode("utf-8", "replace")).digest()
    return "#" + "".join(f"{96 + b % 128:02x}" for b in h[:3])


def picture(target: Sequence[Grid], built: Sequence[Grid], labels: Sequence[str], title: str = "",
            cell_px: int = 12) -> bytes:
    """PNG bytes: the target's layers on the top row, the built layers under them, one legend of the blocks.

    ``target[i]`` and ``built[i]`` are grids of block names (rows top to bottom as drawn) of the same shape.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    layers = max(1, len(target))
    rows = max((len(g) for g in target), default=1) or 1
    cols = max((len(g[0]) for g in target if g), default=1) or 1
    dpi = 72
    width = max(3.0, layers * (cols + 1) * cell_px / dpi + 0.6)
    height = 2 * (rows + 1) * cell_px / dpi + 0.9
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    used: dict[str, str] = {}
    for row, (grids, name) in enumerate(((target, "target"), (built, "built"))):
        for i, grid in enumerate(grids):
            ax = fig.add_subplot(2, layers, row * layers + i + 1)
            ax.set_xlim(0, cols)
            ax.set_ylim(rows, 0)
            ax.set_aspect("equal")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{name} {labels[i]}" if i < len(labels) else name, fontsize=7)
            for r, line in enumerate(grid):
                for c, block in enumerate(line):
                    used[block] = colour(block)
                    wrong = row == 1 and target[i][r][c] != block
                    ax.add_patch(Rectangle((c, r), 1, 1, facecolor=colour(block),
                                           edgecolor="#d62728" if wrong else "#cccccc",
                                           linewidth=1.2 if wrong else 0.3))
    shown = [b for b in used if b not in ("air", "cave_air", "void_air")]
    if shown:
        fig.legend([Patch(facecolor=used[b], edgecolor="#555555") for b in shown], shown, loc="lower center",
                   ncol=min(len(shown), 4), fontsize=6, frameon=False)
    if title:
        fig.suptitle(title, fontsize=8)
    fig.subplots_adjust(left=0.02, right=0.98, top=0.85 if title else 0.92, bottom=0.14 if shown else 0.04,
                        wspace=0.15, hspace=0.35)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
