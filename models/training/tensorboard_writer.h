// TensorBoard event files: scalars and PNG pictures of a run, for TensorBoard (and any
// TFEvents reader) to plot and compare runs. Built when CMake finds Protobuf (Debian's
// libprotobuf-dev, protobuf-compiler); then TANDEM_HAVE_TENSORBOARD is 1.
//
// Contract:
// - TensorBoardWriter(dir) creates `dir` (and its parents) and the file
//   <dir>/events.out.tfevents.<unix seconds>.<hostname> (".<n>" appended, from 1, when that
//   name is taken), and writes its first event: file_version "brain.Event:2". The file is
//   created new (O_EXCL | O_NOFOLLOW, runtime/file_write.h): a name held by anything, a
//   symbolic link included, counts as taken and is never written through. A directory or
//   file that cannot be made is an Error naming it. Construct it on one rank (rank 0).
// - TensorBoardWriter(dir, resume_step) for a run resumed from the checkpoint of step N > 0:
//   before its own file, every event file already in `dir` (events.out.tfevents.*, regular
//   files; a link is not read nor written through) that holds events of steps after N is cut
//   to those of steps <= N (the file version kept) by an atomic rewrite (replace_file,
//   runtime/file_write.h), so that the steps the resumed run logs again appear once in the
//   directory, as in metrics.jsonl. A file that does not read as whole records, or cannot be
//   rewritten, is left as it is, named in a warning on stderr; training goes on.
// - Every event is one TFRecord: uint64 length, uint32 masked CRC-32C of those 8 bytes, the
//   serialized Event (tensorboard_event.proto), uint32 masked CRC-32C of it, all
//   little-endian; masked_crc32c(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. Each event is
//   flushed as it is written, so TensorBoard sees a running job's values.
// - add_scalar(tag, value, step): one event with one simple_value (a float: value rounded
//   to float32). add_scalars(step, scalars): one event with a value per name, in order
//   (the ScalarSink of a ScalarLog: attach it and one log() call feeds both).
// - add_image(tag, png, height, width, channels, step): one event with an Image summary
//   holding the PNG's bytes as they are; channels 1 (gray), 2 (gray + alpha), 3 (RGB) or
//   4 (RGBA), else an Error. add_png_file(tag, path, step) reads a PNG file (such as a
//   sample grid from models/data/png_writer.h) and takes its size and channels from its
//   header; a file that cannot be read or is not a PNG is an Error naming it.
// - A write that fails (a full disk) is reported once on stderr, "tandem: warning: cannot
//   write <path> (<reason>); ...", and nothing more is written; training goes on. What of
//   the failed record was written is truncated away, so the file ends in a whole record.
// - crc32c(bytes) is CRC-32C (Castagnoli, reflected 0x82f63b78, as in iSCSI and TFRecord).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/training/scalar_log.h"

namespace tandem::training {

uint32_t crc32c(const std::string& bytes);
uint32_t masked_crc32c(const std::string& bytes);
// One TFRecord holding `data`.
std::string tfrecord(const std::string& data);
// The data of each whole, intact record at the start of `bytes`, in order; `whole_bytes`
// (when given) is set to how many bytes they take: less than bytes.size() when the rest is
// torn or fails its CRC.
std::vector<std::string> tfrecords_in(const std::string& bytes, size_t* whole_bytes = nullptr);

class TensorBoardWriter : public ScalarSink {
 public:
  explicit TensorBoardWriter(const std::string& dir, int64_t resume_step = 0);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  const std::string& path() const { return path_; }
  void add_scalar(const std::string& tag, double value, int64_t step);
  void add_scalars(int64_t step, const Scalars& scalars) override;
  void add_image(const std::string& tag, const std::string& png, int height, int width, int channels,
                 int64_t step);
  void add_png_file(const std::string& tag, const std::string& path, int64_t step);

 private:
  void write_event(const std::string& serialized);

  std::string path_;
  int fd_ = -1;
  bool write_failed_ = false;
  uint64_t complete_bytes_ = 0;  // the file's length in whole records
};

}  // namespace tandem::training
