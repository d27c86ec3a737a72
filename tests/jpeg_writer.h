// A baseline JPEG writer for tests (libjpeg): `pixels` holds height rows of width *
// channels bytes (1: gray, 3: RGB). With full_chroma the colour planes are not subsampled,
// so at quality 100 flat colours survive within a unit or two. A file that cannot be
// opened throws std::runtime_error naming it.
#pragma once

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
// clang-format on

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::testing {

inline void write_jpeg(const std::string& path, int width, int height, int channels,
                       const std::vector<uint8_t>& pixels, int quality, bool full_chroma) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    jpeg_destroy_compress(&cinfo);
    throw std::runtime_error("cannot write " + path);
  }
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (full_chroma && channels == 3) {
    for (int c = 0; c < 3; ++c) cinfo.comp_info[c].h_samp_factor = cinfo.comp_info[c].v_samp_factor = 1;
  }
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&pixels[static_cast<size_t>(cinfo.next_scanline) * width * channels]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

}  // namespace tandem::testing
