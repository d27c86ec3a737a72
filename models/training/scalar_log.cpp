#include "models/training/scalar_log.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "runtime/error.h"
#include "runtime/tensor.h"

namespace tandem::training {

namespace {

void write_json_string(std::ostream& os, const std::string& text) {
  os << '"';
  for (char c : text) {
    if (c == '"' || c == '\\') {
      os << '\\' << c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(c));
      os << escaped;
    } else {
      os << c;
    }
  }
  os << '"';
}

// A JSON string starting at text[at] == '"'; moves `at` past it. nullopt when torn.
std::optional<std::string> read_json_string(const std::string& text, size_t& at) {
  if (at >= text.size() || text[at] != '"') return std::nullopt;
  std::string out;
  for (++at; at < text.size(); ++at) {
    const char c = text[at];
    if (c == '"') {
      ++at;
      return out;
    }
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++at >= text.size()) return std::nullopt;
    const char e = text[at];
    if (e == 'u') {
      if (at + 4 >= text.size()) return std::nullopt;
      out += static_cast<char>(std::strtol(text.substr(at + 1, 4).c_str(), nullptr, 16));
      at += 4;
    } else {
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'b' ? '\b' : e == 'f' ? '\f' : e;
    }
  }
  return std::nullopt;
}

// Moves `at` past one JSON value that is not a number (an array, a string, a literal).
bool skip_json_value(const std::string& text, size_t& at) {
  if (at < text.size() && text[at] == '"') return read_json_string(text, at).has_value();
  int depth = 0;
  for (; at < text.size(); ++at) {
    const char c = text[at];
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth == 0 && (c == ',' || c == '}')) return true;
    if (depth < 0 || c == '{') return false;
  }
  return false;
}

}  // namespace

std::string scalars_json(int64_t iteration, const Scalars& scalars) {
  std::ostringstream os;
  os << "{\"iteration\": " << iteration;
  for (const auto& [name, value] : scalars) {
    os << ", ";
    write_json_string(os, name);
    os << ": ";
    write_json_number(os, value);
  }
  os << "}";
  return os.str();
}

std::optional<std::pair<int64_t, Scalars>> parse_scalars_json(const std::string& line) {
  const std::string head = "{\"iteration\": ";
  if (!line.starts_with(head) || !line.ends_with("}")) return std::nullopt;
  int64_t iteration = 0;
  size_t at = head.size();
  auto [end, ec] = std::from_chars(line.data() + at, line.data() + line.size(), iteration);
  if (ec != std::errc() || end == line.data() + at) return std::nullopt;
  at = static_cast<size_t>(end - line.data());
  Scalars scalars;
  while (at < line.size() && line[at] == ',') {
    at += 1;
    while (at < line.size() && line[at] == ' ') ++at;
    std::optional<std::string> name = read_json_string(line, at);
    if (!name || line.compare(at, 2, ": ") != 0) return std::nullopt;
    at += 2;
    if (line.compare(at, 4, "null") == 0) {  // a non-finite value (metrics_file.h)
      at += 4;
      scalars.emplace_back(*name, std::nan(""));
      continue;
    }
    const char* first = line.c_str() + at;
    char* number_end = nullptr;
    const double value = std::strtod(first, &number_end);
    // strtod also reads "nan" and "inf"; JSON's literals (true, null) are not numbers.
    if (number_end != first && (*first == '-' || *first == 'N' || *first == 'I' || std::isdigit(*first))) {
      at += static_cast<size_t>(number_end - first);
      scalars.emplace_back(*name, value);
    } else if (!skip_json_value(line, at)) {
      return std::nullopt;
    }
  }
  if (at + 1 != line.size()) return std::nullopt;  // the closing brace, and nothing after it
  return std::make_pair(iteration, std::move(scalars));
}

ScalarLog::ScalarLog(const std::string& dir, dist::ProcessGroup* world, int64_t resume_iteration)
    : world_(world), path_((std::filesystem::path(dir) / kMetricsFile).string()) {
  if (world_ == nullptr || world_->rank() == 0) {
    std::error_code ignored;  // a directory that cannot be made: the open below names the file
    std::filesystem::create_directories(dir, ignored);
    file_.emplace(dir, resume_iteration);
  }
}

Scalars ScalarLog::log(int64_t iteration, const Scalars& scalars, Reduce reduce) {
  Scalars logged = scalars;
  if (reduce == Reduce::mean && world_ != nullptr && world_->size() > 1 && !scalars.empty()) {
    const int64_t count = static_cast<int64_t>(scalars.size());
    Tensor values = Tensor::zeros({count}, DType::f64);
    for (int64_t i = 0; i < count; ++i) values.data<double>()[i] = scalars[i].second;
    dist::allreduce_host(*world_, values, dist::ReduceOp::sum, "logged scalars");
    for (int64_t i = 0; i < count; ++i)
      logged[i].second = values.data<double>()[i] / static_cast<double>(world_->size());
  }
  if (file_) {
    file_->write_line(scalars_json(iteration, logged), iteration);
    for (ScalarSink* sink : sinks_) sink->add_scalars(iteration, logged);
  }
  return logged;
}

}  // namespace tandem::training
