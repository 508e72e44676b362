#pragma once
// Internal to the az:// store (azure_store.cpp, azure_store_staged.cpp): lodge's state tags,
// the read of a byte range that gives its Content-MD5 and checks its SHA-256, and
// AzureStore, one connection over azure::Client.

#include "file_body.hpp"
#include "stores.hpp"

#include <cstdint>
#include <functional>
#include <lodge/azure/client.hpp>
#include <lodge/crypto/md5.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lodge::store::az {

inline const std::map<std::string, std::string> k_pending{{"state", "pending"}};
inline const std::map<std::string, std::string> k_committed{{"state", "committed"}};
inline constexpr int k_max_blocks = 50'000; // committed blocks of one blob

// FILE_CHANGED: the bytes sent as `key` are not the ones reserved.
Error file_changed(const std::string &key);
// The MD5 of a byte range of a file, read before it is sent (Content-MD5 goes in the
// headers, ahead of the body). The same read is hashed to SHA-256: bytes other than the
// reserved ones are FILE_CHANGED before anything is sent (Azure has no SHA-256 check of
// its own); a change after this read is caught by the service's MD5 check.
Result<crypto::Md5Digest> range_md5(const Body &b, const std::string &key);
// The bytes sent must be the bytes reserved: a server-side MD5 mismatch or a digest of
// the sent bytes other than the reserved one is FILE_CHANGED, as on S3.
Error changed_or(FileRangeBody &body, const Error &e, const std::string &key);

class AzureStore final : public ObjectStore {
public:
  AzureStore(const StoreOptions &o, const azure::Account &account, const std::string &container,
             std::string prefix);

  [[nodiscard]] std::string describe() const override { return m_url; }
  [[nodiscard]] const std::string &key_prefix() const override { return m_prefix; }
  // Defined in azure_store.cpp.
  [[nodiscard]] Support support(Capability c) const override;
  [[nodiscard]] Capabilities capabilities() const override;
  Result<PutResult> put(const PutRequest &req) override;
  Result<PresignedPut> presign_put(const PresignPutRequest &req) override;
  Result<ObjectInfo> head(const std::string &key) override;
  Status read(const std::string &key, const std::function<bool(const char *, size_t)> &sink) override;
  Result<std::string> presign_get(const std::string &key, int64_t expires_s) override;
  Status mark_committed(const std::string &key, const std::map<std::string, std::string> &user_tags) override;
  Status mark_pending(const std::string &key, const std::map<std::string, std::string> &user_tags) override;
  Result<std::optional<std::string>> guard_refusal(const std::string &key) override;
  [[nodiscard]] Status accepts(const ObjectOptions &o) const override;
  Result<Removal> remove_owned(const std::string &key, const Stamp &stamp, DeleteGuard guard) override;
  Status remove_small(const std::string &key) override;
  Status list(const std::string &prefix, const std::function<bool(const ObjectInfo &)> &visit) override;
  Result<SmallObject> get_small(const std::string &key) override;
  Result<std::string> put_small(const std::string &key, const std::string &bytes,
                                const std::string &if_tag) override;
  Result<LifecycleRule> lifecycle_rule(int days) override;
  Result<std::vector<std::string>> installed_lifecycle_rules() override;
  // Defined in azure_store_staged.cpp.
  Result<std::string> begin_staged(const StagedRequest & /*req*/) override;
  Result<Part> put_part(const std::string &key, const std::string &handle, int number, const Body &b,
                        int64_t deadline_steady_ms) override;
  Result<PutResult> complete_staged(const StagedRequest &req, const std::string &handle,
                                    const std::vector<Part> &parts, int64_t deadline_steady_ms) override;
  Status abort_staged(const std::string &key, const std::string & /*handle*/) override;
  Status list_staged(const std::string &prefix,
                     const std::function<bool(const StagedUpload &)> &visit) override;
  Result<std::vector<StoredPart>> list_parts(const std::string &key, const std::string &handle) override;
  Result<PresignedPut> presign_part(const PresignPartRequest &req) override;

private:
  // Defined in azure_store.cpp.
  static void set_options(azure::WriteOptions &o, const ObjectOptions &opt);
  Status remove_current(const std::string &key, const Stamp &stamp, DeleteGuard guard, Removal &out);
  Status remove_versions(const std::string &key, const Stamp &stamp, Removal &out);
  Status clear_uncommitted(const std::string &key);

  std::string m_url;
  std::string m_prefix;
  std::unique_ptr<azure::Client> m_client;
  bool m_list_tags = true; // list() asks for tags (until the credential is found not to allow it)
};

} // namespace lodge::store::az
