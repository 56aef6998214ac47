#!/usr/bin/env bash
# Run every notebook under nbval on a large GPU as if it had only GIB GiB of memory (a T4 has
# 15, an L4 22): an IPython startup file caps each notebook kernel's PyTorch allocations with
# torch.cuda.set_per_process_memory_fraction before the first cell runs.
#
#   bash gpu_checks/notebooks_capped.sh 15                      # every notebook
#   bash gpu_checks/notebooks_capped.sh 22 notebooks/09_*.ipynb --durations=5
#   bash gpu_checks/notebooks_capped.sh 15 -n 9                 # nine notebooks at a time
#
# Arguments after GIB are pytest options and notebook paths (default: `notebooks`). With -n N,
# N notebooks run at once on the one GPU, each under its own cap: keep N x GIB within the GPU's
# memory (nine at 15 GiB on a 139 GiB H200), or a notebook can fail for memory its cap allowed.
# Run from the repository root with jupyter's kernel stack and nbval installed. Exits with
# pytest's status; the IPython folder it makes is removed on every exit path. Kernels may take
# up to five minutes to start: with pytest-xdist (-n 12) a dozen start at once, each importing
# torch and initialising CUDA, and with nbval's default wait of a minute every cell of one
# notebook errored in setup.
set -euo pipefail
gib=${1:?usage: notebooks_capped.sh GIB [notebooks and pytest options...]}
shift
ipython_dir=$(mktemp -d)
trap 'rm -rf "$ipython_dir"' EXIT
mkdir -p "$ipython_dir/profile_default/startup"
cat > "$ipython_dir/profile_default/startup/00-memory-cap.py" <<EOF
import torch

if torch.cuda.is_available():
    _total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, $gib * 2**30 / _total), 0)
    print(f"memory capped at $gib GiB of {_total / 2**30:.0f}")
EOF
export IPYTHONDIR="$ipython_dir"
# Options alone still run the notebooks: without a path pytest would take pyproject's testpaths
# (the unit tests and doctests too).
given_paths=0
for arg in "$@"; do
  if [[ $arg == *.ipynb || -d $arg ]]; then given_paths=1; fi
done
if (( ! given_paths )); then set -- "$@" notebooks; fi
# With pytest-xdist each notebook must stay on one worker, its cells in order in one kernel:
# xdist's default (--dist load) deals single cells out to the workers, and nearly every cell
# then fails on names an earlier cell defined in another kernel.
if [[ " $* " =~ " -n " || " $* " =~ " -n"[0-9] ]] && [[ ! " $* " =~ " --dist" ]]; then
  set -- "$@" --dist loadfile
fi
python3 -m pytest -q --nbval-lax --nbval-kernel-startup-timeout=300 -p no:cacheprovider "$@"
