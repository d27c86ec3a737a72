#include "runtime/dist/shared_buffers.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "runtime/dist/shared_segments.h"
#include "runtime/error.h"

namespace tandem::dist {

namespace {

using Clock = std::chrono::steady_clock;

// One flag per cache line, so that ranks setting their flags do not contend.
struct alignas(64) Flag {
  std::atomic<uint64_t> value{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the flags must be lock-free to be shared");

// One window's flags; a segment starts with one per window, then its data.
struct Header {
  Flag published;  // this rank's buffer holds its contribution to use e
  Flag reduced;    // this rank's slice of use e is reduced, in its buffer
  Flag finished;   // this rank has read every slice of use e it needs
};
constexpr size_t kDataAlign = 256;  // the data past the headers, aligned

size_t data_offset(int windows) {
  const size_t headers = static_cast<size_t>(windows) * sizeof(Header);
  return (headers + kDataAlign - 1) / kDataAlign * kDataAlign;
}

constexpr size_t kNameBytes = 64;
constexpr int64_t kSliceAlign = 16;  // elements: slice boundaries on 64-byte lines

std::atomic<uint64_t> g_segments{0};

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

std::string errno_text() { return std::strerror(errno); }

// Once per process, before its first segment: the leftovers of processes that are gone.
void remove_leftovers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& removed : remove_stale_segments()) {
      write_stderr_line("tandem: " + process_label() + "removed the stale shared-memory segment /dev/shm/" +
                        removed + ", left by a process that no longer exists");
    }
  });
}

// Unlinks a segment's name when it goes out of scope, on the way out of create() whether
// it returns or throws: once every rank has mapped it, or when something failed.
class UnlinkAtExit {
 public:
  explicit UnlinkAtExit(std::string name) : name_(std::move(name)) {}
  ~UnlinkAtExit() { shm_unlink(name_.c_str()); }
  UnlinkAtExit(const UnlinkAtExit&) = delete;
  UnlinkAtExit& operator=(const UnlinkAtExit&) = delete;

 private:
  std::string name_;
};

}  // namespace

struct SharedBuffers::Mapping {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  size_t data_offset = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (base != MAP_FAILED) munmap(base, bytes);
  }
  Header& header(int window) const { return static_cast<Header*>(base)[window]; }
  void* data() const { return static_cast<char*>(base) + data_offset; }
};

namespace {

// Maps the segment `name` (already of `bytes` bytes); null with `why` set on failure.
std::shared_ptr<SharedBuffers::Mapping> map_segment(int fd, size_t bytes, size_t offset, std::string* why) {
  auto mapping = std::make_shared<SharedBuffers::Mapping>();
  mapping->base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping->base == MAP_FAILED) {
    *why = "mmap: " + errno_text();
    return nullptr;
  }
  mapping->bytes = bytes;
  mapping->data_offset = offset;
  return mapping;
}

}  // namespace

