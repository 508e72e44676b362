#pragma once
// What a user may ask of the objects an upload writes, beyond their bytes: a fixed
// Content-Type, user metadata, tags, a storage class, server-side encryption and
// Cache-Control. From a policy's keys and `lodge upload`'s flags; validated before anything
// is recorded (the shape here, what a backend takes in ObjectStore::accepts); recorded on
// the row (file_upload.object_options, canonical JSON) and sent with the PUT.

#include <lodge/error.hpp>
#include <map>
#include <string>
#include <string_view>

namespace lodge::store {

struct ObjectOptions {
  std::string content_type;                    // "" = from the extension and the content
  std::map<std::string, std::string> metadata; // user metadata; names lowercase
  std::map<std::string, std::string> tags;
  std::string storage_class;  // S3: STANDARD_IA, GLACIER_IR, ...; Azure: the access tier
  std::string sse;            // "", "AES256" or "aws:kms"
  std::string sse_kms_key_id; // with sse aws:kms only
  std::string cache_control;

  // Nothing asked beyond the content type.
  [[nodiscard]] bool plain() const {
    return metadata.empty() && tags.empty() && storage_class.empty() && sse.empty() && cache_control.empty();
  }
  // `over`'s settings win; metadata and tags merge name by name.
  void merge(const ObjectOptions &over);
};

// The most user tags an object may carry (S3 and Azure both allow ten, lodge's state tag
// included where the store writes one).
inline constexpr size_t k_max_tags = 10;
// S3 allows 2 KiB of user metadata (names and values); lodge's own stamp takes some of it.
inline constexpr size_t k_max_user_metadata_bytes = 1024;

// The shape every backend needs, each problem named after `what` ("--metadata", a
// policy's key): metadata names are letters, digits and '_' (starting with a letter; not
// lodge's own "lodge..." names), values printable ASCII; tags as S3 allows them (keys
// 1-128, values 0-256 characters of letters, digits, space and + - = . _ : / @; no "aws:"
// keys, not lodge's "lodge-state"); a storage class of letters, digits and '_'; sse AES256
// or aws:kms, a key id only with aws:kms; Cache-Control printable ASCII; a content type
// type/subtype with optional parameters. USAGE otherwise.
[[nodiscard]] Status validate(const ObjectOptions &o, std::string_view what);

// "name=value" split at its first '='; USAGE (naming `flag`) without one or with no name.
[[nodiscard]] Result<std::pair<std::string, std::string>> parse_assignment(std::string_view text,
                                                                           std::string_view flag);

// The canonical JSON the row records ("" for plain options without a content type):
// {"cache_control":...,"content_type":...,"metadata":{...},"sse":...,...}, keys sorted,
// empty members left out.
[[nodiscard]] std::string to_json(const ObjectOptions &o);
// Back from the row's JSON ("" is plain). LEDGER_UNUSABLE for what to_json never writes.
[[nodiscard]] ObjectOptions from_json(std::string_view text);

// S3's x-amz-tagging value (URL-encoded k=v pairs joined by '&'), in name order.
[[nodiscard]] std::string s3_tagging(const std::map<std::string, std::string> &tags);

} // namespace lodge::store
