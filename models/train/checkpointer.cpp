#include "models/train/checkpointer.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>

#include "runtime/checkpoint.h"
#include "runtime/error.h"

namespace tandem::models {

namespace {

// The optimizers a checkpoint holds, with the prefix of their entries.
std::array<std::pair<std::string, optim::Optimizer*>, 2> optimizers_of(const TrainState& state) {
  return {{{"optim.generator.", &state.opt_g}, {"optim.discriminator.", &state.opt_d}}};
}

// "--batch 8 --lr 0.0002"
std::string joined(const std::vector<std::string>& parts, const std::string& separator = " ") {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}

// What `check` throws about the file at `path`, starting with the path; "" when nothing.
template <typename Check>
std::string problem_of(const std::string& path, Check check) {
  try {
    check();
  } catch (const Error& e) {
    return e.message();
  } catch (const std::exception& e) {
    return path + ": " + e.what();
  }
  return "";
}

}  // namespace

ResumeChoice choose_resume(const std::vector<CheckpointFile>& files, const std::string& dir, bool allow_fresh,
                           bool skip_damaged) {
  auto readable = [](const CheckpointFile& f) { return f.problem.empty(); };
  ResumeChoice choice;
  auto chosen = std::find_if(files.begin(), files.end(), readable);
  std::vector<std::string> problems;  // of the files newer than the chosen one
  for (auto it = files.begin(); it != chosen; ++it) {
    problems.push_back(it->problem);
    choice.warnings.push_back("--resume skips " + it->problem);
  }
  if (chosen != files.end()) {
    choice.path = chosen->path;
    auto older = std::find_if(chosen + 1, files.end(), readable);
    if (older != files.end()) choice.older = older->path;
  }
  if (!choice.path.empty() && !problems.empty() && !skip_damaged) {
    // One flipped bit is one outcome, in the header or in the data: the run stops.
    choice.warnings.clear();
    const bool one = problems.size() == 1;
    choice.refusal =
        "--resume: " + joined(problems, "; ") + (one ? ". It is" : ". They are") + " newer than " +
        choice.path + ", the newest checkpoint that can be read. Repair or move the damaged " +
        (one ? "file" : "files") + " away, or pass --resume-skip-damaged to resume from " + choice.path;
    choice.path.clear();
    choice.older.clear();
    return choice;
  }
  if (!choice.path.empty()) return choice;
  if (files.empty()) {  // a typo in --out would silently start anew
    if (allow_fresh) {
      choice.warnings.push_back("--resume-allow-fresh: no checkpoint in " + dir +
                                "; starting from iteration 0");
    } else {
      choice.refusal = "--resume: no checkpoint in " + dir + " (no " + kCheckpointPrefix +
                       "-*.safetensors file there). Check the --out path, or pass --resume-allow-fresh to "
                       "start from iteration 0";
    }
    return choice;
  }
  if (allow_fresh) {
    choice.warnings.push_back(
        "--resume-allow-fresh: no checkpoint in " + dir +
        " can be read; starting from iteration 0 (later resumes skip those files again)");
    return choice;
  }
  choice.warnings.clear();
  choice.refusal = "--resume: no checkpoint in " + dir + " can be read (" + joined(problems, "; ") +
                   "). Repair or move them away, or pass --resume-allow-fresh to start from iteration 0";
  return choice;
}

Checkpointer::Checkpointer(std::string dir, RunIdentity run, TrainState state)
    : dir_(std::move(dir)), run_(run), state_(state) {}

std::string Checkpointer::path(int64_t iteration) const {
  return checkpoint_path(dir_, kCheckpointPrefix, iteration);
}

std::vector<CheckpointFile> Checkpointer::scan() const {
  namespace fs = std::filesystem;
  const std::string head = std::string(kCheckpointPrefix) + "-", tail = ".safetensors";
  std::vector<CheckpointFile> files;
  std::error_code ec;
  fs::directory_iterator it(dir_, ec);
  if (ec) return files;
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
      continue;
    }
    const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
    int64_t iteration = 0;
    auto [end, parse_ec] = std::from_chars(digits.data(), digits.data() + digits.size(), iteration);
    if (parse_ec != std::errc() || end != digits.data() + digits.size() || digits[0] == '-') continue;
    CheckpointFile file{
        .path = entry.path().string(), .iteration = iteration, .problem = "", .loaded = nullptr};
    std::error_code type_ec;
    if (!entry.is_regular_file(type_ec)) {
      file.problem = file.path + ": not a regular file";
    } else {
      file.problem = problem_of(file.path, [&] { read_safetensors_header(file.path); });
    }
    files.push_back(std::move(file));
  }
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.iteration > b.iteration; });
  return files;
}

