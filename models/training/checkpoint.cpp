#include "models/training/checkpoint.h"

#include <charconv>
#include <cstring>
#include <exception>

#include "runtime/error.h"

namespace tandem::training {

namespace {

constexpr const char* kIterationKey = "iteration";

// A list of tensors restored in place: the same count, shapes and dtypes (a converted
// tensor would not continue the run bit for bit).
void check_tensor_list(const std::vector<Tensor>& live, const StateDict& saved) {
  std::vector<std::string> problems;
  for (size_t k = 0; k < live.size(); ++k) {
    auto it = saved.find(std::to_string(k));
    if (it == saved.end()) {
      problems.push_back("missing entry '" + std::to_string(k) + "' (" + live[k].str() + ")");
    } else if (it->second.shape() != live[k].shape() || it->second.dtype() != live[k].dtype()) {
      problems.push_back("entry '" + std::to_string(k) + "' is " + it->second.str() + ", not " +
                         live[k].str());
    }
  }
  for (const auto& [key, t] : saved) {
    int64_t k = -1;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), k);
    if (ec != std::errc() || end != key.data() + key.size() || k < 0 ||
        k >= static_cast<int64_t>(live.size()) || key != std::to_string(k))
      problems.push_back("unexpected entry '" + key + "' (" + t.str() + ")");
  }
  if (problems.empty()) return;
  std::string all;
  for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
  TANDEM_FAIL(all);
}

void restore_tensor_list(std::vector<Tensor>& live, const StateDict& saved) {
  for (size_t k = 0; k < live.size(); ++k) live[k].copy_(saved.at(std::to_string(k)));
}

// A generator's state as the int64 bits of its seed and counter.
Tensor generator_tensor(const Generator& g) {
  Tensor t = Tensor::empty({2}, DType::i64);
  const Generator::State s = g.state();
  std::memcpy(t.data<int64_t>(), &s.seed, sizeof s.seed);
  std::memcpy(t.data<int64_t>() + 1, &s.counter, sizeof s.counter);
  return t;
}

void check_generator(const StateDict& saved) {
  auto it = saved.find("state");
  TANDEM_CHECK(it != saved.end(), "missing entry 'state' (int64[2]: the seed and counter)");
  TANDEM_CHECK(it->second.dtype() == DType::i64 && it->second.shape() == Shape{2},
               "entry 'state' is " << it->second.str() << ", not int64[2] (the seed and counter)");
  for (const auto& [key, t] : saved)
    TANDEM_CHECK(key == "state", "unexpected entry '" << key << "' (" << t.str() << ")");
}

int64_t parse_iteration(const std::map<std::string, std::string>& metadata) {
  auto it = metadata.find(kIterationKey);
  TANDEM_CHECK(it != metadata.end(), "no '" << kIterationKey << "' in its metadata");
  const std::string& text = it->second;
  int64_t value = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  TANDEM_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && value >= 0,
               "metadata '" << kIterationKey << "' is '" << text << "', not an integer >= 0");
  return value;
}

// What `fn` throws, as a message ("" when it returns). Any exception: the other ranks wait
// for word of a failure all the same.
std::string failure_of(const std::function<void()>& fn, const std::string& prefix) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  } catch (const std::exception& e) {
    return prefix + e.what();
  }
  return "";
}

}  // namespace

void Checkpoint::add(Piece piece) {
  TANDEM_CHECK(!piece.name.empty(), "Checkpoint: a piece needs a name");
  for (const Piece& other : pieces_) {
    const std::string& a = piece.name;
    const std::string& b = other.name;
    TANDEM_CHECK(a != b, "Checkpoint: '" << a << "' is registered twice");
    TANDEM_CHECK(a.rfind(b + ".", 0) != 0 && b.rfind(a + ".", 0) != 0,
                 "Checkpoint: the names '"
                     << b << "' and '" << a
                     << "' overlap (one is the other's prefix): their entries would mix");
  }
  pieces_.push_back(std::move(piece));
}

void Checkpoint::add_module(const std::string& name, nn::Module& module) {
  add({.name = name,
       .state = [&module] { return module.state_dict(); },
       .check =
           [&module](const StateDict& saved) {
             module.check_state_dict(saved);
             // Dtypes too: a converted tensor would not continue the run bit for bit.
             for (const auto& [key, live] : module.state_dict()) {
               const Tensor& t = saved.at(key);
               TANDEM_CHECK(t.dtype() == live.dtype(),
                            "entry '" << key << "' is " << t.str() << ", the module keeps " << live.str());
             }
           },
       .restore = [&module](const StateDict& saved) { module.load_state_dict(saved); }});
}

void Checkpoint::add_optimizer(const std::string& name, optim::Optimizer& optimizer) {
  add({.name = name,
       .state = [&optimizer] { return optimizer.state_dict(); },
       .check = [&optimizer](const StateDict& saved) { optimizer.check_state_dict(saved); },
       .restore = [&optimizer](const StateDict& saved) { optimizer.load_state_dict(saved); }});
}

void Checkpoint::add_scheduler(const std::string& name, optim::LrScheduler& scheduler) {
  add({.name = name,
       .state = [&scheduler] { return scheduler.state_dict(); },
       .check = [&scheduler](const StateDict& saved) { scheduler.check_state_dict(saved); },
       .restore = [&scheduler](const StateDict& saved) { scheduler.load_state_dict(saved); }});
}

