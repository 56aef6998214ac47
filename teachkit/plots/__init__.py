"""Plot helpers of the course (matplotlib), one module per kind of picture.

Import it explicitly (``from teachkit import plots``); ``import teachkit`` alone does not load
matplotlib.

=================  ==========================================================================
module             pictures
=================  ==========================================================================
figures            saving to ``figures/``, axes, the device label
overflow           where ``exp`` overflows per dtype; rows broken against logit scale (01)
errors             relative error against input scale, naive vs safe (02)
traces             the running max and denominator along a row (03)
reduction_tree     a GPU block's butterfly and shared-memory reduction (03)
merges             chunk-local probabilities rescaled; the weights of merged parts (04)
roofline           the roofline; bytes moved per softmax variant; bandwidth against working set (05)
softmax_bench      achieved bandwidth per softmax provider against the copy ceiling (06)
resident_rounds    a persistent grid's rounds: each program's row, who waits for the next (06)
write_behind       one program's steps in order, plain and written behind (06)
attention          memory against length; the causal tile schedule (07, 08)
attention_bench    TFLOP/s against length per attention provider (08)
decode             decoding: programs against SMs, paged-cache waste, block tables, speed-ups (09)
ring               ring attention: schedules, work per rank, timelines, memory per worker (10)
cute               a row over threads and vectors; what each tier holds (11)
=================  ==========================================================================
"""

from .errors import error_vs_scale, plot_error_vs_scale, scaled_rows
from .figures import figures_dir, label_device, new_axes, save_figure
from .merges import chunk_weights, plot_chunk_rescale, plot_part_weights
from .overflow import dtype_color, dtype_name, plot_broken_rows, plot_exp_range, plot_temperature
from .reduction_tree import butterfly_values, plot_block_reduction_tree
from .softmax_bench import plot_bandwidth
from .traces import max_jumps, plot_online_trace

__all__ = [
    "butterfly_values",
    "chunk_weights",
    "dtype_color",
    "dtype_name",
    "error_vs_scale",
    "figures_dir",
    "label_device",
    "max_jumps",
    "new_axes",
    "plot_bandwidth",
    "plot_block_reduction_tree",
    "plot_broken_rows",
    "plot_chunk_rescale",
    "plot_error_vs_scale",
    "plot_exp_range",
    "plot_online_trace",
    "plot_part_weights",
    "plot_temperature",
    "save_figure",
    "scaled_rows",
]
