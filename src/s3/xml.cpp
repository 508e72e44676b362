#include <ctime>
#include <lodge/s3/xml.hpp>
#include <lodge/util/strings.hpp>
#include <lodge/util/xml.hpp>
#include <pugixml.hpp>

namespace lodge::s3 {
namespace {

auto load(std::string_view xml) {
  return util::load_xml(xml);
}
std::string text(const pugi::xml_node &n, const char *child) {
  return util::xml_text(n, child);
}

bool truthy(const pugi::xml_node &n, const char *child) {
  return text(n, child) == "true";
}

std::string unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  return s;
}
} // namespace

std::optional<S3ErrorBody> parse_error(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  if (std::string_view(root.name()) != "Error") return std::nullopt;
  S3ErrorBody e{text(root, "Code"), text(root, "Message"), text(root, "RequestId")};
  if (e.code.empty()) return std::nullopt;
  return e;
}

std::optional<ListObjectsPage> parse_list_objects_v2(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  if (std::string_view(root.name()) != "ListBucketResult") return std::nullopt;
  ListObjectsPage p;
  p.truncated = truthy(root, "IsTruncated");
  p.next_token = text(root, "NextContinuationToken");
  for (auto c : root.children("Contents")) {
    ListedObject o;
    o.key = text(c, "Key");
    if (o.key.empty()) return std::nullopt;
    auto size = util::parse_int(text(c, "Size"));
    if (!size || *size < 0) return std::nullopt;
    o.size = static_cast<uint64_t>(*size);
    o.etag = unquote(text(c, "ETag"));
    o.last_modified = text(c, "LastModified");
    p.objects.push_back(std::move(o));
  }
  if (p.truncated && p.next_token.empty()) return std::nullopt;
  return p;
}

std::optional<ListVersionsPage> parse_list_versions(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  if (std::string_view(root.name()) != "ListVersionsResult") return std::nullopt;
  ListVersionsPage p;
  p.truncated = truthy(root, "IsTruncated");
  p.next_key_marker = text(root, "NextKeyMarker");
  p.next_version_id_marker = text(root, "NextVersionIdMarker");
  for (auto c : root.children()) {
    std::string_view name = c.name();
    if (name != "Version" && name != "DeleteMarker") continue;
    ListedVersion v{text(c, "Key"), text(c, "VersionId"), name == "DeleteMarker", truthy(c, "IsLatest")};
    if (v.key.empty()) return std::nullopt;
    p.versions.push_back(std::move(v));
  }
  if (p.truncated && p.next_key_marker.empty()) return std::nullopt;
  return p;
}

std::optional<ListUploadsPage> parse_list_uploads(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  if (std::string_view(root.name()) != "ListMultipartUploadsResult") return std::nullopt;
  ListUploadsPage p;
  p.truncated = truthy(root, "IsTruncated");
  p.next_key_marker = text(root, "NextKeyMarker");
  p.next_upload_id_marker = text(root, "NextUploadIdMarker");
  for (auto c : root.children("Upload")) {
    ListedUpload u{text(c, "Key"), text(c, "UploadId"), text(c, "Initiated")};
    if (u.key.empty() || u.upload_id.empty()) return std::nullopt;
    p.uploads.push_back(std::move(u));
  }
  if (p.truncated && p.next_key_marker.empty()) return std::nullopt;
  return p;
}

std::optional<std::string> parse_initiate_multipart(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  if (std::string_view(root.name()) != "InitiateMultipartUploadResult") return std::nullopt;
  auto id = text(root, "UploadId");
  if (id.empty()) return std::nullopt;
  return id;
}

