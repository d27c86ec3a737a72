#include "runtime/command_line.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/error.h"

namespace tandem {

namespace {

// Beyond this the help line goes below the flag, so one long choice list does not push
// every other help line to the right.
constexpr size_t kMaxFlagColumn = 24;

[[noreturn]] void bad(const std::string& message) { throw UsageError(message); }

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string show_int(const int64_t& value) { return std::to_string(value); }

// Shortest text that reads back as the same double, so --help shows 0.1, not 0.100000.
std::string show_real(const double& value) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, end);
}

std::string show_bytes(const int64_t& bytes) {
  for (auto [shift, suffix] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}}) {
    const int64_t unit = int64_t{1} << shift;
    if (bytes != 0 && bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  }
  return std::to_string(bytes);
}

std::string show_text(const std::string& text) { return text; }

bool whole(const std::string& text, const char* end) { return end == text.data() + text.size(); }

int64_t parse_int(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  const bool overflow = ec == std::errc::result_out_of_range;
  if ((ec != std::errc() && !overflow) || !whole(text, end))
    bad(flag + " needs an integer, got '" + text + "'");
  if (overflow ? text[0] == '-' : value < min)
    bad(flag + " must be at least " + std::to_string(min) + ", got " + text);
  if (overflow || value > max) bad(flag + " must be at most " + std::to_string(max) + ", got " + text);
  return value;
}

double parse_real(const std::string& flag, const std::string& text, double above, double below) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || !whole(text, end) || !std::isfinite(value)) {
    bad(flag + " needs a finite number, got '" + text + "'");
  }
  if (!(value > above)) bad(flag + " must be above " + show_real(above) + ", got " + text);
  if (!(value < below)) bad(flag + " must be below " + show_real(below) + ", got " + text);
  return value;
}

int64_t parse_bytes(const std::string& flag, const std::string& text, int64_t min) {
  double number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  const std::string suffix = ec == std::errc() ? std::string(end, text.data() + text.size()) : "";
  int shift = -1;
  if (suffix.empty()) shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  if (suffix == "M" || suffix == "m") shift = 20;
  if (suffix == "G" || suffix == "g") shift = 30;
  if (ec != std::errc() || shift < 0 || !std::isfinite(number)) {
    bad(flag + " needs a byte count such as 4096, 64K, 256M or 1G, got '" + text + "'");
  }
  const double bytes = std::ldexp(number, shift);
  if (bytes != std::floor(bytes)) bad(flag + " must be a whole number of bytes, got " + text);
  if (bytes < static_cast<double>(min)) bad(flag + " must be at least " + show_bytes(min) + ", got " + text);
  if (bytes >= 0x1p63) bad(flag + " is too large, got " + text);
  return static_cast<int64_t>(bytes);
}

std::string parse_choice(const std::string& flag, const std::string& text,
                         const std::vector<std::string>& choices) {
  if (std::find(choices.begin(), choices.end(), text) == choices.end()) {
    bad(flag + " must be one of " + join(choices, "|") + ", got '" + text + "'");
  }
  return text;
}

// "a,b,,c" -> {"a", "b", "c"}; an empty list is an error.
std::vector<std::string> split_list(const std::string& flag, const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t comma = std::min(text.find(',', begin), text.size());
    if (comma > begin) items.push_back(text.substr(begin, comma - begin));
    begin = comma + 1;
  }
  if (items.empty()) bad(flag + " needs at least one value, got '" + text + "'");
  return items;
}

// One scalar or list kind: how an item reads and how a default shows. The Flag keeps a
// copy, so the closures outlive the add() call.
template <typename T>
struct ValueKind {
  std::string metavar;
  std::function<T(const std::string&)> parse;
  std::string (*show)(const T&);
};

template <typename T>
CommandLine::Flag scalar_flag(const std::string& name, T* field, const std::string& help, ValueKind<T> kind) {
  return {name, kind.metavar, help, kind.show(*field),
          [field, parse = kind.parse](const std::string& text) { *field = parse(text); }};
}

