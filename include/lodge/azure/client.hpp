#pragma once
// An Azure Blob Storage client for one container on one Transport (one connection per
// worker), authorized by Shared Key (the account key) or a SAS token. Operations return
// typed errors (Errc + HTTP status, the service's error code in details.s3_code, the
// x-ms-request-id). Transient failures are retried through http::with_retries; a GET
// resumes through http::resumable_get.

#include <atomic>
#include <cstdint>
#include <functional>
#include <lodge/azure/auth.hpp>
#include <lodge/azure/signer.hpp>
#include <lodge/azure/xml.hpp>
#include <lodge/error.hpp>
#include <lodge/http/retry.hpp>
#include <lodge/http/transport.hpp>
#include <lodge/util/clock.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lodge::azure {

// What the service was found, from its answers, to do or not; shared by every client of
// one endpoint and container in a process (learned once, warned once).
enum class Support { unknown, present, absent };
struct ServerTraits {
  std::atomic<int> versions{0}; // listing with include=versions
};
[[nodiscard]] std::shared_ptr<ServerTraits> traits_for(const std::string &server);

struct ClientConfig {
  Account account;
  std::string container;
  http::RetryPolicy retry;
  std::shared_ptr<ServerTraits> traits; // a fresh one when unset
};

struct WriteOptions {
  std::string content_type = "application/octet-stream";
  std::string content_md5;                     // base64 of the body's MD5; "" sends none
  std::map<std::string, std::string> metadata; // x-ms-meta-<name>; names must be C# identifiers
  std::map<std::string, std::string> tags;     // x-ms-tags
  std::string access_tier;                     // x-ms-access-tier: Hot, Cool, Cold, Archive ("" sends none)
  std::string cache_control;                   // x-ms-blob-cache-control
  bool if_none_match = true;                   // create-only (If-None-Match: *)
  std::string if_match;                        // replace only this ETag (then not create-only)
  int64_t deadline_steady_ms = 0;
};

struct PutResult {
  std::string etag; // as the service sent it, quotes included
  std::string version_id;
};

struct Properties {
  uint64_t size = 0;
  std::string etag;
  std::string content_type;
  std::string content_md5;
  std::map<std::string, std::string> metadata; // names lowercased, without x-ms-meta-
  int64_t last_modified_ms = 0;
  int tag_count = 0;
  std::string version_id;
};

struct DeleteOptions {
  std::string if_tags;    // x-ms-if-tags: a tag condition the service enforces
  std::string if_match;   // delete only this ETag
  std::string version_id; // one version (then snapshots are not named)
};

enum class Include : unsigned { none = 0, metadata = 1, uncommitted = 2, versions = 4, tags = 8 };
[[nodiscard]] constexpr Include operator|(Include a, Include b) {
  return static_cast<Include>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
[[nodiscard]] constexpr bool has(Include set, Include one) {
  return (static_cast<unsigned>(set) & static_cast<unsigned>(one)) != 0;
}

enum class BlockListType { committed, uncommitted, all };

// The tag condition of a guarded delete: only while the blob is tagged state=pending.
inline constexpr const char *k_if_pending = "\"state\" = 'pending'";

class Client {
public:
  Client(ClientConfig cfg, std::unique_ptr<http::Transport> transport, const util::Clock &clock,
         http::Sleeper &sleeper = http::real_sleeper());

  // PUT the whole body as a block blob. A create-only put of an existing name:
  // PRECONDITION_FAILED (Azure answers 412 ConditionNotMet or 409 BlobAlreadyExists).
  Result<PutResult> put_blob(const std::string &name, http::BodySource &body, const WriteOptions &o);
  // Stages one block (uncommitted until put_block_list names it).
  Status put_block(const std::string &name, const std::string &block_id, http::BodySource &body,
                   const std::string &content_md5, int64_t deadline_steady_ms);
  // Commits exactly these staged blocks, in order, as the blob's content.
  Result<PutResult> put_block_list(const std::string &name, const std::vector<std::string> &block_ids,
                                   const WriteOptions &o);
  // The blob's properties, or those of the version `version_id` names.
  Result<Properties> get_properties(const std::string &name, const std::string &version_id = {});
  // Streams the blob's bytes to sink, each byte once and in order: an attempt cut off
  // mid-body is resumed with Range and If-Match on the first answer's ETag, and the total
  // is checked against the first answer's length. A false return from sink aborts.
  Status get_blob(const std::string &name, const std::function<bool(const char *, size_t)> &sink);
  // A whole small blob (up to 1 MiB) and its ETag.
  Result<std::pair<std::string, std::string>> get_small_blob(const std::string &name);
  // Deletes the blob with its snapshots (x-ms-delete-snapshots: include). A missing blob
  // is success; a failed condition (if_tags, if_match) is PRECONDITION_FAILED.
  Status delete_blob(const std::string &name, const DeleteOptions &o = {});
  Status set_tags(const std::string &name, const std::map<std::string, std::string> &tags,
                  const std::string &if_match = {});
  // The blob's tags (Get Blob Tags): what a guarded delete's refusal is read from.
  Result<std::map<std::string, std::string>> get_tags(const std::string &name);
  // Flat listing of the blobs under prefix, in name order, page by page (marker paging);
  // visit may stop it by returning false. include=versions on a service that cannot list
  // versions is UNSUPPORTED (learned once, then without a request).
  Status list_blobs(const std::string &prefix, Include include,
                    const std::function<bool(const ListedBlob &)> &visit, int page_size = 5000);
  Result<BlockList> get_block_list(const std::string &name, BlockListType type);
  // A GET URL carrying a service SAS (sr=b, sp=r) valid for expires_s seconds from now;
  // UNSUPPORTED when the credential is a SAS token (no key to sign with).
  Result<std::string> presign_get(const std::string &name, int64_t expires_s);
  // The same with other permissions: "c" (create, never overwrite, nothing else) for a
  // direct upload's PUT.
  Result<std::string> presign(const std::string &name, int64_t expires_s, const std::string &permissions);
  // The headers a Put Blob with `o` sends (type, create-only, metadata, tags, tier, ...).
  [[nodiscard]] http::Headers write_headers(const WriteOptions &o) const;
  [[nodiscard]] Support versions_support() const;

  [[nodiscard]] const ClientConfig &config() const { return m_cfg; }
  // The URL of a blob (no credential in it).
  [[nodiscard]] std::string blob_url(const std::string &name) const;

private:
  struct Call {
    std::string method;
    std::string name; // blob name; empty for container-level calls
    Params query;     // decoded
    http::Headers headers;
    http::BodySource *body = nullptr;
    std::function<bool(const char *, size_t)> sink;
    int64_t deadline_steady_ms = 0;
    std::string what; // for messages: "PUT BLOB name"
  };
  Result<http::Response> send(const Call &call);
  Result<http::Response> send_once(const Call &call,
                                   const std::function<bool(const http::Response &)> &accept = {});
  [[nodiscard]] Error error_from(const http::Response &r, const std::string &what) const;
  void add_write_headers(Call &c, const WriteOptions &o) const;

  ClientConfig m_cfg;
  std::unique_ptr<http::Transport> m_transport;
  const util::Clock &m_clock;
  http::Sleeper &m_sleeper;
  std::shared_ptr<ServerTraits> m_traits;
  std::string m_base_url;  // scheme://host[:port]
  std::string m_base_path; // "/ACCOUNT" on a path-style endpoint, else ""
};

// The x-ms-tags value: "k1=v1&k2=v2", names and values URL-encoded.
[[nodiscard]] std::string tags_header(const std::map<std::string, std::string> &tags);

} // namespace lodge::azure
