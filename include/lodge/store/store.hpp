#pragma once
// The object store as the pipeline sees it: keys, bodies, digests, metadata and typed
// errors; nothing S3-specific leaks out. Backends: S3 (s3://bucket/prefix) and a local
// directory (file:///dir) with the same contract.

#include <cstdint>
#include <functional>
#include <lodge/error.hpp>
#include <lodge/s3/signer.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lodge::store {

using Metadata = std::map<std::string, std::string>; // lowercase names

// A byte range of an open file, to be sent as an object or a part.
struct Body {
  int fd = -1;
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string sha256_hex; // the digest the bytes must have
};

struct PutRequest {
  std::string key;
  Body body;
  std::string content_type;
  Metadata metadata;
  int64_t deadline_steady_ms = 0; // the transfer is aborted at this monotonic time (0: none)
};

struct PutResult {
  std::string etag;
  std::string version_id;
};

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string etag;
  std::string content_type;
  Metadata metadata; // filled by head(), not by list()
  int64_t last_modified_ms = 0;
  std::string sha256_hex; // when the store keeps one
  std::string version_id; // filled by head() on a versioned bucket; empty otherwise
};

// A small object lodge keeps for itself (the id marker under <root>/.lodge/), with the
// tag that names this version of it.
struct SmallObject {
  std::string bytes;
  std::string tag; // an ETag (S3) or the content's SHA-256 (file://)
};

struct UploadInfo {
  std::string key;
  std::string upload_id;
  int64_t initiated_ms = 0;
};

struct Part {
  int number = 0;
  std::string etag;
  std::string sha256_hex;
};

// The lifecycle rule that backs up sweep on a store (see store/lifecycle.hpp).
struct LifecycleRule {
  std::string format;     // "s3-lifecycle-xml" | "azure-management-policy-json"
  std::string document;   // the rule (S3: the whole merged configuration)
  std::string apply_hint; // how to install it when lodge cannot
  bool can_apply = false;
};

// Optional abilities of a store's server, learned from its answers during a run.
enum class Capability { version_listing, multipart_listing };
enum class Support { unknown, present, absent };

class ObjectStore {
public:
  virtual ~ObjectStore() = default;
  // The URL it was opened from, for messages.
  [[nodiscard]] virtual std::string describe() const = 0;
  // Every key lodge writes starts with this ("" or "prefix/").
  [[nodiscard]] virtual const std::string &key_prefix() const = 0;

  // Create-only: PRECONDITION_FAILED when the key exists. Sends exactly body.size bytes
  // and fails with FILE_CHANGED if they do not hash to body.sha256_hex.
  virtual Result<PutResult> put(const PutRequest &req) = 0;
  virtual Result<ObjectInfo> head(const std::string &key) = 0;
  // Streams the object's bytes to sink, in order; sink returns false to abort.
  virtual Status read(const std::string &key, const std::function<bool(const char *, size_t)> &sink) = 0;
  // Writes the object's bytes to fd.
  Status get(const std::string &key, int fd);
  // Removes every version, delete marker and incomplete multipart upload of the key.
  // A missing key is success.
  virtual Status remove_all(const std::string &key) = 0;
  // Visits objects under prefix in ascending byte order of key; visit returns false to stop.
  virtual Status list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) = 0;

  virtual Result<std::string> begin_multipart(const std::string &key, const std::string &content_type,
                                              const Metadata &metadata) = 0;
  virtual Result<Part> put_part(const std::string &key, const std::string &upload_id, int number,
                                const Body &body, int64_t deadline_steady_ms) = 0;
  // Create-only, like put().
  virtual Result<PutResult> complete_multipart(const std::string &key, const std::string &upload_id,
                                               const std::vector<Part> &parts,
                                               int64_t deadline_steady_ms) = 0;
  virtual Status abort_multipart(const std::string &key, const std::string &upload_id) = 0;
  // Lodge's own small objects (the id marker). get_small: the whole object and its tag;
  // NOT_FOUND when missing. put_small: replaces the object only while its tag is still
  // `if_tag` (S3: If-Match), or creates it only if missing when `if_tag` is empty (S3:
  // If-None-Match: *); PRECONDITION_FAILED when the condition does not hold. Returns the
  // new tag.
  virtual Result<SmallObject> get_small(const std::string &key) = 0;
  virtual Result<std::string> put_small(const std::string &key, const std::string &bytes,
                                        const std::string &if_tag) = 0;
  // UNSUPPORTED when the server cannot list incomplete uploads (callers do without).
  virtual Status list_multipart(const std::string &prefix,
                                const std::function<bool(const UploadInfo &)> &visit) = 0;
  // A URL that lets whoever holds it GET the object until `expires_s` seconds from now,
  // without credentials. UNSUPPORTED for a store that cannot sign one (file://).
  virtual Result<std::string> presign_get(const std::string &key, int64_t expires_s);
  // The backstop rule for this store, acting after `days`. UNSUPPORTED by default
  // (file://: sweep is its only cleanup).
  virtual Result<LifecycleRule> lifecycle_rule(int days);
  // Installs what lifecycle_rule() made. UNSUPPORTED where lodge cannot (the default).
  virtual Status apply_lifecycle(const LifecycleRule &rule);
  // What this run has learned so far of an optional ability (unknown until used).
  [[nodiscard]] virtual Support support(Capability /*capability*/) const { return Support::unknown; }
};

struct StoreOptions {
  std::string url; // s3://bucket/prefix or file:///dir
  std::string endpoint;
  std::string region = "us-east-1";
  s3::Credentials credentials;
  std::string ca_bundle;
  bool verify_tls = true;
  int64_t connect_timeout_ms = 10'000;
  int64_t low_speed_time_s = 30;
  int max_attempts = 4;
};

// Opens the store the URL names, wrapped so the store.* failpoints apply. Throws
// LodgeError(CONFIG_INVALID) on a bad URL.
[[nodiscard]] std::unique_ptr<ObjectStore> open_store(const StoreOptions &opts);

// Whether a failure means the store was never reached (no HTTP answer at all) or refused
// our credentials — what, met by a whole run, makes lodge exit 4.
[[nodiscard]] bool is_unreachable(const Error &e);

// Whether a URL names an S3 store (and so needs credentials).
[[nodiscard]] bool is_s3_url(const std::string &url);

// The directory of a file:// store URL ("" for any other URL): walks skip it.
[[nodiscard]] std::string file_store_root(const std::string &url);

// The store a ledger serves, canonicalized so that two spellings of one place compare
// equal: s3://b/archive, s3://b/archive/ and s3://b//archive; file://./x and file:///abs/x.
struct Binding {
  std::string scheme;   // "s3" or "file"
  std::string endpoint; // s3: the endpoint URL (scheme and host lowercased, no default
                        // port, no trailing '/'), "aws" for AWS's own; file: ""
  std::string location; // s3: the bucket; file: the directory's absolute path, symlinks resolved
  std::string root;     // s3: the prefix, no leading, trailing or doubled '/' ("" at the
                        // bucket root); file: ""
  bool operator==(const Binding &) const = default;
};

// The binding of the store a URL (and, for S3, an endpoint: "" for AWS) names. A relative
// file:// directory is taken from the current directory. Throws LodgeError(CONFIG_INVALID)
// for a URL that names no store.
[[nodiscard]] Binding canonical_binding(const std::string &url, const std::string &endpoint);

// A binding as people read it: "s3://b/archive at http://127.0.0.1:9000", "file:///srv/x".
[[nodiscard]] std::string describe(const Binding &b);

} // namespace lodge::store
