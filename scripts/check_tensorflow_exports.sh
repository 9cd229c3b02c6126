#!/usr/bin/env bash
# The SavedModel and TF.js exports' tests, which CI does not run (see
# docs/export-formats.md, "Installs"), in a venv that has the converters:
#
#   python3 -m venv /path/tf && /path/tf/bin/pip install torch==2.13.0 -e ".[tfjs,test]"
#   /path/tf/bin/pip install --no-deps tensorflowjs==4.22.0
#   PYTHON=/path/tf/bin/python bash scripts/check_tensorflow_exports.sh
#
# Node.js (node, npm) verifies the TF.js exports; TF.js comes from npm on the first run.
# It runs tests/engines/test_tensorflow_exports.py and test_tf_graph.py, then every
# model type and network through scripts/check_format_exports.py saved_model and tfjs.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
export PYTHONPATH=.
# TensorFlow's native logging (oneDNN, CUDA probing) says nothing about the exports.
export TF_CPP_MIN_LOG_LEVEL=3
"$PYTHON" -m pytest -q -p no:cacheprovider tests/engines/test_tensorflow_exports.py \
    tests/engines/test_tf_graph.py
for format in saved_model tfjs; do
    echo "\$ python scripts/check_format_exports.py $format"
    "$PYTHON" scripts/check_format_exports.py "$format" 2> >(grep -v -E '^(WARNING: All log messages|[IWE][0-9]{4} )' >&2)
done