std::optional<ListPartsPage> parse_list_parts(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  // AWS answers ListPartsResult; moto ListPartsResponse (as for Complete).
  if (std::string_view name = root.name(); name != "ListPartsResult" && name != "ListPartsResponse")
    return std::nullopt;
  ListPartsPage p;
  p.truncated = truthy(root, "IsTruncated");
  p.next_marker = text(root, "NextPartNumberMarker");
  for (auto c : root.children("Part")) {
    auto number = util::parse_int(text(c, "PartNumber"));
    auto size = util::parse_int(text(c, "Size"));
    if (!number || !size || *number < 1 || *size < 0) return std::nullopt;
    p.parts.push_back({static_cast<int>(*number), static_cast<uint64_t>(*size), unquote(text(c, "ETag")),
                       text(c, "ChecksumSHA256")});
  }
  if (p.truncated && p.next_marker.empty()) return std::nullopt;
  return p;
}

std::string part_md5_hex(const ListedPart &p) {
  constexpr size_t k_md5_hex = 32;
  if (p.etag.size() != k_md5_hex) return {};
  std::string out = util::to_lower(p.etag);
  for (char c : out)
    if ((c < '0' || c > '9') && (c < 'a' || c > 'f')) return {};
  return out;
}

std::string part_sha256_hex(const ListedPart &p) {
  constexpr size_t k_sha256_bytes = 32;
  auto raw = util::base64_decode(p.checksum_sha256);
  if (!raw || raw->size() != k_sha256_bytes) return {};
  return util::hex_encode(*raw);
}

std::optional<CompleteResult> parse_complete_multipart(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  std::string_view name = root.name();
  CompleteResult r;
  if (name == "Error") {
    r.error = S3ErrorBody{text(root, "Code"), text(root, "Message"), text(root, "RequestId")};
    return r;
  }
  // AWS answers CompleteMultipartUploadResult; some servers (moto) ...Response.
  if (name != "CompleteMultipartUploadResult" && name != "CompleteMultipartUploadResponse")
    return std::nullopt;
  r.etag = unquote(text(root, "ETag"));
  return r;
}

std::optional<std::map<std::string, std::string>> parse_tagging(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  if (std::string_view(root.name()) != "Tagging") return std::nullopt;
  std::map<std::string, std::string> tags;
  for (auto t : root.child("TagSet").children("Tag")) {
    auto key = text(t, "Key");
    if (key.empty()) return std::nullopt;
    tags[key] = text(t, "Value");
  }
  return tags;
}

std::optional<std::string> parse_versioning(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  // AWS answers VersioningConfiguration; moto GetBucketVersioningResponse.
  std::string_view name = root.name();
  if (name != "VersioningConfiguration" && name != "GetBucketVersioningResponse") return std::nullopt;
  return text(root, "Status");
}

std::optional<DeleteResult> parse_delete_result(std::string_view xml) {
  auto doc = load(xml);
  if (!doc) return std::nullopt;
  auto root = doc->document_element();
  // AWS answers DeleteResult; some servers add a namespace prefix or ...Response.
  std::string_view name = root.name();
  if (name != "DeleteResult" && name != "DeleteObjectsResponse") return std::nullopt;
  DeleteResult r;
  for (auto d : root.children("Deleted"))
    r.deleted.push_back(text(d, "Key"));
  for (auto e : root.children("Error")) {
    if (e.child("Key").empty()) return std::nullopt; // an error that names no key: unreadable
    r.errors.emplace_back(text(e, "Key"), S3ErrorBody{text(e, "Code"), text(e, "Message"), {}});
  }
  return r;
}

std::optional<int64_t> parse_iso8601_ms(std::string_view s) {
  std::tm tm{};
  std::string str(s);
  const char *end = strptime(str.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!end) return std::nullopt;
  int64_t ms = 0;
  if (*end == '.') {
    ++end;
    int digits = 0;
    while (*end >= '0' && *end <= '9') {
      if (digits < 3) ms = ms * 10 + (*end - '0');
      ++digits;
      ++end;
    }
    while (digits < 3) {
      ms *= 10;
      ++digits;
    }
  }
  if (*end != 'Z' && *end != '\0' && std::string_view(end) != "+00:00") return std::nullopt;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
}

} // namespace lodge::s3