std::vector<CheckpointFile> Checkpointer::scan_for_resume() const {
  std::vector<CheckpointFile> files = scan();
  for (CheckpointFile& file : files) {
    if (!file.problem.empty()) continue;
    file.problem = problem_of(file.path, [&] {
      file.loaded = std::make_shared<const SafetensorsFile>(load_safetensors(file.path));
    });
    if (file.problem.empty()) break;  // the one to resume from: older files need not be read
  }
  return files;
}

std::optional<std::string> Checkpointer::newest() const {
  for (const CheckpointFile& file : scan()) {
    if (file.problem.empty()) return file.path;
  }
  return std::nullopt;
}

training::Checkpoint Checkpointer::checkpoint() const {
  training::Checkpoint checkpoint;
  checkpoint.add_module("model", state_.model);
  for (const auto& [prefix, optimizer] : optimizers_of(state_))
    checkpoint.add_optimizer(prefix.substr(0, prefix.size() - 1), *optimizer);
  checkpoint.add_tensors("ema", state_.ema);
  if (state_.augment != nullptr) checkpoint.add_tensors("augment", *state_.augment);
  if (state_.scaler_g != nullptr) checkpoint.add_tensors("scaler.generator", *state_.scaler_g);
  if (state_.scaler_d != nullptr) checkpoint.add_tensors("scaler.discriminator", *state_.scaler_d);
  return checkpoint;
}

std::string Checkpointer::save(int64_t iteration) const {
  training::Checkpoint checkpoint = this->checkpoint();
  checkpoint.iteration = iteration;
  checkpoint.metadata = {{"model", state_.model.type_name()},
                         {"world_size", std::to_string(run_.world_size)}};
  for (const RunSetting& setting : run_.settings) {
    if (setting.kept_on_resume) checkpoint.metadata[setting.metadata_key()] = setting.value;
  }
  std::string file = path(iteration);
  checkpoint.save(file);
  return file;
}

namespace {

// The metadata entry `key` of the checkpoint at `path`.
std::string meta(const std::string& path, const SafetensorsFile& file, const std::string& key) {
  auto it = file.metadata.find(key);
  TANDEM_CHECK(it != file.metadata.end(),
               path << ": not a tandem-train checkpoint (no '" << key << "' in its metadata)");
  return it->second;
}

// Integers exactly as save() writes them: digits only, within range.
int64_t meta_int(const std::string& path, const SafetensorsFile& file, const std::string& key, int64_t min) {
  const std::string text = meta(path, file, key);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  TANDEM_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && value >= min,
               path << ": metadata '" << key << "' is '" << text << "', not an integer >= " << min);
  return value;
}

// The model and the average; optimizer entries are checked once, by the optimizers'
// load_state_dict (finite moments, a positive lr, ...), which name the entry too.
void check_finite(const std::string& path, const SafetensorsFile& file) {
  for (const auto& [name, t] : file.tensors) {
    if (!is_floating(t.dtype()) || name.rfind("optim.", 0) == 0) continue;
    const std::vector<double> values = t.to_vector();
    auto bad = std::find_if(values.begin(), values.end(), [](double x) { return !std::isfinite(x); });
    TANDEM_CHECK(bad == values.end(), path << ": tensor '" << name << "' holds " << *bad << " at element "
                                           << (bad - values.begin()) << "; a checkpoint must be finite");
  }
}

