#pragma once
// Test helpers: a temporary directory per test, kept when the test fails.

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <lodge/error.hpp>
#include <optional>
#include <string>

namespace lodge::test {

class TempDir {
public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  [[nodiscard]] const std::filesystem::path &path() const { return m_path; }
  [[nodiscard]] std::string file(const std::string &name) const { return (m_path / name).string(); }

private:
  std::filesystem::path m_path;
};

inline void write_file(const std::string &path, const std::string &content) {
  std::ofstream f(path, std::ios::binary);
  f << content;
}

inline std::string read_file(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The error of the LodgeError that fn throws, or nullopt when it throws none: lets a test
// check the code and message, not only that something of the type was thrown.
template <class F> std::optional<Error> thrown_error(F &&fn) {
  try {
    fn();
  } catch (const LodgeError &e) {
    return e.error();
  }
  return std::nullopt;
}

// Whether fn throws a LodgeError with this code whose message contains `part`.
template <class F> bool throws_errc(F &&fn, Errc code, const std::string &part) {
  auto e = thrown_error(std::forward<F>(fn));
  if (!e) return false;
  INFO("thrown: ", std::string(e->name()), ": ", e->message);
  CHECK(e->code == code);
  CHECK(e->message.find(part) != std::string::npos);
  return e->code == code && e->message.find(part) != std::string::npos;
}

} // namespace lodge::test
