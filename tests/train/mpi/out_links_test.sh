#!/usr/bin/env bash
# Symbolic links planted in --out are never written through.
#   out_links_test.sh <mpiexec> <tandem-train> <work dir>
# A link to a "precious" file is planted at each name a run writes in --out (the write
# probe, the temporaries of samples, checkpoints, metrics, report and trace, and the final
# names that are replaced atomically). Asserts: the run succeeds, precious is unchanged, and
# each final name is a regular file. Then a link at .lock, and one at metrics.jsonl (a file
# appended to, not replaced), each end the run before training, naming the file, with
# precious unchanged; a dangling link there creates nothing.
set -uo pipefail
mpiexec="$1"; train="$2"; work="$3"
test_name=out_links_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
rm -rf "$work"; mkdir -p "$work"
echo precious > "$work/precious"
args=(--model ring8-mlp --batch 16 --iters 2 --ckpt-every 2 --sample-every 2 --log-every 1 --seed 7)

expect_precious() {
  [ "$(cat "$work/precious")" = precious ] || fail "$1: the planted link's target was written"
}

out="$work/out"; mkdir -p "$out"
replaced=(report.html samples-000002.png trace.json)
for name in .write-test metrics.jsonl.tmp report.html.tmp samples-000002.png.tmp ckpt-000002.safetensors.tmp \
            trace.json.tmp "${replaced[@]}"; do
  ln -s "$work/precious" "$out/$name"
done
"$mpiexec" -np 1 "$train" "${args[@]}" --out "$out" --trace "$out/trace.json" > "$work/run.log" 2>&1 ||
  { cat "$work/run.log"; fail "a run with links planted in --out failed"; }
expect_precious "a run"
for name in "${replaced[@]}" metrics.jsonl ckpt-000002.safetensors; do
  [ -f "$out/$name" ] && [ ! -L "$out/$name" ] || fail "$name is not a regular file after the run"
done

for name in .lock metrics.jsonl; do
  for target in "$work/precious" "$work/absent"; do
    out="$work/out-${name#.}-$(basename "$target")"; mkdir -p "$out"
    ln -s "$target" "$out/$name"
    "$mpiexec" -np 1 "$train" "${args[@]}" --out "$out" > "$work/refused.log" 2>&1 &&
      { cat "$work/refused.log"; fail "a run with a link at $name ran"; }
    grep -F "$out/$name" "$work/refused.log" | grep -qF "(it is a symbolic link, not written through)" ||
      { cat "$work/refused.log"; fail "the refusal does not name the link at $name"; }
    if grep -q "^iter " "$work/refused.log"; then cat "$work/refused.log"; fail "the refused run trained"; fi
    expect_precious "a link at $name"
    [ ! -e "$work/absent" ] || fail "a dangling link at $name created its target"
  done
done

echo "out_links_test: ok"
rm -rf "$work"
