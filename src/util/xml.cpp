#include <lodge/util/xml.hpp>

namespace lodge::util {

std::optional<pugi::xml_document> load_xml(std::string_view xml) {
  pugi::xml_document doc;
  auto res =
      doc.load_buffer(xml.data(), xml.size(), pugi::parse_default | pugi::parse_doctype, pugi::encoding_utf8);
  if (!res) return std::nullopt;
  for (auto n : doc.children())
    if (n.type() == pugi::node_doctype) return std::nullopt;
  if (!doc.document_element()) return std::nullopt;
  return doc;
}

std::string xml_text(const pugi::xml_node &n, const char *child) {
  return n.child(child).text().as_string();
}

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&apos;";
      break;
    default:
      out.push_back(c);
    }
  }
  return out;
}

} // namespace lodge::util
