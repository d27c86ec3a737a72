#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the training program need.
# Idempotent and quiet when everything is already present.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libeigen3-dev         # CPU kernels (GEMM)
  catch2                # tests (v2)
  libopenmpi-dev openmpi-bin  # MPI process group, mpirun
  libpng-dev libjpeg-dev zlib1g-dev # sample pictures, image folders, gzip dataset files
  dataset-fashion-mnist # the image dataset
  clang-format          # scripts/format.sh --check (CI)
  iproute2              # scripts/cluster.sh: network namespaces, veth links, tc
  chromium              # tests/train/mpi/report_test.sh: report.html in a headless browser
  libdnnl-dev           # CPU float32 convolutions through oneDNN (optional: Eigen without it)
  libprotobuf-dev protobuf-compiler # TensorBoard event files (models/training/tensorboard_writer.h)
  python3-protobuf      # tests/training/tensorboard_test.sh reads the event files back
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
