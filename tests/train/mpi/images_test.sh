#!/usr/bin/env bash
# Training on a folder of your own pictures (--data images) at 2 ranks.
#   images_test.sh <mpiexec> <tandem-train> <make_image_folder> <work dir>
# Makes 300 pictures from Fashion-MNIST (half 28x28 PNG, half 56x64 JPEG, in 3 subfolders),
# gray and tinted RGB, then asserts:
# 1. with a file that is not a picture among them and --skip-bad-images, dcgan trains on
#    the gray folder, rank 0 reporting the one file left out, once, and writes a gray grid;
# 2. without --skip-bad-images every rank stops, naming the file and the reason;
# 3. with --channels 3 dcgan trains on the RGB folder and writes an RGB grid.
# Exits 77 (skipped) without Fashion-MNIST.
set -uo pipefail
mpiexec="$1"; train="$2"; make_folder="$3"; work="$4"
test_name=images_test
source "$(dirname "${BASH_SOURCE[0]}")/train_test_lib.sh"
idx=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
require_fashion_mnist
rm -rf "$work"; mkdir -p "$work"
count=300
started=$(date +%s%N)
"$make_folder" "$idx" "$work/data-gray" $count gray || fail "could not write the gray pictures"
"$make_folder" "$idx" "$work/data-rgb" $count rgb || fail "could not write the RGB pictures"
pngs=$(find "$work/data-gray" -name '*.png' | wc -l) jpegs=$(find "$work/data-gray" -name '*.jpg' | wc -l)
[ "$pngs" -eq 150 ] && [ "$jpegs" -eq 150 ] || fail "expected 150 PNG and 150 JPEG files, got $pngs and $jpegs"

# run <name> <expected exit: 0 or 1> tandem-train args...: its log is $work/<name>.log.
run() {
  local name="$1" expect="$2" rc; shift 2
  "$mpiexec" -np 2 --oversubscribe "$train" --model dcgan --data images --iters 1 --batch 8 --log-every 1 \
    --out "$work/$name" "$@" > "$work/$name.log" 2>&1
  rc=$?
  echo "$name: exit status $rc after $(( ($(date +%s%N) - started) / 1000000 )) ms since the start"
  if [ "$expect" = 0 ] && [ $rc -ne 0 ]; then cat "$work/$name.log"; fail "$name: exit status $rc"; fi
  if [ "$expect" != 0 ] && [ $rc -eq 0 ]; then cat "$work/$name.log"; fail "$name: the job exited 0"; fi
}

# expect_line <name> <text>: the log of run <name> holds the text exactly once.
expect_line() {
  local n
  n=$(grep -cF -- "$2" "$work/$1.log")
  [ "$n" -eq 1 ] || { cat "$work/$1.log"; fail "$1: expected '$2' once, found it $n times"; }
}

# PNG colour type (IHDR byte 25): 0 gray, 2 RGB.
colour_type() { od -An -j25 -N1 -tu1 "$1" | tr -d ' '; }

# A file that is not a picture among them: with --skip-bad-images it is left out and counted.
echo "hello" > "$work/data-gray/1/notes.txt"
run gray 0 --data-dir "$work/data-gray" --skip-bad-images
expect_line gray "--skip-bad-images: left out 1 of 301 files; the first: $work/data-gray/1/notes.txt: not a PNG or JPEG image"
expect_line gray "loaded 300 images from $work/data-gray as 1x28x28"
expect_line gray "tandem-train: dcgan on images, 2 rank(s)"
[ "$(colour_type "$work/gray/samples-000001.png")" = 0 ] || fail "gray: the sample grid is not a gray PNG"

# Without it every rank stops, naming the file and the reason.
run bad_file 1 --data-dir "$work/data-gray"
for rank in 0 1; do
  grep -qF "[rank $rank] $work/data-gray/1/notes.txt: not a PNG or JPEG image" "$work/bad_file.log" ||
    { cat "$work/bad_file.log"; fail "bad_file: rank $rank did not name the file and the reason"; }
done

run rgb 0 --data-dir "$work/data-rgb" --channels 3
expect_line rgb "loaded 300 images from $work/data-rgb as 3x28x28"
[ "$(colour_type "$work/rgb/samples-000001.png")" = 2 ] || fail "rgb: the sample grid is not an RGB PNG"
echo "$test_name: PASS in $(( ($(date +%s%N) - started) / 1000000 )) ms"