// save() writes every tensor in the dtype it restores into: another dtype is a file that
// was rewritten, and converting it would not continue the run bit for bit.
void check_dtypes(const std::string& path, const SafetensorsFile& file, const TrainState& state) {
  auto check_dtype = [&](const std::string& name, DType expected) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) return;  // a missing entry is named by the loaders
    TANDEM_CHECK(it->second.dtype() == expected, path << ": tensor '" << name << "' is "
                                                      << dtype_name(it->second.dtype()) << ", not "
                                                      << dtype_name(expected) << " as this run keeps it");
  };
  for (const auto& [name, live] : state.model.state_dict()) check_dtype("model." + name, live.dtype());
  for (size_t i = 0; i < state.ema.size(); ++i) check_dtype("ema." + std::to_string(i), state.ema[i].dtype());
  for (const auto& [prefix, optimizer] : optimizers_of(state)) {
    const std::string state_prefix = prefix + "state.";
    for (const auto& [name, t] : file.tensors) {
      if (name.rfind(state_prefix, 0) != 0) continue;
      const std::string rest = name.substr(state_prefix.size());  // "<i>.<key>"
      const size_t dot = rest.find('.');
      size_t index = 0;
      auto [end, ec] =
          std::from_chars(rest.data(), rest.data() + (dot == std::string::npos ? 0 : dot), index);
      if (ec != std::errc() || index >= optimizer->params().size()) continue;  // the optimizer names it
      if (rest.substr(dot + 1) != "step") check_dtype(name, optimizer->params()[index].dtype());
    }
  }
}

void check_model(const std::string& path, const SafetensorsFile& file, const GanModel& model) {
  const std::string model_name = meta(path, file, "model");
  TANDEM_CHECK(model_name == model.type_name(), path << ": checkpoint of model '" << model_name
                                                     << "', but this run trains '" << model.type_name()
                                                     << "'");
}

void check_world_size(const std::string& path, const SafetensorsFile& file, const RunIdentity& run) {
  const int64_t saved_world = meta_int(path, file, "world_size", 1);
  if (saved_world == run.world_size) return;
  const bool has_global_batch = file.metadata.count("global_batch") == 1;
  const std::string global_batch = has_global_batch ? " " + file.metadata.at("global_batch") : " B";
  TANDEM_CHECK(run.elastic, path << ": written by a run of " << saved_world << " ranks; resuming on "
                                 << run.world_size
                                 << " ranks changes every rank's share of the global batch. Resume with "
                                    "mpirun -np "
                                 << saved_world << ", or pass --global-batch" << global_batch
                                 << " (the global batch it was written with) to resume at another number "
                                    "of ranks, or start a new run in another --out");
  TANDEM_CHECK(has_global_batch, path << ": written by a run of " << saved_world
                                      << " ranks before checkpoints recorded the global batch; resume it "
                                         "with mpirun -np "
                                      << saved_world);
}

// A resume continues the same run: a setting that shapes it is refused, never overridden.
void check_kept_settings(const std::string& path, const SafetensorsFile& file, const RunIdentity& run) {
  std::vector<std::string> written_with, this_run;
  // A setting the file predates counts as value_when_absent, named only when nothing recorded
  // differs: a file that differs elsewhere (not lazy R1, say) may not have had it apply.
  for (bool recorded : {true, false}) {
    if (!recorded && !written_with.empty()) break;
    for (const RunSetting& setting : run.settings) {
      auto it = file.metadata.find(setting.metadata_key());
      if (!setting.kept_on_resume || (it != file.metadata.end()) != recorded) continue;
      const std::string saved_value = recorded ? it->second : value_when_absent(setting);
      if (saved_value.empty() || saved_value == setting.value) continue;
      if (run.elastic && setting.flag == "--batch") continue;  // the share of the global batch, compared
      RunSetting saved = setting;
      saved.value = saved_value;
      written_with.push_back(saved.as_written());
      this_run.push_back(setting.as_written());
    }
  }
  TANDEM_CHECK(written_with.empty(), path << ": written with " << joined(written_with) << ", this run has "
                                          << joined(this_run)
                                          << ". A resume continues the same run: resume with "
                                          << joined(written_with) << ", or start a new run in another --out");
}

