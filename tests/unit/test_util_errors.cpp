// The Errc table is the one source of the error codes: the man page's ERRORS list must
// name every code, in table order, with the table's description.
#include "support.hpp"
#include "support/decode.hpp"

#include <lodge/error.hpp>
#include <string>
#include <utility>
#include <vector>

using namespace lodge;

namespace {
// roff to text for what the ERRORS section uses: \- is a minus, \\ a backslash.
std::string unroff(const std::string &line) {
  std::string out;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && (line[i + 1] == '-' || line[i + 1] == '\\')) {
      out.push_back(line[++i]);
      continue;
    }
    out.push_back(line[i]);
  }
  return out;
}

// (code, text) of each ".TP / .B CODE / text..." entry of the ERRORS section.
std::vector<std::pair<std::string, std::string>> man_page_errors(const std::string &page) {
  std::vector<std::pair<std::string, std::string>> entries;
  auto start = page.find("\n.SH ERRORS\n");
  REQUIRE(start != std::string::npos);
  auto end = page.find("\n.SH ", start + 1);
  std::string section = page.substr(start, end - start);
  size_t pos = 0;
  bool in_entry = false;
  while (pos < section.size()) {
    auto nl = section.find('\n', pos);
    std::string line = section.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? section.size() : nl + 1;
    if (line == ".TP") {
      in_entry = false;
    } else if (line.rfind(".B ", 0) == 0 && (entries.empty() || !in_entry)) {
      entries.emplace_back(unroff(line.substr(3)), "");
      in_entry = true;
    } else if (in_entry && !line.empty() && line[0] != '.') {
      auto &text = entries.back().second;
      text += (text.empty() ? "" : " ") + unroff(line);
    }
  }
  return entries;
}
} // namespace

TEST_CASE("the man page lists every error code with the table's description") {
  auto page = test::read_file(std::string(LODGE_SOURCE_DIR) + "/man/lodge.1");
  REQUIRE(!page.empty());
  auto entries = man_page_errors(page);
  auto table = all_errcs();
  REQUIRE(entries.size() == table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    INFO("code ", std::string(table[i].name));
    CHECK(entries[i].first == table[i].name);
    CHECK(entries[i].second == table[i].description);
  }
}

TEST_CASE("the Errc table is in enum order and its names are unique") {
  auto table = all_errcs();
  for (size_t i = 0; i < table.size(); ++i) {
    CHECK(static_cast<size_t>(table[i].code) == i);
    CHECK(test::errc_from_name(table[i].name) == table[i].code);
    CHECK(!table[i].description.empty());
  }
}