template <typename T>
CommandLine::Flag list_flag(const std::string& name, std::vector<T>* field, const std::string& help,
                            ValueKind<T> kind) {
  std::vector<std::string> shown;
  for (const T& item : *field) shown.push_back(kind.show(item));
  return {name, kind.metavar + ",...", help, join(shown, ","),
          [name, field, parse = kind.parse](const std::string& text) {
            std::vector<T> items;
            for (const std::string& item : split_list(name, text)) items.push_back(parse(item));
            *field = std::move(items);
          }};
}

ValueKind<int64_t> int_kind(const std::string& flag, int64_t min, int64_t max) {
  return {"N", [=](const std::string& text) { return parse_int(flag, text, min, max); }, show_int};
}

ValueKind<double> real_kind(const std::string& flag, double above, double below) {
  return {"X", [=](const std::string& text) { return parse_real(flag, text, above, below); }, show_real};
}

ValueKind<int64_t> bytes_kind(const std::string& flag, int64_t min) {
  return {"BYTES", [=](const std::string& text) { return parse_bytes(flag, text, min); }, show_bytes};
}

}  // namespace

CommandLine::CommandLine(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void CommandLine::add(const std::string& flag, int64_t* field, const std::string& help, int64_t min,
                      int64_t max) {
  add_entry(scalar_flag(flag, field, help, int_kind(flag, min, max)));
}

void CommandLine::add(const std::string& flag, int* field, const std::string& help, int64_t min,
                      int64_t max) {
  min = std::max<int64_t>(min, std::numeric_limits<int>::min());
  max = std::min<int64_t>(max, std::numeric_limits<int>::max());
  add_entry({flag, "N", help, std::to_string(*field), [flag, field, min, max](const std::string& text) {
               *field = static_cast<int>(parse_int(flag, text, min, max));
             }});
}

void CommandLine::add(const std::string& flag, double* field, const std::string& help, double above,
                      double below) {
  add_entry(scalar_flag(flag, field, help, real_kind(flag, above, below)));
}

void CommandLine::add(const std::string& flag, std::string* field, const std::string& help,
                      const std::string& metavar) {
  add_entry(scalar_flag(flag, field, help, ValueKind<std::string>{metavar, show_text, show_text}));
}

void CommandLine::add_bytes(const std::string& flag, int64_t* field, const std::string& help, int64_t min) {
  add_entry(scalar_flag(flag, field, help, bytes_kind(flag, min)));
}

void CommandLine::add_flag(const std::string& flag, bool* field, const std::string& help) {
  add_entry({flag, "", help, "", [field](const std::string&) { *field = true; }});
}

void CommandLine::add_choice(const std::string& flag, std::string* field,
                             const std::vector<std::string>& choices, const std::string& help) {
  add_choice_of(flag, choices, *field, help, [field, choices](size_t i) { *field = choices[i]; });
}

void CommandLine::add_choice_of(const std::string& flag, const std::vector<std::string>& names,
                                const std::string& current, const std::string& help,
                                std::function<void(size_t)> pick) {
  TANDEM_CHECK(!names.empty(), flag << " has no choices");
  add_entry({flag, join(names, "|"), help, current, [flag, names, pick](const std::string& text) {
               parse_choice(flag, text, names);
               pick(static_cast<size_t>(std::find(names.begin(), names.end(), text) - names.begin()));
             }});
}

void CommandLine::add_list(const std::string& flag, std::vector<std::string>* field, const std::string& help,
                           const std::vector<std::string>& choices) {
  ValueKind<std::string> kind{"TEXT", show_text, show_text};
  if (!choices.empty()) {
    kind.metavar = join(choices, "|");
    kind.parse = [flag, choices](const std::string& text) { return parse_choice(flag, text, choices); };
  }
  add_entry(list_flag(flag, field, help, kind));
}

void CommandLine::add_list(const std::string& flag, std::vector<int64_t>* field, const std::string& help,
                           int64_t min, int64_t max) {
  add_entry(list_flag(flag, field, help, int_kind(flag, min, max)));
}

void CommandLine::add_list(const std::string& flag, std::vector<double>* field, const std::string& help,
                           double above, double below) {
  add_entry(list_flag(flag, field, help, real_kind(flag, above, below)));
}

void CommandLine::add_bytes_list(const std::string& flag, std::vector<int64_t>* field,
                                 const std::string& help, int64_t min) {
  add_entry(list_flag(flag, field, help, bytes_kind(flag, min)));
}

void CommandLine::add_entry(Flag flag) {
  TANDEM_CHECK(flag.name.size() > 2 && flag.name.rfind("--", 0) == 0 &&
                   flag.name.find_first_of("= \t") == std::string::npos,
               program_ << ": a flag is --name, not '" << flag.name << "'");
  TANDEM_CHECK(flag.name != "--help", program_ << ": --help is built in");
  TANDEM_CHECK(!find(flag.name), program_ << ": " << flag.name << " is added twice");
  flags_.push_back(std::move(flag));
}

const CommandLine::Flag* CommandLine::find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool CommandLine::try_parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (name == "--help" || name == "-h") return false;
    const size_t eq = name.find('=');
    const bool inline_value = name.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const Flag* flag = find(name);
    if (!flag) bad((name.rfind("-", 0) == 0 ? "unknown flag '" : "unexpected argument '") + args[i] + "'");
    if (flag->metavar.empty()) {
      if (inline_value) bad(name + " takes no value, got '" + value + "'");
    } else if (!inline_value) {
      // A flag where the value should be is almost always a value left out, not a value.
      if (i + 1 >= args.size()) bad(name + " needs a value (" + flag->metavar + ")");
      value = args[++i];
      if (find(value) || value == "--help")
        bad(name + " needs a value (" + flag->metavar + "), got flag " + value);
    }
    flag->set(value);
  }
  return true;
}

