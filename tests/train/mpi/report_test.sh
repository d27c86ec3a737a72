#!/usr/bin/env bash
# The run report in a real browser: a short 2-rank tandem-train, then its report.html loaded
# by headless Chromium.
#   report_test.sh <mpiexec> <tandem-train> <work dir>
# Asserts, on the file: it is the finished run's (no reload), its loss curves hold one point
# per metrics.jsonl line, at the positions those lines' losses give (worked out here from
# metrics.jsonl, within 0.2 px: the file holds 6 digits), and the latest sample picture is
# inline, byte for byte the PNG the run wrote, the earlier ones named. The same after the
# run is resumed and extended: the report shows the whole run, not only the resumed part.
# Then, in Chromium: the rendered DOM still has the curves and the picture (the page parses
# as meant), and a screenshot of 1280x2000 is written. Without Chromium the browser part
# skips (exit 77), naming what is missing.
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=report_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
out="$work/out"

"$mpiexec" -np 2 --oversubscribe "$train" --model mlp --batch 16 --iters 40 --log-every 10 --sample-every 20 \
  --out "$out" > "$work/train.log" 2>&1 || { cat "$work/train.log"; fail "tandem-train failed"; }
report="$out/report.html"
[ -f "$report" ] || { cat "$work/train.log"; fail "no $report"; }
grep -qF "report: $report" "$work/train.log" || fail "the summary does not name $report"
grep -q 'id="state">finished</span>' "$report" || fail "$report does not say finished"
if grep -q 'http-equiv="refresh"' "$report"; then fail "$report of a finished run still reloads itself"; fi

# points_of <html file> <series>: the polyline's points, one "x,y" per line.
points_of() {
  grep -o "<polyline data-series=\"$2\"[^>]*points=\"[^\"]*\"" "$1" | sed 's/.*points="//; s/"$//' | tr ' ' '\n'
}

# The expected points of loss_d and loss_g from metrics.jsonl: x over the iterations, y over
# both losses' range (the raw and smoothed curves share it; with 4 points they are the same).
metrics="$out/metrics.jsonl"
expected() {  # <loss_d|loss_g>
  awk -v key="$1" '
    function value(line, name,   s) { s = line; sub(".*\"" name "\": ", "", s); sub("[,}].*", "", s); return s + 0 }
    { it[NR] = value($0, "iteration"); d[NR] = value($0, "loss_d"); g[NR] = value($0, "loss_g") }
    END {
      lo = d[1]; hi = d[1]
      for (i = 1; i <= NR; i++) { lo = (d[i] < lo ? d[i] : lo); lo = (g[i] < lo ? g[i] : lo)
                                  hi = (d[i] > hi ? d[i] : hi); hi = (g[i] > hi ? g[i] : hi) }
      for (i = 1; i <= NR; i++) {
        v = (key == "loss_d" ? d[i] : g[i])
        printf "%.1f,%.1f\n", 64 + 480 * (it[i] - it[1]) / (it[NR] - it[1]), 12 + 180 * (1 - (v - lo) / (hi - lo))
      }
    }' "$metrics"
}
# same_points <what> <expected file> <found file>: equal in count, each within 0.2 px.
same_points() {
  paste -d' ' "$2" "$3" | awk -F'[ ,]' -v n="$(wc -l < "$2")" '
    NF != 4 { bad = 1 } { if ((($1 - $3) ^ 2) > 0.04 || (($2 - $4) ^ 2) > 0.04) bad = 1 }
    END { exit (bad || NR != n) }' && [ "$(wc -l < "$2")" -eq "$(wc -l < "$3")" ] ||
    { echo "expected:"; cat "$2"; echo "found:"; cat "$3"; fail "$1: the curve is not metrics.jsonl's"; }
}
check_report() {  # <html file> <what> <log points> <latest sample's iteration> <earlier ones'...>
  local series latest earlier
  [ "$(wc -l < "$metrics")" -eq "$3" ] || fail "$metrics: expected $3 lines, found $(wc -l < "$metrics")"
  for series in "loss_d (raw)" "loss_d (smoothed)" "loss_g (raw)" "loss_g (smoothed)"; do
    expected "${series%% *}" > "$work/expected.txt"
    points_of "$1" "$series" > "$work/found.txt"
    same_points "$2: $series" "$work/expected.txt" "$work/found.txt"
  done
  grep -o '<img id="latest-sample"[^>]*>' "$1" | grep -o 'src="data:image/png;base64,[^"]*"' |
    sed 's/^src="data:image\/png;base64,//; s/"$//' | base64 -d > "$work/latest.png" 2>/dev/null
  latest=$(printf 'samples-%06d.png' "$4")
  cmp -s "$work/latest.png" "$out/$latest" || fail "$2: the inline latest picture is not $out/$latest"
  for earlier in "${@:5}"; do
    earlier=$(printf 'samples-%06d.png' "$earlier")
    grep -q "<img class=\"earlier-sample\"[^>]*src=\"$earlier\"" "$1" || fail "$2: no earlier picture $earlier"
  done
}
check_report "$report" "$report" 4 40 20
echo "report_test: $report holds the run's curves and pictures"

"$mpiexec" -np 2 --oversubscribe "$train" --model mlp --batch 16 --iters 60 --log-every 10 --sample-every 20 \
  --out "$out" --resume > "$work/resume.log" 2>&1 || { cat "$work/resume.log"; fail "the resumed run failed"; }
expect_resumed_from "$work/resume.log" "$out/ckpt-000040.safetensors"
check_report "$report" "$report after --resume" 6 60 40 20
echo "report_test: after --resume, $report holds the whole run"

chromium=$(command -v chromium || true)
if [ -z "$chromium" ]; then
  echo "report_test: SKIP the browser part: no chromium on PATH (Debian: apt-get install chromium)"
  exit 77
fi
# A private profile and caches; --no-sandbox because root may not use the sandbox.
export HOME="$work/home" XDG_CONFIG_HOME="$work/home/config" XDG_CACHE_HOME="$work/home/cache"
mkdir -p "$HOME"
browse() {
  timeout 60 "$chromium" --headless --no-sandbox --disable-gpu --user-data-dir="$work/profile" "$@" \
    "file://$report" 2>> "$work/chromium.log"
}
browse --dump-dom > "$work/dom.html" || { tail -20 "$work/chromium.log"; fail "chromium --dump-dom failed"; }
check_report "$work/dom.html" "the DOM chromium rendered" 6 60 40 20
[ "$(grep -c '<svg ' "$work/dom.html")" -eq 4 ] || fail "the rendered DOM does not hold 4 charts"
browse --screenshot="$work/report.png" --window-size=1280,2000 > /dev/null ||
  { tail -20 "$work/chromium.log"; fail "chromium --screenshot failed"; }
# A PNG (signature, then the IHDR chunk: width and height, big-endian) of the window's size.
header=$(od -An -tx1 -N24 "$work/report.png" | tr -d ' \n')
[ "${header:0:16}" = 89504e470d0a1a0a ] || fail "$work/report.png is not a PNG"
[ "$((16#${header:32:8}))x$((16#${header:40:8}))" = 1280x2000 ] ||
  fail "$work/report.png is $((16#${header:32:8}))x$((16#${header:40:8})), not 1280x2000"
echo "report_test: ok (chromium rendered the curves and the latest picture; screenshot $(wc -c < "$work/report.png") bytes)"
rm -rf "$work"