std::unique_ptr<SharedBuffers> SharedBuffers::create(ProcessGroup& group, int64_t numel,
                                                     const std::string& tag, DType dtype, int windows) {
  TANDEM_CHECK(numel > 0, "shared buffers for " << tag << ": " << numel << " elements");
  TANDEM_CHECK(windows >= 1, "shared buffers for " << tag << ": " << windows << " windows");
  TANDEM_CHECK(dtype == DType::f32 || dtype == DType::i64,
               "shared buffers for " << tag << ": " << dtype_name(dtype) << " (float32 or int64 only)");
  const int size = group.size(), rank = group.rank();
  if (size < 2) return nullptr;  // nothing to share
  const size_t data_bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  const size_t offset = data_offset(windows);
  const size_t bytes = offset + data_bytes;
  std::unique_ptr<SharedBuffers> out(new SharedBuffers(rank, windows, dtype, tag, group.timeout()));
  out->numel_ = numel;
  out->peers_.resize(static_cast<size_t>(size));

  // This rank's segment.
  remove_leftovers();
  std::string why;
  const std::string name = segment_name(++g_segments);
  std::unique_ptr<UnlinkAtExit> unlink_name;
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    why = "shm_open " + name + ": " + errno_text();
  } else {
    unlink_name = std::make_unique<UnlinkAtExit>(name);
    // Reserved now, not at the first write: a full /dev/shm is then a failure here (and
    // the MPI allreduce), never a SIGBUS in the middle of a backward.
    const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (reserved != 0) {
      why = "posix_fallocate " + name + " (" + std::to_string(bytes) + " bytes): " + std::strerror(reserved);
    } else {
      out->peers_[static_cast<size_t>(rank)] = map_segment(fd, bytes, offset, &why);
    }
    close(fd);
  }

  // Every rank's segment name and host name; then, all on one host, every rank maps every
  // other's segment. (Ranks on different hosts could share /dev/shm only in a simulated
  // cluster, whose hosts must use their network.)
  char host[kNameBytes] = {};
  gethostname(host, kNameBytes - 1);
  Tensor mine = Tensor::zeros({static_cast<int64_t>(2 * kNameBytes)}, DType::u8);
  if (out->peers_[static_cast<size_t>(rank)] != nullptr) {
    std::memcpy(mine.data<uint8_t>(), name.data(), std::min(name.size(), kNameBytes - 1));
  }
  std::memcpy(mine.data<uint8_t>() + kNameBytes, host, kNameBytes - 1);
  Tensor names = Tensor::zeros({static_cast<int64_t>(2 * kNameBytes) * size}, DType::u8);
  group.allgather_flat(names, mine, "shared-memory segment names of " + tag)->wait();
  for (int q = 0; q < size && why.empty(); ++q) {
    if (q == rank) continue;
    const char* text =
        reinterpret_cast<const char*>(names.data<uint8_t>() + 2 * kNameBytes * static_cast<size_t>(q));
    const std::string peer(text, strnlen(text, kNameBytes));
    const std::string peer_host(text + kNameBytes, strnlen(text + kNameBytes, kNameBytes));
    if (peer_host != host) {
      why = "rank " + std::to_string(q) + " is on host " + peer_host + ", this one on " + host;
      break;
    }
    if (peer.empty()) {
      why = "rank " + std::to_string(q) + " made no segment";
      break;
    }
    const int peer_fd = shm_open(peer.c_str(), O_RDWR, 0600);
    if (peer_fd < 0) {
      why = "shm_open " + peer + " (rank " + std::to_string(q) + "'s): " + errno_text();
      break;
    }
    struct stat st {};
    if (fstat(peer_fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
      why =
          "rank " + std::to_string(q) + "'s segment " + peer + " is not " + std::to_string(bytes) + " bytes";
    } else {
      out->peers_[static_cast<size_t>(q)] = map_segment(peer_fd, bytes, offset, &why);
    }
    close(peer_fd);
  }

  // Whether every rank mapped every segment; after this no rank opens a name again.
  Tensor ok = Tensor::full({1}, why.empty() ? 1.0 : 0.0, DType::i64);
  allreduce_host(group, ok, ReduceOp::sum, "shared-memory segments of " + tag);
  unlink_name.reset();
  if (ok.data<int64_t>()[0] != size) return nullptr;

  std::shared_ptr<Mapping> own = out->peers_[static_cast<size_t>(rank)];
  auto storage =
      std::make_shared<Storage>(own->data(), data_bytes, Device::cpu(), std::shared_ptr<void>(own));
  out->local_ = Tensor::over_storage(std::move(storage), {numel}, dtype);
  return out;
}

SharedBuffers::~SharedBuffers() = default;

template <typename T>
T* SharedBuffers::elements(const Mapping& segment) const {
  return reinterpret_cast<T*>(static_cast<char*>(segment.data()) +
                              static_cast<size_t>(first_) * dtype_size(dtype_));
}

std::unique_ptr<SharedBuffers> SharedBuffers::window(int w, int64_t first, int64_t numel,
                                                     const std::string& tag) const {
  TANDEM_CHECK(w >= 0 && w < windows_ && first >= 0 && numel > 0 && first + numel <= numel_,
               "shared buffers for " << tag_ << ": window " << w << " of " << windows_ << ", elements ["
                                     << first << ", " << first + numel << ") of " << numel_);
  std::unique_ptr<SharedBuffers> out(new SharedBuffers(rank_, windows_, dtype_, tag, timeout_));
  out->peers_ = peers_;
  out->window_ = w;
  out->first_ = first_ + first;
  out->numel_ = numel;
  out->local_ = local_.view_range(first, {numel});
  return out;
}

std::pair<int64_t, int64_t> SharedBuffers::slice(int q) const {
  const int64_t n = size();
  auto boundary = [&](int64_t k) {
    if (k >= n) return numel_;
    return std::min(numel_, (numel_ * k / n) / kSliceAlign * kSliceAlign);
  };
  return {boundary(q), boundary(q + 1)};
}