void Checkpoint::add_tensors(const std::string& name, std::vector<Tensor>& tensors) {
  add({.name = name,
       .state =
           [&tensors] {
             StateDict out;
             for (size_t k = 0; k < tensors.size(); ++k) out.emplace(std::to_string(k), tensors[k]);
             return out;
           },
       .check = [&tensors](const StateDict& saved) { check_tensor_list(tensors, saved); },
       .restore = [&tensors](const StateDict& saved) { restore_tensor_list(tensors, saved); }});
}

void Checkpoint::add_ema(const std::string& name, EmaWeights& ema) { add_tensors(name, ema.tensors()); }

void Checkpoint::add_generator(const std::string& name, Generator& generator) {
  add({.name = name,
       .state =
           [&generator] {
             return StateDict{{"state", generator_tensor(generator)}};
           },
       .check = check_generator,
       .restore =
           [&generator](const StateDict& saved) {
             Generator::State s;
             const Tensor& t = saved.at("state");
             std::memcpy(&s.seed, t.data<int64_t>(), sizeof s.seed);
             std::memcpy(&s.counter, t.data<int64_t>() + 1, sizeof s.counter);
             generator.set_state(s);
           }});
}

StateDict Checkpoint::tensors() const {
  StateDict out;
  for (const Piece& piece : pieces_) {
    for (auto& [key, t] : piece.state()) out.emplace(piece.name + "." + key, t);
  }
  return out;
}

void Checkpoint::save(const std::string& path) const {
  TANDEM_CHECK(iteration >= 0, path << ": cannot save checkpoint: iteration " << iteration << " is negative");
  TANDEM_CHECK(!metadata.count(kIterationKey), path << ": cannot save checkpoint: the metadata key '"
                                                    << kIterationKey
                                                    << "' is reserved (set Checkpoint::iteration)");
  std::map<std::string, std::string> all = metadata;
  all[kIterationKey] = std::to_string(iteration);
  save_safetensors(path, tensors(), all);
}

void Checkpoint::save(const std::string& path, dist::ProcessGroup& group) const {
  std::string refusal;
  if (group.rank() == 0) refusal = failure_of([&] { save(path); }, path + ": cannot save checkpoint: ");
  // Every rank waits for rank 0's file, and fails with it.
  refusal = dist::broadcast_string(group, refusal, 0, "checkpoint save");
  TANDEM_CHECK(refusal.empty(), (group.rank() == 0 ? "" : "rank 0 cannot save: ") << refusal);
}

void Checkpoint::restore(const SafetensorsFile& file) {
  std::vector<StateDict> saved(pieces_.size());
  std::vector<std::string> problems;
  for (const auto& [name, t] : file.tensors) {
    size_t owner = 0;
    while (owner < pieces_.size() && name.rfind(pieces_[owner].name + ".", 0) != 0) ++owner;
    if (owner == pieces_.size()) {
      problems.push_back("unexpected entry '" + name + "' (" + t.str() + "): no piece registered for it");
      continue;
    }
    saved[owner].emplace(name.substr(pieces_[owner].name.size() + 1), t);
  }
  for (size_t i = 0; i < pieces_.size(); ++i) {
    try {
      pieces_[i].check(saved[i]);
    } catch (const Error& e) {
      problems.push_back("'" + pieces_[i].name + "': " + e.message());
    }
  }
  int64_t saved_iteration = 0;
  try {
    saved_iteration = parse_iteration(file.metadata);
  } catch (const Error& e) {
    problems.push_back(e.message());
  }
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p;
    TANDEM_FAIL(all);
  }
  for (size_t i = 0; i < pieces_.size(); ++i) pieces_[i].restore(saved[i]);
  iteration = saved_iteration;
  metadata = file.metadata;
  metadata.erase(kIterationKey);
}

void Checkpoint::load(const std::string& path) { restore_read(path, load_safetensors(path)); }

void Checkpoint::restore_read(const std::string& path, const SafetensorsFile& file) {
  try {
    restore(file);
  } catch (const Error& e) {
    TANDEM_FAIL(path << ": does not fit this checkpoint: " << e.message());
  }
}

void Checkpoint::load(const std::string& path, dist::ProcessGroup& group, const SafetensorsFile* read) {
  const std::string failure = failure_of([&] { read != nullptr ? restore_read(path, *read) : load(path); },
                                         path + ": cannot load checkpoint: ");
  // Ranks that could not load it: each flags its own slot.
  Tensor failed = Tensor::zeros({group.size()}, DType::f64);
  failed.data<double>()[group.rank()] = failure.empty() ? 0.0 : 1.0;
  dist::allreduce_host(group, failed, dist::ReduceOp::sum, "checkpoint load");
  TANDEM_CHECK(failure.empty(), failure);
  std::string ranks;
  for (int r = 0; r < group.size(); ++r)
    if (failed.data<double>()[r] != 0.0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  TANDEM_CHECK(ranks.empty(), path << ": rank(s) " << ranks << " cannot load it (each says why)");
}

}  // namespace tandem::training
