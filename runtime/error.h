// Errors and checked calls.
//
// Contract: every failure tandem reports is a tandem::Error whose what() starts with
// "file:line" and, once the process knows its rank, "[rank r]", or "[rank r on host H]" once
// it also knows that the job spans several hosts. The file is named relative to the
// repository ("runtime/tensor.cpp"), whether the compiler saw it by its absolute path or
// relative to the build directory (source_path()). Check macros wrap external calls (MPI,
// CUDA, cuBLAS, NCCL) so the message names the call, the site and the rank.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tandem {

class Error : public std::runtime_error {
 public:
  Error(const char* file, int line, const std::string& message);
  const std::string& message() const { return message_; }  // without the file:line prefix
  const char* file() const { return file_; }               // as source_path() names it
  int line() const { return line_; }

 private:
  const char* file_;
  int line_;
  std::string message_;
};

// The rank this process has in the world group, or -1 before one is known. Set once by
// the launch code; read by every error message.
void set_process_rank(int rank);
int process_rank();

// The host this process runs on, named in every error message next to the rank; empty (the
// default) on a job that runs on one host. Set by the launch code (dist::init_from_env).
void set_process_host(const std::string& host);
std::string process_host();

// "[rank r] " or "[rank r on host H] " as error messages start; "" before a rank is known.
std::string process_label();

// A __FILE__ of tandem's sources relative to the repository root: without the repository's
// path when it starts with it, else without leading "./" and "../" (a path relative to a
// build directory inside the repository). A suffix of `file`, never a copy.
const char* source_path(const char* file);

// Writes `line` and a newline to stderr in one write, so that lines of ranks sharing a
// terminal or log file are never spliced into each other.
void write_stderr_line(const std::string& line);

// The one line a program prints for an error that ends it, for a person reading the merged
// output of every rank: "[rank r] <message> [at <file>:<line>]" for an Error, "[rank r]
// error: <what>" for another exception; before the rank is known "<program>: error: <what>".
std::string error_line(const std::exception& e, const std::string& program);

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace tandem

// TANDEM_CHECK(cond, a << b << c): throws tandem::Error with the streamed message.
#define TANDEM_CHECK(cond, msg)                                                  \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::ostringstream tandem_check_os_;                                       \
      tandem_check_os_ << msg;                                                   \
      ::tandem::detail::throw_error(__FILE__, __LINE__, tandem_check_os_.str()); \
    }                                                                            \
  } while (0)

#define TANDEM_FAIL(msg) TANDEM_CHECK(false, msg)