void CommandLine::parse(int argc, const char* const* argv) {
  bool run = false;
  try {
    run = try_parse(std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
  } catch (const UsageError& e) {
    exit_usage(e.what());
  }
  if (!run) {
    std::fputs(usage().c_str(), stdout);
    std::exit(0);
  }
}

void CommandLine::exit_usage(const std::string& problem) const {
  std::fprintf(stderr, "%s: %s (see --help)\n", program_.c_str(), problem.c_str());
  std::exit(2);
}

std::string CommandLine::usage() const {
  std::vector<std::pair<std::string, std::string>> rows;
  bool lists = false, bytes = false;
  for (const Flag& f : flags_) {
    rows.emplace_back(f.name + (f.metavar.empty() ? "" : " " + f.metavar),
                      f.help + (f.default_text.empty() ? "" : " (default: " + f.default_text + ")"));
    lists = lists || f.metavar.ends_with(",...");
    bytes = bytes || f.metavar.starts_with("BYTES");
  }
  rows.emplace_back("--help", "this text");
  size_t width = 0;
  for (const auto& [left, right] : rows) {
    if (left.size() <= kMaxFlagColumn) width = std::max(width, left.size());
  }
  std::string out = "usage: " + program_ + " [flags]\n\n";
  if (!summary_.empty()) out += summary_ + (summary_.back() == '\n' ? "\n" : "\n\n");
  for (const auto& [left, right] : rows) {
    out += "  " + left;
    if (left.size() > width)
      out += "\n  " + std::string(width, ' ');
    else
      out += std::string(width - left.size(), ' ');
    out += "  " + right + "\n";
  }
  if (lists) out += "\nLists are comma-separated.\n";
  if (bytes)
    out += (lists ? "" : "\n") +
           std::string(
               "BYTES: a byte count with an optional K, M or G suffix (powers of 1024): 4096, 64K, 1.5M.\n");
  return out;
}

}  // namespace tandem
