#include "decode.hpp"

#include <fstream>
#include <lodge/util/strings.hpp>
#include <lodge/util/xml.hpp>
#include <pugixml.hpp>
#include <sstream>

namespace lodge::test {
namespace {
bool uuid_form(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}
} // namespace

std::optional<ObjectKeyParts> parse_object_key(std::string_view root, std::string_view key) {
  if (key.substr(0, root.size()) != root) return std::nullopt;
  key.remove_prefix(root.size());
  auto slash = key.find('/');
  if (slash == 0 || slash == std::string_view::npos) return std::nullopt;
  ObjectKeyParts p;
  p.owner = std::string(key.substr(0, slash));
  size_t seg = slash + 1;
  while (seg < key.size()) {
    auto end = key.find('/', seg);
    if (end == std::string_view::npos) return std::nullopt; // a uuid is never the last segment
    auto s = key.substr(seg, end - seg);
    if (uuid_form(s)) {
      if (end + 1 >= key.size()) return std::nullopt; // no relative path
      p.run_prefix = seg > slash + 1 ? std::string(key.substr(slash + 1, seg - slash - 2)) : std::string();
      p.uuid = std::string(s);
      p.relative_path = std::string(key.substr(end + 1));
      return p;
    }
    seg = end + 1;
  }
  return std::nullopt;
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    auto byte = util::hex_decode(s.substr(i + 1, 2));
    if (!byte) return std::nullopt;
    out += *byte;
    i += 2;
  }
  return out;
}

std::string uri_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      if (auto dec = util::hex_decode(s.substr(i + 1, 2))) {
        out += *dec;
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::optional<std::map<std::string, std::string>> parse_blob_tags(std::string_view xml) {
  auto doc = util::load_xml(xml);
  if (!doc || std::string_view(doc->document_element().name()) != "Tags") return std::nullopt;
  std::map<std::string, std::string> out;
  for (auto t : doc->document_element().child("TagSet").children("Tag")) {
    auto k = util::xml_text(t, "Key");
    if (k.empty()) return std::nullopt;
    out[k] = util::xml_text(t, "Value");
  }
  return out;
}

std::optional<Errc> errc_from_name(std::string_view name) {
  for (const auto &e : all_errcs())
    if (e.name == name) return e.code;
  return std::nullopt;
}

std::optional<int64_t> process_start_ticks(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  auto s = ss.str();
  auto close = s.rfind(')'); // the command name may hold spaces and parentheses
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(s.substr(close + 1));
  std::string f;
  for (int i = 3; i <= 22; ++i) { // the fields after ')' start with field 3 (state)
    if (!(fields >> f)) return std::nullopt;
    if (i == 3 && (f == "Z" || f == "X")) return std::nullopt;
  }
  try {
    return std::stoll(f);
  } catch (const std::exception &) {
    return std::nullopt;
  }
}

} // namespace lodge::test