namespace {

// Spins a little, then yields the core, until ready() or the timeout; then fails naming
// the rank and the step waited for.
template <typename Ready>
void wait_for(Ready ready, std::chrono::milliseconds timeout, int rank, int size, int peer, const char* step,
              const std::string& tag) {
  for (int spin = 0; spin < 256; ++spin) {
    if (ready()) return;
    cpu_relax();
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  for (uint64_t n = 1;; ++n) {
    if (ready()) return;
    std::this_thread::yield();
    if (n % 64 == 0 && Clock::now() > deadline) {
      std::ostringstream detail;
      detail << "waiting for rank " << peer << " to " << step;
      throw TimeoutError(
          __FILE__, __LINE__,
          timeout_message("shared-memory allreduce (sum) of " + tag, timeout, rank, size, detail.str()));
    }
  }
}

}  // namespace

void SharedBuffers::begin(uint64_t epoch) {
  if (epoch > 1) wait_finished(epoch - 1);
}

void SharedBuffers::wait_finished(uint64_t epoch) {
  for (int q = 0; q < size(); ++q) {
    const Header& h = peers_[static_cast<size_t>(q)]->header(window_);
    wait_for([&] { return h.finished.value.load(std::memory_order_acquire) >= epoch; }, timeout_, rank_,
             size(), q, "finish reading this rank's buffer", tag_);
  }
}

void SharedBuffers::publish(uint64_t epoch) {
  peers_[static_cast<size_t>(rank_)]->header(window_).published.value.store(epoch, std::memory_order_release);
}

bool SharedBuffers::all_published(uint64_t epoch) const {
  for (const auto& peer : peers_) {
    if (peer->header(window_).published.value.load(std::memory_order_acquire) < epoch) return false;
  }
  return true;
}

template <typename T>
void SharedBuffers::sum_range_as(int64_t first, int64_t count, T* out) const {
  const T* p0 = elements<T>(*peers_[0]) + first;
  const T* p1 = elements<T>(*peers_[1]) + first;
  if (size() == 2) {  // out may be p0 or p1: each element is read before it is written
    for (int64_t i = 0; i < count; ++i) out[i] = p0[i] + p1[i];
    return;
  }
  // In rank order ((b0 + b1) + b2) + ..., through a small block (out may be an input).
  constexpr int64_t kBlock = 1024;
  std::array<T, kBlock> acc;
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t n = std::min(kBlock, count - start);
    for (int64_t i = 0; i < n; ++i) acc[static_cast<size_t>(i)] = p0[start + i] + p1[start + i];
    for (size_t q = 2; q < peers_.size(); ++q) {
      const T* pq = elements<T>(*peers_[q]) + first + start;
      for (int64_t i = 0; i < n; ++i) acc[static_cast<size_t>(i)] += pq[i];
    }
    std::copy_n(acc.begin(), n, out + start);
  }
}

void SharedBuffers::sum_range(int64_t first, int64_t count, void* out) const {
  TANDEM_CHECK(first >= 0 && count >= 0 && first + count <= numel_,
               "shared-memory sum of " << tag_ << ": elements [" << first << ", " << first + count << ") of "
                                       << numel_);
  if (dtype_ == DType::f32) {
    sum_range_as(first, count, static_cast<float*>(out));
  } else {
    sum_range_as(first, count, static_cast<int64_t*>(out));
  }
}

bool SharedBuffers::try_reduce(uint64_t epoch) {
  if (!all_published(epoch)) return false;
  const auto [lo, hi] = slice(rank_);
  sum_range(
      lo, hi - lo,
      elements<char>(*peers_[static_cast<size_t>(rank_)]) + static_cast<size_t>(lo) * dtype_size(dtype_));
  peers_[static_cast<size_t>(rank_)]->header(window_).reduced.value.store(epoch, std::memory_order_release);
  return true;
}

void SharedBuffers::wait_published(uint64_t epoch) {
  for (int q = 0; q < size(); ++q) {
    const Header& h = peers_[static_cast<size_t>(q)]->header(window_);
    wait_for([&] { return h.published.value.load(std::memory_order_acquire) >= epoch; }, timeout_, rank_,
             size(), q, "publish its contribution", tag_);
  }
}

void SharedBuffers::reduce(uint64_t epoch) {
  wait_published(epoch);
  TANDEM_CHECK(try_reduce(epoch), "internal: shared-memory allreduce of " << tag_ << " lost a publication");
}

const float* SharedBuffers::reduced_slice(int q, uint64_t epoch) {
  const Mapping& peer = *peers_[static_cast<size_t>(q)];
  wait_for([&] { return peer.header(window_).reduced.value.load(std::memory_order_acquire) >= epoch; },
           timeout_, rank_, size(), q, "reduce its slice", tag_);
  TANDEM_CHECK(dtype_ == DType::f32, "internal: float32 slices of int64 buffers of " << tag_);
  return elements<float>(peer) + slice(q).first;
}

void SharedBuffers::end(uint64_t epoch) {
  peers_[static_cast<size_t>(rank_)]->header(window_).finished.value.store(epoch, std::memory_order_release);
}

}  // namespace tandem::dist
