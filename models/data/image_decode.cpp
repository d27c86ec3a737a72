#include "models/data/image_decode.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
// clang-format on
#include <png.h>

#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "runtime/error.h"

namespace tandem::data {

namespace {

constexpr uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
constexpr uint8_t kJpegMagic[3] = {0xFF, 0xD8, 0xFF};

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.good(), path << ": cannot open: " << std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TANDEM_CHECK(!in.bad(), path << ": cannot read: " << std::strerror(errno));
  return bytes;
}

bool starts_with(const std::vector<uint8_t>& bytes, const uint8_t* magic, size_t size) {
  return bytes.size() >= size && std::memcmp(bytes.data(), magic, size) == 0;
}

std::string first_bytes(const std::vector<uint8_t>& bytes) {
  std::string out;
  char hex[4];
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
    std::snprintf(hex, sizeof hex, "%s%02x", i == 0 ? "" : " ", bytes[i]);
    out += hex;
  }
  return out;
}

// Refuses a declared size beyond max_side per side before any pixel is allocated.
void check_declared_size(const std::string& path, int64_t width, int64_t height, int64_t max_side) {
  TANDEM_CHECK(width <= max_side && height <= max_side,
               path << ": declares a " << width << "x" << height << " picture, more than " << max_side
                    << " pixels per side (tandem-train's --max-image-side raises the limit)");
}

// height * width * channels bytes, in 64 bits (the sides are checked, so it cannot overflow).
size_t pixel_bytes(int64_t width, int64_t height, int64_t channels) {
  return static_cast<size_t>(width) * static_cast<size_t>(height) * static_cast<size_t>(channels);
}

DecodedImage decode_png(const std::string& path, const std::vector<uint8_t>& bytes, int64_t max_side) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) == 0) {
    std::string why = image.message;
    png_image_free(&image);
    TANDEM_FAIL(path << ": unreadable PNG: " << why);
  }
  DecodedImage out;
  out.width = image.width;
  out.height = image.height;
  try {
    check_declared_size(path, out.width, out.height, max_side);
  } catch (const Error&) {
    png_image_free(&image);
    throw;
  }
  out.channels = (image.format & PNG_FORMAT_FLAG_COLOR) != 0 ? 3 : 1;
  image.format = out.channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  out.pixels.resize(pixel_bytes(out.width, out.height, out.channels));
  const png_color black = {0, 0, 0};
  if (png_image_finish_read(&image, &black, out.pixels.data(), 0, nullptr) == 0) {
    std::string why = image.message;
    png_image_free(&image);
    TANDEM_FAIL(path << ": unreadable PNG (truncated or corrupt): " << why);
  }
  return out;
}

// libjpeg reports errors through error_exit, which must not return: it jumps back to
// decode_jpeg's setjmp. Everything the decoder changes lives in this struct, in memory
// (not in registers that longjmp could roll back).
struct JpegDecode {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = "";
  int64_t max_side = kMaxImageSide;
  bool too_large = false;  // the declared size is beyond max_side (the message is the caller's)
  DecodedImage image;
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* state = static_cast<JpegDecode*>(cinfo->client_data);
  (*cinfo->err->format_message)(cinfo, state->message);
  std::longjmp(state->jump, 1);
}

// Warnings (level -1) are errors here: libjpeg carries on after them with made-up pixels
// (a truncated file's missing rows become gray). Trace messages (level >= 0) are ignored.
void jpeg_emit_message(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_error_exit(cinfo);
}

// Returns false with state->message set when libjpeg stopped.
bool run_jpeg_decode(JpegDecode* state, const std::vector<uint8_t>* bytes) {
  state->cinfo.err = jpeg_std_error(&state->manager);
  state->cinfo.client_data = state;  // kept by jpeg_create_decompress
  state->manager.error_exit = jpeg_error_exit;
  state->manager.emit_message = jpeg_emit_message;
  if (setjmp(state->jump) != 0) {
    jpeg_destroy_decompress(&state->cinfo);
    return false;
  }
  jpeg_create_decompress(&state->cinfo);
  jpeg_mem_src(&state->cinfo, bytes->data(), static_cast<unsigned long>(bytes->size()));
  jpeg_read_header(&state->cinfo, TRUE);
  if (static_cast<int64_t>(state->cinfo.image_width) > state->max_side ||
      static_cast<int64_t>(state->cinfo.image_height) > state->max_side) {
    state->image.width = state->cinfo.image_width;
    state->image.height = state->cinfo.image_height;
    state->too_large = true;
    jpeg_destroy_decompress(&state->cinfo);
    return false;
  }
  const J_COLOR_SPACE space = state->cinfo.jpeg_color_space;
  if (space == JCS_CMYK || space == JCS_YCCK) {
    std::snprintf(state->message, sizeof state->message, "CMYK JPEG is not supported (gray or colour only)");
    jpeg_destroy_decompress(&state->cinfo);
    return false;
  }
  state->cinfo.out_color_space = state->cinfo.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&state->cinfo);
  state->image.width = state->cinfo.output_width;
  state->image.height = state->cinfo.output_height;
  state->image.channels = state->cinfo.output_components;
  state->image.pixels.resize(pixel_bytes(state->image.width, state->image.height, state->image.channels));
  while (state->cinfo.output_scanline < state->cinfo.output_height) {
    JSAMPROW row =
        state->image.pixels.data() + static_cast<size_t>(state->cinfo.output_scanline) *
                                         static_cast<size_t>(state->image.width * state->image.channels);
    jpeg_read_scanlines(&state->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&state->cinfo);
  jpeg_destroy_decompress(&state->cinfo);
  return true;
}

DecodedImage decode_jpeg(const std::string& path, const std::vector<uint8_t>& bytes, int64_t max_side) {
  auto state = std::make_unique<JpegDecode>();
  state->max_side = max_side;
  const bool decoded = run_jpeg_decode(state.get(), &bytes);
  if (state->too_large) check_declared_size(path, state->image.width, state->image.height, max_side);
  TANDEM_CHECK(decoded, path << ": unreadable JPEG (truncated or corrupt): " << state->message);
  return std::move(state->image);
}

}  // namespace

DecodedImage decode_image(const std::string& path, int64_t max_side) {
  const std::vector<uint8_t> bytes = read_file(path);
  TANDEM_CHECK(!bytes.empty(), path << ": empty file, not a PNG or JPEG image");
  if (starts_with(bytes, kPngMagic, sizeof kPngMagic)) return decode_png(path, bytes, max_side);
  if (starts_with(bytes, kJpegMagic, sizeof kJpegMagic)) return decode_jpeg(path, bytes, max_side);
  TANDEM_FAIL(path << ": not a PNG or JPEG image (it starts with bytes " << first_bytes(bytes) << ")");
}

DecodedImage to_channels(const DecodedImage& image, int channels) {
  TANDEM_CHECK(channels == 1 || channels == 3, "to_channels: channels must be 1 or 3, got " << channels);
  if (image.channels == channels) return image;
  DecodedImage out;
  out.width = image.width;
  out.height = image.height;
  out.channels = channels;
  const size_t count = pixel_bytes(image.width, image.height, 1);
  out.pixels.resize(count * static_cast<size_t>(channels));
  for (size_t i = 0; i < count; ++i) {
    if (channels == 3) {
      out.pixels[3 * i] = out.pixels[3 * i + 1] = out.pixels[3 * i + 2] = image.pixels[i];
    } else {
      const uint8_t* p = &image.pixels[3 * i];
      out.pixels[i] = static_cast<uint8_t>(std::lround(0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]));
    }
  }
  return out;
}

}  // namespace tandem::data
