// Training data: the ring8 Gaussian mixture (generated) and IDX image files (Fashion-MNIST).
//
// Contract:
// - ring8: 8 Gaussians of standard deviation kRing8Sigma on a circle of radius
//   kRing8Radius, mode k at angle 2*pi*k/8. make_ring8 draws `count` points as float32
//   [count, 2], deterministically from `gen` (a mode index, then two normals, per point).
//   make_ring8_labeled draws the very same points and also returns each point's mode index
//   0..7 as its label (int64 [count]); make_ring8(n, gen) is its `points`.
// - ring8_quality (the unrolled-GAN / VEEGAN metric): a sample is high quality when it lies
//   within 3 sigma of some mode; a mode is covered when at least 1% of all samples lie
//   within 3 sigma of it.
// - IDX files hold unsigned bytes: a big-endian header (magic 0x00000800 | ndims, then
//   ndims uint32 sizes) and the data. read_idx_u8 reads gzip or plain files (zlib reads
//   both); every problem (missing file, bad magic, short read, trailing data) is an Error
//   naming the file and what is wrong. write_idx_u8 writes a gzip file.
// - load_fashion_mnist reads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz into
//   images float32 [N, 1, 28, 28] scaled to [-1, 1] (pixel / 127.5 - 1) and labels 0..9
//   (the class of each image, from the labels file). A missing file names the file, the
//   Debian package dataset-fashion-mnist and --data-dir.
// - ImageDataset::label_tensor(indices) is the labels of those rows as an int64 tensor
//   [indices.size()] on the CPU; an index outside [0, size()) or labels that are not one per
//   image are an Error.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace tandem::data {

constexpr int kRing8Modes = 8;
constexpr double kRing8Radius = 2.0;
constexpr double kRing8Sigma = 0.02;
constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

std::vector<std::pair<double, double>> ring8_modes();
Tensor make_ring8(int64_t count, Generator& gen);

struct Ring8Draw {
  Tensor points;  // float32 [count, 2]
  Tensor labels;  // int64 [count]: the mode each point was drawn around, 0..7
};
Ring8Draw make_ring8_labeled(int64_t count, Generator& gen);

struct Ring8Quality {
  int modes_covered = 0;                 // of kRing8Modes
  double high_quality_fraction = 0.0;    // in [0, 1]
  std::vector<int64_t> per_mode_counts;  // samples within 3 sigma of each mode
  int64_t count = 0;                     // samples evaluated
};
// `samples`: [N, 2] float32 or float64 on the CPU.
Ring8Quality ring8_quality(const Tensor& samples);

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};
IdxArray read_idx_u8(const std::string& path);
void write_idx_u8(const std::string& path, const IdxArray& array);

struct ImageDataset {
  Tensor images;                // float32 [N, C, H, W] in [-1, 1]
  std::vector<int64_t> labels;  // N entries
  int64_t size() const { return images.defined() ? images.size(0) : 0; }
  Tensor label_tensor(const std::vector<int64_t>& indices) const;
};

// Images from a 3-D IDX file [N, H, W] (as [N, 1, H, W]) and labels from a 1-D IDX file [N].
ImageDataset load_idx_images(const std::string& images_path, const std::string& labels_path);
ImageDataset load_fashion_mnist(const std::string& dir = kFashionMnistDefaultDir, bool train = true);

}  // namespace tandem::data