// The optimizers restore their learning rate; it must be the one this run has at `iteration`:
// its schedule's there, else --lr. Not a repeat of the --lr setting's check: this one holds
// for checkpoints that do not record lr in their metadata, and for a rate the file's
// optimizer state would otherwise bring back unseen.
void check_learning_rates(const std::string& path, const SafetensorsFile& file, const TrainState& state,
                          int64_t iteration) {
  for (const auto& [prefix, optimizer] : optimizers_of(state)) {
    auto it = file.tensors.find(prefix + "lr");
    if (it == file.tensors.end() || it->second.numel() != 1) continue;  // the optimizer names what is wrong
    const double saved_lr = it->second.to_vector()[0];
    if (!std::isfinite(saved_lr)) continue;
    const std::optional<double> scheduled =
        state.scheduler ? state.scheduler->scheduled_lr(*optimizer, iteration) : std::nullopt;
    if (scheduled) {
      TANDEM_CHECK(
          saved_lr == *scheduled,
          path << ": its learning rate at iteration " << iteration << " is " << canonical_number(saved_lr)
               << " (" << prefix << "lr), but this run's --lr and --lr-schedule "
               << state.scheduler->schedule().str() << " give " << canonical_number(*scheduled)
               << " there. A resume continues the same run: resume with the flags that wrote it, or start "
                  "a new run in another --out");
      continue;
    }
    TANDEM_CHECK(saved_lr == optimizer->lr(),
                 path << ": written with --lr " << canonical_number(saved_lr) << " (" << prefix
                      << "lr), this run has --lr " << canonical_number(optimizer->lr())
                      << ". A resume continues the same run: resume with --lr " << canonical_number(saved_lr)
                      << ", or start a new run in another --out");
  }
}

}  // namespace

int64_t Checkpointer::load(const std::string& path, const SafetensorsFile* loaded) const {
  SafetensorsFile file = loaded != nullptr ? *loaded : load_safetensors(path);  // a copy shares the tensors
  const int64_t iteration = verify_compatible(path, file);
  restore(path, std::move(file));
  return iteration;
}

int64_t Checkpointer::verify_compatible(const std::string& path, const SafetensorsFile& file) const {
  check_finite(path, file);
  check_dtypes(path, file, state_);
  check_model(path, file, state_.model);
  check_world_size(path, file, run_);
  check_kept_settings(path, file, run_);
  const int64_t iteration = meta_int(path, file, "iteration", 0);
  check_learning_rates(path, file, state_, iteration);
  return iteration;
}

void Checkpointer::restore(const std::string& path, SafetensorsFile file) const {
  try {
    const std::vector<Tensor>& ema = state_.ema;
    if (ema.empty()) {  // a run without the average resumes one that kept it, ignoring it
      std::erase_if(file.tensors, [](const auto& entry) { return entry.first.rfind("ema.", 0) == 0; });
    }
    // A file without any average: say why it may be so. Anything else that does not fit
    // (the model first) is named by the checkpoint.
    const bool has_ema = std::any_of(file.tensors.begin(), file.tensors.end(),
                                     [](const auto& entry) { return entry.first.rfind("ema.", 0) == 0; });
    TANDEM_CHECK(ema.empty() || has_ema, "no moving-average entry 'ema.0' of shape "
                                             << shape_str(ema[0].shape())
                                             << " (written with --ema-decay 0?)");
    checkpoint().restore(file);  // all or nothing
  } catch (const Error& e) {
    TANDEM_FAIL(path << ": does not fit this model: " << e.message());
  }
}

CheckpointGenerator load_checkpoint_generator(const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  const auto type = file.metadata.find("model");
  TANDEM_CHECK(type != file.metadata.end(),
               path << ": not a tandem-train checkpoint (no 'model' in its metadata)");
  const bool dynamic = type->second == "mlp (dynamic)";
  const std::string name = dynamic ? "mlp" : type->second;
  TANDEM_CHECK(name == "ring8-mlp" || name == "mlp" || name == "dcgan",
               path << ": a checkpoint of " << type->second
                    << ", whose architecture its name does not fix; this takes ring8-mlp, mlp or dcgan");
  CheckpointGenerator out{.model = make_gan({.model = name, .dynamic = dynamic}), .from_average = false};
  StateDict state;
  for (const auto& [key, t] : file.tensors) {
    if (key.rfind("model.", 0) == 0) state.emplace(key.substr(6), t);
  }
  try {
    out.model->load_state_dict(state);
  } catch (const Error& e) {
    TANDEM_FAIL(path << ": " << e.message());
  }
  out.from_average = file.tensors.count("ema.0") == 1;
  if (!out.from_average) return out;
  std::vector<Variable> g = out.model->generator->parameters();
  for (size_t k = 0; k < g.size(); ++k) {
    const auto found = file.tensors.find("ema." + std::to_string(k));
    TANDEM_CHECK(
        found != file.tensors.end() && found->second.shape() == g[k].data().shape(),
        path << ": no moving-average entry 'ema." << k << "' of shape " << shape_str(g[k].data().shape()));
    g[k].data().copy_(found->second);
  }
  return out;
}

}  // namespace tandem::models
