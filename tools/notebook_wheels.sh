#!/usr/bin/env bash
# Download the Jupyter and nbval wheels the GPU machine's image lacks into DIR (default .whl/, ignored
# by git; copy it to that machine beside the checkout), for `bash tools/gpu.sh notebooks`, which
# installs them, runs every notebook in place and then nbval on the result. Everything else the
# notebooks need is already on that image.
#   bash tools/notebook_wheels.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.whl}
python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dest" \
  asttokens==3.0.2 \
  comm==0.2.3 \
  coverage==7.17.5 \
  debugpy==1.8.22 \
  executing==2.3.0 \
  fastjsonschema==2.22.3 \
  ipykernel==7.4.0 \
  ipython==9.18.1 \
  ipython_pygments_lexers==1.1.1 \
  jedi==0.20.1 \
  jsonschema==4.26.0 \
  jsonschema_specifications==2025.9.1 \
  jupyter_client==8.10.0 \
  jupyter_core==5.9.1 \
  matplotlib_inline==0.2.2 \
  nbclient==0.11.0 \
  nbformat==5.11.1 \
  nbval==0.11.0 \
  nest_asyncio2==1.7.4 \
  parso==0.8.7 \
  pexpect==4.9.0 \
  platformdirs==4.14.8 \
  prompt_toolkit==3.0.53 \
  ptyprocess==0.7.0 \
  pure_eval==0.2.4 \
  pyzmq==27.3.0 \
  referencing==0.37.0 \
  rpds_py==2026.9.1 \
  stack_data==0.6.3 \
  tornado==6.6.1 \
  traitlets==5.16.1 \
  wcwidth==0.9.4
