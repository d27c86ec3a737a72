// A checkpoint of any training loop: the user registers what makes up the run's state, by
// name, and saves or loads it whole (tandem-train's Checkpointer is one user of it).
//
// Contract:
// - Each registered piece owns the tensors "<name>.<key>" of the file:
//     add_module(name, m)       m.state_dict()            ("<name>.<parameter or buffer>")
//     add_optimizer(name, o)    o.state_dict()            ("<name>.lr", "<name>.state.<i>.<key>", ...)
//     add_scheduler(name, s)    s.state_dict()            ("<name>.base_lr.<k>", "<name>.iteration")
//     add_tensors(name, ts)     ts[k]                     ("<name>.<k>", k = 0..size-1)
//     add_ema(name, e)          e.tensors(), as add_tensors
//     add_generator(name, g)    "<name>.state", int64 [2]: the seed and counter bits of g
//   The pieces are held by reference and must outlive the Checkpoint. A name is not empty,
//   registered once, and neither it nor another is "<other>." + more (each file entry
//   belongs to exactly one piece): an Error otherwise.
// - iteration (>= 0) is recorded in the metadata as "iteration"; metadata holds the user's
//   string pairs, saved as they are ("iteration" and "tandem.crc32" are reserved: an Error).
// - save(path) writes every piece's tensors and the metadata with save_safetensors
//   (runtime/checkpoint.h): atomic (a .tmp renamed over path), CRC-32 checked, never
//   written through a symbolic link. save(path, group): rank 0 writes, and every rank
//   returns once it has, or throws its Error (on other ranks "rank 0 cannot save: ...").
// - load(path) reads the file (a corrupt one is refused by its checksum), then restore()s it:
//   before anything changes, every entry must belong to a registered piece and fit it (a
//   module's, an optimizer's and a scheduler's own checks; tensors of the same shape and
//   dtype; one entry per tensor and generator), every piece must find its entries, and the
//   iteration must be a decimal integer >= 0. Every problem is named in one Error
//   "<path>: does not fit this checkpoint: '<piece>': <problem>; ..." and nothing changes.
//   Then every piece is restored, iteration and metadata (without "iteration") set from the
//   file. load(path, group): every rank loads the file; if any rank cannot, every rank
//   throws (that rank its own Error, the others one naming the ranks that failed). A rank
//   that has read the file already passes it (`read`) and restores it without reading again.
// - It is training::Checkpoint, in the toolkit's namespace (models/training/): not "train",
//   so that programs written as the README's (using namespace tandem; a function
//   train(...)) call their own train().
// - restore(file) is load's second half, without the path, for callers that check a file's
//   metadata themselves first (tandem-train's Checkpointer); its Error lists the problems.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "autograd/lr_scheduler.h"
#include "autograd/module.h"
#include "autograd/optim.h"
#include "models/training/ema_weights.h"
#include "runtime/checkpoint.h"
#include "runtime/dist/process_group.h"
#include "runtime/rng.h"

namespace tandem::training {

class Checkpoint {
 public:
  void add_module(const std::string& name, nn::Module& module);
  void add_optimizer(const std::string& name, optim::Optimizer& optimizer);
  void add_scheduler(const std::string& name, optim::LrScheduler& scheduler);
  void add_tensors(const std::string& name, std::vector<Tensor>& tensors);
  void add_ema(const std::string& name, EmaWeights& ema);
  void add_generator(const std::string& name, Generator& generator);

  int64_t iteration = 0;
  std::map<std::string, std::string> metadata;

  // The file's tensors as save() writes them (handles on the live state).
  StateDict tensors() const;
  void save(const std::string& path) const;
  void save(const std::string& path, dist::ProcessGroup& group) const;
  void load(const std::string& path);
  // `read`, when given, is the file at `path` as this rank already read it (a resume that
  // chose it by reading it): restored without reading the file again.
  void load(const std::string& path, dist::ProcessGroup& group, const SafetensorsFile* read = nullptr);
  void restore(const SafetensorsFile& file);

 private:
  // One registered piece: its entries (keys without "<name>."), its checks and its restore.
  struct Piece {
    std::string name;
    std::function<StateDict()> state;
    std::function<void(const StateDict&)> check;  // throws an Error naming the problems
    std::function<void(const StateDict&)> restore;
  };
  void add(Piece piece);
  // restore(file), its Error prefixed with `path` as load's.
  void restore_read(const std::string& path, const SafetensorsFile& file);

  std::vector<Piece> pieces_;
};

}  // namespace tandem::training
