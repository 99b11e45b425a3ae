#!/usr/bin/env bash
# The packages a real Jupyter kernel with the extension needs on the lent GPU machines (Python 3.12, no network, no
# Jupyter there: see /work/.library/device/KINDS.md), as wheels in .whl/ (git-ignored), at this venv's versions.
# The device command then starts with:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
names="ipykernel jupyter_client jupyter_core ipython ipython_pygments_lexers traitlets pyzmq tornado comm debugpy
nest_asyncio matplotlib-inline prompt_toolkit wcwidth jedi parso pexpect ptyprocess stack_data executing asttokens
pure_eval decorator ipywidgets widgetsnbextension jupyterlab_widgets anywidget psygnal platformdirs"
pins=()
for name in $names; do
  version=$(.venv/bin/python -m pip show "$name" 2>/dev/null | awk '/^Version:/ {print $2}' || true)
  [ -n "$version" ] && pins+=("$name==$version")  # what this venv's kernel runs without is left out
done
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 -d .whl "${pins[@]}"
du -sh .whl
