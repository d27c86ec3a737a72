// A table-driven command-line parser for tandem's programs.
//
// Contract: a program binds each flag to a field of its options with a help line; the value
// a field holds when it is added is its default, shown by --help. Flags take "--flag value"
// or "--flag=value"; a later repeat of a flag replaces the earlier value (lists too).
// Integers take an inclusive [min, max]; reals an open (above, below) and must be finite;
// byte sizes take a K, M or G suffix (powers of 1024, either case) and must come out a
// whole number of bytes; lists are comma-separated, empty items are skipped and at least
// one must remain. try_parse() throws UsageError naming the flag and the bad value for an
// unknown flag, a missing value, a malformed or out-of-range value, or a value not among
// the choices; it returns false when --help (or -h) was given. given(flag) says whether the
// last try_parse() set it (a default that depends on other flags applies only when not).
// parse() is the program entry: usage() on stdout and exit 0 for --help, "<program>:
// <problem> (see --help)" on stderr and exit 2 for a usage error. group(heading) starts a
// section: the flags added after it are listed under that heading, in usage() and in
// markdown() (the same table as a Markdown page). usage() wraps help text at 100 columns.
// Adding a flag twice is a programming error (tandem::Error), not a usage error.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class CommandLine {
 public:
  static constexpr int64_t kNoMin = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
  static constexpr double kNoBound = std::numeric_limits<double>::infinity();

  // One row of the table, as --help shows it.
  struct Flag {
    std::string name;     // "--iters"
    std::string metavar;  // "N"; empty: a switch, which takes no value
    std::string help;
    std::string default_text;                     // empty: none shown
    std::function<void(const std::string&)> set;  // parses the value into the bound field
    std::string group{};                          // its section's heading; empty: none
  };

  // `summary` follows the usage line in --help: what the program does or measures.
  CommandLine(std::string program, std::string summary);

  void add(const std::string& flag, int64_t* field, const std::string& help, int64_t min = kNoMin,
           int64_t max = kNoMax);
  void add(const std::string& flag, int* field, const std::string& help,
           int64_t min = std::numeric_limits<int>::min(), int64_t max = std::numeric_limits<int>::max());
  void add(const std::string& flag, uint64_t* field, const std::string& help, int64_t min = 0,
           int64_t max = kNoMax);
  void add(const std::string& flag, double* field, const std::string& help, double above = -kNoBound,
           double below = kNoBound);
  // A finite real in (0, below): "must be a positive finite number".
  void add_positive(const std::string& flag, double* field, const std::string& help, double below = kNoBound);
  // 0, which switches a feature off, or a finite real in (0, below).
  void add_off_or_positive(const std::string& flag, double* field, const std::string& help,
                           double below = kNoBound);
  void add(const std::string& flag, std::string* field, const std::string& help,
           const std::string& metavar = "TEXT");
  void add_bytes(const std::string& flag, int64_t* field, const std::string& help, int64_t min = 1);
  void add_flag(const std::string& flag, bool* field, const std::string& help);  // sets true
  void add_choice(const std::string& flag, std::string* field, const std::vector<std::string>& choices,
                  const std::string& help);
  // A name from `choices` stored as the value it stands for (an enum, say).
  template <typename T>
  void add_choice(const std::string& flag, T* field, const std::vector<std::pair<std::string, T>>& choices,
                  const std::string& help) {
    std::vector<std::string> names;
    std::string current;
    for (const auto& [name, value] : choices) {
      names.push_back(name);
      if (value == *field) current = name;
    }
    add_choice_of(flag, names, current, help, [field, choices](size_t i) { *field = choices[i].second; });
  }
  // Comma lists; with `choices`, every item must be one of them.
  void add_list(const std::string& flag, std::vector<std::string>* field, const std::string& help,
                const std::vector<std::string>& choices = {});
  void add_list(const std::string& flag, std::vector<int64_t>* field, const std::string& help,
                int64_t min = kNoMin, int64_t max = kNoMax);
  void add_list(const std::string& flag, std::vector<double>* field, const std::string& help,
                double above = -kNoBound, double below = kNoBound);
  void add_bytes_list(const std::string& flag, std::vector<int64_t>* field, const std::string& help,
                      int64_t min = 1);

  // --help shows `text` as the flag's default instead of its field's value (a default that
  // depends on other flags: "64; dcgan64: 128").
  void describe_default(const std::string& flag, const std::string& text);
  // Appends `sentence` (no final full stop) to the flag's help, after a full stop: a rule
  // the program states about several flags from one table of its own.
  void add_note(const std::string& flag, const std::string& sentence);
  // The flags added from here on are listed under `heading`.
  void group(const std::string& heading) { group_ = heading; }

  bool try_parse(const std::vector<std::string>& args);  // args without the program name
  bool given(const std::string& flag) const { return given_.count(flag) > 0; }
  void parse(int argc, const char* const* argv);
  // A check across flags that failed after parsing: reported and ended as a usage error.
  [[noreturn]] void exit_usage(const std::string& problem) const;
  std::string usage() const;
  // The table as a Markdown page: a title, the summary, then one table per section.
  std::string markdown() const;
  const std::vector<Flag>& flags() const { return flags_; }

 private:
  void add_entry(Flag flag);
  void add_choice_of(const std::string& flag, const std::vector<std::string>& names,
                     const std::string& current, const std::string& help, std::function<void(size_t)> pick);
  const Flag* find(const std::string& name) const;
  std::string notes() const;  // what the value kinds in use have in common

  std::string program_;
  std::string summary_;
  std::vector<Flag> flags_;
  std::string group_;
  std::set<std::string> given_;
};

}  // namespace tandem
