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
// Help text is wrapped to lines this wide.
constexpr size_t kHelpColumns = 100;

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

// Words separated by spaces; a help line is wrapped between them.
std::vector<std::string> split_words(const std::string& text) {
  std::vector<std::string> words;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t space = std::min(text.find(' ', begin), text.size());
    if (space > begin) words.push_back(text.substr(begin, space - begin));
    begin = space + 1;
  }
  return words;
}

// `words` on lines of at most kHelpColumns - indent characters, joined by a newline and
// `indent` spaces; a word longer than that has a line of its own.
std::string wrap(const std::vector<std::string>& words, size_t indent) {
  const size_t room = kHelpColumns > indent + 20 ? kHelpColumns - indent : 20;
  std::string out;
  size_t line = 0;
  for (const std::string& word : words) {
    if (line > 0 && line + 1 + word.size() > room) {
      out += '\n';
      out.append(indent, ' ');
      line = 0;
    }
    if (line > 0) {
      out += ' ';
      ++line;
    }
    out += word;
    line += word.size();
  }
  return out;
}

// Text in a Markdown table cell: a '|' would end the cell.
std::string table_cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string code_span(const std::string& text) {
  std::string out = "`";
  out += text;
  out += '`';
  return out;
}

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

// A positive finite real below `below`; with zero_is_off, 0 too.
double parse_positive(const std::string& flag, const std::string& text, bool zero_is_off, double below) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || !whole(text, end)) bad(flag + " needs a number, got '" + text + "'");
  if (zero_is_off && value == 0) return 0.0;
  if (!(value > 0) || !std::isfinite(value)) {
    bad(flag +
        (zero_is_off ? " must be a finite number >= 0 (0: off), got "
                     : " must be a positive finite number, got ") +
        text);
  }
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

ValueKind<double> positive_kind(const std::string& flag, bool zero_is_off, double below) {
  return {"X", [=](const std::string& text) { return parse_positive(flag, text, zero_is_off, below); },
          show_real};
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

void CommandLine::add(const std::string& flag, uint64_t* field, const std::string& help, int64_t min,
                      int64_t max) {
  min = std::max<int64_t>(min, 0);
  add_entry({flag, "N", help, std::to_string(*field), [flag, field, min, max](const std::string& text) {
               *field = static_cast<uint64_t>(parse_int(flag, text, min, max));
             }});
}

void CommandLine::add(const std::string& flag, double* field, const std::string& help, double above,
                      double below) {
  add_entry(scalar_flag(flag, field, help, real_kind(flag, above, below)));
}

void CommandLine::add_positive(const std::string& flag, double* field, const std::string& help,
                               double below) {
  add_entry(scalar_flag(flag, field, help, positive_kind(flag, false, below)));
}

void CommandLine::add_off_or_positive(const std::string& flag, double* field, const std::string& help,
                                      double below) {
  add_entry(scalar_flag(flag, field, help, positive_kind(flag, true, below)));
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
  flag.group = group_;
  flags_.push_back(std::move(flag));
}

void CommandLine::describe_default(const std::string& flag, const std::string& text) {
  const Flag* found = find(flag);
  TANDEM_CHECK(found, program_ << ": " << flag << " is not a flag");
  flags_[static_cast<size_t>(found - flags_.data())].default_text = text;
}

void CommandLine::add_note(const std::string& flag, const std::string& sentence) {
  const Flag* found = find(flag);
  TANDEM_CHECK(found, program_ << ": " << flag << " is not a flag");
  flags_[static_cast<size_t>(found - flags_.data())].help += ". " + sentence;
}

const CommandLine::Flag* CommandLine::find(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool CommandLine::try_parse(const std::vector<std::string>& args) {
  given_.clear();
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
    given_.insert(name);
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

std::string CommandLine::notes() const {
  bool lists = false, bytes = false;
  for (const Flag& f : flags_) {
    lists = lists || f.metavar.ends_with(",...");
    bytes = bytes || f.metavar.starts_with("BYTES");
  }
  std::string out;
  if (lists) out += "Lists are comma-separated.\n";
  if (bytes)
    out += "BYTES: a byte count with an optional K, M or G suffix (powers of 1024): 4096, 64K, 1.5M.\n";
  return out;
}

std::string CommandLine::usage() const {
  struct Row {
    std::string left;
    std::vector<std::string> words;  // the help, then its default as one word
    std::string group;
  };
  std::vector<Row> rows;
  for (const Flag& f : flags_) {
    Row row{f.name + (f.metavar.empty() ? "" : " " + f.metavar), split_words(f.help), f.group};
    if (!f.default_text.empty()) row.words.push_back("(default: " + f.default_text + ")");
    rows.push_back(std::move(row));
  }
  rows.push_back({"--help", {"this", "text"}, flags_.empty() ? "" : flags_.back().group});
  size_t width = 0;
  for (const Row& row : rows) {
    if (row.left.size() <= kMaxFlagColumn) width = std::max(width, row.left.size());
  }
  std::string out = "usage: " + program_ + " [flags]\n\n";
  if (!summary_.empty()) out += summary_ + (summary_.back() == '\n' ? "\n" : "\n\n");
  std::string group;
  for (const Row& row : rows) {
    if (row.group != group) {
      group = row.group;
      out += (&row == &rows.front() ? "" : "\n") + group + ":\n";
    }
    out += "  " + row.left;
    if (row.left.size() > width)
      out += "\n  " + std::string(width, ' ');
    else
      out += std::string(width - row.left.size(), ' ');
    out += "  " + wrap(row.words, width + 4) + "\n";
  }
  const std::string footer = notes();
  return footer.empty() ? out : out + "\n" + footer;
}

std::string CommandLine::markdown() const {
  std::string out = "# " + program_ + "\n\n```\nusage: " + program_ + " [flags]\n```\n\n";
  if (!summary_.empty()) out += summary_ + (summary_.back() == '\n' ? "\n" : "\n\n");
  std::string group = "\n";  // no heading matches it: the first table always starts
  for (const Flag& f : flags_) {
    if (f.group != group) {
      group = f.group;
      if (!group.empty()) out += "## " + group + "\n\n";
      out += "| Flag | Default | Meaning |\n|---|---|---|\n";
    }
    // Appended piece by piece: GCC 12 warns (-Wrestrict) of "literal" + a temporary string.
    out += "| ";
    out += code_span(table_cell(f.metavar.empty() ? f.name : f.name + " " + f.metavar));
    out += " | ";
    if (!f.default_text.empty()) out += code_span(table_cell(f.default_text));
    out += " | ";
    out += table_cell(f.help);
    out += " |\n";
    if (&f == &flags_.back() || (&f)[1].group != group) out += "\n";
  }
  out += "`--help` prints this as text.\n";
  const std::string footer = notes();
  return footer.empty() ? out : out + "\n" + footer;
}

}  // namespace tandem
