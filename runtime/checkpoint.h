// Checkpoint files in the safetensors format.
//
// Contract:
// - Layout (exactly safetensors): an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {string: string}, "name": {"dtype": "F32"|"F64"|"F16"|"BF16"|"I32"|
//   "I64"|"U8", "shape": [...], "data_offsets": [begin, end]}, ...} padded with spaces to a
//   multiple of 8, then the raw little-endian tensor data (offsets are relative to its
//   start). Any safetensors reader can open what save_safetensors writes.
// - Checksum: save_safetensors records in the metadata "tandem.crc32": 8 lowercase hex
//   digits of the CRC-32 (zlib's) of the header's meaning in a fixed form (compact JSON:
//   the metadata but the checksum, keys in byte order, then the tensors in name order, each
//   {"dtype":..,"shape":[..],"data_offsets":[b,e]}) followed by the data section. The key is
//   reserved (saving it is an Error) and not returned in `metadata`: load_safetensors
//   verifies it, and a mismatch is an Error "<path>: checksum mismatch: recorded X,
//   computed Y ...; the file is corrupt". Files without the key (other writers, older
//   checkpoints) load unchecked; a key that is not 8 lowercase hex digits is a corrupt header.
// - save_safetensors writes `path + ".tmp"` (or a name of its own: TemporaryName::unique)
//   (made fresh: a link there is replaced, never
//   written through; runtime/file_write.h), flushes and fsyncs it, renames it over `path`
//   and fsyncs the directory: a crash never leaves a half-written file under `path`. A link
//   at `path` is replaced by the file, its target untouched.
//   Tensors may live on any device (they are copied to the host to be written).
// - load_safetensors validates everything before trusting it (header length against the
//   file size, JSON syntax, dtype, shape x dtype size == byte span, offsets packed one
//   tensor after another from byte 0 of the data section to the end of the file: no
//   overlap, no gap, nothing after them), then the checksum. Every problem is an Error
//   whose message starts with the path and says what is wrong.
// - read_safetensors_header validates the header alone (the checksum needs the data);
//   verify_safetensors the header and the checksum, making no tensor.
// - list_checkpoints(dir, prefix) is every `<dir>/<prefix>-<iteration>.safetensors` that is a
//   regular file (a link to one counts; *.tmp and other names do not), as (iteration, path),
//   the highest iteration first; empty when `dir` cannot be read. Nothing of the files is read.
// - find_latest_checkpoint returns the complete checkpoint `<dir>/<prefix>-<iteration>
//   .safetensors` with the highest iteration, skipping *.tmp files and files whose header
//   does not validate (a torn or foreign file never wins); nullopt when there is none or
//   `dir` does not exist. It reads headers only: a file whose data is corrupt can win,
//   and load_safetensors refuses it by name.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace tandem {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;        // CPU tensors
  std::map<std::string, std::string> metadata;  // without "tandem.crc32"
};

// Per-tensor entry of a validated header (no data read).
struct SafetensorsEntry {
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;  // without "tandem.crc32"
  std::optional<uint32_t> checksum;             // "tandem.crc32", when the file records one
  uint64_t data_offset = 0;                     // byte offset of the data section in the file (8 + N)
};

// Where save_safetensors writes before its rename (see the contract above).
enum class TemporaryName {
  beside,  // "<path>.tmp": one writer per path (a run's own --out); a stale one is replaced
  unique,  // "<path>.tmp.<pid>.<random>": for files several jobs may write at once (a shared
           // cache): each writer has its own temporary, and the last rename wins whole
};

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      TemporaryName temporary = TemporaryName::beside);

SafetensorsFile load_safetensors(const std::string& path);

// Reads and validates the header only, including that the file is long enough for it and
// for the data it describes; the checksum is not verified (see load_safetensors).
SafetensorsHeader read_safetensors_header(const std::string& path);

// Everything load_safetensors checks of the file (the header, then the checksum over the
// header and data), the same Error on a problem, without making the tensors.
void verify_safetensors(const std::string& path);

// "<dir>/<prefix>-000100.safetensors" (iteration zero-padded to at least 6 digits).
std::string checkpoint_path(const std::string& dir, const std::string& prefix, int64_t iteration);

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir,
                                                              const std::string& prefix);
std::optional<std::string> find_latest_checkpoint(const std::string& dir, const std::string& prefix);

// Removes from `dir` the temporaries TemporaryName::unique gave to files named `prefix`...
// ("<prefix>....tmp.<pid>.<8 hex digits>", regular files, not links) last written at least
// `older_than` ago: a writer that was killed between creating and renaming its temporary
// leaves it behind, and nothing else would remove it. A save takes seconds, so a temporary
// older than that is nobody's (the age, not the process id, decides: a cache may be shared
// by several hosts). Returns the paths removed; a directory that cannot be read removes none.
std::vector<std::string> remove_stale_temporaries(const std::string& dir, const std::string& prefix,
                                                  std::chrono::seconds older_than);

}  // namespace tandem
