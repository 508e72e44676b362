#pragma once
// Parsers for S3's XML answers (pugixml; a document with a DOCTYPE is refused, so no
// DTD or entity is ever processed). Each returns nullopt on a document it cannot read.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lodge::s3 {

struct S3ErrorBody {
  std::string code;
  std::string message;
  std::string request_id;
};

struct ListedObject {
  std::string key;
  uint64_t size = 0;
  std::string etag;
  std::string last_modified; // ISO 8601
};

struct ListObjectsPage {
  std::vector<ListedObject> objects;
  bool truncated = false;
  std::string next_token;
};

struct ListedVersion {
  std::string key;
  std::string version_id;
  bool delete_marker = false;
  bool latest = false;
};

struct ListVersionsPage {
  std::vector<ListedVersion> versions; // versions and delete markers, in document order
  bool truncated = false;
  std::string next_key_marker;
  std::string next_version_id_marker;
};

struct ListedUpload {
  std::string key;
  std::string upload_id;
  std::string initiated;
};

struct ListUploadsPage {
  std::vector<ListedUpload> uploads;
  bool truncated = false;
  std::string next_key_marker;
  std::string next_upload_id_marker;
};

[[nodiscard]] std::optional<S3ErrorBody> parse_error(std::string_view xml);
[[nodiscard]] std::optional<ListObjectsPage> parse_list_objects_v2(std::string_view xml);
[[nodiscard]] std::optional<ListVersionsPage> parse_list_versions(std::string_view xml);
[[nodiscard]] std::optional<ListUploadsPage> parse_list_uploads(std::string_view xml);
[[nodiscard]] std::optional<std::string> parse_initiate_multipart(std::string_view xml); // UploadId
struct ListedPart {
  int number = 0;
  uint64_t size = 0;
  std::string etag;            // unquoted
  std::string checksum_sha256; // base64, when the part carried one
};
struct ListPartsPage {
  std::vector<ListedPart> parts;
  bool truncated = false;
  std::string next_marker; // NextPartNumberMarker
};
[[nodiscard]] std::optional<ListPartsPage> parse_list_parts(std::string_view xml);
// What a listed part proves of its bytes (store::StoredPart): its MD5, lowercase hex, when
// its ETag is a plain 32-hex-digit one (the server's MD5 of an unencrypted part; a multipart
// or otherwise shaped ETag gives ""); its SHA-256, hex, from ChecksumSHA256 when that is
// the base64 of 32 bytes ("" otherwise).
[[nodiscard]] std::string part_md5_hex(const ListedPart &p);
[[nodiscard]] std::string part_sha256_hex(const ListedPart &p);
// CompleteMultipartUpload can answer 200 with an <Error> body: that comes back as error.
struct CompleteResult {
  std::optional<S3ErrorBody> error;
  std::string etag;
};
[[nodiscard]] std::optional<CompleteResult> parse_complete_multipart(std::string_view xml);

// GetObjectTagging's <Tagging><TagSet><Tag><Key/><Value/></Tag>...: the tags by key.
[[nodiscard]] std::optional<std::map<std::string, std::string>> parse_tagging(std::string_view xml);
// GetBucketVersioning's <Status>: "Enabled", "Suspended", or "" for a bucket never versioned.
[[nodiscard]] std::optional<std::string> parse_versioning(std::string_view xml);
// DeleteObjects' answer: each key it could not delete, with S3's code and message (a quiet
// request's answer lists nothing else; `deleted` holds the keys a verbose one reports).
struct DeleteResult {
  std::vector<std::string> deleted;
  std::vector<std::pair<std::string, S3ErrorBody>> errors; // key, why
};
[[nodiscard]] std::optional<DeleteResult> parse_delete_result(std::string_view xml);

// "2010-11-10T20:48:34.000Z" to ms since the epoch; nullopt when malformed.
[[nodiscard]] std::optional<int64_t> parse_iso8601_ms(std::string_view s);

} // namespace lodge::s3
