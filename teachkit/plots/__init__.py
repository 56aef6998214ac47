"""Plot helpers of the course (matplotlib), one module per kind of picture.

Import it explicitly (``from teachkit import plots``); ``import teachkit`` alone does not load
matplotlib.
"""

from .figures import figures_dir, label_device, new_axes, save_figure
from .traces import plot_online_trace

__all__ = ["figures_dir", "label_device", "new_axes", "save_figure", "plot_online_trace"]
