// A dataset of your own pictures: every PNG and JPEG file of a folder tree.
//
// Contract:
// - list_image_files(dir) is every regular file under `dir`, recursively, following no
//   symbolic link to a folder, leaving out hidden files and folders (names starting with
//   '.'), sorted by path (byte order), so every rank and every run sees the same list.
//   The format is decided by each file's content (image_decode.h), not by its name, so
//   every file listed must be a picture.
// - load_image_folder decodes them all once, in that order, converts each to `channels`
//   (1 gray, 3 RGB: to_channels), fits it to side x side (square_resize: centre crop, area
//   average) and stores float32 [N, channels, side, side] scaled to [-1, 1] (v / 127.5 - 1,
//   as Fashion-MNIST).
// - Labels, as torchvision's ImageFolder: `classes` are the names of the immediate
//   sub-folders of `dir` that hold a listed file (at any depth), sorted (byte order); a file's
//   label is the index in `classes` of the sub-folder it lies in (dir/cat/x/1.png: "cat").
//   A file directly in `dir` has label 0: a flat folder is one class, and loose files
//   beside class folders share label 0 with the first class (`classes` does not name them).
//   Classes come from the listing, so a sub-folder whose files are all skipped (skip_bad)
//   keeps its index and the labels of the other classes do not move.
// - Errors name the folder or file and the reason: `dir` missing or not a folder; no file
//   in it; a file that cannot be decoded (its path and why), or that declares a picture
//   wider or higher than max_side (image_decode.h: refused before its pixels are allocated). With skip_bad, a
//   file that cannot be decoded is left out and listed in `skipped` ("path: reason") instead; when every file
//   is bad it is still an Error (nothing to train on), quoting the first reason.
// - progress(done, total), when set, is called after each file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/data/dataset.h"
#include "models/data/image_decode.h"

namespace tandem::data {

struct ImageFolderOptions {
  int channels = 1;  // 1 or 3
  int64_t side = 28;
  bool skip_bad = false;
  int64_t max_side = kMaxImageSide;  // decode_image's limit on a file's declared width and height
  std::function<void(int64_t done, int64_t total)> progress = nullptr;
};

struct ImageFolder {
  ImageDataset dataset;
  std::vector<std::string> files;    // the files in the dataset, in its order
  std::vector<std::string> classes;  // sub-folder names; label k is classes[k]
  std::vector<std::string> skipped;  // with skip_bad: "path: reason" for each file left out
};

std::vector<std::string> list_image_files(const std::string& dir);
ImageFolder load_image_folder(const std::string& dir, const ImageFolderOptions& options);

}  // namespace tandem::data
