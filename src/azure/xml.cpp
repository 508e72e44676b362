#include <lodge/azure/xml.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/xml.hpp>
#include <pugixml.hpp>

namespace lodge::azure {
namespace {

auto load(std::string_view xml) {
  return util::load_xml(xml);
}
std::string text(const pugi::xml_node &n, const char *child) {
  return util::xml_text(n, child);
}

std::optional<std::vector<Block>> blocks(const pugi::xml_node &list) {
  std::vector<Block> out;
  for (auto b : list.children("Block")) {
    auto size = util::parse_int(text(b, "Size"));
    if (!size || *size < 0) return std::nullopt;
    out.push_back(Block{text(b, "Name"), static_cast<uint64_t>(*size)});
  }
  return out;
}
} // namespace

std::optional<ErrorBody> parse_error(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  if (std::string_view(root.name()) != "Error") return std::nullopt;
  ErrorBody e{text(root, "Code"), text(root, "Message")};
  if (e.code.empty()) return std::nullopt;
  return e;
}

std::optional<ListBlobsPage> parse_list_blobs(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  if (std::string_view(root.name()) != "EnumerationResults") return std::nullopt;
  ListBlobsPage p;
  p.next_marker = text(root, "NextMarker");
  for (auto b : root.child("Blobs").children("Blob")) {
    ListedBlob o;
    o.name = text(b, "Name");
    if (o.name.empty()) return std::nullopt;
    auto props = b.child("Properties");
    auto size = util::parse_int(text(props, "Content-Length"));
    if (!size || *size < 0) return std::nullopt;
    o.size = static_cast<uint64_t>(*size);
    o.etag = text(props, "Etag");
    if (o.etag.size() >= 2 && o.etag.front() == '"') o.etag = o.etag.substr(1, o.etag.size() - 2);
    o.last_modified = text(props, "Last-Modified");
    o.version_id = text(b, "VersionId");
    if (auto cur = b.child("IsCurrentVersion"))
      o.is_current_version = std::string_view(cur.text().as_string()) == "true";
    for (auto m : b.child("Metadata").children())
      o.metadata[util::to_lower(m.name())] = m.text().as_string();
    for (auto t : b.child("Tags").child("TagSet").children("Tag"))
      o.tags[text(t, "Key")] = text(t, "Value");
    p.blobs.push_back(std::move(o));
  }
  return p;
}

std::optional<BlockList> parse_block_list(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  if (std::string_view(root.name()) != "BlockList") return std::nullopt;
  BlockList out;
  auto c = blocks(root.child("CommittedBlocks"));
  auto u = blocks(root.child("UncommittedBlocks"));
  if (!c || !u) return std::nullopt;
  out.committed = std::move(*c);
  out.uncommitted = std::move(*u);
  return out;
}

std::optional<std::map<std::string, std::string>> parse_tags(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  if (std::string_view(root.name()) != "Tags") return std::nullopt;
  std::map<std::string, std::string> out;
  for (auto t : root.child("TagSet").children("Tag")) {
    auto k = text(t, "Key");
    if (k.empty()) return std::nullopt;
    out[k] = text(t, "Value");
  }
  return out;
}

std::string block_list_xml(const std::vector<std::string> &block_ids) {
  std::string out = R"(<?xml version="1.0" encoding="utf-8"?><BlockList>)";
  for (const auto &id : block_ids)
    out += "<Latest>" + util::xml_escape(id) + "</Latest>";
  return out + "</BlockList>";
}

std::string tags_xml(const std::map<std::string, std::string> &tags) {
  std::string out = R"(<?xml version="1.0" encoding="utf-8"?><Tags><TagSet>)";
  for (const auto &[k, v] : tags)
    out += "<Tag><Key>" + util::xml_escape(k) + "</Key><Value>" + util::xml_escape(v) + "</Value></Tag>";
  return out + "</TagSet></Tags>";
}

} // namespace lodge::azure
