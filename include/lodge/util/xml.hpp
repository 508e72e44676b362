#pragma once
// XML as every store backend reads and writes it: parsed without DOCTYPE processing (a
// document that carries one is refused, so no entity of a hostile answer is ever
// expanded), and text escaped for element content and attribute values.

#include <optional>
#include <pugixml.hpp>
#include <string>
#include <string_view>

namespace lodge::util {

// The document, or nullopt when it does not parse, has a DOCTYPE or has no root element.
[[nodiscard]] std::optional<pugi::xml_document> load_xml(std::string_view xml);

// The text of `n`'s first child element named `child` ("" when there is none).
[[nodiscard]] std::string xml_text(const pugi::xml_node &n, const char *child);

// & < > " ' as entities.
[[nodiscard]] std::string xml_escape(std::string_view s);

} // namespace lodge::util
