#include "models/data/image_folder.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "models/data/image_decode.h"
#include "models/data/image_resize.h"
#include "runtime/error.h"

namespace tandem::data {

namespace fs = std::filesystem;

namespace {

// The immediate sub-folder of `dir` that `file` lies in; "" for a file directly in `dir`.
// `file` comes from listing `dir`, so it is `dir` followed by separators and the rest.
std::string class_folder(const std::string& dir, const std::string& file) {
  const size_t start = file.find_first_not_of('/', dir.size());
  const size_t slash = file.find('/', start);
  return slash == std::string::npos ? "" : file.substr(start, slash - start);
}

}  // namespace

std::vector<std::string> list_image_files(const std::string& dir) {
  std::error_code ec;
  TANDEM_CHECK(fs::is_directory(dir, ec), dir << ": not a folder of images ("
                                              << (fs::exists(dir, ec) ? "not a folder" : "no such folder")
                                              << ")");
  std::vector<std::string> files;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  TANDEM_CHECK(!ec, dir << ": cannot list the folder: " << ec.message());
  for (; it != end; it.increment(ec)) {
    TANDEM_CHECK(!ec, dir << ": cannot list the folder: " << ec.message());
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

ImageFolder load_image_folder(const std::string& dir, const ImageFolderOptions& options) {
  TANDEM_CHECK(options.channels == 1 || options.channels == 3,
               "image folder " << dir << ": channels must be 1 or 3, got " << options.channels);
  const std::vector<std::string> listed = list_image_files(dir);
  TANDEM_CHECK(!listed.empty(), dir << ": no PNG or JPEG image in this folder (nor below it)");
  ImageFolder out;
  std::map<std::string, int64_t> label_of{{"", 0}};
  for (const std::string& file : listed) {
    const std::string name = class_folder(dir, file);
    if (!name.empty() && label_of.emplace(name, 0).second) out.classes.push_back(name);
  }
  std::sort(out.classes.begin(), out.classes.end());
  for (size_t k = 0; k < out.classes.size(); ++k) label_of[out.classes[k]] = static_cast<int64_t>(k);

  const int64_t per_image = options.channels * options.side * options.side;
  std::vector<float> values;
  values.reserve(listed.size() * static_cast<size_t>(per_image));
  for (size_t i = 0; i < listed.size(); ++i) {
    std::vector<float> pixels;
    try {
      pixels = square_resize(to_channels(decode_image(listed[i], options.max_side), options.channels),
                             options.side);
    } catch (const Error& e) {
      if (!options.skip_bad) throw;
      out.skipped.push_back(e.message());
    }
    if (!pixels.empty()) {
      for (float& v : pixels) v = v / 127.5f - 1.0f;
      values.insert(values.end(), pixels.begin(), pixels.end());
      out.files.push_back(listed[i]);
      out.dataset.labels.push_back(label_of.at(class_folder(dir, listed[i])));
    }
    if (options.progress) options.progress(static_cast<int64_t>(i + 1), static_cast<int64_t>(listed.size()));
  }
  TANDEM_CHECK(!out.files.empty(),
               dir << ": none of its " << listed.size()
                   << " file(s) is a readable PNG or JPEG image; the first: " << out.skipped.front());
  const int64_t count = static_cast<int64_t>(out.files.size());
  out.dataset.images = Tensor::empty({count, options.channels, options.side, options.side});
  std::memcpy(out.dataset.images.data<float>(), values.data(), values.size() * sizeof(float));
  return out;
}

}  // namespace tandem::data
