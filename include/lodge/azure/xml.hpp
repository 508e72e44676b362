#pragma once
// Azure Blob XML: parsers for the answers (pugixml; a document with a DOCTYPE is refused,
// so no DTD or entity is ever processed; each returns nullopt on a document it cannot
// read) and builders for the request bodies.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lodge::azure {

struct ErrorBody {
  std::string code;
  std::string message;
};

struct ListedBlob {
  std::string name;
  uint64_t size = 0;
  std::string etag;
  std::string last_modified; // RFC 1123, as listed
  std::string version_id;    // with include=versions
  bool is_current_version = true;
  std::map<std::string, std::string> metadata; // with include=metadata; names lowercased
  std::map<std::string, std::string> tags;     // with include=tags (blob index tags)
  // With include=uncommittedblobs a blob holding only uncommitted blocks is listed like
  // any other (Content-Length 0, an Etag); only Get Blob Properties tells it apart (404).
};

struct ListBlobsPage {
  std::vector<ListedBlob> blobs;
  std::string next_marker; // "" on the last page
};

struct Block {
  std::string name; // the block id, base64 as sent
  uint64_t size = 0;
};
struct BlockList {
  std::vector<Block> committed;
  std::vector<Block> uncommitted;
};

[[nodiscard]] std::optional<ErrorBody> parse_error(std::string_view xml);
[[nodiscard]] std::optional<ListBlobsPage> parse_list_blobs(std::string_view xml);
[[nodiscard]] std::optional<BlockList> parse_block_list(std::string_view xml);
// Get Blob Tags' answer: key -> value; nullopt when unreadable.
[[nodiscard]] std::optional<std::map<std::string, std::string>> parse_tags(std::string_view xml);

// <BlockList><Latest>id</Latest>...</BlockList>
[[nodiscard]] std::string block_list_xml(const std::vector<std::string> &block_ids);
// <Tags><TagSet><Tag><Key>k</Key><Value>v</Value></Tag>...</TagSet></Tags>
[[nodiscard]] std::string tags_xml(const std::map<std::string, std::string> &tags);

} // namespace lodge::azure
